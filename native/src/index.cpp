// index.cpp: the usearch index through usearch's own C++ headers (its sdist), loaded from checked bytes, searched exactly.
#include "index.h"

#include <cmath>
#include <cstring>
#include <unordered_map>

#include <usearch/index_dense.hpp>

#include "digest.h"
#include "error.h"

namespace ms {

using unum::usearch::index_dense_t;
using unum::usearch::metric_kind_t;
using unum::usearch::scalar_kind_t;

struct ToolIndex::Impl {
    index_dense_t index;
    std::unordered_map<uint64_t, int> row_of_key;
};

uint64_t tool_key(const std::string &tool_id) {
    return blake2b_64(tool_id.data(), tool_id.size()) & 0x7FFFFFFFFFFFFFFFULL;
}

ToolIndex::ToolIndex() : impl_(new Impl) {}
ToolIndex::~ToolIndex() = default;

std::unique_ptr<ToolIndex> ToolIndex::from_bytes(const std::string &bytes, const std::vector<std::string> &ids,
                                                 int ndim, const std::string &name) {
    const std::string damaged = name + ": not a readable usearch index (truncated, damaged or not an index); rebuild the bundle";
    // The vectors' matrix comes first: refuse one larger than the bytes before usearch allocates it.
    uint32_t dims[2];
    if (bytes.size() < sizeof dims) fail(MS_ERR_BUNDLE, damaged);
    std::memcpy(dims, bytes.data(), sizeof dims);
    if (uint64_t(dims[0]) * dims[1] > bytes.size() || dims[0] != ids.size()) {
        fail(MS_ERR_BUNDLE, name + ": the index holds " + std::to_string(dims[0]) + " vectors but the catalog has " +
                                std::to_string(ids.size()) + " tools (or the file is damaged); rebuild the bundle");
    }
    std::unique_ptr<ToolIndex> out(new ToolIndex);
    std::size_t at = 0;
    auto input = [&bytes, &at](void *buffer, std::size_t length) {
        if (length > bytes.size() - at) return false;
        std::memcpy(buffer, bytes.data() + at, length);
        at += length;
        return true;
    };
    index_dense_t &index = out->impl_->index;
    auto loaded = index.load_from_stream(input);
    if (!loaded) fail(MS_ERR_BUNDLE, damaged);
    const auto &metric = index.metric();
    if (metric.metric_kind() != metric_kind_t::cos_k) fail(MS_ERR_BUNDLE, name + ": not a cosine index");
    switch (metric.scalar_kind()) {
        case scalar_kind_t::f32_k: out->dtype_ = "f32"; break;
        case scalar_kind_t::f16_k: out->dtype_ = "f16"; break;
        case scalar_kind_t::i8_k: out->dtype_ = "i8"; break;
        default: fail(MS_ERR_BUNDLE, name + ": stores vectors as neither f32, f16 nor i8");
    }
    if (int(index.dimensions()) != ndim || ndim < 1) {
        fail(MS_ERR_BUNDLE, name + ": " + std::to_string(index.dimensions()) + " dimensions, the manifest says " +
                                std::to_string(ndim));
    }
    if (index.size() != ids.size()) {
        fail(MS_ERR_BUNDLE, name + ": index holds " + std::to_string(index.size()) + " tools but the catalog has " +
                                std::to_string(ids.size()) + ": the index and catalog are out of step; rebuild the bundle");
    }
    if (!index.try_reserve(unum::usearch::index_limits_t(index.size(), 1))) fail(MS_ERR_INTERNAL, name + ": out of memory");
    out->ndim_ = ndim;
    out->keys_.reserve(ids.size());
    for (std::size_t row = 0; row < ids.size(); ++row) {
        const uint64_t key = tool_key(ids[row]);
        if (!out->impl_->row_of_key.emplace(key, int(row)).second) {
            fail(MS_ERR_BUNDLE, name + ": tool ids collide on their index keys (or repeat)");
        }
        if (!index.contains(key)) fail(MS_ERR_BUNDLE, name + ": index lacks catalog tool '" + ids[row] + "'; rebuild the bundle");
        out->keys_.push_back(key);
    }
    return out;
}

Hits ToolIndex::search(const float *query, std::size_t count) const {
    Hits hits;
    count = std::min(count, size());
    if (count == 0) return hits;
    auto found = impl_->index.search(query, count, 0, /*exact=*/true);
    if (!found) fail(MS_ERR_INTERNAL, std::string("index search failed: ") + found.error.release());
    std::vector<uint64_t> keys(count);
    std::vector<float> distances(count);
    const std::size_t n = found.dump_to(keys.data(), distances.data());
    for (std::size_t i = 0; i < n; ++i) {
        auto it = impl_->row_of_key.find(keys[i]);
        if (it == impl_->row_of_key.end()) fail(MS_ERR_INTERNAL, "index search returned a key of no catalog tool");
        hits.rows.push_back(it->second);
        hits.scores.push_back(1.0f - distances[i]);
    }
    return hits;
}

std::vector<float> ToolIndex::unit_vector(int row) const {
    std::vector<float> v(std::size_t(ndim_), 0.0f);
    if (row < 0 || std::size_t(row) >= keys_.size() || impl_->index.get(keys_[std::size_t(row)], v.data()) != 1) {
        fail(MS_ERR_INTERNAL, "index: no vector for catalog row " + std::to_string(row));
    }
    float norm2 = 0.0f;
    for (float x : v) norm2 += x * x;
    const float norm = std::max(std::sqrt(norm2), 1e-12f);
    for (float &x : v) x /= norm;
    return v;
}

}  // namespace ms

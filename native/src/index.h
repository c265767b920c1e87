// index.h: the bundle's usearch index of tool vectors (runtime/stages/index.py): keys hashed from tool ids, exact cosine search.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ms {

// The index key of a tool id: BLAKE2b-64 of its UTF-8, little-endian, top bit cleared (index.py tool_key).
uint64_t tool_key(const std::string &tool_id);

// One retrieval list: catalog rows best first, with their scores.
struct Hits {
    std::vector<int> rows;
    std::vector<float> scores;
};

class ToolIndex {
public:
    // The index in a file's (already checked) bytes, bound to the catalog's ids in order: it must hold
    // exactly their keys, with `ndim` dimensions under the cosine metric (f32, f16 or i8 storage); a
    // damaged index or one of another catalog is MS_ERR_BUNDLE naming `name`.
    static std::unique_ptr<ToolIndex> from_bytes(const std::string &bytes, const std::vector<std::string> &ids,
                                                 int ndim, const std::string &name);
    ~ToolIndex();

    // The `count` nearest tools of a unit query vector, by exact scan, as (rows, 1 - cosine distance),
    // best first: what usearch's exact search returns the Python runtime.
    Hits search(const float *query, std::size_t count) const;
    // The stored vector of a catalog row as float32, divided by its norm (index.py ToolIndex.vectors).
    std::vector<float> unit_vector(int row) const;
    int ndim() const { return ndim_; }
    std::size_t size() const { return keys_.size(); }
    const std::string &dtype() const { return dtype_; }

private:
    struct Impl;
    ToolIndex();
    std::unique_ptr<Impl> impl_;
    std::vector<uint64_t> keys_;  // per catalog row
    int ndim_ = 0;
    std::string dtype_;
};

}  // namespace ms

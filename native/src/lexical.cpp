// lexical.cpp: BM25 over the bundle's stored postings (a STORED .npz read here: no zlib), and its fusion with the dense lists, float for float as numpy computes them.
#include "lexical.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "error.h"
#include "json.h"
#include "unicode.h"

namespace ms {
namespace {

constexpr const char *kFormat = "magicselector-bm25/1";

uint64_t le(const std::string &b, std::size_t at, int bytes, const std::string &name) {
    if (at > b.size() || std::size_t(bytes) > b.size() - at) fail(MS_ERR_BUNDLE, name + ": truncated (a zip record runs past the end)");
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + std::size_t(i)]);
    return v;
}

struct Member {
    std::size_t offset = 0, size = 0;
};

// The members of a zip archive whose entries are all STORED (np.savez writes them so): name -> bytes.
std::map<std::string, Member> stored_zip(const std::string &b, const std::string &name) {
    const std::size_t min_eocd = 22;
    if (b.size() < min_eocd) fail(MS_ERR_BUNDLE, name + ": not a .npz (too short for a zip archive)");
    std::size_t eocd = std::string::npos;
    const std::size_t floor = b.size() > 65557 ? b.size() - 65557 : 0;
    for (std::size_t i = b.size() - min_eocd + 1; i-- > floor;) {
        if (le(b, i, 4, name) == 0x06054b50) {
            eocd = i;
            break;
        }
    }
    if (eocd == std::string::npos) fail(MS_ERR_BUNDLE, name + ": not a .npz (no zip directory)");
    uint64_t entries = le(b, eocd + 10, 2, name), cd_offset = le(b, eocd + 16, 4, name);
    if ((entries == 0xFFFF || cd_offset == 0xFFFFFFFF) && eocd >= 20 && le(b, eocd - 20, 4, name) == 0x07064b50) {
        const uint64_t z64 = le(b, eocd - 12, 8, name);
        if (le(b, std::size_t(std::min<uint64_t>(z64, b.size())), 4, name) != 0x06064b50) fail(MS_ERR_BUNDLE, name + ": a damaged zip64 directory");
        entries = le(b, std::size_t(z64) + 32, 8, name);
        cd_offset = le(b, std::size_t(z64) + 48, 8, name);
    }
    if (entries > 64) fail(MS_ERR_BUNDLE, name + ": more members than a lexical index has");
    std::map<std::string, Member> out;
    std::size_t at = std::size_t(std::min<uint64_t>(cd_offset, b.size()));
    for (uint64_t e = 0; e < entries; ++e) {
        if (le(b, at, 4, name) != 0x02014b50) fail(MS_ERR_BUNDLE, name + ": a damaged zip directory");
        const uint64_t method = le(b, at + 10, 2, name);
        uint64_t csize = le(b, at + 20, 4, name), usize = le(b, at + 24, 4, name);
        const std::size_t nlen = le(b, at + 28, 2, name), xlen = le(b, at + 30, 2, name), clen = le(b, at + 32, 2, name);
        uint64_t local = le(b, at + 42, 4, name);
        if (at + 46 + nlen > b.size()) fail(MS_ERR_BUNDLE, name + ": truncated zip directory");
        const std::string member = b.substr(at + 46, nlen);
        for (std::size_t x = at + 46 + nlen; x + 4 <= at + 46 + nlen + xlen;) {  // the zip64 extra field
            const uint64_t id = le(b, x, 2, name), len = le(b, x + 2, 2, name);
            if (id == 1) {
                std::size_t p = x + 4;
                if (usize == 0xFFFFFFFF) { usize = le(b, p, 8, name); p += 8; }
                if (csize == 0xFFFFFFFF) { csize = le(b, p, 8, name); p += 8; }
                if (local == 0xFFFFFFFF) { local = le(b, p, 8, name); }
            }
            x += 4 + len;
        }
        if (method != 0 || csize != usize) {
            fail(MS_ERR_BUNDLE, name + ": member '" + member + "' is compressed; a lexical index is stored uncompressed (LexicalIndex.save)");
        }
        if (le(b, std::size_t(std::min<uint64_t>(local, b.size())), 4, name) != 0x04034b50) fail(MS_ERR_BUNDLE, name + ": a damaged zip member");
        const std::size_t data = std::size_t(local) + 30 + le(b, std::size_t(local) + 26, 2, name) + le(b, std::size_t(local) + 28, 2, name);
        if (data > b.size() || usize > b.size() - data) fail(MS_ERR_BUNDLE, name + ": member '" + member + "' runs past the end");
        out[member] = Member{data, std::size_t(usize)};
        at += 46 + nlen + xlen + clen;
    }
    return out;
}

// One .npy member: its dtype must be `descr` and its shape 1-D; returns its element count and data offset.
std::pair<std::size_t, std::size_t> npy_1d(const std::string &b, const Member &m, const std::string &descr,
                                           std::size_t item, const std::string &where) {
    if (m.size < 10 || b.compare(m.offset, 6, "\x93NUMPY") != 0) fail(MS_ERR_BUNDLE, where + ": not a .npy array");
    const int major = static_cast<unsigned char>(b[m.offset + 6]);
    const std::size_t hlen = major == 1 ? le(b, m.offset + 8, 2, where) : le(b, m.offset + 8, 4, where);
    const std::size_t start = m.offset + (major == 1 ? 10 : 12);
    if (hlen > m.size || start + hlen > m.offset + m.size) fail(MS_ERR_BUNDLE, where + ": a damaged .npy header");
    const std::string header = b.substr(start, hlen);
    if (header.find("'descr': '" + descr + "'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos) {
        fail(MS_ERR_BUNDLE, where + ": not a 1-D array of dtype " + descr);
    }
    const std::size_t s = header.find("'shape': (");
    if (s == std::string::npos) fail(MS_ERR_BUNDLE, where + ": no shape");
    std::size_t p = s + 10, count = 0;
    bool digits = false;
    while (p < header.size() && header[p] >= '0' && header[p] <= '9') {
        if (count > (std::size_t(1) << 40)) fail(MS_ERR_BUNDLE, where + ": a shape past any bundle");
        count = count * 10 + std::size_t(header[p++] - '0');
        digits = true;
    }
    if (!digits || p + 1 >= header.size() || header.compare(p, 2, ",)") != 0) fail(MS_ERR_BUNDLE, where + ": not a 1-D array");
    const std::size_t data = start + hlen, stored = m.offset + m.size - data;
    if (count * item != stored) fail(MS_ERR_BUNDLE, where + ": its header declares " + std::to_string(count) + " items, it holds " + std::to_string(stored) + " bytes");
    return {count, data};
}

template <typename T>
std::vector<T> npy_array(const std::string &b, const std::map<std::string, Member> &z, const std::string &key,
                         const std::string &descr, const std::string &name) {
    auto it = z.find(key + ".npy");
    if (it == z.end()) fail(MS_ERR_BUNDLE, name + ": no member '" + key + "'");
    const auto shape = npy_1d(b, it->second, descr, sizeof(T), name + ": " + key);
    std::vector<T> out(shape.first);
    if (shape.first) std::memcpy(out.data(), b.data() + shape.second, shape.first * sizeof(T));
    return out;
}

json npy_json(const std::string &b, const std::map<std::string, Member> &z, const std::string &key, const std::string &name) {
    const auto raw = npy_array<char>(b, z, key, "|u1", name);
    return parse_json(std::string(raw.begin(), raw.end()), MS_ERR_BUNDLE, name + ": " + key);
}

bool ascii_lower(char32_t c) { return c >= U'a' && c <= U'z'; }
bool ascii_upper(char32_t c) { return c >= U'A' && c <= U'Z'; }

bool ends_with(const std::u32string &w, const char32_t *suffix) {
    const std::size_t n = std::char_traits<char32_t>::length(suffix);
    return w.size() >= n && w.compare(w.size() - n, n, suffix) == 0;
}

std::vector<double> z_scores(const std::vector<double> &x) {
    const std::size_t n = x.size();
    std::vector<double> out(n, 0.0);
    if (!n) return out;
    const double mean = numpy_sum(x.data(), n) / double(n);
    std::vector<double> sq(n);
    for (std::size_t i = 0; i < n; ++i) sq[i] = (x[i] - mean) * (x[i] - mean);
    const double sd = std::sqrt(numpy_sum(sq.data(), n) / double(n));
    if (sd > 1e-12) {
        for (std::size_t i = 0; i < n; ++i) out[i] = (x[i] - mean) / sd;
    }
    return out;
}

}  // namespace

double numpy_sum(const double *a, std::size_t n) {
    if (n < 8) {
        double r = 0.0;
        for (std::size_t i = 0; i < n; ++i) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        std::size_t i = 8;
        for (; i < n - n % 8; i += 8) {
            for (int j = 0; j < 8; ++j) r[j] += a[i + std::size_t(j)];
        }
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    std::size_t half = n / 2;
    half -= half % 8;
    return numpy_sum(a, half) + numpy_sum(a + half, n - half);
}

std::string s_stem(const std::u32string &w) {
    std::u32string out = w;
    if (w.size() > 3 && ends_with(w, U"ies") && !ends_with(w, U"eies") && !ends_with(w, U"aies")) {
        out = w.substr(0, w.size() - 3) + U"y";
    } else if (w.size() > 3 && ends_with(w, U"es") && !ends_with(w, U"aes") && !ends_with(w, U"ees") && !ends_with(w, U"oes")) {
        out = w.substr(0, w.size() - 1);
    } else if (w.size() > 2 && ends_with(w, U"s") && !ends_with(w, U"us") && !ends_with(w, U"ss")) {
        out = w.substr(0, w.size() - 1);
    }
    return unicode::encode_utf8(out);
}

std::vector<std::string> lexical_tokens(const std::string &utf8, bool stem) {
    const std::u32string text = unicode::decode_utf8(utf8, "text");
    std::u32string spaced;
    spaced.reserve(text.size() + text.size() / 4);
    for (std::size_t i = 0; i < text.size(); ++i) {  // _CAMEL: a space at aB and at AB|c joints (ASCII)
        if (i > 0 && ((ascii_lower(text[i - 1]) && ascii_upper(text[i])) ||
                      (ascii_upper(text[i - 1]) && ascii_upper(text[i]) && i + 1 < text.size() && ascii_lower(text[i + 1])))) {
            spaced.push_back(U' ');
        }
        spaced.push_back(text[i]);
    }
    const std::u32string lowered = unicode::py_lower(spaced);
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < lowered.size()) {  // [^\W_]+
        if (!unicode::py_isalnum(lowered[i])) {
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < lowered.size() && unicode::py_isalnum(lowered[j])) ++j;
        const std::u32string word = lowered.substr(i, j - i);
        out.push_back(stem ? s_stem(word) : unicode::encode_utf8(word));
        i = j;
    }
    return out;
}

LexicalIndex LexicalIndex::from_npz(const std::string &bytes, const std::vector<std::string> &catalog_ids,
                                    const std::string &name) {
    const auto z = stored_zip(bytes, name);
    const json meta = npy_json(bytes, z, "meta", name);
    if (!meta.is_object() || meta.value("format", json()) != kFormat) fail(MS_ERR_BUNDLE, name + ": lexical index format is not " + kFormat);
    const json vocab = npy_json(bytes, z, "vocab", name), ids = npy_json(bytes, z, "ids", name);
    if (!vocab.is_array() || !ids.is_array()) fail(MS_ERR_BUNDLE, name + ": vocab and ids must be lists");
    const json k1j = meta.value("k1", json()), bj = meta.value("b", json()), idf = meta.value("idf", json()), stem = meta.value("stem", json());
    if (!k1j.is_number() || !bj.is_number() || !stem.is_boolean() || !(idf == "lucene" || idf == "okapi")) {
        fail(MS_ERR_BUNDLE, name + ": meta needs numbers k1 and b, idf lucene|okapi and a boolean stem");
    }
    const double k1 = k1j.get<double>(), b = bj.get<double>();
    if (!(k1 >= 0.0) || !(b >= 0.0 && b <= 1.0)) fail(MS_ERR_BUNDLE, name + ": meta k1 must be >= 0 and b within [0, 1]");
    LexicalIndex lx;
    lx.stem_ = stem.get<bool>();
    lx.indptr_ = npy_array<int64_t>(bytes, z, "indptr", "<i8", name);
    lx.docs_ = npy_array<int32_t>(bytes, z, "docs", "<i4", name);
    const auto tf = npy_array<uint16_t>(bytes, z, "tf", "<u2", name);
    const auto doc_len = npy_array<int32_t>(bytes, z, "doc_len", "<i4", name);
    const std::size_t n = ids.size(), v = vocab.size();
    bool ok = lx.indptr_.size() == v + 1 && tf.size() == lx.docs_.size() && doc_len.size() == n && lx.indptr_[0] == 0 &&
              uint64_t(lx.indptr_[v]) == lx.docs_.size();
    for (std::size_t t = 0; ok && t < v; ++t) ok = lx.indptr_[t] <= lx.indptr_[t + 1];
    for (std::size_t j = 0; ok && j < lx.docs_.size(); ++j) ok = lx.docs_[j] >= 0 && std::size_t(lx.docs_[j]) < n;
    if (!ok) fail(MS_ERR_BUNDLE, name + ": lexical index arrays disagree (tools " + std::to_string(n) + ", terms " + std::to_string(v) + ")");
    // lexical rows -> catalog rows (the catalog's own order may differ; ties still go to the lexical row)
    std::map<std::string, int> catalog_row;
    for (std::size_t r = 0; r < catalog_ids.size(); ++r) catalog_row[catalog_ids[r]] = int(r);
    std::vector<int> to_catalog(n);
    std::vector<bool> seen(catalog_ids.size(), false);
    for (std::size_t r = 0; r < n; ++r) {
        auto it = ids[r].is_string() ? catalog_row.find(ids[r].get<std::string>()) : catalog_row.end();
        if (it == catalog_row.end() || seen[std::size_t(it->second)]) {
            fail(MS_ERR_BUNDLE, name + ": the lexical index holds tools the catalog does not (or twice); rebuild the bundle");
        }
        seen[std::size_t(it->second)] = true;
        to_catalog[r] = it->second;
    }
    if (n != catalog_ids.size()) fail(MS_ERR_BUNDLE, name + ": the lexical index holds " + std::to_string(n) + " tools, the catalog " + std::to_string(catalog_ids.size()) + "; rebuild the bundle");
    for (std::size_t t = 0; t < v; ++t) {
        if (!vocab[t].is_string()) fail(MS_ERR_BUNDLE, name + ": vocab must hold strings");
        lx.vocab_.push_back(vocab[t].get<std::string>());
        lx.term_ids_.emplace_back(lx.vocab_.back(), int(t));
    }
    std::sort(lx.term_ids_.begin(), lx.term_ids_.end());
    // _reweigh: idf per term, then each posting's weight in float64, stored as float32
    std::vector<double> idfs(v);
    std::vector<double> present;
    for (std::size_t t = 0; t < v; ++t) {
        const double df = double(lx.indptr_[t + 1] - lx.indptr_[t]);
        if (idf == "lucene") {
            idfs[t] = std::log1p((double(n) - df + 0.5) / (df + 0.5));
        } else {
            idfs[t] = std::log(std::max(double(n) - df + 0.5, 1e-12) / (df + 0.5));
            if (df > 0) present.push_back(idfs[t]);
        }
    }
    if (idf == "okapi") {
        const double floor = 0.25 * (present.empty() ? 0.0 : numpy_sum(present.data(), present.size()) / double(present.size()));
        for (double &x : idfs) x = x < 0 ? floor : x;
    }
    std::vector<double> lengths(doc_len.begin(), doc_len.end());
    double avgdl = n ? numpy_sum(lengths.data(), n) / double(n) : 1.0;
    avgdl = avgdl > 0 ? avgdl : 1.0;
    lx.weights_.resize(lx.docs_.size());
    for (std::size_t t = 0; t < v; ++t) {
        for (int64_t j = lx.indptr_[t]; j < lx.indptr_[t + 1]; ++j) {
            const double f = double(tf[std::size_t(j)]);
            const double norm = k1 * ((1.0 - b) + (b * double(doc_len[std::size_t(lx.docs_[std::size_t(j)])])) / avgdl);
            lx.weights_[std::size_t(j)] = float(((idfs[t] * f) * (k1 + 1.0)) / (f + norm));
        }
    }
    lx.lex_row_of_.assign(n, 0);
    for (std::size_t r = 0; r < n; ++r) {
        lx.lex_row_of_[std::size_t(to_catalog[r])] = int(r);
    }
    for (int32_t &d : lx.docs_) d = to_catalog[std::size_t(d)];  // postings now name catalog rows
    lx.tools_ = n;
    return lx;
}

int LexicalIndex::term_id(const std::string &term) const {
    auto it = std::lower_bound(term_ids_.begin(), term_ids_.end(), std::make_pair(term, -1));
    return it != term_ids_.end() && it->first == term ? it->second : -1;
}

std::vector<float> LexicalIndex::scores(const std::string &text) const {
    std::vector<double> acc(tools_, 0.0);
    for (const std::string &tok : lexical_tokens(text, stem_)) {
        const int t = term_id(tok);
        if (t < 0) continue;
        for (int64_t j = indptr_[std::size_t(t)]; j < indptr_[std::size_t(t) + 1]; ++j) {
            acc[std::size_t(docs_[std::size_t(j)])] += double(weights_[std::size_t(j)]);
        }
    }
    return std::vector<float>(acc.begin(), acc.end());
}

Hits LexicalIndex::top(const std::vector<float> &scores, std::size_t count) const {
    std::vector<int> hit;
    for (std::size_t r = 0; r < scores.size(); ++r) {
        if (scores[r] > 0) hit.push_back(int(r));
    }
    std::sort(hit.begin(), hit.end(), [&](int a, int c) {
        if (scores[std::size_t(a)] != scores[std::size_t(c)]) return scores[std::size_t(a)] > scores[std::size_t(c)];
        return lex_row_of_[std::size_t(a)] < lex_row_of_[std::size_t(c)];
    });
    Hits out;
    for (std::size_t i = 0; i < hit.size() && i < count; ++i) {
        out.rows.push_back(hit[i]);
        out.scores.push_back(scores[std::size_t(hit[i])]);
    }
    return out;
}

FusedList fuse_lexical(const Hits &dense_hits, const std::vector<float> &bm25, const Hits &lexical_hits,
                       const ToolIndex &index, const float *vector, double weight, std::size_t candidates) {
    FusedList out;
    if (lexical_hits.rows.empty() || weight <= 0.0) {
        for (std::size_t i = 0; i < dense_hits.rows.size() && i < candidates; ++i) {
            out.rows.push_back(dense_hits.rows[i]);
            out.scores.push_back(dense_hits.scores[i]);
            out.dense.push_back(dense_hits.scores[i]);
            out.lexical.push_back(bm25[std::size_t(dense_hits.rows[i])]);
        }
        return out;
    }
    std::vector<int> uni(dense_hits.rows);
    for (int r : lexical_hits.rows) {
        if (std::find(uni.begin(), uni.end(), r) == uni.end()) uni.push_back(r);
    }
    const std::size_t n = uni.size(), dim = std::size_t(index.ndim());
    std::vector<float> cos(n), lex(n);
    std::vector<double> cos64(n), lex64(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::vector<float> v = index.unit_vector(uni[i]);
        double dot = 0.0;
        for (std::size_t d = 0; d < dim; ++d) dot += double(v[d]) * double(vector[d]);
        cos[i] = float(dot);
        lex[i] = bm25[std::size_t(uni[i])];
        cos64[i] = cos[i];
        lex64[i] = lex[i];
    }
    const std::vector<double> zc = z_scores(cos64), zl = z_scores(lex64);
    std::vector<double> fused(n);
    for (std::size_t i = 0; i < n; ++i) fused[i] = (1.0 - weight) * zc[i] + weight * zl[i];
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t c) { return -fused[a] < -fused[c]; });
    for (std::size_t i = 0; i < n && i < candidates; ++i) {
        out.rows.push_back(uni[order[i]]);
        out.scores.push_back(float(fused[order[i]]));
        out.dense.push_back(cos[order[i]]);
        out.lexical.push_back(lex[order[i]]);
    }
    return out;
}

}  // namespace ms

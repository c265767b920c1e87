// lexical.h: the BM25 channel (runtime/stages/lexical.py): the bundle's lexical.npz, BM25 scores of a text, and its z-score fusion with a dense list.
#pragma once

#include <string>
#include <vector>

#include "index.h"

namespace ms {

// lexical_tokens: words (runs of Unicode letters and digits) after a space is put at camelCase joints,
// lowercased as Python's str.lower(), S-stemmed where `stem`.
std::vector<std::string> lexical_tokens(const std::string &utf8, bool stem);
std::string s_stem(const std::u32string &word);

class LexicalIndex {
public:
    // The index in a lexical.npz's (already checked) bytes: an uncompressed .npz of format
    // magicselector-bm25/1 (LexicalIndex.save), bound to the catalog's ids (the same set); anything
    // else is MS_ERR_BUNDLE naming `name`.
    static LexicalIndex from_npz(const std::string &bytes, const std::vector<std::string> &catalog_ids,
                                 const std::string &name);
    // BM25 of every tool for one text, by catalog row (float32 of the float64 sums, as bincount gives them).
    std::vector<float> scores(const std::string &text) const;
    // Up to `count` rows with a score > 0, best first, ties to the lower row (LexicalIndex.top).
    Hits top(const std::vector<float> &scores, std::size_t count) const;

private:
    std::vector<std::string> vocab_;
    std::vector<int64_t> indptr_;
    std::vector<int32_t> docs_;      // postings as catalog rows
    std::vector<float> weights_;     // per posting
    std::vector<std::pair<std::string, int>> term_ids_;  // sorted by term, for lookup
    std::vector<int> lex_row_of_;    // per catalog row, its row in the file (ties in top go to the lower)
    bool stem_ = true;
    std::size_t tools_ = 0;
    int term_id(const std::string &term) const;
};

// One dense list fused with the BM25 list of its text (fuse_lexical): z(cosine) and z(BM25) mixed
// over the union of both lists, cut to `candidates`. `dense`/`lexical` receive each kept tool's parts.
struct FusedList {
    std::vector<int> rows;
    std::vector<float> scores, dense, lexical;
};
FusedList fuse_lexical(const Hits &dense_hits, const std::vector<float> &bm25, const Hits &lexical_hits,
                       const ToolIndex &index, const float *vector, double weight, std::size_t candidates);

// numpy's pairwise summation of float64 (what ndarray.sum / mean / std add with).
double numpy_sum(const double *a, std::size_t n);

}  // namespace ms

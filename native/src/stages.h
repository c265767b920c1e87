// stages.h: the selection stages after retrieval, as runtime/stages does them: peak-rank fusion (fuse.cpp), the rmargin cut (cut.cpp), the learned head (head.cpp), the budget (budget.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ms {

// One retrieval list after the lexical fusion: catalog rows best first, their scores, and the parts
// of each score (cosine, BM25) where `has_parts` (runtime/stages/fuse.py RankedList).
struct RankedList {
    std::vector<int> rows;
    std::vector<float> scores, dense, lexical;
    bool has_parts = false;
};

// peak_rank_fusion: every tool of every list at its best rank (ties: the higher score, then the
// earlier list), with the score and the list where it peaked.
struct Fused {
    std::vector<int> rows;
    std::vector<float> scores;
    std::vector<int> source;
};
Fused peak_rank_fusion(const std::vector<RankedList> &lists);

// The shipped cut, CutConfig() (rmargin; the paper's rule and a fixed k are bench rules, not here).
struct CutConfig {
    std::string rule = "rmargin";
    int k_min = 1, k_max = 10;
    double range_margin = 0.7;
    int range_depth = 15;
    double list_range_margin = 0.8;  // < 0: none (range_margin)
    int anchor_k_max = 5;            // < 0: none (k_max)
    double min_probability = 0.012;
};
struct Cut {
    int k = 0, k_score = 0, k_sim = 0;
    std::string rule;
    int pool = -1;  // -1: None
};
Cut rmargin_cut(const std::vector<float> &scores, double margin, int k_min, int k_max, int depth);
Cut apply_list_cut(const CutConfig &config, const std::vector<float> &scores, bool anchor);
// cut_turn: per list with the kept tools' union leading the fused order (several lists), else on
// the fused list; `order` receives the new order of fused positions.
Cut cut_turn(const CutConfig &config, const std::vector<RankedList> &lists, const Fused &fused, std::vector<int> &order);

// The learned head (runtime/stages/head.py): its JSON model, its features and the order it gives.
struct HeadModel {
    int depth = 20;
    std::vector<double> mean, scale;
    struct Layer {
        std::vector<double> weight;  // in x out, row-major
        std::vector<double> bias;
        std::size_t in = 0, out = 0;
    };
    std::vector<Layer> layers;
    // A head.json's bytes; anything malformed is MS_ERR_BUNDLE naming `name`.
    static HeadModel from_json(const std::string &bytes, const std::string &name);
    std::vector<double> probabilities(const std::vector<std::vector<double>> &rows) const;
};
constexpr int kHeadFeatures = 23;
std::vector<std::vector<double>> head_features(const std::vector<RankedList> &lists, int history_list,
                                               const Fused &fused, int depth);
// head_cut: the cut's kept tools (its pool) by probability, those under min_probability dropped (the
// surest stays), at most k_max; returns K and rewrites `order`.
int head_cut(const std::vector<double> &probabilities, std::vector<int> &order, const Cut &cut, const CutConfig &config);

// The caller's budget (runtime/stages/budget.py); max_* < 0: no bound.
struct Budget {
    int max_tools = -1, max_schema_tokens = -1;
    std::string format = "mcp";
    bool bounded() const { return max_tools >= 0 || max_schema_tokens >= 0; }
};
// spend_budget: positions of `rows` (ranked; the cut kept the first k) the budget keeps, ascending.
// `lists`: each retrieval list's rows; `tokens(row)`: a tool's definition size in the budget's format.
std::vector<int> spend_budget(const Budget &budget, const std::vector<int> &rows, int k,
                              const std::vector<RankedList> &lists, const std::function<long long(int)> &tokens,
                              bool by_probability);

}  // namespace ms

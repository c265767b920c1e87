// cut.cpp: the shipped rmargin cut (runtime/stages/cut.py), in float32 as the Python reads scores, per list with their union in a decomposed turn.
#include <algorithm>
#include <set>

#include "stages.h"

namespace ms {
namespace {

int clamp_k(int k, int n, int k_min, int k_max) { return std::min(n, std::max(k_min, std::min(k_max, k))); }

}  // namespace

Cut rmargin_cut(const std::vector<float> &s, double margin, int k_min, int k_max, int depth) {
    const int n = int(s.size());
    if (n == 0) return Cut{0, 0, 0, "rmargin", -1};
    const int head = (depth >= 2 && depth < n) ? depth : n;
    const float top = *std::max_element(s.begin(), s.end());
    const float head_max = *std::max_element(s.begin(), s.begin() + head);
    const float head_min = *std::min_element(s.begin(), s.begin() + head);
    const float span = head_max - head_min;
    int k = n;
    if (!(span <= 0.0f || (margin >= 1.0 && head == n))) {
        const float drop = float(margin) * span;  // its own statement: float32 product, then the difference (no FMA)
        const float threshold = top - drop;
        k = 0;
        while (k < n && !(s[std::size_t(k)] < threshold)) ++k;
    }
    return Cut{clamp_k(k, n, k_min, k_max), k, 0, "rmargin", -1};
}

Cut apply_list_cut(const CutConfig &config, const std::vector<float> &scores, bool anchor) {
    const double margin = config.list_range_margin >= 0 ? config.list_range_margin : config.range_margin;
    Cut cut = rmargin_cut(scores, margin, config.k_min, config.k_max, config.range_depth);
    if (anchor && config.anchor_k_max >= 0 && cut.k > config.anchor_k_max) {
        cut = Cut{config.anchor_k_max, cut.k_score, cut.k_sim, cut.rule, -1};
    }
    return cut;
}

Cut cut_turn(const CutConfig &config, const std::vector<RankedList> &lists, const Fused &fused, std::vector<int> &order) {
    order.clear();
    if (lists.size() > 1) {
        std::set<int> keep;
        int k_score = 0, k_sim = 0;
        for (std::size_t j = 0; j < lists.size(); ++j) {
            if (lists[j].rows.empty()) continue;
            const Cut c = apply_list_cut(config, lists[j].scores, j == 0);
            for (int i = 0; i < c.k && i < int(lists[j].rows.size()); ++i) keep.insert(lists[j].rows[std::size_t(i)]);
            k_score = std::max(k_score, c.k_score);
            k_sim = std::max(k_sim, c.k_sim);
        }
        for (std::size_t i = 0; i < fused.rows.size(); ++i) {
            if (keep.count(fused.rows[i])) order.push_back(int(i));
        }
        for (std::size_t i = 0; i < fused.rows.size(); ++i) {
            if (!keep.count(fused.rows[i])) order.push_back(int(i));
        }
        return Cut{std::min(int(keep.size()), config.k_max), k_score, k_sim, config.rule + "/subtask", int(keep.size())};
    }
    for (std::size_t i = 0; i < fused.rows.size(); ++i) order.push_back(int(i));
    return rmargin_cut(fused.scores, config.range_margin, config.k_min, config.k_max, config.range_depth);
}

}  // namespace ms

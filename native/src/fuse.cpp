// fuse.cpp: peak-rank fusion (runtime/stages/fuse.py): a tool's fused rank is the best rank it reached in any list.
#include <algorithm>
#include <map>
#include <tuple>

#include "stages.h"

namespace ms {

Fused peak_rank_fusion(const std::vector<RankedList> &lists) {
    // per tool its key (rank, -score, list): the smallest wins, and the fused order is by key
    std::map<int, std::tuple<std::size_t, double, int>> best;
    for (std::size_t li = 0; li < lists.size(); ++li) {
        const RankedList &lst = lists[li];
        for (std::size_t rank = 0; rank < lst.rows.size() && rank < lst.scores.size(); ++rank) {
            const auto key = std::make_tuple(rank, -double(lst.scores[rank]), int(li));
            auto it = best.find(lst.rows[rank]);
            if (it == best.end() || key < it->second) best[lst.rows[rank]] = key;
        }
    }
    std::vector<std::pair<std::tuple<std::size_t, double, int>, int>> order;
    order.reserve(best.size());
    for (const auto &kv : best) order.emplace_back(kv.second, kv.first);
    std::stable_sort(order.begin(), order.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    Fused out;
    for (const auto &o : order) {
        out.rows.push_back(o.second);
        out.scores.push_back(float(-std::get<1>(o.first)));
        out.source.push_back(std::get<2>(o.first));
    }
    return out;
}

}  // namespace ms

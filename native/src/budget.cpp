// budget.cpp: spend_budget (runtime/stages/budget.py): at most max_tools tools and max_schema_tokens tokens of definitions, each list's best kept tool first.
#include <algorithm>

#include "stages.h"

namespace ms {

std::vector<int> spend_budget(const Budget &budget, const std::vector<int> &rows, int k,
                              const std::vector<RankedList> &lists, const std::function<long long(int)> &tokens,
                              bool by_probability) {
    std::vector<int> kept;
    for (int i = 0; i < std::min<int>(k, int(rows.size())); ++i) kept.push_back(i);
    if (!budget.bounded()) return kept;
    std::vector<int> priority;
    if (by_probability) {
        priority = kept;
    } else {
        // each list's best kept tool, the sub-tasks' lists before the utterance's own (list 0), which
        // on a multi-intent turn is the whole turn and would give its first intent two slots
        std::vector<const RankedList *> ordered;
        for (std::size_t l = 1; l < lists.size(); ++l) ordered.push_back(&lists[l]);
        if (!lists.empty()) ordered.push_back(&lists[0]);
        auto push = [&priority](int i) {
            if (std::find(priority.begin(), priority.end(), i) == priority.end()) priority.push_back(i);
        };
        const auto kept_end = rows.begin() + std::ptrdiff_t(kept.size());
        for (const RankedList *lst : ordered) {
            for (int row : lst->rows) {
                auto at = std::find(rows.begin(), kept_end, row);
                if (at != kept_end) {
                    push(int(at - rows.begin()));
                    break;
                }
            }
        }
        for (int i : kept) push(i);
    }
    const std::size_t slots = budget.max_tools >= 0 ? std::size_t(budget.max_tools) : priority.size();
    long long room = budget.max_schema_tokens;
    std::vector<int> chosen;
    for (int i : priority) {
        if (chosen.size() == slots) break;
        if (budget.max_schema_tokens >= 0) {
            const long long cost = tokens(rows[std::size_t(i)]);
            if (cost > room) continue;
            room -= cost;
        }
        chosen.push_back(i);
    }
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

}  // namespace ms

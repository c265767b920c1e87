// rules.h: the rules decomposer (runtime/decompose/rules.py RuleDecomposer), hand-written scanners, no regex engine.
#pragma once

#include <string>
#include <vector>

#include "dialogue.h"

namespace ms {

// RuleDecomposer(max_tasks).decompose(query, history).tasks: the request clauses of an utterance with
// their context, elliptical ones completed from the dialogue; the utterance whole when it asks one
// thing and nothing was resolved. `query` is a validated utterance and `history` a bounded one
// (invalid UTF-8 is MS_ERR_INPUT). Reads at most max_chars code points of the utterance (its start)
// and of each history turn (its end): bounded time and memory on any input.
std::vector<std::string> decompose_rules(const std::string &query, const std::vector<Turn> &history,
                                         int max_tasks = 4, int max_chars = -1);

}  // namespace ms

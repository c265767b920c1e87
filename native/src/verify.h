// verify.h: the native build's check of a bundle's golden.json pipeline probes, stage by stage (runtime/golden.py check_pipeline).
#pragma once

#include <string>

#include "json.h"
#include "selector.h"

namespace ms {

// Runs every probe turn: the text stages (sub-tasks, retrieval texts, token ids) exactly, the
// embedder (where opened) within the probes' cosine, and every later stage from the written vectors
// (ids, order and K exact; scores, features and probabilities within the written tolerances).
// Returns the report ({"ok", "turns", "stages": {name: {"checked", "mismatches"}}, "first_mismatch", ...}).
json verify_golden(Selector &selector);

}  // namespace ms

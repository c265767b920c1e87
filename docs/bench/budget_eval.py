"""docs/bench/budget.md: Completeness, mean/p90 K and MCP schema tokens per turn at the shipped cut, fixed 5/10 and the budget max_tools 5/3, on every development part."""
import json, random, sys
import numpy as np
from magicselector import Selector
from magicselector.catalog import load_catalog
from magicselector.tokens import schema_tokens
from magicselector.formats import tool_definition

PARTS = {"mobile/test": "/tmp/mobile/test", "mobile/test_ood": "/tmp/mobile/test_ood",
         "bfcl/eval": "/tmp/splits/bfcl/eval", "metatool/eval": "/tmp/splits/metatool/eval"}
N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
base = Selector.from_bundle()
out = {}
for name, d in PARTS.items():
    qs = [json.loads(l) for l in open(f"{d}/queries.jsonl")]
    random.Random(0).shuffle(qs); qs = qs[:N]
    sel = base if name.startswith("mobile") else base.with_catalog(load_catalog(f"{d}/tools.jsonl"))
    tok = {}
    cost = lambda i: tok.setdefault(i, schema_tokens(tool_definition(sel.catalog.get(i), "mcp")))
    rows = {k: [] for k in ("cut", "fixed5", "fixed10", "budget5", "budget3")}
    for q in qs:
        gold = set(q["gold"])
        s = sel.select(q["query"], q["history"])
        rk = s.ranked_ids
        for key, ids in (("cut", s.ids), ("fixed5", rk[:5]), ("fixed10", rk[:10]),
                         ("budget5", sel.select(q["query"], q["history"], max_tools=5).ids),
                         ("budget3", sel.select(q["query"], q["history"], max_tools=3).ids)):
            rows[key].append((gold <= set(ids), len(ids), sum(cost(i) for i in ids)))
    out[name] = {k: {"C": float(np.mean([r[0] for r in v])), "meanK": float(np.mean([r[1] for r in v])),
                     "p90K": float(np.percentile([r[1] for r in v], 90)), "tokens": float(np.mean([r[2] for r in v]))}
                 for k, v in rows.items()}
    print(name, json.dumps(out[name]), flush=True)
import os; os.makedirs("/tmp/research", exist_ok=True)
json.dump(out, open("/tmp/research/budget_eval.json", "w"), indent=1)

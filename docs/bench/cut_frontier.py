"""docs/bench/budget.md: per development part, C@K / mean K / p90 K of rmargin cuts re-applied offline, with NDCG@10, C@5, C@10.

python3 docs/bench/cut_frontier.py BUNDLE|default N OUT.json [BASELINE.json]
Each part's N seeded queries (random.Random(0) shuffle) are selected once with a cut that keeps every
candidate; every cut of the grid is then re-applied to the stored lists (bench/cut_curve.py reapply).
With BASELINE.json (an earlier OUT.json), prints the cuts whose C@K stays within 0.01 of the
baseline's shipped-then cut (rm0.825/kmax20/d15) on every part, fewest tools first.
"""
import json, random, sys, time
from dataclasses import replace
import numpy as np
from magicselector import Selector
from magicselector.catalog import load_catalog
from magicselector.config import DEFAULT_CUT
from magicselector.bench.cut_curve import collect_rankings, reapply, Ranking
from magicselector.stages.cut import CutConfig
from magicselector.data.metrics import ndcg_at_k

PARTS = {"mobile/test": "/tmp/mobile/test", "mobile/test_ood": "/tmp/mobile/test_ood",
         "bfcl/eval": "/tmp/splits/bfcl/eval", "metatool/eval": "/tmp/splits/metatool/eval"}
bundle = None if sys.argv[1] == "default" else sys.argv[1]
N = int(sys.argv[2]); out_path = sys.argv[3]
base = Selector.from_bundle(bundle)
GRID = [replace(DEFAULT_CUT, range_margin=m, k_max=kx, range_depth=dp) for m in (0.825, 0.8, 0.75, 0.7, 0.65, 0.6, 0.5, 0.4)
        for kx in (20, 15, 12, 10) for dp in (15, 10)]
out = {}
for name, d in PARTS.items():
    t0 = time.time()
    qs = [json.loads(l) for l in open(f"{d}/queries.jsonl")]
    random.Random(0).shuffle(qs); qs = qs[:N]
    # the generated parts' catalog is the bundle's own (its index, as the product runs it)
    sel = base if name.startswith("mobile") else base.with_catalog(load_catalog(f"{d}/tools.jsonl"))
    keep = sel.with_config(cut=CutConfig(rule="fixed", fixed_k=sel.config.candidates))
    rows = []
    for q in qs:
        s = keep.select(q["query"], q["history"])
        rows.append(Ranking(q["id"], q.get("category", ""), list(q["gold"]), list(s.ranked_ids),
                            np.asarray(s.ranked_scores, dtype=np.float64), keep.index.vectors(s.ranked_ids),
                            [(t, list(i), np.asarray(sc, dtype=np.float64)) for t, i, sc in s.lists]))
    res = {}
    for cfg in GRID:
        Cs, Ks, ND, C5, C10 = [], [], [], [], []
        for r in rows:
            ranked, k = reapply(r, cfg)
            g = set(r.gold)
            Cs.append(g <= set(ranked[:k])); Ks.append(k)
            ND.append(ndcg_at_k(ranked, r.gold, 10)); C5.append(g <= set(ranked[:5])); C10.append(g <= set(ranked[:10]))
        res[f"rm{cfg.range_margin}/kmax{cfg.k_max}/d{cfg.range_depth}"] = {"C@K": float(np.mean(Cs)), "meanK": float(np.mean(Ks)),
            "p90K": float(np.percentile(Ks, 90)), "ndcg@10": float(np.mean(ND)), "C@5": float(np.mean(C5)), "C@10": float(np.mean(C10))}
    out[name] = res
    s0 = res["rm0.825/kmax20/d15"]
    print(name, f"{time.time()-t0:.0f}s", json.dumps(s0), flush=True)
json.dump(out, open(out_path, "w"), indent=1)

if len(sys.argv) > 4:
    base_run = json.load(open(sys.argv[4]))
    ref = {p: base_run[p]["rm0.825/kmax20/d15"]["C@K"] for p in PARTS}
    fits = sorted((sum(out[p][k]["meanK"] for p in PARTS) / len(PARTS), k) for k in out[next(iter(PARTS))]
                  if all(out[p][k]["C@K"] >= ref[p] - 0.01 for p in PARTS))
    for mean_k, k in fits[:8]:
        print(f"{k:24s} mean K {mean_k:.2f} | " + " | ".join(
            f"{out[p][k]['C@K']:.3f} @ {out[p][k]['meanK']:.1f} (p90 {out[p][k]['p90K']:.0f})" for p in PARTS))

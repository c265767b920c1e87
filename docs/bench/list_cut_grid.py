"""docs/bench/budget.md, "The decomposed turn's cut": the lone-list margin, the per-list margin and the anchor's cap, re-applied offline.

python3 docs/bench/list_cut_grid.py collect eval|train N OUT.pkl   # N seeded queries per part, every candidate kept
python3 docs/bench/list_cut_grid.py grid RANKINGS.pkl OUT.json      # the grid; prints the cuts that hold the issue-start C@K
A lone-list turn is cut at range_margin on its fused list; a decomposed turn's lists (the anchor first)
each at list_range_margin, the anchor at most anchor_k_max tools, their union at most k_max (stages/cut.py).
"""
import itertools, json, pickle, random, sys
from dataclasses import replace
import numpy as np
from magicselector.bench.cut_curve import Ranking, reapply
from magicselector.config import DEFAULT_CUT
from magicselector.stages.cut import CutConfig

PARTS = {"mobile/test": "/tmp/mobile/test", "mobile/test_ood": "/tmp/mobile/test_ood",
         "bfcl/eval": "/tmp/splits/bfcl/eval", "metatool/eval": "/tmp/splits/metatool/eval"}
TRAIN = {"mobile/train": "/tmp/mobile/train", "bfcl/train": "/tmp/splits/bfcl/train", "metatool/train": "/tmp/splits/metatool/train"}
ISSUE_START = {"mobile/test": 0.918, "mobile/test_ood": 0.904, "bfcl/eval": 0.942, "metatool/eval": 0.932}  # C@K - 0.01


def collect(split, n, out):
    from magicselector import Selector
    from magicselector.catalog import load_catalog
    base = Selector.from_bundle(None)
    res = {}
    for name, d in (PARTS if split == "eval" else TRAIN).items():
        qs = [json.loads(l) for l in open(f"{d}/queries.jsonl")]
        random.Random(0).shuffle(qs)
        sel = base if name.startswith("mobile") else base.with_catalog(load_catalog(f"{d}/tools.jsonl"))
        keep = sel.with_config(cut=CutConfig(rule="fixed", fixed_k=sel.config.candidates))
        res[name] = []
        for q in qs[:n]:  # as bench/cut_curve.collect_rankings, on budget_eval.py's random.Random(0) sample
            s = keep.select(q["query"], q["history"])
            res[name].append(Ranking(q["id"], q.get("category", ""), list(q["gold"]), list(s.ranked_ids),
                                     np.asarray(s.ranked_scores, dtype=np.float64), keep.index.vectors(s.ranked_ids),
                                     [(t, list(i), np.asarray(sc, dtype=np.float64)) for t, i, sc in s.lists]))
    pickle.dump(res, open(out, "wb"))


def kept(r, cut):
    ranked, k = reapply(r, cut)  # the runtime's cut_turn, offline
    return ranked[:k]


def grid(rankings, out):
    rows = pickle.load(open(rankings, "rb"))
    found = []
    for rm, lrm, kmax, anchor in itertools.product((0.8, 0.75, 0.7, 0.65), (0.85, 0.8, 0.75), (20, 16, 14, 12),
                                                   (None, 8, 6, 5, 4, 3)):
        cut = replace(DEFAULT_CUT, range_margin=rm, list_range_margin=lrm, k_max=kmax, anchor_k_max=anchor)
        res = {}
        for part, rs in rows.items():
            ks = [kept(r, cut) for r in rs]
            res[part] = dict(C=float(np.mean([set(r.gold) <= set(k) for r, k in zip(rs, ks)])),
                             meanK=float(np.mean([len(k) for k in ks])), p90K=float(np.percentile([len(k) for k in ks], 90)))
        found.append(dict(cut=[rm, lrm, kmax, anchor], parts=res, meanK=float(np.mean([v["meanK"] for v in res.values()]))))
    json.dump(found, open(out, "w"), indent=1)
    holds = [f for f in found if all(f["parts"][p]["C"] >= c - 1e-9 for p, c in ISSUE_START.items() if p in f["parts"])]
    for f in sorted(holds, key=lambda f: f["meanK"])[:10]:
        print(f["cut"], round(f["meanK"], 2), {p: (round(v["C"], 3), round(v["meanK"], 1), v["p90K"]) for p, v in f["parts"].items()})


if __name__ == "__main__":
    if sys.argv[1] == "collect":
        collect(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        grid(sys.argv[2], sys.argv[3])

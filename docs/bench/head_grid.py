"""docs/bench/budget.md, "The learned head": the shipped cut with and without the head, and the grid its min_probability was chosen on, re-applied offline.

python3 docs/bench/head_grid.py collect eval|train N OUT.pkl   # N seeded queries per part (budget_eval.py's sample)
python3 docs/bench/head_grid.py report RANKINGS.pkl            # NDCG@10, C@5, C@10, the shipped cut: no head -> head
python3 docs/bench/head_grid.py grid RANKINGS.pkl OUT.json     # cuts x min_probability that hold the issue-start C@K
The rankings are the default bundle's fused lists (every candidate kept, the head off); the cut and
the head are re-applied with bench/cut_curve.reapply, which test_cut_curve checks against select.
"""
import itertools, json, math, pickle, random, sys
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
        keep = sel.with_config(cut=CutConfig(rule="fixed", fixed_k=sel.config.candidates), head=False)
        res[name] = []
        for q in qs[:n]:
            s = keep.select(q["query"], q["history"])
            res[name].append(Ranking(q["id"], q.get("category", ""), list(q["gold"]), list(s.ranked_ids),
                                     np.asarray(s.ranked_scores, dtype=np.float64), keep.index.vectors(s.ranked_ids),
                                     [(t, list(i), np.asarray(sc, dtype=np.float64)) for t, i, sc in s.lists],
                                     s.history_list))
    pickle.dump((res, base.head), open(out, "wb"))


def ndcg(ids, gold, k=10):
    dcg = sum(1 / math.log2(i + 2) for i, t in enumerate(ids[:k]) if t in gold)
    return dcg / sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))


def measure(rs, cut, head):
    kept = [reapply(r, cut, head=head) for r in rs]
    ks = [k for _, k in kept]
    return (float(np.mean([set(r.gold) <= set(o[:k]) for r, (o, k) in zip(rs, kept)])), float(np.mean(ks)),
            float(np.percentile(ks, 90)))


def report(rankings):
    rows, head = pickle.load(open(rankings, "rb"))
    fixed = replace(DEFAULT_CUT, rule="fixed")
    for part, rs in rows.items():
        plain, ranked = [r.ids for r in rs], [reapply(r, fixed, head=head)[0] for r in rs]
        line = [part]
        for name, f in (("NDCG@10", lambda o, g: ndcg(o, g)), ("C@5", lambda o, g: g <= set(o[:5])),
                        ("C@10", lambda o, g: g <= set(o[:10]))):
            a = np.mean([f(o, set(r.gold)) for r, o in zip(rs, plain)])
            b = np.mean([f(o, set(r.gold)) for r, o in zip(rs, ranked)])
            line.append(f"{name} {a:.3f} -> {b:.3f}")
        (c0, k0, p0), (c1, k1, p1) = measure(rs, replace(DEFAULT_CUT, min_probability=0.0), None), measure(rs, DEFAULT_CUT, head)
        line.append(f"cut {c0:.3f} @ {k0:.2f} (p90 {p0:.0f}) -> {c1:.3f} @ {k1:.2f} (p90 {p1:.0f})")
        print(" | ".join(line))


def grid(rankings, out):
    rows, head = pickle.load(open(rankings, "rb"))
    found = []
    for rm, lrm, kmax, anchor, floor in itertools.product((0.7, 0.75, 0.8), (0.8, 0.85, 0.9), (12, 16, 20), (5, None),
                                                         (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005)):
        cut = replace(DEFAULT_CUT, range_margin=rm, list_range_margin=lrm, k_max=kmax, anchor_k_max=anchor,
                      min_probability=floor)
        parts = {part: measure(rs, cut, head) for part, rs in rows.items()}
        holds = all(parts[p][0] >= c - 1e-9 for p, c in ISSUE_START.items() if p in parts)
        found.append(dict(cut=[rm, lrm, kmax, anchor, floor], holds=holds,
                          meanK=float(np.mean([v[1] for v in parts.values()])), parts=parts))
    json.dump(found, open(out, "w"), indent=1)
    for f in sorted((f for f in found if f["holds"]), key=lambda f: f["meanK"])[:10]:
        print(f["cut"], round(f["meanK"], 2), {p: (round(c, 3), round(k, 1), p90) for p, (c, k, p90) in f["parts"].items()})


if __name__ == "__main__":
    if sys.argv[1] == "collect":
        collect(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        grid(sys.argv[2], sys.argv[3])

"""The rerank gate experiment (the removed SelectorConfig.rerank_min_margin, re-applied offline) and the rerank skip, on the development sets' evaluation parts.

For every set (generated mobile test and test_ood, bfcl and metatool tool-disjoint eval parts, as
``magicselector bench quality`` builds them) it takes the 200 queries ``bench quality --limit 200``
scores plus 300 more drawn with seed 1 from the rest, runs the shipped configuration with the
reranker off and on (once per turn, no gate) and records per query NDCG@10 both ways and the
cross-encoder's top-1 margin over the runner-up, and retrieval's (the fused score of its top tool
over the runner-up's, before any rerank). A gate at margin m keeps the reranked list where the
cross-encoder's margin is >= m; a skip at retrieval margin s does not run the cross-encoder where
retrieval's margin is >= s (``SelectorConfig.rerank_skip_margin``). Prints, per m and per s, the
NDCG@10 change per set, its mean and the share of turns reranked; writes the rows as JSON.

    python3 tools/rerank_gate.py --out /tmp/rerank_gate.json [--reranker DIR] [--bundle DIR] [--work /tmp/devsets]
        [--rerank-candidates N] [--rerank-weight W]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from magicselector.bench.evaluate import screen_queries, selector_for_catalog
from magicselector.bench.quality import development_sets
from magicselector.default_bundle import ensure_default_bundle
from magicselector.config import SelectorConfig
from magicselector.data.datasets import load_benchmark
from magicselector.data.metrics import ndcg_at_k
from magicselector.selector import Selector
from magicselector.stages.rerank import CrossEncoder

MARGINS = (0.0, 0.2, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8, 1.0)
SKIP_QUANTILES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


class RecordingReranker:
    """The reranker, keeping the logits of its last call."""

    def __init__(self, inner):
        self.inner, self.name, self.last = inner, inner.name, None

    def score(self, query, texts):
        self.last = self.inner.score(query, texts)
        return self.last

    def score_pairs(self, pairs):
        self.last = self.inner.score_pairs(pairs)
        return self.last


def sample(queries: list, first: int = 200, more: int = 300) -> list:
    n = len(queries)
    head = set(int(i) for i in np.random.default_rng(0).choice(n, first, replace=False)) if n > first else set(range(n))
    rest = [i for i in range(n) if i not in head]
    extra = set(int(i) for i in np.random.default_rng(1).choice(rest, min(more, len(rest)), replace=False)) if rest else set()
    return [queries[i] for i in sorted(head | extra)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reranker", help="a reranker folder (default: the bundle's)")
    ap.add_argument("--work", default="/tmp/magicselector-devsets")
    ap.add_argument("--bundle", help="a bundle folder (default: the default bundle)")
    ap.add_argument("--rerank-candidates", type=int, help="tools the cross-encoder scores per turn (default: shipped)")
    ap.add_argument("--rerank-weight", type=float, help="cross-encoder share of the mixed score (default: shipped)")
    args = ap.parse_args(argv)
    sets = development_sets(args.work, note=lambda m: print(m, file=sys.stderr))
    base = Selector.from_bundle(args.bundle or ensure_default_bundle(progress=False), config=SelectorConfig(threads=1))
    rec = RecordingReranker(CrossEncoder.from_dir(args.reranker, threads=1) if args.reranker else base.reranker)
    base = base.with_reranker(rec)
    shipped = SelectorConfig()
    shipped = replace(shipped, **{k: v for k, v in (("rerank_candidates", args.rerank_candidates),
                                                   ("rerank_weight", args.rerank_weight)) if v is not None})
    off_config = replace(shipped, rerank=False, candidates=max(10, shipped.cut.k_max, 30))
    rows: dict[str, list[dict]] = {}
    for name, folder in sets:
        bench = load_benchmark(folder)
        queries, _ = screen_queries(sample(bench.queries), off_config)
        off = selector_for_catalog(base, bench.catalog, off_config)
        on = off.with_config(rerank=True, rerank_skip_margin=None)  # every turn
        head_scores: list[np.ndarray] = []  # the fused scores the turn's rerank head sees
        rerank_head = on._rerank_head
        on._rerank_head = lambda texts, ids, scores, *rest: (head_scores.append(np.asarray(scores, dtype=float)),
                                                             rerank_head(texts, ids, scores, *rest))[1]
        rows[name] = []
        for q in queries:
            a, b = off.select(q.query, q.history), on.select(q.query, q.history)
            top = np.sort(np.asarray(rec.last, dtype=float))
            fused = head_scores[-1]
            rows[name].append({"off": ndcg_at_k(a.ranked_ids, q.gold, 10), "on": ndcg_at_k(b.ranked_ids, q.gold, 10),
                               "margin": float(top[-1] - top[-2]) if len(top) > 1 else float("inf"),
                               "retrieval_margin": float(fused[0] - fused[1]) if len(fused) > 1 else float("inf")})
        print(f"{name}: {len(rows[name])} queries", file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps({"config": {"rerank_weight": shipped.rerank_weight,
                                                     "rerank_candidates": shipped.rerank_candidates},
                                          "rows": rows}) + "\n", encoding="utf-8")
    print("| margin | " + " | ".join(rows) + " | mean | reranked share |")
    print("|---:|" + "---:|" * (len(rows) + 2))
    for m in MARGINS:
        deltas = [np.mean([(r["on"] if r["margin"] >= m else r["off"]) - r["off"] for r in rs]) for rs in rows.values()]
        share = np.mean([r["margin"] >= m for rs in rows.values() for r in rs])
        print(f"| {m} | " + " | ".join(f"{d:+.4f}" for d in deltas) + f" | {np.mean(deltas):+.4f} | {share:.2f} |")
    print()
    print("| skip at retrieval margin | " + " | ".join(rows) + " | mean | reranked share |")
    print("|---:|" + "---:|" * (len(rows) + 2))
    every = sorted(r["retrieval_margin"] for rs in rows.values() for r in rs)
    for q in SKIP_QUANTILES:  # thresholds at quantiles of the pooled margins: the shares read directly
        s = float(np.quantile(every, q))
        deltas = [np.mean([(r["on"] if r["retrieval_margin"] < s else r["off"]) - r["off"] for r in rs])
                  for rs in rows.values()]
        share = np.mean([r["retrieval_margin"] < s for rs in rows.values() for r in rs])
        print(f"| {s:.4g} | " + " | ".join(f"{d:+.4f}" for d in deltas) + f" | {np.mean(deltas):+.4f} | {share:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

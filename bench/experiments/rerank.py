"""The cross-encoder experiment: an INT8 cross-encoder mixed into the shipped ranking's head, per part, against the shipped ranking and cut.

    python3 -m magicselector.bench.experiments.rerank [NAME=]DIR... [--dev WORK] [--bundle DIR]
        [--reranker DIR] [--candidates 10] [--weight 0.5] [--skip-margin 0.3] [--threads 1]
        [--n 500] [--out OUT.json]

The runtime carries no cross-encoder: it never earned its place (docs/bench/reranker.md, the
decision and its table). This is how it ran while it did, rebuilt on the public hook
``Selector.rank`` (the turn before its cut): per turn, the fused list's first ``candidates`` tools
are scored by the cross-encoder, each paired with the text of the list it came from, and the
z-scored logits are mixed with the z-scored fused scores (``weight``: the cross-encoder's share); a
turn whose top tool leads the runner-up by ``skip_margin`` or more keeps the shipped ranking, cut
and head. A reranked turn is the reranked head alone, cut once by the shipped cut rule on the mixed
scores (the learned head was fitted on retrieval scores and does not read them). Both rows score
the same sampled turns: NDCG@10, C@5 and C@10 of the ranking, the cut's C@K, mean K and schema
tokens; and the cross-encoder's milliseconds per reranked turn.

The reranker folder (``--reranker``, default ``bench/experiments/reranker``: a source checkout's,
outside the wheel) is what ``python3 -m magicselector.export.shipped_reranker`` writes from a
``magicselector train reranker`` checkpoint.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.catalog import Catalog, tool_text
from magicselector.errors import InputError, MagicSelectorError
from magicselector.selector import Ranking, Selection, Selector
from magicselector.stages.cut import cut_turn

from magicselector.data.cross_encoder import EXPERIMENT_RERANKER_DIR, CrossEncoder, Reranker
from magicselector.data.datasets import Benchmark
from magicselector.data.metrics import completeness_at_k, ndcg_at_k

from .common import (add_part_args, load_part, open_bundle, over_catalog, parts_from, show, summarize, token_cost,
                     turn_metrics, write_json)


@dataclass(frozen=True)
class RerankSettings:
    """How the cross-encoder runs on a turn (the settings it last ran with in the runtime).

    candidates: the fused list's head it scores. weight: its z-scored logits' share of the mix
    with the z-scored fused scores (1: the cross-encoder alone). skip_margin: a turn whose top tool
    leads the runner-up by at least this much keeps the shipped ranking (None: every turn reranks)."""

    candidates: int = 10
    weight: float = 0.5
    skip_margin: float | None = 0.3

    def __post_init__(self) -> None:
        if not isinstance(self.candidates, int) or self.candidates < 1:
            raise InputError(f"RerankSettings.candidates must be an integer >= 1, got {self.candidates!r}")
        if not 0.0 <= self.weight <= 1.0:
            raise InputError(f"RerankSettings.weight must be within [0, 1], got {self.weight!r}")
        if self.skip_margin is not None and self.skip_margin < 0:
            raise InputError(f"RerankSettings.skip_margin must be >= 0 or None, got {self.skip_margin!r}")


def zscore(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if len(x) < 2:
        return np.zeros_like(x)
    sd = float(x.std())
    return (x - x.mean()) / sd if sd > 1e-6 else np.zeros_like(x)


def mix_scores(rerank: np.ndarray, retrieval: np.ndarray, weight: float) -> np.ndarray:
    """weight * z(cross-encoder) + (1 - weight) * z(retrieval), over one candidate list: z-scoring
    puts the two on one scale per list; a weight below 1 keeps the retriever's view where the
    cross-encoder is unsure (tools outside its training domain)."""
    if weight >= 1.0:
        return np.asarray(rerank, dtype=np.float32)
    return (weight * zscore(rerank) + (1.0 - weight) * zscore(retrieval)).astype(np.float32)


def rerank_fused(scorer: Reranker, pairs_of: Callable[[int], list[tuple[str, str]]], scores: np.ndarray,
                 settings: RerankSettings) -> tuple[np.ndarray, np.ndarray] | None:
    """One turn's rerank: skip, score, mix. Returns the head's new order (positions into it) and
    its mixed scores in that order; None, and no cross-encoder call, where the list is empty or
    retrieval is sure (``settings.skip_margin``)."""
    n = min(settings.candidates, len(scores))
    if n == 0:
        return None
    if settings.skip_margin is not None and n >= 2 and float(scores[0]) - float(scores[1]) >= settings.skip_margin:
        return None
    ce = np.asarray(scorer.score_pairs(pairs_of(n)), dtype=np.float32)
    final = mix_scores(ce, np.asarray(scores[:n], dtype=np.float32), settings.weight)
    order = np.argsort(-final, kind="stable")
    return order, final[order]


@dataclass(frozen=True)
class RerankedTurn:
    """A turn after the experiment: its ranking (the reranked head, or the shipped ranked list where
    the skip kept it), the tools the cut kept, whether the cross-encoder ran and its milliseconds."""

    ranked: list[str]
    kept: list[str]
    reranked: bool
    ms: float


def rerank_turn(selector: Selector, ranking: Ranking, selection: Selection, scorer: Reranker,
                settings: RerankSettings) -> RerankedTurn:
    """The experiment on one turn, from what ``Selector.rank`` and ``Selector.select`` gave for it."""
    ids, catalog, texts, source = ranking.ids, ranking.catalog, ranking.texts, ranking.source
    t0 = time.perf_counter()
    got = rerank_fused(scorer, lambda n: [(texts[source[i]], tool_text(catalog.get(ids[i]))) for i in range(n)],
                       np.asarray(ranking.scores), settings)
    ms = (time.perf_counter() - t0) * 1e3
    if got is None:
        return RerankedTurn(list(selection.ranked_ids), list(selection.ids), False, ms)
    order, mixed = got
    head = [ids[i] for i in order]
    # the cut once, on the reranked list (its scores are not per retrieval list any more)
    kept_order, cut = cut_turn(selector.config.cut, [(head, mixed)], head, mixed, ranking.vectors, per_list=False)
    return RerankedTurn(head, [head[i] for i in kept_order[:cut.k]], True, ms)


def _metrics(gold: Sequence[str], turn: RerankedTurn, cost: Callable[[Sequence[str]], int]) -> dict[str, float]:
    """``common.turn_metrics`` for a turn the experiment ranked."""
    return {"C@5": completeness_at_k(turn.ranked, gold, 5), "C@10": completeness_at_k(turn.ranked, gold, 10),
            "NDCG@10": ndcg_at_k(turn.ranked, gold, 10), "C@K": completeness_at_k(turn.kept, gold, len(turn.kept)),
            "K": float(len(turn.kept)), "tokens": float(cost(turn.kept))}


def measure_part(selector: Selector, bench: Benchmark, scorer: Reranker, settings: RerankSettings) -> dict[str, Any]:
    """The shipped row and the reranked row of one part (its sampled queries), with the share of
    turns the cross-encoder ran on and its p50 milliseconds there."""
    cost = token_cost(selector)
    shipped, reranked, ms = [], [], []
    for q in bench.queries:
        selection = selector.select(q.query, q.history)
        assert selection.ranking is not None  # select always keeps the ranking it cut
        turn = rerank_turn(selector, selection.ranking, selection, scorer, settings)
        shipped.append(turn_metrics(q.gold, selection, cost))
        reranked.append(_metrics(q.gold, turn, cost))
        if turn.reranked:
            ms.append(turn.ms)
    return {"queries": len(bench.queries), "shipped": summarize(shipped), "reranked": summarize(reranked),
            "reranked_share": round(len(ms) / max(1, len(bench.queries)), 4),
            "rerank_ms_p50": round(float(np.percentile(ms, 50)), 3) if ms else None}


def run(parts: Sequence[tuple[str, Path]], base: Selector, scorer: Reranker, settings: RerankSettings, n: int,
        seed: int = 0) -> dict[str, Any]:
    """Every part's rows (``measure_part``), each over its own catalog (``common.over_catalog``)."""
    out: dict[str, Any] = {"settings": {"candidates": settings.candidates, "weight": settings.weight,
                                        "skip_margin": settings.skip_margin},
                           "reranker": getattr(scorer, "name", "reranker"), "n": n, "seed": seed, "parts": {}}
    for name, folder in parts:
        bench = load_part(folder, n, seed)
        catalog: Catalog = bench.catalog
        row = measure_part(over_catalog(base, catalog), bench, scorer, settings)
        out["parts"][name] = row
        show(name + " shipped", row["shipped"])
        show(name + " reranked", {**row["reranked"], "share": row["reranked_share"], "ms": row["rerank_ms_p50"]})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.rerank",
                                     description=__doc__.split("\n")[0] if __doc__ else None)
    add_part_args(parser)
    parser.add_argument("--bundle", help="bundle folder (default: the default bundle)")
    parser.add_argument("--reranker", default=str(EXPERIMENT_RERANKER_DIR), metavar="DIR",
                        help="the reranker folder (default: bench/experiments/reranker of the source checkout)")
    parser.add_argument("--candidates", type=int, default=RerankSettings.candidates)
    parser.add_argument("--weight", type=float, default=RerankSettings.weight)
    parser.add_argument("--skip-margin", type=float, default=RerankSettings.skip_margin,
                        help="keep the shipped ranking where its top tool leads by this much (negative: never)")
    parser.add_argument("--threads", type=int, default=1, help="the cross-encoder's inference threads")
    parser.add_argument("--out", help="write the rows as JSON")
    args = parser.parse_args(argv)
    try:
        settings = RerankSettings(args.candidates, args.weight, None if args.skip_margin < 0 else args.skip_margin)
        scorer = CrossEncoder.from_dir(args.reranker, threads=args.threads)
        write_json(args.out, run(parts_from(args), open_bundle(args.bundle), scorer, settings, args.n, args.seed))
    except MagicSelectorError as e:
        raise SystemExit(f"rerank: error: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Companions through the catalog's structure, measured: the pair model fitted on train parts' multi-tool gold sets, each eval part's companion table built from its own catalog, and the lift re-applied to the shipped selections, before and after.

    python3 -m magicselector.bench.experiments.companions --train NAME=DIR [...] --eval NAME=DIR [...]
        [--bundle DIR] [--n 500] [--seed 0] [--cache DIR] [--out RESULT.json]

Each part's queries are selected once with the bundle's shipped configuration (``Selector.select``;
cached under ``--cache``): the seeded ``--n`` sample and, separately, every query with two or more
gold tools (up to ``--n``), the multi-tool rows. Train parts give the pairs the model is fitted on
(``export.companions.gold_pairs``: gold with gold against gold with the turn's other ranked tools)
and the lift's setting (``--grid``: the combination that raises the train parts' multi-tool C@5 most
while no train part's sample loses more than ``--tolerance`` C@5 or NDCG@10; ``--config`` measures a
given one instead); eval parts, whose
tools never occur in training, are measured with that setting: C@5, C@10, NDCG@10 of the ranked
list (kept first), mean K and C@K of the kept tools, before (shipped) and after the lift.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from magicselector.errors import InputError

from magicselector.data.datasets import Query, load_benchmark
from magicselector.data.metrics import completeness_at_k, ndcg_at_k
from magicselector.export.companions import (FEATURES, CompanionConfig, CompanionTable, PairModel, average_precision,
                                             catalog_facts, companion_table, fit_pair_model, gold_pairs, lift_companions)

from .common import Part, open_bundle, over_catalog, part_arg, sample, write_json

Turn = dict[str, Any]  # {"id", "gold", "ranked", "k"}
GRID = {"hits": (1, 2, 3), "min_score": (0.5, 0.7, 0.8, 0.9, 0.95), "max_lifted": (1, 2), "depth": (0, 5, 10)}


def multi(queries: Sequence[Query], n: int, seed: int) -> list[Query]:
    """The part's queries with two or more gold tools: a seeded sample of at most ``n``."""
    return sample([q for q in queries if len(set(q.gold)) >= 2], n, seed)


def collect(parts: Sequence[Part], bundle: str | None, n: int, seed: int, cache: Path | None
            ) -> tuple[dict[str, dict[str, list[Turn]]], dict[str, Any]]:
    """Per part, {"sample": turns, "multi": turns} of the shipped selections, and per part the
    facts its table is built from (catalog and tool vectors)."""
    base = open_bundle(bundle)
    turns: dict[str, dict[str, list[Turn]]] = {}
    facts: dict[str, Any] = {}
    for name, folder in parts:
        bench = load_benchmark(folder)
        selector = over_catalog(base, bench.catalog)
        facts[name] = catalog_facts(bench.catalog, selector.index.vectors(bench.catalog.ids))
        stored = cache / f"{name.replace('/', '_').replace(' ', '_')}-{n}-{seed}.json" if cache else None
        if stored is not None and stored.is_file():
            turns[name] = json.loads(stored.read_text())
            continue
        done: dict[str, Turn] = {}
        rows: dict[str, list[Turn]] = {}
        t0 = time.perf_counter()
        for which, queries in (("sample", sample(bench.queries, n, seed)), ("multi", multi(bench.queries, n, seed))):
            rows[which] = []
            for q in queries:
                if q.id not in done:
                    sel = selector.select(q.query, history=list(q.history))
                    done[q.id] = {"id": q.id, "gold": list(q.gold), "ranked": list(sel.ranked_ids), "k": sel.k}
                rows[which].append(done[q.id])
        print(f"{name}: {len(done)} selections in {time.perf_counter() - t0:.0f} s", flush=True)
        turns[name] = rows
        if stored is not None:
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_text(json.dumps(rows))
    return turns, facts


def peer_rows(parts: Sequence[Part], n: int, seed: int) -> dict[str, dict[str, float]]:
    """graph-tool-call (``bench.peers``, BM25 over its graph of tools linked by their parameters, no
    embedding) on each part's multi-tool rows, ranking the history-folded text as ``bench quality``
    does: its C@5, C@10 and NDCG@10; parts where it is not installed are left out."""
    from magicselector.config import SelectorConfig

    from magicselector.bench.peers import PEERS, PeerRanker, installed
    from magicselector.bench.quality import folded_texts

    peer = next(p for p in PEERS if p.name == "graph-tool-call")
    if not installed(peer):
        print(f"note: {peer.package} is not installed; no peer row", flush=True)
        return {}
    out = {}
    for name, folder in parts:
        bench = load_benchmark(folder)
        queries = multi(bench.queries, n, seed)
        if not queries:
            continue
        ranker = PeerRanker(peer, list(bench.catalog))
        ranked = [ranker.rank(text, 10) for text in folded_texts(queries, SelectorConfig())]
        rows = [(completeness_at_k(r, q.gold, 5), completeness_at_k(r, q.gold, 10), ndcg_at_k(r, q.gold, 10))
                for r, q in zip(ranked, queries)]
        m = np.mean(np.asarray(rows, dtype=np.float64), axis=0)
        out[name] = dict(zip(("C@5", "C@10", "NDCG@10"), (round(float(x), 4) for x in m)))
    return out


def metrics(turns: Sequence[Turn], table: CompanionTable | None, config: CompanionConfig | None) -> dict[str, float]:
    """C@5, C@10, NDCG@10 of the ranked lists, K and C@K of the kept tools, with the lift where
    ``table`` and ``config`` are given; ``lifted``: the share of turns where it moved a tool."""
    rows = []
    for t in turns:
        ranked, k, moved = t["ranked"], t["k"], 0
        if table is not None and config is not None:
            lift = lift_companions(table, config, ranked, k)
            ranked, k, moved = [ranked[i] for i in lift.order], lift.k, int(bool(lift.lifted))
        gold = t["gold"]
        rows.append((completeness_at_k(ranked, gold, 5), completeness_at_k(ranked, gold, 10), ndcg_at_k(ranked, gold, 10),
                     float(k), completeness_at_k(ranked[:k], gold, k), moved))
    if not rows:
        return {}
    m = np.mean(np.asarray(rows, dtype=np.float64), axis=0)
    return dict(zip(("C@5", "C@10", "NDCG@10", "K", "C@K", "lifted"), (round(float(x), 4) for x in m)))


def fit(turns: dict[str, dict[str, list[Turn]]], facts: dict[str, Any], names: Sequence[str], l2: float
        ) -> tuple[PairModel, int, int]:
    """The pair model fitted on the named parts' turns (sample and multi-tool rows together)."""
    xs, ys = [], []
    for name in names:
        seen = {t["id"]: t for rows in turns[name].values() for t in rows}
        x, y = gold_pairs(facts[name], [(t["gold"], t["ranked"]) for t in seen.values()])
        xs.append(x)
        ys.append(y)
    x, y = np.vstack(xs), np.concatenate(ys)
    return fit_pair_model(x, y, l2=l2), int(y.sum()), int(len(y) - y.sum())


def choose(turns: dict[str, dict[str, list[Turn]]], tables: dict[str, CompanionTable], names: Sequence[str],
           tolerance: float) -> tuple[CompanionConfig | None, list[dict[str, Any]]]:
    """The grid's setting with the highest mean multi-tool C@5 gain over the named (train) parts
    among those costing no part's sample more than ``tolerance`` C@5 or NDCG@10; None: none gains."""
    before = {n: {w: metrics(turns[n][w], None, None) for w in ("sample", "multi")} for n in names}
    tried = []
    best: tuple[float, CompanionConfig | None] = (0.0, None)
    for values in itertools.product(*GRID.values()):
        config = CompanionConfig(**dict(zip(GRID, values)))
        gain, worst = [], 0.0
        for n in names:
            after = {w: metrics(turns[n][w], tables[n], config) for w in ("sample", "multi")}
            if turns[n]["multi"]:
                gain.append(after["multi"]["C@5"] - before[n]["multi"]["C@5"])
            worst = min(worst, *(after["sample"][m] - before[n]["sample"][m] for m in ("C@5", "NDCG@10")))
        mean_gain = float(np.mean(gain)) if gain else 0.0
        tried.append({"config": dict(zip(GRID, values)), "multi_C@5_gain": round(mean_gain, 4),
                      "worst_sample_loss": round(worst, 4)})
        if worst >= -tolerance - 1e-9 and mean_gain > best[0]:  # a loss of exactly the tolerance holds
            best = (mean_gain, config)
    return best[1], tried


def held_out_ap(turns: dict[str, dict[str, list[Turn]]], facts: dict[str, Any], model: PairModel, name: str
                ) -> float:
    """Average precision of the pair model on an eval part's own pairs (never fitted on)."""
    seen = {t["id"]: t for rows in turns[name].values() for t in rows}
    x, y = gold_pairs(facts[name], [(t["gold"], t["ranked"]) for t in seen.values()])
    return average_precision(model.probabilities(x), y) if len(y) else float("nan")


def lift_time_us(turns: Sequence[Turn], table: CompanionTable, config: CompanionConfig, repeat: int = 20) -> float:
    """Mean microseconds of one lift (lookup and reorder), over a part's turns."""
    if not turns:
        return 0.0
    t0 = time.perf_counter()
    for _ in range(repeat):
        for t in turns:
            lift_companions(table, config, t["ranked"], t["k"])
    return (time.perf_counter() - t0) / (repeat * len(turns)) * 1e6


def run(train: Sequence[Part], evaluate: Sequence[Part], bundle: str | None = None, n: int = 500, seed: int = 0,
        cache: Path | None = None, tolerance: float = 0.002, l2: float = 1.0, per_tool: int = 4,
        config: CompanionConfig | None = None, peer: bool = False) -> dict[str, Any]:
    """Fit, choose (unless ``config`` is given) and measure, with graph-tool-call's row on the eval
    parts' multi-tool rows where ``peer``; returns the report (also printed)."""
    turns, facts = collect([*train, *evaluate], bundle, n, seed, cache)
    train_names = [name for name, _ in train]
    model, positives, negatives = fit(turns, facts, train_names, l2)
    print("pair model:", {f: round(w, 3) for f, w in zip(FEATURES, model.weights)}, "bias", round(model.bias, 3),
          f"({positives} companion pairs, {negatives} not)", flush=True)
    floor = min(GRID["min_score"]) if config is None else config.min_score
    tables = {name: companion_table(facts[name], model, per_tool=per_tool, floor=floor) for name in turns}
    tried: list[dict[str, Any]] = []
    if config is None:
        config, tried = choose(turns, tables, train_names, tolerance)
    print("setting:", config, flush=True)
    parts: dict[str, Any] = {}
    for name in turns:
        row: dict[str, Any] = {"role": "train" if name in train_names else "eval"}
        for which in ("sample", "multi"):
            rows = turns[name][which]
            row[which] = {"n": len(rows), "before": metrics(rows, None, None)}
            if config is not None:
                row[which]["after"] = metrics(rows, tables[name], config)
        if config is not None:
            row["lift_us"] = round(lift_time_us(turns[name]["sample"], tables[name], config), 2)
        if row["role"] == "eval":
            row["pair_ap"] = round(held_out_ap(turns, facts, model, name), 4)
        parts[name] = row
        for which in ("sample", "multi"):
            r = row[which]
            if r["n"]:
                print(f"{name:24s} {which:6s} n={r['n']:4d} before {r['before']}" +
                      (f"\n{'':31s} after  {r['after']}" if "after" in r else ""), flush=True)
    peers = peer_rows(evaluate, n, seed) if peer else {}
    for name, row in peers.items():
        parts[name]["multi"]["graph-tool-call"] = row
        print(f"{name:24s} multi  graph-tool-call {row}", flush=True)
    return {"model": model.to_json(), "pairs": {"companions": positives, "not": negatives},
            "config": None if config is None else {k: getattr(config, k) for k in ("hits", "min_score", "max_lifted",
                                                                                     "depth", "k_max")},
            "tolerance": tolerance, "n": n, "seed": seed, "per_tool": per_tool, "parts": parts, "grid": tried}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.companions",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--train", action="append", type=part_arg, default=[], metavar="[NAME=]DIR",
                        help="a train part (repeat): the pair model and the lift's setting are fitted on these")
    parser.add_argument("--eval", action="append", type=part_arg, default=[], metavar="[NAME=]DIR",
                        help="an evaluation part (repeat), tool-disjoint from the train parts")
    parser.add_argument("--bundle", help="bundle folder (default: the default bundle)")
    parser.add_argument("--n", type=int, default=500, help="seeded queries per part, and multi-tool ones (default 500)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, help="keep each part's selections here for the next run")
    parser.add_argument("--tolerance", type=float, default=0.002,
                        help="the most C@5 or NDCG@10 a train part's sample may lose to a chosen setting")
    parser.add_argument("--l2", type=float, default=1.0, help="the pair model's L2 penalty")
    parser.add_argument("--per-tool", type=int, default=4, help="companions kept per tool in the table")
    parser.add_argument("--config", type=json.loads, metavar="JSON",
                        help='measure this lift setting instead of choosing one on the train parts, e.g. '
                             '\'{"hits": 3, "min_score": 0.9, "max_lifted": 1, "depth": 10}\'')
    parser.add_argument("--peer", action="store_true",
                        help="also graph-tool-call (no embedding) on the eval parts' multi-tool rows")
    parser.add_argument("--out", help="write the report as JSON here")
    args = parser.parse_args(argv)
    if not args.train or not args.eval:
        parser.error("name at least one --train and one --eval part")
    try:
        config = CompanionConfig(**args.config) if args.config is not None else None
    except (InputError, TypeError) as e:  # a bad value, or a key CompanionConfig does not have
        parser.error(f"--config: {e}")
    report = run(args.train, args.eval, args.bundle, args.n, args.seed, args.cache, args.tolerance, args.l2,
                 args.per_tool, config, args.peer)
    write_json(args.out, report)
    return report


if __name__ == "__main__":
    main()

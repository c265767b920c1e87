"""The cut's and the head's settings chosen offline: rankings collected once per part, every cut of a grid re-applied to them (``bench/cut_curve.reapply``, which tests/test_cut_curve.py checks against ``select``).

    python3 -m magicselector.bench.experiments.cut_grid collect [NAME=]DIR... [--dev WORK] [--bundle DIR]
        [--n 500] --out RANKINGS.pkl
    python3 -m magicselector.bench.experiments.cut_grid report RANKINGS.pkl
    python3 -m magicselector.bench.experiments.cut_grid grid RANKINGS.pkl --vary FIELD=V1,V2,... [...]
        [--head bundle|none] [--tolerance 0.01] [--out OUT.json]

``collect`` stores each query's fused lists (the bundle's shipped configuration, every candidate kept,
the head off) and the bundle's head. ``report`` prints, per part, NDCG@10, C@5 and C@10 of the fused
order against the head's order, and the shipped cut without and with the head. ``grid`` re-applies
every combination of the ``--vary`` values of ``CutConfig`` fields (``none`` for None) and prints the
cuts whose C@K stays within ``--tolerance`` of the shipped cut's on every part, fewest tools first.
The cut's margins, its k_max, the anchor's cap and the head's floor (docs/bench/budget.md) were
chosen so (docs/bench/LOG.md).
"""
from __future__ import annotations

import argparse
import itertools
import pickle
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from magicselector.config import SelectorConfig
from magicselector.stages.cut import CutConfig
from magicselector.stages.head import HeadModel

from magicselector.bench.cut_curve import Ranking, collect_rankings, reapply
from magicselector.data.datasets import load_benchmark
from magicselector.data.metrics import completeness_at_k, ndcg_at_k

from .common import add_part_args, load_part, open_bundle, over_catalog, parts_from, write_json

Rankings = dict[str, list[Ranking]]


def collect(parts: Sequence[tuple[str, Path]], bundle: str | None, n: int, seed: int = 0
            ) -> tuple[Rankings, HeadModel | None]:
    """Per part, the rankings of its seeded sample (``cut_curve.collect_rankings``), and the head."""
    base = open_bundle(bundle)
    out: Rankings = {}
    for name, folder in parts:
        part = load_part(folder, n, seed)
        out[name] = collect_rankings(over_catalog(base, load_benchmark(folder).catalog), part)
        print(name, len(out[name]), "rankings", flush=True)
    return out, base.head


def measure(rows: Sequence[Ranking], cut: CutConfig, head: HeadModel | None) -> dict[str, float]:
    """C@K, mean and p90 K of ``cut`` (and ``head``) re-applied to a part's rankings."""
    kept = [reapply(r, cut, head=head) for r in rows]
    ks = [k for _, k in kept]
    return {"C@K": float(np.mean([completeness_at_k(o, r.gold, k) for r, (o, k) in zip(rows, kept)])),
            "meanK": float(np.mean(ks)), "p90K": float(np.percentile(ks, 90))}


def report(rankings: Rankings, head: HeadModel | None) -> dict[str, Any]:
    """Per part: the ranking's metrics in the fused and in the head's order, and the shipped cut
    without and with the head."""
    shipped = SelectorConfig().cut
    out = {}
    for part, rows in rankings.items():
        ordered = [reapply(r, shipped, head=head)[0] for r in rows] if head is not None else [r.ids for r in rows]
        line: dict[str, Any] = {}
        for name, metric in (("NDCG@10", lambda o, g: ndcg_at_k(o, g, 10)), ("C@5", lambda o, g: completeness_at_k(o, g, 5)),
                             ("C@10", lambda o, g: completeness_at_k(o, g, 10))):
            line[name] = [float(np.mean([metric(o, r.gold) for r, o in zip(rows, orders)]))
                          for orders in ([r.ids for r in rows], ordered)]
        line["cut"] = [measure(rows, shipped, None), measure(rows, shipped, head)]
        out[part] = line
        print(part, " | ".join(f"{k} {a:.3f} -> {b:.3f}" for k, (a, b) in line.items() if k != "cut"),
              "| cut {C@K:.3f} @ {meanK:.2f} (p90 {p90K:.0f})".format(**line["cut"][0]),
              "-> {C@K:.3f} @ {meanK:.2f} (p90 {p90K:.0f})".format(**line["cut"][1]), flush=True)
    return out


def grid_values(specs: Sequence[str]) -> dict[str, list[Any]]:
    """``FIELD=V1,V2`` per CutConfig field: the values to try (numbers, or ``none``)."""
    names = {f.name for f in fields(CutConfig)}
    out: dict[str, list[Any]] = {}
    for spec in specs:
        name, _, values = spec.partition("=")
        if name not in names:
            raise SystemExit(f"--vary {spec!r}: {name!r} is not a CutConfig field ({', '.join(sorted(names))})")
        out[name] = [None if v == "none" else (int(v) if v.lstrip("-").isdigit() else float(v)) for v in values.split(",")]
    return out


def grid(rankings: Rankings, head: HeadModel | None, vary: dict[str, list[Any]], tolerance: float = 0.01
         ) -> dict[str, Any]:
    """Every combination of ``vary`` on the shipped cut, and those that hold its C@K on every part."""
    shipped = SelectorConfig().cut
    reference = {part: measure(rows, shipped, head)["C@K"] for part, rows in rankings.items()}
    found = []
    for combo in itertools.product(*vary.values()):
        change = dict(zip(vary, combo))
        cut = replace(shipped, **change)
        parts = {part: measure(rows, cut, head) for part, rows in rankings.items()}
        found.append({"cut": change, "meanK": float(np.mean([v["meanK"] for v in parts.values()])), "parts": parts,
                      "holds": all(parts[p]["C@K"] >= reference[p] - tolerance - 1e-9 for p in parts)})
    print("shipped cut", {p: round(c, 3) for p, c in reference.items()})
    for f in sorted((f for f in found if f["holds"]), key=lambda f: f["meanK"])[:10]:
        print(f["cut"], round(f["meanK"], 2), {p: (round(v["C@K"], 3), round(v["meanK"], 1), v["p90K"])
                                                for p, v in f["parts"].items()}, flush=True)
    return {"reference": reference, "tolerance": tolerance, "found": found}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.cut_grid",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="store the parts' rankings")
    add_part_args(c)
    c.add_argument("--bundle", help="bundle folder (default: the default bundle)")
    c.add_argument("--out", required=True, help="the rankings file (pickle)")
    r = sub.add_parser("report", help="the head's gain on the stored rankings")
    r.add_argument("rankings")
    g = sub.add_parser("grid", help="cuts re-applied to the stored rankings")
    g.add_argument("rankings")
    g.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2,...", help="a CutConfig field's values")
    g.add_argument("--head", choices=("bundle", "none"), default="bundle", help="the collected bundle's head, or none")
    g.add_argument("--tolerance", type=float, default=0.01, help="C@K a cut may lose on a part (default 0.01)")
    g.add_argument("--out", help="every cut's results (JSON)")
    return p


def main(argv: Sequence[str] | None = None) -> Any:
    args = parser().parse_args(argv)
    if args.command == "collect":
        stored = collect(parts_from(args), args.bundle, args.n, args.seed)
        Path(args.out).write_bytes(pickle.dumps(stored))
        return stored
    rankings, head = pickle.loads(Path(args.rankings).read_bytes())  # a file this tool wrote
    if args.command == "report":
        return report(rankings, head)
    result = grid(rankings, head if args.head == "bundle" else None, grid_values(args.vary), args.tolerance)
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()

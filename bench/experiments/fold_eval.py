"""One bundle under one configuration on every part: the ranking's C@5, C@10, NDCG@10 and the shipped cut's C@K, mean and p90 K and schema tokens per turn.

    python3 -m magicselector.bench.experiments.fold_eval [NAME=]DIR... [--dev WORK] [--bundle DIR]
        [--history MODE] [--cut JSON] [--config JSON] [--head HEAD.json|none] [--n 500] [--out OUT.json]

``--cut`` replaces fields of the shipped cut (``'{"range_margin": 0.6}'``), ``--config`` fields of
``SelectorConfig`` (``'{"max_tools": 3}'`` measures the budget, ``'{"history_turns": 6}'``), ``--head``
runs another head file (``train head``'s output) or none. The history modes, the head floor and the
budget in docs/bench/history.md and budget.md were chosen with it.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any, Callable, Sequence

from magicselector.catalog import Catalog
from magicselector.selector import Selector
from magicselector.stages.head import HeadModel

from magicselector.data.datasets import load_benchmark

from .common import (Part, add_part_args, open_bundle, over_catalog, parts_from, sample, show, summarize,
                     token_cost, turn_metrics, write_json)

Over = Callable[[Selector, Catalog], Selector]


def configured(bundle: str | None = None, history: str | None = None, cut: str = "{}", config: str = "{}",
               head: str | None = None) -> Selector:
    """The bundle's Selector with the command line's changes to its configuration and head."""
    base = open_bundle(bundle)
    changes: dict[str, Any] = json.loads(config)
    if history:
        changes["history"] = history
    base = base.with_config(cut=replace(base.config.cut, **json.loads(cut)), **changes)
    if head == "none":
        base = base.with_config(head=False)
    elif head:
        base.head = HeadModel.from_bytes(open(head, "rb").read())
    return base


def measure(base: Selector, parts: Sequence[Part], n: int, seed: int = 0, over: Over = over_catalog
            ) -> dict[str, dict[str, float]]:
    """Per part, the metrics of ``over(base, part catalog)`` on the part's seeded sample."""
    out = {}
    for name, folder in parts:
        bench = load_benchmark(folder)
        sel = over(base, bench.catalog)
        cost = token_cost(sel)
        out[name] = summarize([turn_metrics(q.gold, sel.select(q.query, q.history), cost)
                               for q in sample(bench.queries, n, seed)])
        show(name, out[name])
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.fold_eval",
                                description=__doc__.split("\n")[0])
    add_part_args(p)
    p.add_argument("--bundle", help="bundle folder (default: the default bundle)")
    p.add_argument("--history", help="history mode (default: the shipped one)")
    p.add_argument("--cut", default="{}", help="JSON object of CutConfig fields replacing the shipped cut's")
    p.add_argument("--config", default="{}", help="JSON object of SelectorConfig fields")
    p.add_argument("--head", help="a head file to run instead of the bundle's, or 'none'")
    p.add_argument("--out", help="write the results here (JSON)")
    return p


def run(args: argparse.Namespace, over: Over = over_catalog) -> dict[str, Any]:
    """The parsed command line's measurement, written to ``--out`` and returned."""
    base = configured(args.bundle, args.history, args.cut, args.config, args.head)
    result = {"bundle": args.bundle or "default", "history": base.config.history, "n": args.n,
              "cut": json.loads(args.cut), "config": json.loads(args.config), "head": args.head or "bundle",
              "parts": measure(base, parts_from(args), args.n, args.seed, over)}
    write_json(args.out, result)
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run(parser().parse_args(argv))


if __name__ == "__main__":
    main()

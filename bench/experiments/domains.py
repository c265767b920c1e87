"""Where the shipped ranking misses, by domain: C@5 of a bundle's pipeline per generator domain of a generated part, optionally with every podcast and audiobook title replaced.

    python3 -m magicselector.bench.experiments.domains [NAME=]DIR... [--dev WORK] [--bundle DIR]
        [--titles SUBSTITUTE] [--n 500] [--out OUT.json]

A generated query lists its domains (``domains`` in queries.jsonl); a multi-domain turn counts in
each. ``--titles``: the generator's podcast show and audiobook names in the utterance and history
read as SUBSTITUTE (a diagnosis of how much the names cost, never for training). Parts without
domains count under ``all`` only. docs/bench/LOG.md's "What test_ood misses, by domain" was measured so.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from magicselector.data.datasets import load_benchmark
from magicselector.data.metrics import completeness_at_k

from .common import add_part_args, open_bundle, over_catalog, parts_from, ranked_ids, sample, write_json


def title_editor(substitute: str) -> Callable[[str], str]:
    """Replaces every podcast show and audiobook title the generator draws from with ``substitute``."""
    import magicselector.data.mobile as mobile

    folder = Path(mobile.__file__).parent
    slots = json.loads((folder / "slots.json").read_text())
    books = json.loads((folder / "domains" / "podcasts.json").read_text())["slots"]["audiobook"]
    names = sorted(slots["podcast_show"] + books, key=len, reverse=True)
    rx = re.compile("|".join(map(re.escape, names)))
    return lambda text: rx.sub(substitute, text)


def by_domain(selector: Any, queries: Sequence[Any], edit: Callable[[str], str] = lambda t: t
              ) -> dict[str, tuple[float, int]]:
    """(C@5, queries) per domain, ``all`` first, then the weakest domain first."""
    n: collections.Counter[str] = collections.Counter()
    hit: collections.Counter[str] = collections.Counter()
    for q in queries:
        history = [dict(t, content=edit(t["content"])) if isinstance(t.get("content"), str) else t for t in q.history]
        ok = completeness_at_k(ranked_ids(selector.select(edit(q.query), history)), q.gold, 5)
        for dom in ["all", *q.extra.get("domains", [])]:
            n[dom] += 1
            hit[dom] += ok
    return {d: (hit[d] / n[d], n[d]) for d in sorted(n, key=lambda d: (d != "all", hit[d] / n[d]))}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.domains",
                                description=__doc__.split("\n")[0])
    add_part_args(p)
    p.add_argument("--bundle", help="bundle folder (default: the default bundle)")
    p.add_argument("--titles", metavar="SUBSTITUTE", help="read every podcast and audiobook title as this")
    p.add_argument("--out", help="write the results here (JSON)")
    args = p.parse_args(argv)
    base = open_bundle(args.bundle)
    edit = title_editor(args.titles) if args.titles is not None else (lambda t: t)
    out = {}
    for name, folder in parts_from(args):
        bench = load_benchmark(folder)
        out[name] = by_domain(over_catalog(base, bench.catalog), sample(bench.queries, args.n, args.seed), edit)
        print(name, " ".join(f"{d}:{c:.3f}({k})" for d, (c, k) in out[name].items()), flush=True)
    write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()

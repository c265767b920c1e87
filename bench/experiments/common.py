"""What the experiments share: the evaluation parts named on the command line, their seeded sample, a Selector over each part's catalog, and the per-part metrics docs/bench/ reports.

A part is a benchmark folder (``tools.jsonl`` and ``queries.jsonl``, ``data/datasets.py``), named on
the command line as ``NAME=DIR`` (or ``DIR``: named by its last two path components). ``--dev WORK``
adds the development evaluation parts (``bench.quality.development_sets``: the generated mobile test
and test_ood splits, then the tool-disjoint eval part of each public set in ``data.splits.SHARED_SETS``
found in the shared data: nine with all seven) written under WORK, or already written there.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.catalog import Catalog
from magicselector.formats import tool_definition
from magicselector.selector import Selection, Selector
from magicselector.tokens import schema_tokens

from magicselector.data.datasets import Benchmark, Query, load_benchmark
from magicselector.data.metrics import completeness_at_k, ndcg_at_k

Part = tuple[str, Path]


def part_arg(text: str) -> Part:
    """``NAME=DIR`` or ``DIR`` as a (name, folder) pair; the folder must be a benchmark folder."""
    name, sep, folder = text.partition("=")
    path = Path(folder if sep else text)
    if not (path / "tools.jsonl").is_file() or not (path / "queries.jsonl").is_file():
        raise argparse.ArgumentTypeError(f"{path}: a part is a folder holding tools.jsonl and queries.jsonl")
    return (name if sep else "/".join(path.resolve().parts[-2:])), path


def add_part_args(parser: argparse.ArgumentParser, n: int = 500) -> None:
    """The arguments every experiment reads its parts and sample from."""
    parser.add_argument("parts", nargs="*", type=part_arg, metavar="[NAME=]DIR",
                        help="benchmark folders (tools.jsonl, queries.jsonl) to measure on")
    parser.add_argument("--dev", metavar="WORK", help="also the development evaluation parts (the generated "
                        "mobile test and test_ood, each public set's eval part), written under WORK "
                        "(bench.quality.development_sets; kept there for the next run)")
    parser.add_argument("--shared-data", metavar="DIR", help="the public sets for --dev (default: shared/data "
                        "beside the checkout)")
    parser.add_argument("--n", type=int, default=n, help=f"seeded queries per part (default {n})")
    parser.add_argument("--seed", type=int, default=0, help="seeds the sample (default 0)")


def parts_from(args: argparse.Namespace) -> list[Part]:
    """The parts the command line names: the positional ones, then ``--dev``'s."""
    parts = list(args.parts)
    if args.dev:
        from magicselector.bench.quality import development_sets

        work = Path(args.dev)
        written = written_development_sets(work, args.shared_data)
        # written by an earlier run: the same seeded generation and splits
        parts += written if written is not None else development_sets(work, args.shared_data)
    if not parts:
        raise SystemExit("name at least one part (NAME=DIR) or --dev WORK")
    return parts


def written_development_sets(work: Path, shared_data: str | Path | None) -> list[Part] | None:
    """The development parts an earlier run wrote under ``work``, named and ordered as
    ``development_sets`` names them, or None when one is missing: the mobile splits, or the eval
    part of a public set the shared data holds."""
    from magicselector.data.splits import SHARED_SETS, default_shared_data

    parts: list[Part] = [("mobile test", work / "mobile" / "test"), ("mobile test_ood", work / "mobile" / "test_ood")]
    if not all((folder / "queries.jsonl").is_file() for _, folder in parts):
        return None
    shared = Path(shared_data) if shared_data is not None else default_shared_data()
    for name in SHARED_SETS:
        folder = work / f"{name}-split" / "eval"
        if (folder / "queries.jsonl").is_file():
            parts.append((f"{name} eval", folder))
        elif all((shared / name / file).is_file() for file in ("tools.jsonl", "queries.jsonl")):
            return None  # a public set not split yet
    return parts


def sample(queries: Sequence[Query], n: int, seed: int = 0) -> list[Query]:
    """The first ``n`` of the queries shuffled by ``random.Random(seed)``: the sample the numbers in
    docs/bench/ were taken on (``eval --limit`` draws another one)."""
    out = list(queries)
    random.Random(seed).shuffle(out)
    return out[:n]


def open_bundle(spec: str | None) -> Selector:
    """``Selector.from_bundle`` of a folder, or of the default bundle for None or ``default``."""
    return Selector.from_bundle(None if spec in (None, "default") else spec)


def over_catalog(base: Selector, catalog: Catalog) -> Selector:
    """``base`` itself where the part's catalog is the bundle's (the generated mobile parts: the
    index the product runs), else ``base.with_catalog`` (the index built over the part's tools)."""
    if list(catalog.ids) == list(base.catalog.ids):
        return base
    return base.with_catalog(catalog)


def ranked_ids(selection: Selection) -> list[str]:
    """The turn's whole ranked list, the kept tools first: what NDCG and C@5 / C@10 are read from."""
    return list(selection.ranked_ids)


def token_cost(selector: Selector) -> Callable[[Sequence[str]], int]:
    """Schema tokens of some tools' MCP definitions (``magicselector.tokens``), cached per tool."""
    cache: dict[str, int] = {}

    def cost(ids: Sequence[str]) -> int:
        return sum(cache.setdefault(i, schema_tokens(tool_definition(selector.catalog.get(i), "mcp"))) for i in ids)
    return cost


def turn_metrics(gold: Sequence[str], selection: Selection, cost: Callable[[Sequence[str]], int]) -> dict[str, float]:
    """One turn: the ranking's C@5, C@10 and NDCG@10; the shipped cut's completeness, K and tokens."""
    ranked = ranked_ids(selection)
    return {"C@5": completeness_at_k(ranked, gold, 5), "C@10": completeness_at_k(ranked, gold, 10),
            "NDCG@10": ndcg_at_k(ranked, gold, 10), "C@K": completeness_at_k(selection.ids, gold, len(selection.ids)),
            "K": float(selection.k), "tokens": float(cost(selection.ids))}


def summarize(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Means over a part's turns, and the 90th percentile of K."""
    if not rows:
        return {}
    out = {key: round(float(np.mean([r[key] for r in rows])), 4) for key in rows[0]}
    out["p90K"] = round(float(np.percentile([r["K"] for r in rows], 90)), 4)
    return out


def load_part(folder: Path, n: int, seed: int = 0) -> Benchmark:
    """A part with only its seeded sample of queries."""
    bench = load_benchmark(folder)
    return Benchmark(bench.path, bench.catalog, sample(bench.queries, n, seed))


def show(name: str, row: dict[str, Any]) -> None:
    print(f"{name:20s}", " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
          flush=True)


def write_json(path: str | Path | None, obj: Any) -> None:
    if path:
        Path(path).write_text(json.dumps(obj, indent=1) + "\n")

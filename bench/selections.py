"""``bench selections``: every turn's selection (ids, K, scores) on benchmark folders, one JSON line per turn, to show two runtimes select the same.

A refactor of the runtime that must not change behaviour is checked by dumping the selections of
the development parts before and after it and comparing the two files (``compare_selections``;
``bench selections DIR... --out F --against BEFORE``). Each folder's queries are sampled as
``eval --limit N`` samples them (seeded, the same ids), each selected by the Selector
``Selector.from_bundle`` gives (the shipped ``SelectorConfig()`` unless flags say otherwise) over
the folder's own catalog (``Selector.with_catalog``, as ``eval`` runs it). Scores are rounded to
``SCORE_DIGITS`` decimals so that two runs on one machine compare exactly.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from magicselector.config import SelectorConfig
from magicselector.errors import MagicSelectorError
from magicselector.selector import Selector

from magicselector.data.datasets import load_benchmark

from .evaluate import EvalConfig, _sampled_queries

SCORE_DIGITS = 6


def selection_rows(selector: Selector, folder: str | Path, limit: int | None = 500, seed: int = 0
                   ) -> Iterator[dict[str, Any]]:
    """One row per sampled query of the benchmark ``folder``: the folder as given (``set``), the
    query's id, the kept ids, K and their scores; a query the Selector refuses gives its error instead."""
    bench = load_benchmark(folder, skip_bad_rows=True)
    over = selector.with_catalog(bench.catalog, selector.config)
    for q in _sampled_queries(bench, EvalConfig(limit=limit, seed=seed)):
        row: dict[str, Any] = {"set": str(folder), "id": q.id}
        try:
            sel = over.select(q.query, q.history)
        except MagicSelectorError as e:
            yield {**row, "error": f"{type(e).__name__}: {e}"}
            continue
        yield {**row, "ids": sel.ids, "k": sel.k, "scores": [round(t.score, SCORE_DIGITS) for t in sel.tools]}


def write_selections(folders: Sequence[str | Path], out: str | Path, bundle: str | None = None,
                     config: SelectorConfig | None = None, limit: int | None = 500, seed: int = 0) -> int:
    """Every folder's ``selection_rows`` into ``out`` (JSON lines); returns the number of rows."""
    selector = Selector.from_bundle(bundle, config=config or SelectorConfig())
    count = 0
    with open(out, "w", encoding="utf-8") as f:
        for folder in folders:
            for row in selection_rows(selector, folder, limit, seed):
                f.write(json.dumps(row, sort_keys=True) + "\n")
                count += 1
    return count


def compare_selections(before: str | Path, after: str | Path, show: int = 5) -> list[str]:
    """The differences between two selection files, one line each (at most ``show`` turns shown,
    then a count); an empty list when every turn selected the same."""
    def rows(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
        with open(path, encoding="utf-8") as f:
            return {(r["set"], r["id"]): r for r in map(json.loads, f) if r}

    old, new = rows(before), rows(after)
    diffs = [f"{key[0]} {key[1]}: only in {before}" for key in old.keys() - new.keys()]
    diffs += [f"{key[0]} {key[1]}: only in {after}" for key in new.keys() - old.keys()]
    diffs += [f"{key[0]} {key[1]}: {old[key]} -> {new[key]}" for key in sorted(old.keys() & new.keys())
              if old[key] != new[key]]
    return diffs if len(diffs) <= show else [*diffs[:show], f"... {len(diffs) - show} more turns differ"]

"""Benchmark folders: ``tools.jsonl`` ({id, name, description, parameters}) and ``queries.jsonl``
({id, history: [chat messages], query, gold: [tool ids], category}). Extra keys are kept."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magicselector.catalog import Catalog, load_catalog
from magicselector.dialogue import validate_history
from magicselector.errors import CatalogError, InputError
from magicselector.files import BLANK_LINE, json_line


@dataclass(frozen=True)
class Query:
    id: str
    query: str
    gold: tuple[str, ...]
    history: tuple[dict[str, str], ...] = ()
    category: str = "all"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Benchmark:
    path: Path
    catalog: Catalog
    queries: list[Query]
    rejected: list[dict[str, Any]] = field(default_factory=list)  # rows left out by load_benchmark(skip_bad_rows=True)

    @property
    def name(self) -> str:
        return self.path.name


def load_queries(path: Path, catalog: Catalog, rejected: list[dict[str, Any]] | None = None) -> list[Query]:
    """The queries of ``queries.jsonl``. A malformed row is an InputError naming its line, unless a
    ``rejected`` list is given: then the row is left out and recorded there ({line, id, error})."""
    out = []
    seen: set[str] = set()
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                query = _parse_row(raw, n, path, catalog, seen)
            except InputError as e:
                if rejected is None:
                    raise
                rejected.append({"line": n, "id": _row_id(raw), "error": str(e)})
                continue
            if query is not None:
                seen.add(query.id)
                out.append(query)
    if not out:
        raise InputError(f"{path}: holds no queries")
    return out


def _row_id(raw: bytes) -> str | None:
    """The id of a row that failed to parse, where one can still be read (for the report)."""
    try:
        row = json.loads(raw.decode("utf-8"))
        qid = row.get("id") if isinstance(row, dict) else None
        return str(qid) if isinstance(qid, (str, int)) else None
    except (ValueError, RecursionError):
        return None


def _parse_row(raw: bytes, n: int, path: Path, catalog: Catalog, seen: set[str]) -> Query | None:
    row = json_line(raw, n, path, "a query", InputError)
    if row is BLANK_LINE:
        return None
    where = f"{path}:{n}"
    if not isinstance(row, dict):
        raise InputError(f"{where}: a query is a JSON object {{id, query, gold, ...}}, "
                         f"got {type(row).__name__}")
    qid, query, gold = row.get("id"), row.get("query"), row.get("gold")
    if not isinstance(qid, (str, int)) or str(qid) in seen:
        raise InputError(f"{where}: missing or repeated query id {qid!r}")
    if not isinstance(query, str) or not query.strip():
        raise InputError(f"{where}: 'query' must be a non-empty string")
    if not isinstance(gold, list) or not gold or not all(isinstance(g, str) for g in gold):
        raise InputError(f"{where}: 'gold' must be a non-empty list of tool ids")
    unknown = [g for g in gold if g not in catalog]
    if unknown:
        raise InputError(f"{where}: gold tool ids not in tools.jsonl: {unknown[:5]}")
    history = row.get("history") or []
    if not isinstance(history, list):
        raise InputError(f"{where}: 'history' must be a list of messages")
    try:  # chat messages in any shape the runtime reads (tool calls and results included)
        validate_history(history)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    extra = {k: v for k, v in row.items() if k not in ("id", "query", "gold", "history", "category")}
    return Query(str(qid), query, tuple(dict.fromkeys(gold)), tuple(history),
                 str(row.get("category") or "all"), extra)


def load_benchmark(path: str | Path, skip_bad_rows: bool = False) -> Benchmark:
    """A benchmark folder. With ``skip_bad_rows`` a malformed query row is left out and listed in
    ``Benchmark.rejected`` instead of stopping the load (``eval`` never loses a run to one row)."""
    path = Path(path)
    if not (path / "tools.jsonl").is_file() or not (path / "queries.jsonl").is_file():
        raise InputError(f"{path}: a benchmark folder holds tools.jsonl and queries.jsonl")
    try:
        catalog = load_catalog(path / "tools.jsonl")
    except CatalogError:
        raise
    rejected: list[dict[str, Any]] | None = [] if skip_bad_rows else None
    queries = load_queries(path / "queries.jsonl", catalog, rejected)
    return Benchmark(path, catalog, queries, rejected or [])

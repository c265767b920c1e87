"""Seeded tool-disjoint splits of benchmark folders (the evaluation part's tools never occur in
training), where the public development sets live, and which split part a folder is."""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from magicselector.errors import InputError
from magicselector.files import sha256_file

from .datasets import Benchmark, Query, load_benchmark

SPLIT_INFO = "split.json"
SPLIT_PARTS = ("train", "eval")
SHARED_SETS = ("bfcl", "metatool")  # the public development sets in ../shared/data


def default_shared_data() -> Path:
    """``shared/data`` beside the repository checkout (a source checkout's ``../shared/data``)."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"  # data/ -> checkout -> beside it


@dataclass(frozen=True)
class ToolSplitConfig:
    """How the tools are drawn: ``eval_fraction`` of the catalog's tools (after a seeded shuffle of
    the sorted ids) form the evaluation part; the rest train. A query belongs to the part that holds
    all its gold tools; a query whose gold tools straddle both parts is dropped from both, so no
    training query ever names an evaluation tool."""

    eval_fraction: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.eval_fraction < 1.0:
            raise InputError(f"eval_fraction must be within (0, 1), got {self.eval_fraction!r}")


def split_tools(tool_ids: list[str], config: ToolSplitConfig) -> tuple[set[str], set[str]]:
    """(train tools, eval tools): a seeded draw that depends only on the ids, not on their order."""
    ids = sorted(set(tool_ids))
    random.Random(f"magicselector-tool-split:{config.seed}").shuffle(ids)
    n_eval = max(1, round(len(ids) * config.eval_fraction))
    return set(ids[n_eval:]), set(ids[:n_eval])


def _part_queries(queries: list[Query], tools: set[str]) -> list[Query]:
    return [q for q in queries if all(g in tools for g in q.gold)]


def _row(q: Query, tools: set[str]) -> dict[str, Any]:
    row = {"id": q.id, "history": list(q.history), "query": q.query, "gold": list(q.gold), "category": q.category}
    for key, value in q.extra.items():
        # lists of tool ids (bfcl's "candidates") keep only the part's own tools
        row[key] = [v for v in value if v in tools] if key == "candidates" and isinstance(value, list) else value
    return row


def write_tool_disjoint_split(source: str | Path, out: str | Path, config: ToolSplitConfig = ToolSplitConfig()
                              ) -> dict[str, Any]:
    """Write ``out/train`` and ``out/eval`` benchmark folders (each with only its own tools in
    ``tools.jsonl``) and ``out/split.json`` (config, counts, the source files' sha256)."""
    bench: Benchmark = load_benchmark(source)
    train_tools, eval_tools = split_tools(bench.catalog.ids, config)
    parts = {"train": train_tools, "eval": eval_tools}
    out = Path(out)
    info: dict[str, Any] = {"source": str(Path(source).resolve()), "config": asdict(config),
                            "source_sha256": {f: sha256_file(Path(source) / f) for f in ("tools.jsonl", "queries.jsonl")},
                            "parts": {}}
    kept = 0
    for name, tools in parts.items():
        queries = _part_queries(bench.queries, tools)
        kept += len(queries)
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "tools.jsonl", "w", encoding="utf-8") as f:
            for tool in bench.catalog:
                if tool.id in tools:
                    f.write(json.dumps(tool.to_record(), ensure_ascii=False) + "\n")
        with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
            for q in queries:
                f.write(json.dumps(_row(q, tools), ensure_ascii=False) + "\n")
        gold = {g for q in queries for g in q.gold}
        info["parts"][name] = {"tools": len(tools), "gold_tools": len(gold), "queries": len(queries),
                               "tools_sha256": hashlib.sha256("\n".join(sorted(tools)).encode()).hexdigest()}
    info["dropped_straddling"] = len(bench.queries) - kept
    (out / SPLIT_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return info


def write_tool_disjoint_splits(sources: list[str | Path], out: str | Path, config: ToolSplitConfig = ToolSplitConfig(),
                               overwrite: bool = False, note=None) -> dict[str, Any]:
    """``write_tool_disjoint_split`` of each source folder into ``out/<folder name>``. Refuses a
    missing source, two sources of one name and (without ``overwrite``) a non-empty ``out``, before
    writing anything. ``note(text)`` hears one line per source. Returns {out, config, sets: {name: info}}."""
    out = Path(out)
    if not sources:
        raise InputError("split: no source folders given")
    names: dict[str, Path] = {}
    for source in map(Path, sources):
        for f in ("tools.jsonl", "queries.jsonl"):
            if not (source / f).is_file():
                raise InputError(f"{source}: not a benchmark folder (no {f})")
        name = source.resolve().name
        if name in names:
            raise InputError(f"{source}: two sources are named {name!r} ({names[name]} too); each gets out/<name>")
        names[name] = source
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not overwrite)):
        raise InputError(f"{out}: output folder exists and is not empty (pass --force to write into it)")
    sets = {}
    for name, source in names.items():
        info = write_tool_disjoint_split(source, out / name, config)
        sets[name] = info
        if note is not None:
            parts = info["parts"]
            note(f"split {name}: train {parts['train']['tools']} tools / {parts['train']['queries']} queries, "
                 f"eval {parts['eval']['tools']} tools / {parts['eval']['queries']} queries, "
                 f"{info['dropped_straddling']} straddling queries dropped")
    return {"out": str(out), "config": asdict(config), "sets": sets}


def split_part(folder: str | Path) -> dict[str, Any] | None:
    """Which part of a tool-disjoint split ``folder`` is (its parent holds ``split.json`` and the
    folder is named ``train`` or ``eval``): {part, config, source, tools, tools_sha256}; None for
    any other folder."""
    folder = Path(folder)
    info_file = folder.parent / SPLIT_INFO
    if folder.name not in SPLIT_PARTS or not info_file.is_file():
        return None
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
        part = info["parts"][folder.name]
        return {"part": folder.name, "config": info["config"], "source": info["source"],
                "tools": part["tools"], "tools_sha256": part["tools_sha256"]}
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{info_file}: not a split record written by write_tool_disjoint_split") from None

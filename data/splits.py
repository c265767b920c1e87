"""Seeded tool-disjoint splits of benchmark folders (the evaluation part's tools never occur in
training), where the public development sets live, how each is split, and which split part a folder is."""
from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from magicselector.errors import InputError
from magicselector.files import sha256_file

from .datasets import Benchmark, Query, load_benchmark

SPLIT_INFO = "split.json"
SPLIT_PARTS = ("train", "eval")
SPLIT_DRAWS = ("tools", "gold_sets")
# SGD's service versions (``Restaurants_1.ReserveRestaurant``, ``Restaurants_2.ReserveRestaurant``)
VERSIONED_NAME = re.compile(r"^(?P<service>[A-Za-z]+)_(?P<version>\d+)\.(?P<intent>\w+)$")
# services whose numbered versions are different services, not versions: SGD's Services_1..4 are a hair
# stylist, a dentist, a doctor and a therapist (a user who asks for a dentist is not served by a stylist)
DISTINCT_VERSIONS = frozenset({"Services"})
# one intent under two names across versions (Music_1's LookupSong is Music_2/3's LookupMusic)
INTENT_ALIASES: Mapping[str, Mapping[str, str]] = {"Music": {"LookupSong": "LookupMusic", "PlaySong": "PlayMedia"}}


def default_shared_data() -> Path:
    """``shared/data`` beside the repository checkout (a source checkout's ``../shared/data``)."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"  # data/ -> checkout -> beside it


@dataclass(frozen=True)
class ToolSplitConfig:
    """How the tools are drawn. ``eval_fraction`` of the catalog's tools form the evaluation part, the
    rest train. A query belongs to the part that holds all its gold tools; a query whose gold tools
    straddle both parts is dropped from both, so no training query ever names an evaluation tool.

    ``draw="tools"``: a seeded shuffle of the sorted ids, the first ``eval_fraction`` evaluate.
    ``draw="gold_sets"`` (for multi-tool sets, where a tool-by-tool draw splits most gold sets and
    drops their queries): whole gold sets are drawn in a seeded order into the evaluation part while
    they fit, then tools no query names, then the rest. Both depend only on the tool ids and the
    gold sets, never on file order.

    ``merge_versions``: tools named ``<Service>_<n>.<Intent>`` (SGD's service versions, near-identical
    intents of which the gold names one) become one tool ``<Service>.<Intent>`` before the draw, so a
    version group is one unit of the split and of scoring (``merge_service_versions``)."""

    eval_fraction: float = 0.3
    seed: int = 0
    draw: str = "tools"
    merge_versions: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.eval_fraction < 1.0:
            raise InputError(f"eval_fraction must be within (0, 1), got {self.eval_fraction!r}")
        if self.draw not in SPLIT_DRAWS:
            raise InputError(f"draw must be one of {', '.join(SPLIT_DRAWS)}, got {self.draw!r}")


# The public development sets in ../shared/data and how each is split. bfcl and metatool keep the
# tool draw the shipped embedder was trained against (its train parts); nestful and restbench are
# multi-tool (gold mean 2.3-2.4), so whole gold sets are drawn; sgd's service versions are merged.
PUBLIC_SPLITS: Mapping[str, ToolSplitConfig] = {
    "bfcl": ToolSplitConfig(),
    "metatool": ToolSplitConfig(),
    "nestful": ToolSplitConfig(draw="gold_sets"),
    "restbench": ToolSplitConfig(draw="gold_sets"),
    "toolalpaca": ToolSplitConfig(),
    "gorilla_apibench": ToolSplitConfig(),
    "sgd": ToolSplitConfig(merge_versions=True),
}
SHARED_SETS = tuple(PUBLIC_SPLITS)


def split_tools(tool_ids: Iterable[str], config: ToolSplitConfig, gold_sets: Iterable[Iterable[str]] = ()
                ) -> tuple[set[str], set[str]]:
    """(train tools, eval tools): a seeded draw that depends only on the ids (and, for
    ``draw="gold_sets"``, the queries' gold sets), not on their order."""
    ids = sorted(set(tool_ids))
    n_eval = max(1, round(len(ids) * config.eval_fraction))
    if config.draw == "tools":
        random.Random(f"magicselector-tool-split:{config.seed}").shuffle(ids)
        return set(ids[n_eval:]), set(ids[:n_eval])
    known = set(ids)
    sets = sorted({tuple(sorted(set(g))) for g in gold_sets if g and set(g) <= known})
    random.Random(f"magicselector-gold-set-split:{config.seed}").shuffle(sets)
    evals: set[str] = set()
    for gold in sets:
        if len(evals | set(gold)) <= n_eval:
            evals.update(gold)
        if len(evals) == n_eval:
            break
    named = {t for gold in sets for t in gold}
    rest = [t for t in ids if t not in evals]
    random.Random(f"magicselector-gold-set-fill:{config.seed}").shuffle(rest)
    rest.sort(key=lambda t: t in named)  # stable: tools no query names fill first (they split no gold set)
    evals.update(rest[:n_eval - len(evals)])
    return known - evals, evals


def _merged_name(name: str) -> str | None:
    """``Restaurants_2.ReserveRestaurant`` -> ``Restaurants.ReserveRestaurant``; None for a name that
    is not a versioned service's intent or whose versions are distinct services."""
    m = VERSIONED_NAME.match(name)
    if m is None or m["service"] in DISTINCT_VERSIONS:
        return None
    intent = INTENT_ALIASES.get(m["service"], {}).get(m["intent"], m["intent"])
    return f"{m['service']}.{intent}"


def merge_service_versions(tools: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(merged tool records, {source id: merged id}). Each version group becomes one tool at its
    lowest version's place: that version's description (the version suffix dropped from the service
    name), the union of the versions' parameters, required only where every version requires it.
    Tools outside any group (and ids that do not end with their name) are kept as they are."""
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for t in tools:
        merged = _merged_name(t["name"])
        if merged is not None and str(t["id"]).endswith(t["name"]):
            version = int(VERSIONED_NAME.match(t["name"])["version"])  # type: ignore[index]
            groups.setdefault(merged, []).append((version, t))
    mapping: dict[str, str] = {}
    merged_records: dict[str, dict[str, Any]] = {}
    for merged, members in groups.items():
        members.sort(key=lambda vt: vt[0])
        first = members[0][1]
        merged_id = str(first["id"])[: -len(first["name"])] + merged
        service = VERSIONED_NAME.match(first["name"])["service"]  # type: ignore[index]
        properties: dict[str, Any] = {}
        required: set[str] | None = None
        for _, t in members:
            params = t.get("parameters") or {}
            for key, value in (params.get("properties") or {}).items():
                properties.setdefault(key, value)
            req = set(params.get("required") or [])
            required = req if required is None else required & req
            mapping[str(t["id"])] = merged_id
        description = re.sub(rf"\b{service}_\d+\b", service, first["description"])
        params = {**(first.get("parameters") or {}), "type": "object", "properties": properties,
                  "required": sorted(required or ())}
        merged_records[merged_id] = {**first, "id": merged_id, "name": merged, "description": description,
                                     "parameters": params}
    out, placed = [], set()
    for t in tools:
        tid = mapping.get(str(t["id"]))
        if tid is None:
            out.append(t)
        elif tid not in placed:
            placed.add(tid)
            out.append(merged_records[tid])
    return out, mapping


def _remap_query(q: Query, mapping: Mapping[str, str]) -> Query:
    if not mapping:
        return q
    extra = dict(q.extra)
    if isinstance(extra.get("candidates"), list):
        extra["candidates"] = list(dict.fromkeys(mapping.get(c, c) for c in extra["candidates"]))
    return replace(q, gold=tuple(dict.fromkeys(mapping.get(g, g) for g in q.gold)), extra=extra)


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
    ``tools.jsonl``) and ``out/split.json`` (config, counts, the source files' sha256, and with
    ``merge_versions`` the merged groups)."""
    bench: Benchmark = load_benchmark(source)
    records = [t.to_record() for t in bench.catalog]
    mapping: dict[str, str] = {}
    if config.merge_versions:
        records, mapping = merge_service_versions(records)
    queries = [_remap_query(q, mapping) for q in bench.queries]
    train_tools, eval_tools = split_tools([r["id"] for r in records], config, [q.gold for q in queries])
    parts = {"train": train_tools, "eval": eval_tools}
    out = Path(out)
    info: dict[str, Any] = {"source": str(Path(source).resolve()), "config": asdict(config),
                            "source_sha256": {f: sha256_file(Path(source) / f) for f in ("tools.jsonl", "queries.jsonl")},
                            "parts": {}}
    if config.merge_versions:
        groups: dict[str, list[str]] = {}
        for source_id, merged_id in mapping.items():
            groups.setdefault(merged_id, []).append(source_id)
        info["merged"] = {"tools_before": len(bench.catalog), "tools_after": len(records),
                          "groups": {k: sorted(v) for k, v in sorted(groups.items())}}
    kept = 0
    for name, tools in parts.items():
        part_queries = _part_queries(queries, tools)
        kept += len(part_queries)
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "tools.jsonl", "w", encoding="utf-8") as f:
            for record in records:
                if record["id"] in tools:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
        with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
            for q in part_queries:
                f.write(json.dumps(_row(q, tools), ensure_ascii=False) + "\n")
        gold = {g for q in part_queries for g in q.gold}
        info["parts"][name] = {"tools": len(tools), "gold_tools": len(gold), "queries": len(part_queries),
                               "multi_tool_queries": sum(len(q.gold) >= 2 for q in part_queries),
                               "tools_sha256": hashlib.sha256("\n".join(sorted(tools)).encode()).hexdigest()}
    info["dropped_straddling"] = len(queries) - kept
    (out / SPLIT_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return info


def write_tool_disjoint_splits(sources: Sequence[str | Path], out: str | Path,
                               config: ToolSplitConfig = ToolSplitConfig(), overwrite: bool = False,
                               note: Callable[[str], None] | None = None,
                               configs: Mapping[str, ToolSplitConfig] | None = None) -> dict[str, Any]:
    """``write_tool_disjoint_split`` of each source folder into ``out/<folder name>``, with
    ``configs[name]`` where given, else ``config``. Refuses a missing source, two sources of one name
    and (without ``overwrite``) a non-empty ``out``, before writing anything. ``note(text)`` hears one
    line per source. Returns {out, config, sets: {name: info}} (each info names its own config)."""
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
        info = write_tool_disjoint_split(source, out / name, (configs or {}).get(name, config))
        sets[name] = info
        if note is not None:
            parts = info["parts"]
            merged = info.get("merged")
            note(f"split {name}: train {parts['train']['tools']} tools / {parts['train']['queries']} queries, "
                 f"eval {parts['eval']['tools']} tools / {parts['eval']['queries']} queries, "
                 f"{info['dropped_straddling']} straddling queries dropped"
                 + (f"; {merged['tools_before']} tools merged into {merged['tools_after']} (service versions)"
                    if merged else ""))
    return {"out": str(out), "config": asdict(config), "sets": sets}


def public_split_configs(eval_fraction: float | None = None, seed: int | None = None) -> dict[str, ToolSplitConfig]:
    """``PUBLIC_SPLITS`` with the fraction and seed replaced where given (each set keeps its draw and merge)."""
    changes = {k: v for k, v in (("eval_fraction", eval_fraction), ("seed", seed)) if v is not None}
    return {name: replace(config, **changes) for name, config in PUBLIC_SPLITS.items()}


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

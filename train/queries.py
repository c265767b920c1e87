"""Training data from benchmark folders: loading them for a run, the encoder trainers' (reranker,
embedder) training queries as the runtime retrieves them and their seeded sample, tool texts, and
the hard-negative rule of Algorithm 1 (eq. 22) that both encoders mine with."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from magicselector.catalog import Catalog, tool_text
from magicselector.data.datasets import Benchmark, load_benchmark
from magicselector.data.splits import split_part
from magicselector.dialogue import retrieval_text, validate_history
from magicselector.errors import InputError

from .toolkit import check_out_dir


@dataclass(frozen=True)
class TrainQuery:
    """One training query: a dialogue turn (``source='turn'``) or a gold sub-task (``'task'``)."""

    id: str
    text: str
    gold: tuple[str, ...]
    bench: int  # index into the list of benchmarks (each has its own catalog)
    source: str = "turn"


def query_counts(available: int, queries: Sequence[TrainQuery]) -> dict[str, int]:
    """A run record's query counts: how many queries there were, how many were trained on, and of
    those the dialogue turns and the gold sub-tasks."""
    return {"queries_available": available, "queries": len(queries),
            "turn_queries": sum(q.source == "turn" for q in queries),
            "task_queries": sum(q.source == "task" for q in queries)}


def build_training_queries(bench: Benchmark, bench_index: int = 0, history: str = "user", turns: int = 4,
                           include_tasks: bool = True) -> list[TrainQuery]:
    """The training queries of one benchmark folder, de-duplicated on (text, gold).

    A turn's text is the runtime's retrieval text under the history mode; each ``tasks`` entry
    ({text, tool}) of a generated set becomes a (sub-task text, tool) query, since at run time the
    reranker scores sub-tasks against tools.
    """
    out: list[TrainQuery] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def add(qid: str, text: str, gold: tuple[str, ...], source: str) -> None:
        key = (text, gold)
        if text and key not in seen:
            seen.add(key)
            out.append(TrainQuery(f"{bench_index}:{qid}", text, gold, bench_index, source))

    for q in bench.queries:
        text = retrieval_text(" ".join(q.query.split()), validate_history(q.history), history, turns)
        add(q.id, text, tuple(q.gold), "turn")
        if not include_tasks:
            continue
        for j, (text, tool) in enumerate(gold_tasks(bench, q) or []):
            add(f"{q.id}#task{j}", text, (tool,), "task")
    return out


def gold_tasks(bench: Any, q: Any) -> list[tuple[str, str]] | None:
    """A generated turn's gold sub-tasks as (whitespace-folded text, tool id), checked against the
    catalog; None when the turn has none."""
    tasks = q.extra.get("tasks")
    if tasks is None:
        return None
    if not isinstance(tasks, list):
        raise InputError(f"{bench.path}: query {q.id!r}: 'tasks' must be a list of {{text, tool}}")
    out = []
    for j, task in enumerate(tasks):
        if not isinstance(task, Mapping) or not isinstance(task.get("text"), str) \
                or not isinstance(task.get("tool"), str):
            raise InputError(f"{bench.path}: query {q.id!r}: tasks[{j}] must be {{text: str, tool: str}}")
        if task["tool"] not in bench.catalog:
            raise InputError(f"{bench.path}: query {q.id!r}: tasks[{j}] names tool {task['tool']!r}, "
                             "which is not in tools.jsonl")
        out.append((" ".join(task["text"].split()), task["tool"]))
    return out


def gold_scoped(bench: Benchmark, gold: set[str]) -> Benchmark:
    """The benchmark with its catalog cut to the tools in ``gold`` (queries are unchanged)."""
    return replace(bench, catalog=Catalog([t for t in bench.catalog if t.id in gold], source=bench.catalog.source))

def tool_texts(catalog: Catalog) -> dict[str, str]:
    """Each tool's text as the runtime embeds and reranks it (``tool_text``); the readable name
    when a tool has no description, the id as a last resort, so that no pair ever has an empty
    second segment."""
    return {t.id: (tool_text(t) or t.id) for t in catalog}


def fill_negatives(q: TrainQuery, chosen: list[str], n: int, catalog_ids: Sequence[str],
                   rng: np.random.Generator) -> list[str]:
    """Top ``chosen`` up to n non-gold tools with random catalog tools (tiny pools or catalogs)."""
    if len(chosen) >= n:
        return chosen[:n]
    taken = set(chosen) | set(q.gold)
    rest = [t for t in catalog_ids if t not in taken]
    if rest:
        extra = rng.permutation(len(rest))[: n - len(chosen)]
        chosen = chosen + [rest[int(i)] for i in extra]
    return chosen


def check_negatives_exist(queries: Sequence[TrainQuery], benches: Sequence[Benchmark]) -> None:
    """Every query needs a catalog tool that is not gold for it."""
    ids = [set(b.catalog.ids) for b in benches]
    for q in queries:
        if not ids[q.bench] - set(q.gold):
            raise InputError(f"{benches[q.bench].path}: query {q.id.split(':', 1)[1]!r}: every tool of the "
                             "catalog is gold, so there is no negative to train against")


def load_benchmarks(data_dirs: str | Path | Sequence[str | Path], who: str) -> list[Benchmark]:
    """The benchmark folders a run trains on (one folder or several), checked."""
    if isinstance(data_dirs, (str, Path)):
        data_dirs = [data_dirs]
    dirs = [Path(d) for d in data_dirs]
    if not dirs:
        raise InputError(f"{who}: no data folders given")
    benches = []
    for d in dirs:
        if not d.is_dir():
            raise InputError(f"{d}: no such data folder")
        if not (d / "queries.jsonl").is_file():
            raise InputError(f"{d}: the data folder has no queries.jsonl (a benchmark folder holds tools.jsonl "
                             "and queries.jsonl)")
        benches.append(load_benchmark(d))  # raises InputError for an empty queries.jsonl
    return benches


def refuse_eval_parts(benches: Sequence[Benchmark]) -> None:
    """InputError for the evaluation part of a tool-disjoint split: its tools must never be trained on."""
    for bench in benches:
        part = split_part(bench.path)
        if part is not None and part["part"] == "eval":
            raise InputError(f"{bench.path}: the evaluation part of a tool-disjoint split is not training data; "
                             "train on its train part")


def prepare_training_data(data_dirs: str | Path | Sequence[str | Path], out_dir: Path, config: Any, overwrite: bool,
                          who: str) -> tuple[list[Benchmark], list[TrainQuery], int, np.random.Generator]:
    """The shared start of a training run: check the data folders and the output folder, load the
    benchmarks, build the training queries (``config``: history, history_turns, include_tasks,
    catalog_scope, max_queries, max_queries_per_folder, seed), cut each catalog to its gold tools when asked, and draw the
    seeded ``max_queries_per_folder`` sample of each folder, then the ``max_queries`` sample. Returns (benchmarks, queries, queries available before the
    sample, the run's generator, already used for the sample)."""
    check_out_dir(out_dir, overwrite)
    benches = load_benchmarks(data_dirs, who)
    refuse_eval_parts(benches)
    queries: list[TrainQuery] = []
    for b, bench in enumerate(benches):
        queries += build_training_queries(bench, b, config.history, config.history_turns, config.include_tasks)
    if not queries:
        raise InputError(f"{', '.join(str(b.path) for b in benches)}: no training queries")
    available = len(queries)
    if config.catalog_scope == "gold":
        benches = [gold_scoped(bench, {t for q in queries if q.bench == b for t in q.gold})
                   for b, bench in enumerate(benches)]
    rng = np.random.default_rng(config.seed)
    per_folder = getattr(config, "max_queries_per_folder", None)
    if per_folder is not None:
        # Caps each folder first, so that one large public set (metatool's 14k one-liners) does not
        # outweigh the others in the mix; the draw order is fixed by folder order and the seed.
        kept: list[TrainQuery] = []
        for b in range(len(benches)):
            mine = [q for q in queries if q.bench == b]
            if len(mine) > per_folder:
                pick = sorted(rng.choice(len(mine), per_folder, replace=False))
                mine = [mine[int(i)] for i in pick]
            kept += mine
        queries = kept
    if config.max_queries is not None and config.max_queries < len(queries):
        keep = sorted(rng.choice(len(queries), config.max_queries, replace=False))
        queries = [queries[int(i)] for i in keep]
    return benches, queries, available, rng


def mine_hard_negatives(scores_by_query: Mapping[str, Sequence[float]],
                        candidates_by_query: Mapping[str, Sequence[str]],
                        gold_by_query: Mapping[str, Sequence[str]], k: int) -> dict[str, list[str]]:
    """Eq. 22: per query, the k highest-scoring candidates that are not gold, best first.

    ``scores_by_query[q][i]`` is the teacher's score of ``candidates_by_query[q][i]``. Ties keep the
    retriever's order; repeated candidates count once. A query whose pool holds fewer than k
    non-gold tools gets fewer negatives (the trainer tops them up with random catalog tools).
    """
    if k < 1:
        raise InputError("mine_hard_negatives: k must be >= 1")
    out: dict[str, list[str]] = {}
    for qid, cands in candidates_by_query.items():
        cands = list(cands)
        if not cands:
            raise InputError(f"mine_hard_negatives: query {qid!r} has an empty candidate list")
        if qid not in scores_by_query:
            raise InputError(f"mine_hard_negatives: no teacher scores for query {qid!r}")
        if qid not in gold_by_query:
            raise InputError(f"mine_hard_negatives: no gold tools for query {qid!r}")
        scores = np.asarray(scores_by_query[qid], dtype=np.float64).reshape(-1)
        if len(scores) != len(cands):
            raise InputError(f"mine_hard_negatives: query {qid!r} has {len(cands)} candidates but "
                             f"{len(scores)} scores")
        gold = set(gold_by_query[qid])
        order = np.argsort(-scores, kind="stable")
        picked: list[str] = []
        for i in order:
            t = cands[int(i)]
            if t in gold or t in picked:
                continue
            picked.append(t)
            if len(picked) == k:
                break
        out[qid] = picked
    return out

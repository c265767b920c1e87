"""Turns that need several tools (issue 45): why the shipped top five misses a gold tool, and the stages after the embedder re-applied with each fix, on every development part.

    python3 -m magicselector.bench.experiments.multi_tool --work W --cache C [--shared-data D]
        [--bundle DIR] [--llm] [--out RESULT.json]

The parts are ``bench quality``'s (``bench.quality.development_sets`` written under ``--work``; its
seeded sample of 500 per part, ``sampled_queries``; the multi-tool group its ``MULTI_TOOL_GROUP``).
Each turn is ranked once by the shipped Selector over the part's catalog (``Selector.rank``:
decompose, embed, search, lexical fusion, peak-rank fusion; cached under ``--cache``), and every
variant (``variants``) re-applies only what comes after: the fused order, the cut (``cut_turn``),
the learned head (``head_cut``) and the ranking's first five. The ``shipped`` variant is checked
against ``Selector.select`` on the first turns of each part (``identity``), so the replay is the
product's path.

The failure analysis (``--out``'s ``failures``) takes every multi-tool-group turn whose shipped
ranking misses a gold tool in its first five and says, per missing tool, where it was (its rank in
the fused list, in the cut's order before the head, after the head, in each sub-task's list, the
anchor's and the history's; not retrieved at all), whether the rules split the turn (sub-tasks
against gold tools), which tools took the first five (another sub-task's second hit, the anchor's
or history's hit, a near-duplicate of a gold tool) and one cause per missing tool (``CAUSES``).

The train parts (the generated train split, each public set's tool-disjoint train part; at most
3,000 seeded turns a folder as ``train head`` reads them) are ranked too, and heads refitted on
them (``fit_heads``, ``train.head.fit_head``) are measured as variants. ``decomposition_bounds``
ranks the generated parts with other decompositions: their recorded gold sub-tasks (the bound),
a rules variant, and with ``--llm`` ``decompose="auto"``.
"""
from __future__ import annotations

import argparse
import json
import pickle
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.config import SelectorConfig
from magicselector.errors import MagicSelectorError
from magicselector.selector import Ranking, Selector
from magicselector.stages.cut import cut_turn
from magicselector.stages.head import HeadModel, head_cut, head_features

from magicselector.data.datasets import load_benchmark
from magicselector.data.metrics import completeness_at_k, ndcg_at_k

TOP = 5


@dataclass(frozen=True)
class Turn:
    """One turn's retrieval before the cut, as ``Selector.rank`` gave it, with its gold tools."""

    id: str
    gold: tuple[str, ...]
    category: str
    query: str
    texts: list[str]
    subtasks: list[str]
    history_list: int | None
    lists: list[tuple[list[str], np.ndarray]]  # each retrieval list after the lexical fusion: (ids, scores)
    ids: list[str]           # the fused list (peak rank)
    scores: np.ndarray
    source: list[int]


def as_turn(q: Any, r: Ranking) -> Turn:
    return Turn(q.id, tuple(q.gold), q.category, q.query, list(r.texts), list(r.subtasks), r.history_list,
                [(list(lst.ids), np.asarray(lst.scores, dtype=np.float32)) for lst in r.lists],
                list(r.ids), np.asarray(r.scores), list(r.source))


# -- collection ---------------------------------------------------------------------------------------

def rank_part(selector: Selector, queries: Sequence[Any]) -> list[Turn]:
    out = []
    for q in queries:
        try:
            out.append(as_turn(q, selector.rank(q.query, list(q.history))))
        except MagicSelectorError:  # a turn the runtime refuses scores in no row
            continue
    return out


def cached(path: Path, make: Callable[[], Any]) -> Any:
    """``make()``, stored in ``path`` (pickle; turns as plain dicts, so the file does not depend on
    how this module was run) and read from it the next time."""
    if path.is_file():
        with path.open("rb") as f:
            return _from_plain(pickle.load(f))
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        pickle.dump(_to_plain(value), f)
    tmp.replace(path)
    return value


def _to_plain(value: Any) -> Any:
    if isinstance(value, Turn):
        return {"__turn__": vars(value)}
    if isinstance(value, list):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict) and "__turn__" in value:
        return Turn(**value["__turn__"])
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _from_plain(v) for k, v in value.items()}
    return value


def slug(name: str) -> str:
    return name.replace("/", "_").replace(" ", "_")


def eval_parts(work: Path, shared: Path | None) -> list[tuple[str, Path]]:
    """``bench quality``'s development parts under ``work`` (written on the first run)."""
    from magicselector.bench.quality import development_sets

    parts: list[tuple[str, Path]] = development_sets(work, shared, note=print)
    return parts


def train_parts(work: Path) -> list[tuple[str, Path]]:
    """The train parts beside the development parts ``development_sets`` wrote under ``work``."""
    parts = [("mobile train", work / "mobile" / "train")]
    parts += [(f"{p.name[:-len('-split')]} train", p / "train") for p in sorted(work.glob("*-split"))
              if (p / "train" / "queries.jsonl").is_file()]
    return parts


def collect_eval(base: Selector, parts: Sequence[tuple[str, Path]], cache: Path, tag: str = "shipped",
                 config: SelectorConfig | None = None) -> dict[str, dict[str, Any]]:
    """Per part: its turns (the seeded sample ``bench quality`` scores), the multi-tool group's
    turn ids and the part's tool vectors; ``config`` (None: ``SelectorConfig(threads=1)``) ranks."""
    from magicselector.bench.quality import MULTI_TOOL_GROUP, QualityConfig, multi_tool_ids, sampled_queries

    shipped = SelectorConfig()
    config = config or SelectorConfig(threads=1)
    out = {}
    for name, folder in parts:
        bench = load_benchmark(folder)
        queries = sampled_queries(bench, QualityConfig(), shipped)

        def make() -> dict[str, Any]:
            t0 = time.perf_counter()
            selector = base.with_catalog(bench.catalog, config)
            turns = rank_part(selector, queries)
            print(f"{name} ({tag}): {len(turns)} turns ranked in {time.perf_counter() - t0:.0f} s", flush=True)
            ids = list(bench.catalog.ids)
            return {"turns": turns, "vectors": dict(zip(ids, selector.index.vectors(ids)))}

        part = cached(cache / f"{tag}-{slug(name)}.pkl", make)
        multi = multi_tool_ids(bench, MULTI_TOOL_GROUP[name]) if name in MULTI_TOOL_GROUP else set()
        out[name] = {**part, "multi": multi, "folder": str(folder),
                     "names": {t.id: t.name for t in bench.catalog}}
    return out


def collect_train(base: Selector, parts: Sequence[tuple[str, Path]], cache: Path, limit: int = 3000,
                  seed: int = 0) -> dict[str, list[Turn]]:
    """Per train part, its turns (at most ``limit``, sampled as ``train head`` samples them)."""
    out = {}
    for name, folder in parts:
        def make() -> list[Turn]:
            bench = load_benchmark(folder)
            queries = list(bench.queries)
            if len(queries) > limit:
                rng = np.random.default_rng(seed)
                queries = [queries[i] for i in sorted(rng.choice(len(queries), limit, replace=False))]
            t0 = time.perf_counter()
            turns = rank_part(base.with_catalog(bench.catalog, SelectorConfig(threads=1)), queries)
            print(f"{name}: {len(turns)} turns ranked in {time.perf_counter() - t0:.0f} s", flush=True)
            return turns

        out[name] = cached(cache / f"train-{slug(name)}.pkl", make)
    return out


class GoldTasksDecomposer:
    """The sub-tasks the generated dialogues record for a turn (``Query.extra["tasks"]``, one text
    per gold tool): the decomposition a perfect decomposer would give, to bound what a better
    split could gain. ``current`` is set to the turn's tasks before each ``rank``."""

    name = "gold-tasks"

    def __init__(self) -> None:
        self.current: tuple[str, ...] = ()

    def decompose(self, query: str, history: Sequence[Any]) -> Any:
        from magicselector.decompose import Decomposition

        return Decomposition(self.current or (query,))


def collect_gold_tasks(base: Selector, parts: Sequence[tuple[str, Path]], cache: Path) -> dict[str, list[Turn]]:
    """The generated parts' turns ranked with their recorded sub-tasks (``GoldTasksDecomposer``)."""
    from magicselector.bench.quality import QualityConfig, sampled_queries

    out = {}
    for name, folder in parts:
        bench = load_benchmark(folder)
        queries = [q for q in sampled_queries(bench, QualityConfig(), SelectorConfig()) if q.extra.get("tasks")]
        if not queries:
            continue

        def make() -> list[Turn]:
            over = base.with_catalog(bench.catalog, SelectorConfig(threads=1))
            oracle = GoldTasksDecomposer()
            selector = Selector(over.catalog, over.embedder, over.index, config=over.config, decomposer=oracle,
                                bundle=over.bundle, lexical=over.live.lexical, head=over.head)
            turns = []
            for q in queries:
                oracle.current = tuple(t["text"] for t in q.extra["tasks"])
                turns.append(as_turn(q, selector.rank(q.query, list(q.history))))
            return turns

        out[name] = cached(cache / f"gold-tasks-{slug(name)}.pkl", make)
    return out


# -- replay --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Replayed:
    """One turn after the stages a variant re-applies: the ranked list (kept first), K, and the
    steps on the way (the cut's order before the head, each fused position's head probability)."""

    ranked: list[str]
    k: int
    cut_order: list[str]
    probabilities: dict[str, float]


def shipped_replay(turn: Turn, head: HeadModel | None, config: SelectorConfig = SelectorConfig()) -> Replayed:
    """``Selector.select``'s cut and head on a ranked turn (``Selector._cut``, no budget)."""
    pairs = [(ids, scores) for ids, scores in turn.lists]
    order, cut = cut_turn(config.cut, pairs, turn.ids, turn.scores, None)
    cut_order = [turn.ids[i] for i in order]
    if head is None or not config.head:
        return Replayed(cut_order, cut.k, cut_order, {})
    probs = head.probabilities(head_features(pairs, turn.history_list, turn.ids, turn.scores, head.depth))
    order, k = head_cut(probs, order, cut, config.cut)
    return Replayed([turn.ids[i] for i in order], k, cut_order, dict(zip(turn.ids, map(float, probs))))


def turn_row(turn: Turn, r: Replayed) -> dict[str, float]:
    g = turn.gold
    return {"NDCG@10": ndcg_at_k(r.ranked, g, 10), "C@5": completeness_at_k(r.ranked, g, 5),
            "C@10": completeness_at_k(r.ranked, g, 10), "K": float(r.k), "C@K": completeness_at_k(r.ranked, g, r.k)}


def columns(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    # unrounded: the shipping rule's 0.005 bound is read on them (compare)
    out = {m: float(np.mean([r[m] for r in rows])) for m in rows[0]}
    out["p90K"] = float(np.percentile([r["K"] for r in rows], 90))
    out["n"] = len(rows)
    return out


Variant = Callable[[Turn, dict[str, Any]], Replayed]


def measure(parts: dict[str, dict[str, Any]], variant: Variant) -> dict[str, Any]:
    """A variant's columns per part, on the multi-tool group (pooled) and the mean over the parts."""
    per_part, group = {}, []
    for name, part in parts.items():
        rows = []
        for turn in part["turns"]:
            row = turn_row(turn, variant(turn, part))
            rows.append(row)
            if turn.id in part["multi"]:
                group.append(row)
        per_part[name] = columns(rows)
    keys = [k for k in next(iter(per_part.values())) if k != "n"]
    mean = {k: float(np.mean([c[k] for c in per_part.values()])) for k in keys}
    return {"parts": per_part, "multi-tool": columns(group), "mean": mean}


def identity(base: Selector, parts: dict[str, dict[str, Any]], n: int = 20) -> dict[str, float]:
    """The share of each part's first ``n`` turns that ``Selector.select`` ranks and cuts exactly as
    the ``shipped`` replay does (the check that the replay is the product's path)."""
    from magicselector.bench.quality import QualityConfig, sampled_queries

    out = {}
    for name, part in parts.items():
        bench = load_benchmark(Path(part["folder"]))
        selector = base.with_catalog(bench.catalog, SelectorConfig(threads=1))
        by_id = {q.id: q for q in sampled_queries(bench, QualityConfig(), SelectorConfig())}
        same = []
        for turn in part["turns"][:n]:
            q = by_id[turn.id]
            sel = selector.select(q.query, list(q.history))
            r = shipped_replay(turn, selector.head)
            same.append(sel.ranked_ids == r.ranked and sel.k == r.k)
        out[name] = float(np.mean(same))
    return out


# -- failure analysis ----------------------------------------------------------------------------------

CAUSES = {
    "not_retrieved": "in no retrieval list (none of the turn's lists held it in its 30)",
    "unsplit": "the rules did not split the turn (one sub-task) and its one list ranks the tool below five",
    "under_split": "split into fewer sub-tasks than gold tools; no sub-task list ranks it first",
    "subtask_miss": "split into as many sub-tasks as gold tools or more, but no sub-task list ranks it first",
    "cut": "ranked first by a sub-task list, yet the cut's order (before the head) puts it below five",
    "head": "in the first five of the cut's order, below five after the head",
}
NEAR_DUPLICATE = 0.8  # cosine of two tools' vectors above which one is a near-duplicate of the other


def _rank_in(ids: Sequence[str], tool: str) -> int | None:
    try:
        return list(ids).index(tool)
    except ValueError:
        return None


def _list_kinds(turn: Turn) -> list[str]:
    """Each retrieval list's kind: the anchor (the utterance), a sub-task, the history-folded utterance."""
    return ["anchor" if i == 0 else "history" if i == turn.history_list else "subtask"
            for i in range(len(turn.lists))]


def _best(turn: Turn, tool: str, kind: str) -> int | None:
    ranks = [r for (ids, _), k in zip(turn.lists, _list_kinds(turn)) if k == kind
             for r in [_rank_in(ids, tool)] if r is not None]
    return min(ranks) if ranks else None


def cause_of(turn: Turn, r: Replayed, tool: str) -> str:
    """One cause per gold tool missing from the first five (``CAUSES``), the earliest stage that lost it."""
    if all(_rank_in(ids, tool) is None for ids, _ in turn.lists):
        return "not_retrieved"
    if (_rank_in(r.cut_order, tool) or 99) < TOP:
        return "head"
    n_sub = sum(k == "subtask" for k in _list_kinds(turn))
    if _best(turn, tool, "subtask") == 0:
        return "cut"
    if len(turn.subtasks) <= 1:
        return "unsplit"
    return "under_split" if n_sub < len(set(turn.gold)) else "subtask_miss"


def intruder_kind(turn: Turn, tool: str, gold: Sequence[str], vectors: dict[str, np.ndarray]) -> str:
    """What a non-gold tool in the first five is: a near-duplicate of a gold tool (cosine at least
    ``NEAR_DUPLICATE``), else the list where it peaked and its rank there (a sub-task's first or
    later hit, the anchor's, the history's)."""
    v = vectors.get(tool)
    if v is not None:
        sims = [float(np.dot(v, vectors[g])) for g in gold if g in vectors]
        if sims and max(sims) >= NEAR_DUPLICATE:
            return "near-duplicate of a gold tool"
    kinds = _list_kinds(turn)
    peaks = [(rank, kinds[i]) for i, (ids, _) in enumerate(turn.lists)
             for rank in [_rank_in(ids, tool)] if rank is not None]
    if not peaks:
        return "no list"
    rank, kind = min(peaks, key=lambda p: (p[0], p[1] != "subtask"))
    return f"{kind} {'first' if rank == 0 else 'second' if rank == 1 else 'third or later'} hit"


def failures(parts: dict[str, dict[str, Any]], head: HeadModel | None) -> dict[str, Any]:
    """The failure analysis of the shipped ranking on the multi-tool group (module docstring)."""
    from collections import Counter

    causes: Counter[str] = Counter()
    intruders: Counter[str] = Counter()
    split: Counter[str] = Counter()
    by_part: dict[str, Counter[str]] = {}
    head_moves: Counter[str] = Counter()
    rows = []
    for name, part in parts.items():
        for turn in part["turns"]:
            if turn.id not in part["multi"]:
                continue
            r = shipped_replay(turn, head)
            gold = list(dict.fromkeys(turn.gold))
            missing = [g for g in gold if g not in r.ranked[:TOP]]
            n_sub = sum(k == "subtask" for k in _list_kinds(turn))
            split_kind = ("unsplit" if len(turn.subtasks) <= 1 else
                          "fewer sub-tasks than gold" if n_sub < len(gold) else "as many or more")
            split[f"{split_kind}: {'missed' if missing else 'complete'}"] += 1
            if not missing:
                continue
            found = []
            for g in missing:
                c = cause_of(turn, r, g)
                causes[c] += 1
                by_part.setdefault(name, Counter())[c] += 1
                before, after = _rank_in(r.cut_order, g), _rank_in(r.ranked, g)
                head_moves[("up" if after < before else "down" if after > before else "same")
                           if before is not None and after is not None else "unranked"] += 1
                found.append({"tool": g, "cause": c, "fused": _rank_in(turn.ids, g), "before_head": before,
                              "after_head": after, "anchor": _best(turn, g, "anchor"),
                              "subtask": _best(turn, g, "subtask"), "history": _best(turn, g, "history"),
                              "probability": round(r.probabilities.get(g, 0.0), 4)})
            took = [(t, intruder_kind(turn, t, gold, part["vectors"])) for t in r.ranked[:TOP] if t not in gold]
            intruders.update(k for _, k in took)
            rows.append({"part": name, "id": turn.id, "query": turn.query, "gold": gold, "subtasks": turn.subtasks,
                         "missing": found, "top5": r.ranked[:TOP], "intruders": took})
    return {"turns_missed": len(rows), "missing_tools": sum(causes.values()), "causes": dict(causes.most_common()),
            "causes_by_part": {p: dict(c.most_common()) for p, c in by_part.items()},
            "split": dict(split.most_common()), "head_moves": dict(head_moves.most_common()),
            "intruders": dict(intruders.most_common()), "rows": rows}


# -- variants ----------------------------------------------------------------------------------------

def refused(turn: Turn, aux_offset: int) -> Turn:
    """The turn with its lists fused again, sub-task lists first: in a decomposed turn a tool's rank
    in the anchor or the history list counts ``aux_offset`` ranks lower (ties: sub-task lists before
    the others, then the higher score); an undecomposed turn as it was."""
    if len(turn.subtasks) <= 1:
        return turn
    kinds = _list_kinds(turn)
    best: dict[str, tuple[int, int, float, int]] = {}
    for li, ((ids, scores), kind) in enumerate(zip(turn.lists, kinds)):
        aux = kind != "subtask"
        for rank, (tid, score) in enumerate(zip(ids, scores)):
            key = (rank + (aux_offset if aux else 0), int(aux), -float(score), li)
            if tid not in best or key < best[tid]:
                best[tid] = key
    order = sorted(best.items(), key=lambda kv: kv[1])
    return replace(turn, ids=[t for t, _ in order], scores=np.array([-k[2] for _, k in order], dtype=np.float32),
                   source=[k[3] for _, k in order])


def protected(turn: Turn, r: Replayed, depth: int = 1, k_max: int = 10) -> Replayed:
    """``r`` with each sub-task list's first ``depth`` tools (a decomposed turn's) kept and put
    first, most probable first, before the head's other kept tools; K grows by those the head had
    dropped (at most ``k_max``)."""
    if len(turn.subtasks) <= 1:
        return r
    tops = [t for (ids, _), kind in zip(turn.lists, _list_kinds(turn)) if kind == "subtask" for t in ids[:depth]]
    pinned = sorted(dict.fromkeys(tops), key=lambda t: -r.probabilities.get(t, 0.0))
    kept = list(dict.fromkeys(pinned + r.ranked[:r.k]))[:k_max]
    return replace(r, ranked=kept + [t for t in r.ranked if t not in kept], k=len(kept))


def deduplicated(turn: Turn, r: Replayed, vectors: dict[str, np.ndarray], threshold: float = NEAR_DUPLICATE
                 ) -> Replayed:
    """``r`` with a tool of the first five moved just past them where its vector is within
    ``threshold`` cosine of a tool ranked above it and it is no sub-task list's first hit."""
    tops = {ids[0] for (ids, _), kind in zip(turn.lists, _list_kinds(turn)) if kind == "subtask" and ids}
    head: list[str] = []
    moved: list[str] = []
    for t in r.ranked[:TOP]:
        v = vectors.get(t)
        dup = v is not None and t not in tops and any(
            float(np.dot(v, vectors[u])) >= threshold for u in head if u in vectors)
        (moved if dup else head).append(t)
    if not moved:
        return r
    rest = r.ranked[TOP:]
    ranked = head + rest[:len(moved)] + moved + rest[len(moved):]
    return replace(r, ranked=ranked)


def owners(turn: Turn) -> dict[str, int]:
    """Each listed tool's owner: the sub-task list where it ranks best (ties: the higher score), -1
    for a tool only the anchor or the history list holds."""
    best: dict[str, tuple[int, float, int]] = {}
    for li, ((ids, scores), kind) in enumerate(zip(turn.lists, _list_kinds(turn))):
        if kind != "subtask":
            continue
        for rank, (tid, score) in enumerate(zip(ids, scores)):
            key = (rank, -float(score), li)
            if tid not in best or key < best[tid]:
                best[tid] = key
    return {t: k[2] for t, k in best.items()}


def diversified(turn: Turn, r: Replayed, gamma: float, first: int = TOP) -> Replayed:
    """``r``'s first ``first`` picked greedily across sub-tasks: each pick the highest head
    probability times ``gamma`` to the power of how many earlier picks share its owner sub-task
    (``owners``; a tool no sub-task list holds shares with none), from the kept tools and then the
    rest; K unchanged, a decomposed turn only."""
    if len(turn.subtasks) <= 1 or not r.probabilities:
        return r
    owner = owners(turn)
    pool = list(r.ranked)
    picked: list[str] = []
    count: dict[int, int] = {}
    kept = set(r.ranked[:r.k])
    while pool and len(picked) < first:
        def value(t: str) -> tuple[int, float]:
            o = owner.get(t, -1)
            return (int(t in kept), r.probabilities.get(t, 0.0) * (gamma ** count.get(o, 0) if o >= 0 else 1.0))
        best = max(pool, key=lambda t: (value(t), -pool.index(t)))
        picked.append(best)
        pool.remove(best)
        o = owner.get(best, -1)
        if o >= 0:
            count[o] = count.get(o, 0) + 1
    return replace(r, ranked=picked + pool)


def head_from_turns(turns: Sequence[Turn], config: Any, weight_multi: float = 1.0) -> HeadModel:
    """A head fitted on ranked train turns as ``train head`` fits it (``train.head.fit_head``);
    ``weight_multi`` repeats the rows of multi-gold turns (an integer number of times)."""
    from magicselector.train.head import fit_head

    xs, ys = [], []
    for t in turns:
        x = head_features([(ids, sc) for ids, sc in t.lists], t.history_list, t.ids, t.scores, config.depth)
        y = np.array([tid in t.gold for tid in t.ids[:config.depth]], dtype=bool)
        reps = int(weight_multi) if len(set(t.gold)) >= 2 else 1
        xs.extend([x] * reps)
        ys.extend([y] * reps)
    return fit_head(np.vstack(xs), np.concatenate(ys), config)


class OwnRequestsFirst:
    """The rules with the utterance's own requests ahead of those a retry or status check replays:
    where the tasks pass ``max_tasks``, the replayed ones (the earliest first) are dropped, not the
    clauses said after the check ("how much longer? By the way, let someone follow my drive" keeps
    the drive). A wrapper over ``RuleDecomposer`` for measurement."""

    name = "rules"

    def __init__(self) -> None:
        from magicselector.decompose.rules import RuleDecomposer

        self.rules = RuleDecomposer()

    def decompose(self, query: str, history: Sequence[Any]) -> Any:
        from magicselector.decompose import DecomposeTrace, Decomposition
        from magicselector.decompose import rules as R

        rules, found = self.rules, R._TaskList()
        memo: dict[str, str] = {}
        seen: dict[tuple[int, int], list[str]] = {}
        replayed: list[int] = []
        turns = list(history)
        for n, clause in enumerate(rules.clauses(query)):
            why = R._is_elliptical(clause, turns, n == 0)
            for task in rules._clause_tasks(clause, n == 0, found, turns, memo, 0, seen):
                before = len(found.tasks)
                found.take(task, clause)
                if why in ("retry", "status") and len(found.tasks) > before:
                    replayed.append(len(found.tasks) - 1)
            if len(found.tasks) - len(replayed) > rules.max_tasks:
                break
        tasks = found.result(query, 10 ** 6)
        drop = set(replayed[:max(0, len(tasks) - rules.max_tasks)])
        tasks = [t for i, t in enumerate(tasks) if i not in drop][:rules.max_tasks]
        return Decomposition(tuple(map(str, tasks)), DecomposeTrace(ran="rules"))


def collect_decomposer(base: Selector, parts: Sequence[tuple[str, Path]], cache: Path, tag: str,
                       decomposer: Any = None, config: SelectorConfig | None = None,
                       only_multi: bool = False) -> dict[str, dict[str, Any]]:
    """``collect_eval`` with another decomposer (an object, or ``config``'s ``decompose`` mode), on
    every sampled turn or only the multi-tool group's (``only_multi``: the LLM's cost)."""
    from magicselector.bench.quality import MULTI_TOOL_GROUP, QualityConfig, multi_tool_ids, sampled_queries

    config = config or SelectorConfig(threads=1)
    out = {}
    for name, folder in parts:
        bench = load_benchmark(folder)
        multi = multi_tool_ids(bench, MULTI_TOOL_GROUP.get(name)) if name in MULTI_TOOL_GROUP else set()
        queries = [q for q in sampled_queries(bench, QualityConfig(), SelectorConfig())
                   if not only_multi or q.id in multi]

        def make() -> dict[str, Any]:
            over = base.with_catalog(bench.catalog, config)
            selector = over if decomposer is None else Selector(
                over.catalog, over.embedder, over.index, config=over.config, decomposer=decomposer,
                bundle=over.bundle, lexical=over.live.lexical, head=over.head)
            t0 = time.perf_counter()
            turns = rank_part(selector, queries)
            print(f"{name} ({tag}): {len(turns)} turns ranked in {time.perf_counter() - t0:.0f} s", flush=True)
            return {"turns": turns}

        part = cached(cache / f"{tag}-{slug(name)}.pkl", make)
        out[name] = {**part, "multi": multi, "vectors": {}, "folder": str(folder)}
    return out


# -- the whole run -------------------------------------------------------------------------------------

def variants(head: HeadModel | None, heads: dict[str, HeadModel]) -> dict[str, Variant]:
    """Every post-retrieval variant measured, by name (docs/bench/multi-tool.md says what each is)."""
    def replay(h: HeadModel | None, offset: int | None = None) -> Variant:
        return lambda t, p: shipped_replay(t if offset is None else refused(t, offset), h)

    out: dict[str, Variant] = {"shipped": replay(head), "no head": replay(None)}
    for depth in (1, 2):
        out[f"protect sub-task top {depth}"] = (lambda d: lambda t, p: protected(t, shipped_replay(t, head), d))(depth)
    for aux in (0, 1, 2):
        out[f"sub-task-first fusion +{aux}"] = replay(head, aux)
    out["sub-task-first fusion +1, no head"] = replay(None, 1)
    for gamma in (0.2, 0.4, 0.6, 0.8):
        out[f"diversify across sub-tasks {gamma}"] = (
            lambda g: lambda t, p: diversified(t, shipped_replay(t, head), g))(gamma)
    for threshold in (0.8, 0.7):
        out[f"near-duplicates out of the top five {threshold}"] = (
            lambda th: lambda t, p: deduplicated(t, shipped_replay(t, head), p["vectors"], th))(threshold)
    for name, h in heads.items():
        offset = 1 if "fusion +1" in name else None
        out[f"head: {name}"] = replay(h, offset)
        out[f"head: {name} + protect top 1"] = (
            lambda h, o: lambda t, p: protected(t, shipped_replay(t if o is None else refused(t, o), h), 1))(h, offset)
    return out


def fit_heads(train: dict[str, list[Turn]]) -> dict[str, HeadModel]:
    """The heads refitted on the train parts' rankings (``HeadTrainConfig()``'s MLP): on the shipped
    head's three sets, on every train part, with multi-gold turns repeated 3 times, and those two on
    the sub-task-first fusion (+1)."""
    from magicselector.train.head import HeadTrainConfig

    config = HeadTrainConfig()
    shipped_sets = [t for n in ("mobile train", "bfcl train", "metatool train") for t in train.get(n, [])]
    every = [t for ts in train.values() for t in ts]
    refused_every = [refused(t, 1) for t in every]
    return {"refit on the shipped head's sets": head_from_turns(shipped_sets, config),
            "every train part": head_from_turns(every, config),
            "every train part, multi-gold x3": head_from_turns(every, config, 3),
            "every train part, fusion +1": head_from_turns(refused_every, config),
            "every train part, multi-gold x3, fusion +1": head_from_turns(refused_every, config, 3)}


def compare(base_row: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The shipping rule's reading of a variant against the shipped row: the group's C@5 and C@10
    change, the worst part loss of C@5 or NDCG@10, mean K and C@K over the parts."""
    worst = min(((row["parts"][p][m] - base_row["parts"][p][m]), p, m)
                for p in row["parts"] for m in ("C@5", "NDCG@10"))
    g, b = row["multi-tool"], base_row["multi-tool"]
    ships = (g["C@5"] > b["C@5"] and g["C@10"] > b["C@10"] and worst[0] >= -0.005 and row["mean"]["K"] <= 6
             and row["mean"]["C@K"] >= base_row["mean"]["C@K"])
    return {"group C@5": round(g["C@5"] - b["C@5"], 4), "group C@10": round(g["C@10"] - b["C@10"], 4),
            "worst": {"change": round(worst[0], 4), "part": worst[1], "metric": worst[2]}, "meets the rule": ships}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.multi_tool",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--work", required=True, type=Path, help="the development parts' folder (written on first use)")
    parser.add_argument("--cache", required=True, type=Path, help="the rankings' cache (reused by the next run)")
    parser.add_argument("--shared-data", type=Path, default=None, help="the public sets (default: beside the checkout)")
    parser.add_argument("--bundle", default=None, help="a bundle folder (default: the default bundle)")
    parser.add_argument("--llm", action="store_true", help="also rank the generated parts' multi-tool turns with "
                        "decompose='auto' (the LLM, no deadline): slow")
    parser.add_argument("--out", type=Path, default=None, help="the result as JSON")
    args = parser.parse_args(argv)
    base = Selector.from_bundle(args.bundle, config=SelectorConfig(threads=1))
    dev = eval_parts(args.work, args.shared_data)
    parts = collect_eval(base, dev, args.cache)
    result: dict[str, Any] = {"identity": identity(base, parts), "failures": failures(parts, base.head)}
    train = collect_train(base, train_parts(args.work), args.cache)
    rows = {name: measure(parts, v) for name, v in variants(base.head, fit_heads(train)).items()}
    result["variants"] = {name: {**row, "against shipped": compare(rows["shipped"], row)} for name, row in rows.items()}
    result["decomposition"] = decomposition_bounds(base, dev, parts, args.cache, args.llm)
    for name, row in result["variants"].items():
        g, c = row["multi-tool"], row["against shipped"]
        print(f"{name:48s} group C@5 {g['C@5']:.3f} C@10 {g['C@10']:.3f} K {g['K']:.2f} | mean K {row['mean']['K']:.2f} "
              f"C@K {row['mean']['C@K']:.3f} | worst {c['worst']['change']:+.3f} {c['worst']['part']} "
              f"{c['worst']['metric']}{' | meets the rule' if c['meets the rule'] else ''}")
    print(json.dumps({k: v for k, v in result["failures"].items() if k != "rows"}, indent=1))
    print(json.dumps(result["decomposition"], indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1, default=float) + "\n")


def decomposition_bounds(base: Selector, dev: Sequence[tuple[str, Path]], parts: dict[str, dict[str, Any]],
                         cache: Path, llm: bool) -> dict[str, Any]:
    """The generated parts' multi-tool turns (and all their sampled turns) ranked with other
    decompositions, the shipped cut and head after: the gold tasks (``GoldTasksDecomposer``), the
    rules with their own requests first (``OwnRequestsFirst``) and, with ``llm``, ``auto``."""
    from magicselector.config import LLMDecomposerConfig

    generated = [(n, f) for n, f in dev if n.startswith("mobile")]
    gold = collect_gold_tasks(base, generated, cache)
    runs: dict[str, dict[str, dict[str, Any]]] = {
        "gold tasks": {n: {**parts[n], "turns": ts} for n, ts in gold.items()},
        "rules, own requests first": collect_decomposer(base, generated, cache, "own-first", OwnRequestsFirst())}
    if llm:
        config = SelectorConfig(threads=1, decompose="auto", llm=LLMDecomposerConfig(deadline_ms=None, threads=1))
        runs["auto (LLM, no deadline)"] = collect_decomposer(base, generated, cache, "auto-multi", config=config,
                                                             only_multi=True)
    out: dict[str, Any] = {}
    for label, run in runs.items():
        for name, part in run.items():
            ids = {t.id for t in part["turns"]}
            shipped = [t for t in parts[name]["turns"] if t.id in ids]
            multi = parts[name]["multi"]
            selections: tuple[tuple[str, Callable[[Turn], bool]], ...] = (
                ("multi-tool", lambda t: t.id in multi), ("sampled", lambda t: True))
            for which, keep in selections:
                before = [turn_row(t, shipped_replay(t, base.head)) for t in shipped if keep(t)]
                after = [turn_row(t, shipped_replay(t, base.head)) for t in part["turns"] if keep(t)]
                no_head = [turn_row(t, shipped_replay(t, None)) for t in part["turns"] if keep(t)]
                if after and (which == "multi-tool" or len(after) > len(parts[name]["multi"])):
                    out.setdefault(label, {}).setdefault(name, {})[which] = {
                        "rules": columns(before), "this": columns(after), "this, no head": columns(no_head)}
    return out


if __name__ == "__main__":
    main()

"""``magicselector eval``: quality of a bundle's pipeline on a benchmark folder.

The dataset's own tools are indexed with the bundle's embedder (embeddings cached on disk), then
every query is ranked by the chosen retriever (dense = the Selector itself; hybrid = the Selector
with its lexical channel on, BM25 fused into every retrieval list, decomposed or not; bm25 = the
runtime's BM25 alone) and cut by the configured rule. Reports NDCG@k, Recall@k, Completeness@k; for adaptive cuts,
Completeness@K and mean K next to Completeness at a fixed k of the rounded mean K; the mean
number of schema tokens handed to the assistant; and the same per category. ``per_query`` lists
every scored query (id, ranked ids, K, kept ids, gold) for query-by-query comparisons.
"""
from __future__ import annotations

import hashlib
import re
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.bundle import Bundle
from magicselector.default_bundle import ensure_default_bundle
from magicselector.catalog import Catalog, schema_tokens, tool_text
from magicselector.config import SelectorConfig
from magicselector.dialogue import retrieval_text, validate_history, validate_query
from magicselector.errors import InputError
from magicselector.files import cache_home
from magicselector.dialogue import bounded_history
from magicselector.selector import Selector
from magicselector.stages.budget import kept_first, spend_budget
from magicselector.stages.cut import CutRule
from magicselector.stages.index import ToolIndex

from magicselector.data.datasets import Benchmark, Query, load_benchmark
from magicselector.data.metrics import completeness_at_k, mean, ndcg_at_k, recall_at_k

from .cut_rules import FixedCut

RETRIEVERS = ("dense", "bm25", "hybrid")
_SHIPPED = SelectorConfig()
BAD_QUERY_POLICIES = ("skip", "truncate")


@dataclass(frozen=True)
class EvalConfig:
    """What ``evaluate`` runs: the pipeline ``selector`` (the shipped ``SelectorConfig()`` by
    default, so ``evaluate(DIR)`` and ``magicselector eval DIR`` measure the product) with the
    evaluation's own settings.

    k: the metrics' cutoff (NDCG@k, Recall@k, Completeness@k).
    adaptive: cut by ``selector.cut``; False: a fixed top-k cut at k.
    retriever: dense | bm25 | hybrid; None: the shipped one (hybrid: the Selector with its lexical
      channel). It sets ``selector.lexical``; bm25 alone runs no decomposition.
    limit, seed: a seeded sample of at most ``limit`` queries.
    on_bad_query: a query the Selector refuses (over-long, empty, not valid Unicode, malformed
      history) is skipped, or with ``truncate`` an over-long one is cut to ``limits.max_query_chars``.
    ``selector.llm.model`` None means the bundle's decomposer, with its prompt unless
    ``selector.llm.prompt`` asks for another (what ``Selector.from_bundle`` ships).
    """

    selector: SelectorConfig = _SHIPPED
    k: int = 10
    adaptive: bool = True
    retriever: str | None = None
    limit: int | None = None
    seed: int = 0
    on_bad_query: str = "skip"

    @property
    def decomposition(self) -> str:
        """The decomposer that runs: the selector's, none for BM25 alone."""
        return "none" if self.retrieval == "bm25" else self.selector.decompose

    @property
    def retrieval(self) -> str:
        """The retriever that runs: the one asked for, else the shipped one."""
        return self.retriever or ("hybrid" if _SHIPPED.lexical else "dense")

    @property
    def cut(self) -> CutRule:
        """The cut the evaluation applies: the selector's, or a fixed top-k when not adaptive."""
        return self.selector.cut if self.adaptive else FixedCut(self.k)

    def __post_init__(self) -> None:
        if not isinstance(self.selector, SelectorConfig):
            raise InputError(f"selector must be a SelectorConfig, got {type(self.selector).__name__}")
        if self.retriever is not None and self.retriever not in RETRIEVERS:
            raise InputError(f"retriever must be one of {RETRIEVERS}, got {self.retriever!r}")
        if self.retriever == "bm25" and self.selector.decompose not in ("none", _SHIPPED.decompose):
            raise InputError("decomposition is evaluated with the dense or hybrid retriever (--retriever dense|hybrid)")
        if self.k < 1:
            raise InputError("k must be >= 1")
        if self.on_bad_query not in BAD_QUERY_POLICIES:
            raise InputError(f"on_bad_query must be one of {BAD_QUERY_POLICIES}, got {self.on_bad_query!r}")


def selector_for_catalog(base: Selector, catalog: Catalog, config: SelectorConfig) -> Selector:
    """A Selector over another catalog, sharing the base Selector's models (``Selector.with_catalog``)."""
    return base.with_catalog(catalog, config)


_WORD = re.compile(r"[a-z0-9]+")


def bm25_tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("_", " "))


class BM25Ranker:
    """rank_bm25's BM25Okapi over ``bm25_tokens``: the reference BM25 that ``bench latency --compare``
    times (the eval's bm25 and hybrid retrievers use the runtime's own, ``magicselector.stages.lexical``)."""

    def __init__(self, catalog: Catalog) -> None:
        try:
            from rank_bm25 import BM25Okapi
        except ImportError:
            raise InputError("the reference BM25 needs rank-bm25: pip install 'magicselector[bench]'") from None
        self.ids = catalog.ids
        self._bm25 = BM25Okapi([bm25_tokens(tool_text(t)) for t in catalog])

    def rank(self, text: str, count: int) -> tuple[list[str], np.ndarray]:
        scores = self._bm25.get_scores(bm25_tokens(text))
        top = np.argsort(-scores, kind="stable")[:count]
        return [self.ids[i] for i in top], scores[top].astype(np.float32)


def _progress(total: int, desc: str, enabled: bool):
    """A progress bar on stderr, only where stderr is a terminal: a bar's frames do not belong in a log file."""
    if enabled and sys.stderr.isatty():
        try:
            from tqdm import tqdm

            return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=1.0, leave=False)
        except ImportError:
            pass

    class _Null:
        def update(self, n: int = 1) -> None: ...

        def close(self) -> None: ...

    return _Null()


def _summarise(rows: list[dict[str, Any]], k: int, adaptive: bool, token_cost: Callable[[Sequence[str]], int]) -> dict[str, Any]:
    out = {
        "queries": len(rows),
        f"ndcg@{k}": mean(r["ndcg"] for r in rows),
        f"recall@{k}": mean(r["recall"] for r in rows),
        f"completeness@{k}": mean(r["complete"] for r in rows),
        "completeness@K": mean(r["complete_K"] for r in rows),
        "mean_k": mean(r["K"] for r in rows),
        "schema_tokens": mean(r["tokens"] for r in rows),
    }
    if adaptive and rows:
        fixed = max(1, int(round(out["mean_k"])))
        out["fixed_k_at_mean_k"] = fixed
        out["completeness@fixed_k_at_mean_k"] = mean(completeness_at_k(r["ranked"], r["gold"], fixed) for r in rows)
        out["schema_tokens@fixed_k_at_mean_k"] = mean(token_cost(r["ranked"][:fixed]) for r in rows)
    return out


def _sampled_queries(bench: Benchmark, config: EvalConfig) -> list[Query]:
    """The benchmark's queries, or a seeded sample of ``config.limit`` (so limited runs are comparable)."""
    queries = bench.queries
    if config.limit is not None and (isinstance(config.limit, bool) or not isinstance(config.limit, int)
                                     or config.limit < 0):
        raise InputError(f"limit must be a whole number >= 0 (0: every query), got {config.limit!r:.40}")
    if config.limit and config.limit < len(queries):  # 0 or None: every query, as the bench's --limit 0
        rng = np.random.default_rng(config.seed)
        queries = [queries[i] for i in sorted(rng.choice(len(queries), config.limit, replace=False))]
    return queries


def _run_config(config: EvalConfig, base: Selector, candidates: int) -> SelectorConfig:
    """The Selector's settings as the evaluation runs them: the asked ones with its cut, candidates,
    retriever and decomposition; no model named: the bundle's decomposer with its prompt (unless
    another prompt was asked for)."""
    asked = config.selector
    model, prompt = asked.llm.model, asked.llm.prompt
    if model is None:
        model = base.config.llm.model
        if prompt == _SHIPPED.llm.prompt:
            prompt = base.config.llm.prompt
    return replace(asked, candidates=candidates, cut=config.cut, decompose=config.decomposition,
                   lexical=config.retrieval == "hybrid", llm=replace(asked.llm, model=model, prompt=prompt))


def _bm25_ranking(selector: Selector, q: Query, run: SelectorConfig, candidates: int) -> tuple[list[str], int]:
    """BM25 alone: the runtime's lexical index over the retrieval text, cut by the run's rule and
    bounded by the run's budget as every other row is (``spend_budget``: one list, so the ranked
    order's first tools); (ranked ids, K)."""
    text = retrieval_text(" ".join(q.query.split()), validate_history(q.history), run.history, run.history_turns)
    ids, scores = selector.lexical.search([text], candidates)[0]
    ids = list(ids)
    emb = selector.index.vectors(ids) if run.cut.uses_embeddings else None
    k = run.cut.apply(np.asarray(scores), emb).k
    budget = run.budget()
    if not budget.bounded:
        return ids, k
    kept = spend_budget(budget, ids, k, [ids], lambda t: selector.live.schema_tokens(selector.catalog.get(t),
                                                                                      budget.format))
    return [ids[i] for i in kept_first(kept, len(ids))], len(kept)  # as Selector.select hands them over


def _scored_row(q: Query, selector: Selector, raw_selector: Selector | None, run: SelectorConfig,
                config: EvalConfig, token_cost: Callable[[Sequence[str]], int]) -> dict[str, Any]:
    """One query ranked, cut and scored (with the counterfactual without decomposition, if any)."""
    extra: dict[str, Any] = {}
    if config.retrieval != "bm25":
        sel = selector.select(q.query, q.history)
        ranked, K, kept = sel.ranked_ids, sel.k, sel.ids
        if raw_selector is not None:
            extra = _counterfactual_row(q, sel, raw_selector.select(q.query, q.history), selector, config.k)
    else:
        ranked, K = _bm25_ranking(selector, q, run, run.candidates)
        kept = ranked[:K]
    return {
        "id": q.id, "category": q.category, "gold": q.gold, "ranked": ranked, "K": K, "kept": list(kept),
        "ndcg": ndcg_at_k(ranked, q.gold, config.k), "recall": recall_at_k(ranked, q.gold, config.k),
        "complete": completeness_at_k(ranked, q.gold, config.k),
        "complete_K": completeness_at_k(ranked, q.gold, K), "tokens": token_cost(ranked[:K]),
        **extra,
    }


def _bad_queries_report(bench: Benchmark, refused: list[dict[str, str]], policy: str) -> dict[str, Any]:
    """``bad_queries``: the malformed rows (not JSON, unknown gold ids, a broken history), which never
    reached the Selector and are skipped whatever the policy, listed with their line, then the
    queries the Selector refused."""
    malformed = [{"id": r["id"] if r["id"] is not None else f"line {r['line']}", "line": r["line"],
                  "action": "skipped", "reason": r["error"][:300]} for r in bench.rejected]
    bad = [*malformed, *refused]
    return {"policy": policy, "count": len(bad), "ids": [b["id"] for b in bad],
            "skipped": sum(b["action"] == "skipped" for b in bad),
            "truncated": sum(b["action"] == "truncated" for b in bad),
            "malformed_rows": len(malformed), "rows": bad}


def _counterfactual_report(rows: list[dict[str, Any]], by_cat: dict[str, list], k: int) -> dict[str, Any]:
    """``counterfactual``: decomposed against raw, overall, per category and on multi-tool turns."""
    multi = [r for r in rows if len(set(r["gold"])) > 1]
    return {**_counterfactual(rows, k),
            "by_category": {c: _counterfactual(rs, k) for c, rs in sorted(by_cat.items())},
            # the aim is stated on turns needing two or more tools
            "multi_gold": _counterfactual(multi, k)}


def evaluate(benchmark: Benchmark | str | Path, config: EvalConfig = EvalConfig(), bundle: str | Path | None = None,
             progress: bool = True, base: Selector | None = None, public_key: Any = None,
             min_release: int | None = None) -> dict[str, Any]:
    """Evaluate the pipeline on a benchmark folder; returns the report (see module docstring).
    ``public_key`` and ``min_release``: as ``Selector.from_bundle`` takes them, for ``bundle``."""
    bench = benchmark if isinstance(benchmark, Benchmark) else load_benchmark(benchmark, skip_bad_rows=True)
    queries = _sampled_queries(bench, config)
    candidates = max(config.k, config.cut.k_max if config.adaptive else config.k, 30)
    t0 = time.perf_counter()
    asked = config.selector
    if base is None:
        base = Selector.from_bundle(bundle if bundle is not None else ensure_default_bundle(progress=progress),
                                    config=SelectorConfig(threads=asked.threads), public_key=public_key,
                                    min_release=min_release)
    sel_config = _run_config(config, base, candidates)
    queries, bad = screen_queries(queries, sel_config, config.on_bad_query)  # before any indexing
    if not queries and not bad:
        raise InputError(f"{bench.path}: holds no queries to evaluate")
    if not queries:
        raise InputError(f"{bench.path}: every query was refused ({len(bad)}), e.g. {bad[0]['id']}: {bad[0]['reason']}")
    selector = selector_for_catalog(base, bench.catalog, sel_config)
    raw_selector = selector.with_config(decompose="none") if config.decomposition != "none" else None
    cost = {t.id: schema_tokens(t) for t in bench.catalog}

    def token_cost(ids: Sequence[str]) -> int:
        return sum(cost[i] for i in ids)

    rows = []
    bar = _progress(len(queries), f"eval {bench.name}", progress)
    for q in queries:
        rows.append(_scored_row(q, selector, raw_selector, sel_config, config, token_cost))
        bar.update()
    bar.close()
    by_cat: dict[str, list] = defaultdict(list)
    for r in rows:
        by_cat[r["category"]].append(r)
    report = {
        "dataset": str(bench.path),
        "overall": _summarise(rows, config.k, config.adaptive, token_cost),
        "by_category": {c: _summarise(rs, config.k, config.adaptive, token_cost) for c, rs in sorted(by_cat.items())},
        "config": report_config(config, sel_config, asked) | {
            "bundle": str(base.bundle.path) if base.bundle else None, "tools": len(bench.catalog),
            # what ran: asked for and held by the bundle (a head-less bundle cuts without one)
            "head": bool(sel_config.head and selector.head is not None),
            "seconds": round(time.perf_counter() - t0, 2)},
    }
    report["per_query"] = per_query_rows(rows)
    report["bad_queries"] = _bad_queries_report(bench, bad, config.on_bad_query)
    if raw_selector is not None:
        report["counterfactual"] = _counterfactual_report(rows, by_cat, config.k)
        quality = _decomposition_quality(rows, config.k)
        if quality:
            report["decomposition"] = quality
    return report


def report_config(config: EvalConfig, ran: SelectorConfig, asked: SelectorConfig) -> dict[str, Any]:
    """The report's ``config``: the Selector's settings as they ran (``SelectorConfig`` as JSON, its
    groups ``cut``, ``limits`` and ``llm`` nested; the decomposer's model and prompt as asked, None
    for the bundle's), then the evaluation's own."""
    own = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "selector"}
    settings = asdict(ran)
    settings["cut"] = {"rule": ran.cut.rule, **settings["cut"]}
    settings["llm"].update(model=asked.llm.model, prompt=asked.llm.prompt if asked.llm.model is not None
                           or asked.llm.prompt != _SHIPPED.llm.prompt else None)
    return {**settings, **own, "retriever": config.retrieval, "decompose": config.decomposition}


PER_QUERY_RANKED = 50  # the ranked list a per-query row carries, at most


def per_query_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per scored query, so two runs (or a peer's) compare query by query: its id, the ranked
    ids (the first ``PER_QUERY_RANKED``), K (the tools the cut kept), the kept ids and the gold ids."""
    return [{"id": r["id"], "ranked_ids": list(r["ranked"][:PER_QUERY_RANKED]), "k": r["K"],
             "ids": list(r["kept"]), "gold": list(r["gold"])} for r in rows]


def screen_queries(queries: Sequence[Query], config: SelectorConfig, policy: str = "skip"
                   ) -> tuple[list[Query], list[dict[str, str]]]:
    """The queries the Selector takes, and one row ({id, action, reason}) per query it would refuse,
    found with the Selector's own checks. ``policy="truncate"`` cuts an over-long utterance at a
    word boundary within ``config.limits.max_query_chars`` instead of skipping it."""
    limits = config.limits
    kept, bad = [], []
    for q in queries:
        note = None
        try:
            text = " ".join(q.query.split()) if isinstance(q.query, str) else ""
            if policy == "truncate" and len(text) > limits.max_query_chars:
                cut = text[: limits.max_query_chars + 1]
                cut = cut[: cut.rfind(" ")] if " " in cut else cut[: limits.max_query_chars]
                note = {"id": q.id, "action": "truncated", "reason": f"{len(text):,} characters, cut to {len(cut):,}"}
                q = replace(q, query=cut)
            validate_query(q.query, limits.max_query_chars)
            bounded_history(q.history, limits.max_history_turns, limits.max_history_chars)
        except InputError as e:
            bad.append({"id": q.id, "action": "skipped", "reason": str(e)[:300]})
            continue
        if note:
            bad.append(note)
        kept.append(q)
    return kept, bad


def _counterfactual_row(q: Query, sel, raw, selector: Selector, k: int) -> dict[str, Any]:
    """Per turn: NDCG and completeness with (atom) and without (raw) decomposition; the
    sub-task lists' own gold coverage; the decomposition time."""
    row: dict[str, Any] = {
        "ndcg_raw": ndcg_at_k(raw.ranked_ids, q.gold, k), "complete_raw": completeness_at_k(raw.ranked_ids, q.gold, k),
        "subtasks": list(sel.subtasks), "decompose_ms": sel.timings_ms.get("decompose", 0.0),
        "ran": sel.trace.ran or sel.decomposer,
        "reason": sel.trace.reason,
    }
    if row["ran"] == "llm":
        row["duplicate_rate"] = _duplicate_line_rate(sel.trace.raw)
    tasks = q.extra.get("tasks")
    if isinstance(tasks, list) and tasks:
        row["gold_tasks"] = len(tasks)
        vecs = selector.embedder.embed(list(sel.subtasks))
        union: set[str] = set()
        for ids, _ in selector.index.search(vecs, k):
            union.update(ids)
        row["subtask_complete"] = float(set(q.gold) <= union)
    return row


def _duplicate_line_rate(text: str) -> float:
    """Share of the LLM's output lines that repeat an earlier line (case and spacing ignored): the
    paper's reward-hacking signal (section 6.6); the runtime's parser stops at the first repeat, so
    this reads the raw text."""
    from magicselector.train.rewards import duplicate_task_rate  # numpy only

    return duplicate_task_rate([line for line in text.split("\n") if line.strip()])


def _counterfactual(rows: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """MagicSelector eq. 4 both ways: N_raw (no decomposition) vs N_atom, per turn."""
    rows = [r for r in rows if "ndcg_raw" in r]
    if not rows:
        return {}
    gains = [r["ndcg"] - r["ndcg_raw"] for r in rows]
    eps = 1e-9
    ms = sorted(r["decompose_ms"] for r in rows)
    return {
        "queries": len(rows),
        f"ndcg_raw@{k}": mean(r["ndcg_raw"] for r in rows),
        f"ndcg_atom@{k}": mean(r["ndcg"] for r in rows),
        "mean_gain": mean(gains),
        "helps": mean(float(g > eps) for g in gains),
        "hurts": mean(float(g < -eps) for g in gains),
        "same": mean(float(abs(g) <= eps) for g in gains),
        f"completeness_raw@{k}": mean(r["complete_raw"] for r in rows),
        f"completeness_atom@{k}": mean(r["complete"] for r in rows),
        "decompose_ms_p50": float(np.percentile(ms, 50)),
        "decompose_ms_p90": float(np.percentile(ms, 90)),
        "llm_share": mean(float(r.get("ran") == "llm") for r in rows),
        # auto only: turns the gate kept from the LLM, and turns whose LLM ran past the deadline
        "gate_skipped": mean(float(r.get("reason", "").startswith("gate:") and r.get("ran") != "llm") for r in rows),
        "deadline_missed": mean(float(r.get("reason", "").startswith("deadline")) for r in rows),
        # over the turns the LLM decomposed (0 when it decomposed none)
        "duplicate_rate": mean(r["duplicate_rate"] for r in rows if "duplicate_rate" in r),
    }


def _decomposition_quality(rows: list[dict[str, Any]], k: int) -> dict[str, Any]:
    rows = [r for r in rows if "gold_tasks" in r]
    if not rows:
        return {}
    multi = [r for r in rows if r["gold_tasks"] > 1]
    return {
        "turns": len(rows),
        "task_count_right": mean(float(len(r["subtasks"]) == r["gold_tasks"]) for r in rows),
        "task_count_right_multi": mean(float(len(r["subtasks"]) == r["gold_tasks"]) for r in multi),
        "mean_subtasks": mean(len(r["subtasks"]) for r in rows),
        "mean_gold_tasks": mean(r["gold_tasks"] for r in rows),
        f"subtask_completeness@{k}": mean(r["subtask_complete"] for r in rows),
    }


def format_report(report: dict[str, Any]) -> str:
    """A plain-text table of a report: overall, then per category."""
    k = report["config"]["k"]
    adaptive = report["config"]["adaptive"]
    cols = [f"ndcg@{k}", f"recall@{k}", f"completeness@{k}", "completeness@K", "mean_k", "schema_tokens"]
    if adaptive:
        cols += ["fixed_k_at_mean_k", "completeness@fixed_k_at_mean_k"]
    head = f"{'category':<22} {'n':>6} " + " ".join(f"{c:>{max(8, len(c))}}" for c in cols)
    lines = [f"{report['dataset']}  retriever={report['config']['retriever']} history={report['config']['history']} "
             f"adaptive={adaptive} tools={report['config']['tools']}", head]

    def line(name: str, m: dict[str, Any]) -> str:
        vals = []
        for c in cols:
            v = m.get(c, float("nan"))
            vals.append(f"{v:>{max(8, len(c))}.3f}" if isinstance(v, float) else f"{v:>{max(8, len(c))}}")
        return f"{name:<22} {m['queries']:>6} " + " ".join(vals)

    lines.append(line("overall", report["overall"]))
    for cat, m in report["by_category"].items():
        lines.append(line(cat[:22], m))
    cf = report.get("counterfactual")
    if cf:
        lines.append(f"\ncounterfactual (decompose={report['config'].get('decompose')} vs none, "
                     f"fusion={report['config'].get('fusion')})")
        ccols = [f"ndcg_raw@{k}", f"ndcg_atom@{k}", "mean_gain", "helps", "hurts", "same",
                 f"completeness_raw@{k}", f"completeness_atom@{k}", "decompose_ms_p50", "llm_share"]
        lines.append(f"{'category':<22} {'n':>6} " + " ".join(f"{c:>{max(8, len(c))}}" for c in ccols))

        def cline(name: str, m: dict[str, Any]) -> str:
            return f"{name:<22} {m['queries']:>6} " + " ".join(
                f"{m.get(c, float('nan')):>{max(8, len(c))}.3f}" for c in ccols)

        lines.append(cline("overall", cf))
        for cat, m in cf.get("by_category", {}).items():
            if m:
                lines.append(cline(cat[:22], m))
        if cf.get("multi_gold"):
            lines.append(cline("(2+ gold tools)", cf["multi_gold"]))
    dq = report.get("decomposition")
    if dq:
        lines.append("decomposition vs gold tasks: " + ", ".join(
            f"{key}={v:.3f}" if isinstance(v, float) else f"{key}={v}" for key, v in dq.items()))
    bad = report.get("bad_queries")
    if bad and bad["count"]:
        shown = ", ".join(f"{b['id']} ({b['action']}: {b['reason'][:60]})" for b in bad["rows"][:10])
        lines.append(f"bad queries: {bad['count']} ({bad['skipped']} skipped, {bad['truncated']} truncated; "
                     f"--on-bad-query {bad['policy']}): {shown}" + (" ..." if bad["count"] > 10 else ""))
    return "\n".join(lines)

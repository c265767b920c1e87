"""The golden file's ``pipeline`` probes: every stage of the shipped selection on a few dozen turns, written at bundle build and re-checked by ``bundle verify``.

A port (the native core, an app's own code) checks itself stage by stage against what the Python
runtime computed from the same bundle: per probe turn the input (utterance, history, budget), the
decomposer's sub-tasks, the retrieval texts, their token ids and vectors, each retrieval list's
dense search and lexical (BM25) hits, the lists fused with BM25, the peak-rank fusion, the cut (with
each list's cut), the learned head's features and probabilities, the budget's choice and the final
selection. Each stage is computed here by calling the stage functions on the previous stage's plain
output (``PipelineParts``: the bundle's parts without a Selector, which sits above the bundle writer),
and ``bundle verify`` checks that it equals ``Selector.select``'s.

Numbers: float32 stages (vectors, search, lexical and fused scores) are written as the shortest
decimal that reads back as the same float32, so a port that parses them as float32 feeds exactly
the values the Python runtime used; the head's features and probabilities are float64. Tolerances
(``TOLERANCES``): ids, order and K exact; scores within 1e-5; vectors recomputed by an embedder
within a cosine of 1 - 0.005 of the written ones (the later stages are re-run from the written
vectors, so a port's own embedder does not blur them); the head's features and probabilities within
1e-9 (features also 1e-12 of their size), computed from the written lists and fused list for the
same reason (``head_on_written``: its inputs' last float32 bits would otherwise grow past any bound).

``schema_tokens.json`` (``schema_token_table``) is the per-tool definition size in each API format,
written beside the catalog: a port spends ``max_schema_tokens`` budgets from it instead of rendering
four formats and estimating tokens itself.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence

import numpy as np

from .config import SelectorConfig
from .decompose import Decomposer, build_decomposer
from .errors import BundleError
from .plan import RetrievalPlan, plan_turn

if TYPE_CHECKING:
    from .catalog import Catalog
    from .stages.cut import Cut
    from .stages.fuse import Fused, RankedList
    from .stages.head import HeadModel
    from .stages.index import ToolIndex
    from .stages.lexical import LexicalIndex


class Pipeline(Protocol):
    """What the probes read of a pipeline: a ``Selector`` is one, ``PipelineParts`` another."""

    @property
    def config(self) -> SelectorConfig: ...
    @property
    def catalog(self) -> Catalog: ...
    @property
    def embedder(self) -> Any: ...
    @property
    def index(self) -> ToolIndex: ...
    @property
    def lexical(self) -> LexicalIndex: ...
    @property
    def head(self) -> HeadModel | None: ...
    def plan(self, query: str, history: Iterable[Any] | None = ()) -> RetrievalPlan: ...


@dataclass(frozen=True)
class PipelineParts:
    """A bundle's parts under a config, as the bundle writer holds them (no Selector: the Selector
    builds the default bundle on first use, so the writer cannot import it)."""

    catalog: Catalog
    embedder: Any
    index: ToolIndex
    lexical: LexicalIndex
    head: HeadModel | None = None
    config: SelectorConfig = field(default_factory=SelectorConfig)
    decomposer: Decomposer = field(default_factory=lambda: build_decomposer("rules"))

    def plan(self, query: str, history: Iterable[Any] | None = ()) -> RetrievalPlan:
        return plan_turn(self.config, self.decomposer, query, history)

PIPELINE_FORMAT = "magicselector-golden-pipeline/1"
SCHEMA_TOKENS_FORMAT = "magicselector-schema-tokens/1"
SCHEMA_TOKENS_FILE = "schema_tokens.json"
# The head's features and probabilities are checked on the written lists and fused list (``head_on_written``):
# the same double arithmetic on the same float32 inputs, apart only in log1p's last bit and the order of a
# sum (measured 5e-16), so 1e-9 passes every port that computes what this module does and fails one that
# slips a feature into float32 (1e-7 relative), misreads, drops or reorders one. ``feature_rel`` scales
# the bound with the feature (a list whose spread clamps at 1e-6 gives gaps near 1e6: |a - b| <= abs +
# rel * max(|a|, |b|)).
TOLERANCES = {"score_abs": 1e-5, "probability_abs": 1e-9, "feature_abs": 1e-9, "feature_rel": 1e-12,
              "vector_cosine_min": 0.995}


def _u(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


# Probe turns: single requests, multi-intent turns the rules decomposer splits, follow-ups that need
# the history (a question the assistant asked, a pronoun), and budgets in every API format.
PIPELINE_TURNS: list[dict[str, Any]] = [
    {"query": "wake me up at 6:30 tomorrow"},
    {"query": "set a timer for ten minutes"},
    {"query": "what's the weather like in Berlin this weekend"},
    {"query": "turn on bluetooth and play some jazz"},
    {"query": "text Sam that I'm running late and then navigate to the office"},
    {"query": "send an email to my boss about the budget, add it to my calendar and remind me tomorrow"},
    {"query": "turn the wifi off"},
    {"query": "take a selfie and share it with Mia"},
    {"query": "order a large pepperoni pizza"},
    {"query": "how many steps did I walk today"},
    {"query": "translate good morning into Spanish"},
    {"query": "book a hotel in Rome for next Friday and get me a ride to the airport"},
    {"query": "pay Alex 20 dollars for dinner"},
    {"query": "cancel my 3 pm meeting"},
    {"query": "call the dentist"},
    {"query": "hi"},
    {"query": "Play the latest episode of Hardcore History at 1.5x speed"},
    {"query": "Öffne die Kamera 📷 und mach ein Foto"},
    {"query": "Yes, at 7 please", "history": [
        _u("user", "I need to get up early tomorrow"),
        _u("assistant", "Should I set an alarm? What time?")]},
    {"query": "Pause it", "history": [
        _u("user", "Can you start Born a Crime?"), _u("assistant", "Playing Born a Crime.")]},
    {"query": "and send it to Jordan too", "history": [
        _u("user", "take a screenshot"), _u("assistant", "Screenshot saved."),
        _u("user", "share it with Priya"), _u("assistant", "Shared with Priya.")]},
    {"query": "make it 8 instead", "history": [
        _u("user", "set an alarm for 7"), _u("assistant", "Alarm set for 7:00."),
        _u("user", "thanks"), _u("assistant", "Anything else?")]},
    {"query": "the one from last summer", "history": [
        _u("user", "show me my photos"), _u("assistant", "Which album would you like to see?")]},
    {"query": "how long will it take?", "history": [
        _u("user", "navigate to the airport"), _u("assistant", "Starting navigation to the airport.")]},
    {"query": "turn on bluetooth and play some jazz", "max_tools": 1},
    {"query": "send an email to my boss about the budget and add it to my calendar", "max_tools": 2},
    {"query": "take a selfie and share it with Mia", "max_schema_tokens": 300, "format": "mcp"},
    {"query": "book a table for two tonight and order a ride there", "max_schema_tokens": 400,
     "format": "openai"},
    {"query": "what's on my calendar tomorrow and what's the weather", "max_schema_tokens": 250,
     "format": "openai-responses"},
    {"query": "play my workout playlist and start a run", "max_tools": 3, "max_schema_tokens": 500,
     "format": "anthropic"},
    {"query": "yes, remind me at 5", "max_tools": 2, "format": "anthropic", "history": [
        _u("user", "I have to pick up the kids"), _u("assistant", "Do you want a reminder? When?")]},
    {"query": "set the brightness to 40 percent, enable dark mode and mute the phone", "max_schema_tokens": 120,
     "format": "mcp"},
]


def _f32(values: Any) -> list[float]:
    """float32 values as the shortest decimals that read back as the same float32."""
    return [float(str(x)) for x in np.asarray(values, dtype=np.float32).reshape(-1)]


def _f64(values: Any) -> list[float]:
    return [float(x) for x in np.asarray(values, dtype=np.float64).reshape(-1)]


def schema_token_table(catalog: Catalog) -> dict[str, Any]:
    """Each tool's definition size (``tokens.schema_tokens``) in every API format, in catalog order."""
    from .formats import FORMATS, tool_definition
    from .tokens import schema_tokens

    return {"format": SCHEMA_TOKENS_FORMAT, "formats": list(FORMATS), "counter": "magicselector.tokens.schema_tokens",
            "tools": {t.id: [schema_tokens(tool_definition(t, f)) for f in FORMATS] for t in catalog}}


def catalog_digest(catalog: Catalog) -> str:
    """The sha256 of the catalog's tool ids in order: the probes hold only for the catalog they were run on."""
    return hashlib.sha256("\n".join(catalog.ids).encode("utf-8")).hexdigest()


def pipeline_probes(selector: Pipeline, turns: Sequence[dict[str, Any]] = PIPELINE_TURNS) -> dict[str, Any]:
    """The ``pipeline`` block of golden.json for ``selector`` (its config must be the shipped one's
    shape: rules decomposer). Given a ``Selector``, raises BundleError where a stage-by-stage run
    disagrees with ``Selector.select``."""
    cases = []
    for turn in turns:
        case = _probe(selector, turn)
        _agrees_with_select(selector, turn["query"], turn.get("history", []), turn, case)
        cases.append(case)
    return {"format": PIPELINE_FORMAT, "config": _config(selector), "catalog_ids_sha256": catalog_digest(selector.catalog),
            "tolerances": dict(TOLERANCES), "turns": cases}


def _config(selector: Pipeline) -> dict[str, Any]:
    from .stages.cut import CutConfig

    cfg, cut = selector.config, selector.config.cut
    if not isinstance(cut, CutConfig):  # a bench rule (bench/cut_rules.py) is no part of a bundle
        raise BundleError(f"golden probes are written for the shipped cut (CutConfig), not {cut.rule!r}")
    return {"history": cfg.history, "history_turns": cfg.history_turns, "candidates": cfg.candidates,
            "decompose": cfg.decompose, "lexical": cfg.lexical, "lexical_weight": cfg.lexical_weight,
            "lexical_candidates": cfg.lexical_candidates, "head": cfg.head and selector.head is not None,
            "cut": {"rule": cut.rule, "k_min": cut.k_min, "k_max": cut.k_max, "range_margin": cut.range_margin,
                    "range_depth": cut.range_depth, "list_range_margin": cut.list_range_margin,
                    "anchor_k_max": cut.anchor_k_max, "min_probability": cut.min_probability},
            "budget": {"max_tools": cfg.max_tools, "max_schema_tokens": cfg.max_schema_tokens},
            "limits": {"max_query_chars": cfg.limits.max_query_chars, "max_history_turns": cfg.limits.max_history_turns,
                       "max_history_chars": cfg.limits.max_history_chars, "max_subtasks": cfg.limits.max_subtasks}}


def _probe(selector: Pipeline, turn: dict[str, Any]) -> dict[str, Any]:
    """One probe turn, stage by stage: the decomposer and the models, then ``replay`` of the rest."""
    plan = selector.plan(turn["query"], turn.get("history", []))  # the decomposer and the history fold
    subtasks, texts, history_list = plan.subtasks, plan.texts, plan.history_list
    tokenizer = selector.embedder.tokenizer
    enc = tokenizer.encode(texts)
    token_ids = [enc["input_ids"][i][enc["attention_mask"][i] == 1].tolist() for i in range(len(texts))]
    vectors = np.asarray(selector.embedder.embed(texts), dtype=np.float32)
    inputs = {"query": turn["query"], "history": list(turn.get("history", [])),
              "max_tools": turn.get("max_tools"), "max_schema_tokens": turn.get("max_schema_tokens"),
              "format": turn.get("format", "mcp")}
    fed = [_f32(v) for v in vectors]
    return {"input": inputs, "subtasks": subtasks, "texts": texts, "history_list": history_list,
            "token_ids": token_ids, "vectors": fed,
            **replay(selector, texts, np.asarray(fed, dtype=np.float32), history_list, inputs)}


def replay(selector: Pipeline, texts: Sequence[str], vectors: np.ndarray, history_list: int | None,
           inputs: dict[str, Any]) -> dict[str, Any]:
    """Every stage after the embedder on these retrieval texts and their vectors, as ``Selector.select``
    runs them: dense search, BM25, their fusion, peak-rank fusion, the cut, the head, the budget."""
    from .stages.fuse import RankedList, peak_rank_fusion
    from .stages.lexical import fuse_lexical

    cfg, index, lexical = selector.config, selector.index, selector.lexical
    search = index.search(vectors, cfg.candidates)
    lists = [RankedList(ids, scores) for ids, scores in search]
    lexical_hits = [_lexical_hits(lexical, text, cfg.lexical_candidates) for text in texts]
    if cfg.lexical:
        lists = fuse_lexical(lists, texts, vectors, index, lexical, weight=cfg.lexical_weight,
                             lexical_candidates=cfg.lexical_candidates, candidates=cfg.candidates)
    fused = peak_rank_fusion(lists)
    pairs = [(lst.ids, lst.scores) for lst in lists]
    order, cut, cut_block = _replay_cut(cfg, pairs, fused, index.ndim)
    order, cut, probability, head_block = _replay_head(selector, pairs, history_list, fused, order, cut)
    ids = [fused.ids[i] for i in order]
    kept, tokens = _replay_budget(selector, inputs, ids, cut.k, lists, bool(probability))
    final = [ids[i] for i in kept]
    scores = np.asarray(fused.scores)[order]
    return {
        "search": [{"ids": list(i), "scores": _f32(s)} for i, s in search],
        "lexical": lexical_hits,
        "lists": [_list_block(lst) for lst in lists],
        "fused": {"ids": list(fused.ids), "scores": _f32(fused.scores), "source": list(fused.source)},
        "cut": cut_block,
        "head": head_block,
        "budget": {"kept": kept, "schema_tokens": tokens},
        "selection": {"ids": final, "k": len(final), "scores": _f32([scores[i] for i in kept])},
    }


def _lexical_hits(lexical: LexicalIndex, text: str, count: int) -> dict[str, Any]:
    """One retrieval text's BM25 hits, as the lexical stage ranks them."""
    lex_ids, lex_scores = lexical.top(lexical.scores(text), count)
    return {"ids": lex_ids, "scores": _f32(lex_scores)}


def _list_block(lst: RankedList) -> dict[str, Any]:
    """One retrieval list after the lexical fusion: ids, scores, and the dense and BM25 parts."""
    return {"ids": list(lst.ids), "scores": _f32(lst.scores),
            "dense": _f32(lst.dense) if lst.dense is not None else None,
            "lexical": _f32(lst.lexical) if lst.lexical is not None else None}


def _replay_cut(cfg: SelectorConfig, pairs: list[tuple[Sequence[str], Any]], fused: Fused, ndim: int
                ) -> tuple[list[int], Cut, dict[str, Any]]:
    """The cut's order and Cut, and its block: with each list's own K on a turn of several lists."""
    from .stages.cut import cut_turn

    per_list = [cfg.cut.apply_list(np.asarray(s), None, anchor=j == 0).k for j, (_, s) in enumerate(pairs)] \
        if len(pairs) > 1 else []
    order, cut = cut_turn(cfg.cut, pairs, fused.ids, fused.scores, lambda ids: np.zeros((len(ids), ndim)))
    return order, cut, {"order": list(order), "k": cut.k, "pool": cut.pool, "per_list_k": per_list}


def _replay_head(selector: Pipeline, pairs: list[tuple[Sequence[str], Any]], history_list: int | None,
                 fused: Fused, order: list[int], cut: Cut
                 ) -> tuple[list[int], Cut, dict[str, float], dict[str, Any] | None]:
    """The learned head's order and Cut, each fused tool's probability and the head's block, where
    the bundle has a head and the configuration runs it; else the cut's, unchanged."""
    from .stages.head import head_cut, head_features

    if selector.head is None or not selector.config.head:
        return order, cut, {}, None
    rows = head_features(pairs, history_list, fused.ids, fused.scores, selector.head.depth)
    probs = selector.head.probabilities(rows)
    order, k = head_cut(probs, order, cut, selector.config.cut)
    cut = type(cut)(k, cut.k_score, cut.k_sim, f"{cut.rule}+head", cut.pool)
    probability = dict(zip(fused.ids, map(float, probs)))
    return order, cut, probability, {"features": [_f64(r) for r in rows], "probabilities": _f64(probs),
                                     "order": list(order), "k": k}


def _replay_budget(selector: Pipeline, inputs: dict[str, Any], ids: list[str], k: int, lists: Sequence[RankedList],
                   by_probability: bool) -> tuple[list[int], int | None]:
    """The positions the probe's budget keeps, and the schema tokens they spend (where it bounds tokens);
    a bound the probe leaves out is the config's, as in ``select``."""
    from .stages.budget import spend_budget

    budget = selector.config.budget(inputs.get("max_tools"), inputs.get("max_schema_tokens"), inputs.get("format", "mcp"))
    kept = spend_budget(budget, ids, k, [lst.ids for lst in lists], lambda t: tool_tokens(selector, t, budget.format),
                        by_probability)
    tokens = sum(tool_tokens(selector, ids[i], budget.format) for i in kept) \
        if budget.max_schema_tokens is not None else None
    return kept, tokens


def tool_tokens(selector: Pipeline, tool_id: str, format: str) -> int:
    """The definition size of one tool of the selector's catalog in ``format``."""
    from .formats import tool_definition
    from .tokens import schema_tokens

    return schema_tokens(tool_definition(selector.catalog.get(tool_id), format))


def _agrees_with_select(selector: Pipeline, query: str, history: Any, budget: dict[str, Any],
                        case: dict[str, Any]) -> None:
    """Where ``selector`` composes the stages itself (a ``Selector``), its answer must be the stages'."""
    select = getattr(selector, "select", None)
    if select is None:
        return
    sel = select(query, history, max_tools=budget.get("max_tools"), max_schema_tokens=budget.get("max_schema_tokens"),
                 format=budget.get("format", "mcp"))
    if sel.ids != case["selection"]["ids"] or sel.k != case["selection"]["k"] or list(sel.subtasks) != case["subtasks"]:
        raise BundleError(f"golden pipeline probe {query!r:.60}: the stages give {case['selection']['ids']} "
                          f"but Selector.select gives {sel.ids}")


def check_pipeline(selector: Pipeline, block: dict[str, Any]) -> dict[str, Any]:
    """Re-run every probe turn's stages with ``selector`` (the later ones from the written vectors)
    and compare within ``block['tolerances']``; raises BundleError naming the turn and stage."""
    if block.get("format") != PIPELINE_FORMAT:
        raise BundleError(f"golden pipeline: format {block.get('format')!r}, expected {PIPELINE_FORMAT!r}")
    if block.get("catalog_ids_sha256") != catalog_digest(selector.catalog):
        return {"golden_pipeline": "skipped: the catalog changed since the probes were written"}
    tol = {**TOLERANCES, **block.get("tolerances", {})}
    worst_cos = 1.0
    for n, case in enumerate(block["turns"]):
        where = f"golden pipeline turn {n} ({case['input']['query']!r:.40})"
        plan = selector.plan(case["input"]["query"], case["input"]["history"])
        _same(where, "subtasks", plan.subtasks, case["subtasks"])
        _same(where, "texts", plan.texts, case["texts"])
        enc = selector.embedder.tokenizer.encode(case["texts"])
        _same(where, "token_ids", [enc["input_ids"][i][enc["attention_mask"][i] == 1].tolist()
                                   for i in range(len(case["texts"]))], case["token_ids"])
        fed = np.asarray(case["vectors"], dtype=np.float32)
        got = np.asarray(selector.embedder.embed(case["texts"]), dtype=np.float32)
        worst_cos = min(worst_cos, float(np.min(np.sum(got * fed, axis=1))))
        if worst_cos < tol["vector_cosine_min"]:
            raise BundleError(f"{where}: vectors differ (cosine {worst_cos:.5f} < {tol['vector_cosine_min']})")
        compare_replay(where, replay(selector, case["texts"], fed, case["history_list"], case["input"]), case, tol)
        head_on_written(where, selector, case, tol)
        if np.all(np.sum(got * fed, axis=1) >= 1.0 - 1e-6):  # the same vectors: the composed select must agree
            _agrees_with_select(selector, case["input"]["query"], case["input"]["history"], case["input"], case)
    return {"golden_pipeline_turns": len(block["turns"]), "golden_pipeline_min_cosine": round(worst_cos, 6)}


def compare_replay(where: str, got: dict[str, Any], want: dict[str, Any], tol: dict[str, float]) -> None:
    """A replayed turn against the written one: ids, order and K exact, scores within ``tol``; the
    head's numbers are ``head_on_written``'s to check, its order and K are checked here."""
    s = tol["score_abs"]
    for j, (g, w) in enumerate(zip(got["search"], want["search"])):
        _ranked(where, f"search[{j}]", g, w, s)
    for j, (g, w) in enumerate(zip(got["lexical"], want["lexical"])):
        _ranked(where, f"lexical[{j}]", g, w, s)
    for j, (g, w) in enumerate(zip(got["lists"], want["lists"])):
        _ranked(where, f"lists[{j}]", g, w, s)
    _ranked(where, "fused", got["fused"], want["fused"], s)
    _same(where, "fused.source", got["fused"]["source"], want["fused"]["source"])
    _same(where, "cut", got["cut"], want["cut"])
    if (got["head"] is None) != (want["head"] is None):
        raise BundleError(f"{where}: head: ran {'not ' if got['head'] is None else ''}but the probe says otherwise")
    if got["head"] is not None:
        _same(where, "head.order", got["head"]["order"], want["head"]["order"])
        _same(where, "head.k", got["head"]["k"], want["head"]["k"])
    _same(where, "budget", got["budget"], want["budget"])
    _same(where, "selection.ids", got["selection"]["ids"], want["selection"]["ids"])


def head_on_written(where: str, selector: Pipeline, case: dict[str, Any], tol: dict[str, float]) -> None:
    """The head's features and probabilities of one written turn, computed from its written lists and
    fused list (the stage's own input, as the later stages run on the written vectors), against the
    written ones. Not from a replay's own scores: a port's (or another CPU's) float32 search, cosine
    and BM25 sums differ from these in their last bits, and the features subtract fused scores and
    divide each list's gaps by its spread after the lexical mix divided the cosines by their standard
    deviation; on a model whose scores lie close together (a barely trained checkpoint) a 3e-7 search
    difference reached 1.5e-5 on a feature and 4e-6 on a probability in the native core (issue 48).
    The replay's order and K, which those probabilities give, stay exact (``compare_replay``)."""
    from .stages.head import head_features

    if case["head"] is None or selector.head is None:
        return
    lists = [(list(lst["ids"]), np.asarray(lst["scores"], dtype=np.float32)) for lst in case["lists"]]
    rows = head_features(lists, case["history_list"], case["fused"]["ids"],
                         np.asarray(case["fused"]["scores"], dtype=np.float32), selector.head.depth)
    _close(where, "head.features", rows, case["head"]["features"], tol["feature_abs"], tol.get("feature_rel", 0.0))
    _close(where, "head.probabilities", selector.head.probabilities(rows), case["head"]["probabilities"],
           tol["probability_abs"])


def _ranked(where: str, stage: str, got: dict[str, Any], want: dict[str, Any], tol: float) -> None:
    _same(where, f"{stage}.ids", list(got["ids"]), list(want["ids"]))
    _close(where, f"{stage}.scores", got["scores"], want["scores"], tol)


def _same(where: str, stage: str, got: Any, want: Any) -> None:
    if got != want:
        raise BundleError(f"{where}: {stage} differs: got {str(got)[:200]}, expected {str(want)[:200]}")


def _close(where: str, stage: str, got: Any, want: Any, tol: float, rel: float = 0.0) -> None:
    """|got - want| <= tol + rel * max(|got|, |want|) everywhere, with the same shape."""
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        raise BundleError(f"{where}: {stage} differ in shape: got {g.shape}, expected {w.shape}")
    excess = np.abs(g - w) - (tol + rel * np.maximum(np.abs(g), np.abs(w)))
    if g.size and float(np.max(excess)) > 0:
        at = np.unravel_index(int(np.argmax(excess)), g.shape)
        raise BundleError(f"{where}: {stage} differ beyond {tol}" + (f" + {rel} x magnitude" if rel else "")
                          + f" at {list(map(int, at))}: got {g[at]!r}, expected {w[at]!r}")


def shipped_pipeline_probes(catalog: Catalog, embedder: Any, index: Any, lexical: Any, head_file: Any = None
                            ) -> dict[str, Any]:
    """``pipeline_probes`` of a bundle being built: the shipped ``SelectorConfig()`` over its parts
    (``head_file``: the bundle's head.json, None where it has none)."""
    from .stages.head import HeadModel

    head = HeadModel.from_bytes(head_file.read_bytes(), str(head_file)) if head_file is not None else None
    return pipeline_probes(PipelineParts(catalog, embedder, index, lexical, head))

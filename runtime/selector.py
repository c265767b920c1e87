"""The Selector: decompose -> embed -> search + lexical -> fuse -> cut + learned head -> budget, with per-stage timings."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from .bundle import Bundle
from .catalog import Catalog, Tool
from .live_catalog import LiveCatalog
from .plan import RetrievalPlan, plan_turn
from .config import SelectorConfig
from .errors import BundleError, InputError
from .stages.budget import Budget, kept_first, spend_budget
from .stages.cut import Cut, cut_turn
from .decompose import BUILT_IN, DecomposeTrace, Decomposer, LlmSettings, build_decomposer
from .stages.embed import Embedder
from .stages.fuse import RankedList, peak_rank_fusion
from .stages.head import HeadModel, head_cut, head_features
from .stages.index import ToolIndex
from .stages.lexical import LexicalIndex, fuse_lexical
from .targets import warn_if_other_target
from .tool_vectors import catalog_index


@dataclass(frozen=True)
class SelectedTool:
    """One kept tool and why it was kept: the retrieval list where it ranked best (``list``: 0 is
    the utterance, then the sub-tasks and the history-folded utterance, ``Selection.lists``), its
    rank there and the parts of its score there (``dense`` cosine, ``lexical`` BM25; None where that
    list was not fused from both), and its calibrated relevance probability where a model gives one."""

    id: str
    name: str
    score: float
    subtask: str  # the text of that list: the sub-task (or the utterance itself)
    list: int = 0
    rank: int | None = None
    dense: float | None = None
    lexical: float | None = None
    probability: float | None = None

    def why(self) -> dict[str, Any]:
        def part(x: float | None) -> float | None:
            return None if x is None else round(float(x), 6)

        return {"list": self.list, "text": self.subtask, "rank": self.rank, "dense": part(self.dense),
                "lexical": part(self.lexical), "probability": part(self.probability)}


@dataclass(frozen=True)
class Ranking:
    """A turn's retrieval before the cut (``Selector.rank``): what every cut and the learned head
    read. ``texts``: the texts retrieved with (the utterance, its sub-tasks, the history-folded
    utterance; ``history_list`` says which is the last, None: none); ``lists``: each text's ranked
    list after the lexical fusion; ``ids`` / ``scores`` / ``source``: the fused list, each tool's
    best list; ``catalog``: the catalog the turn searched, ``version`` its ``catalog_version``."""

    texts: list[str]
    lists: list[RankedList]
    ids: list[str]
    scores: np.ndarray
    source: list[int]
    history_list: int | None
    subtasks: list[str]
    catalog: Catalog
    version: int
    trace: DecomposeTrace
    vectors: Callable[[list[str]], np.ndarray] | None = None  # listed tools' vectors, where the cut reads them


@dataclass(frozen=True)
class Selection:
    """What the Selector chose for one turn; its tools' definitions (``Selector.schemas``) come
    from the catalog the turn searched (``catalog``), whatever changed since."""

    tools: list[SelectedTool]
    k: int
    cut: Cut
    subtasks: list[str]
    candidates: int
    timings_ms: dict[str, float]
    decomposer: str = "none"
    ranked_ids: list[str] = field(default_factory=list)  # the whole ranked list after the cut
    ranked_scores: list[float] = field(default_factory=list)
    # how many add_tool / remove_tool calls the Selector had applied when this turn searched: two
    # selections with the same version saw the same catalog
    catalog_version: int = 0
    trace: DecomposeTrace = field(default_factory=DecomposeTrace)  # how the decomposer got the sub-tasks
    budget: Budget = field(default_factory=Budget)  # the caller's bound on the tools; k is within it
    # tokens of the kept tools' definitions in budget.format (counted where a token budget was set)
    schema_tokens: int | None = None
    ranking: Ranking | None = field(default=None, repr=False)  # the retrieval the cut read

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.tools]

    @property
    def catalog(self) -> Catalog | None:
        """The catalog this turn searched (None: a Selection made by hand)."""
        return self.ranking.catalog if self.ranking is not None else None

    @property
    def retrieved_texts(self) -> list[str]:
        """Every text retrieved with: the utterance, the sub-tasks, the history-folded utterance."""
        return list(self.ranking.texts) if self.ranking is not None else []

    @property
    def lists(self) -> list[tuple[str, list[str], list[float]]]:
        """Per retrieval list (utterance anchor first, then each sub-task), after the fusion: (text,
        ids, scores), what the cut saw; built when read (analysis: bench/cut_curve.py)."""
        if self.ranking is None:
            return []
        return [(text, list(lst.ids), [float(x) for x in lst.scores])
                for text, lst in zip(self.ranking.texts, self.ranking.lists)]

    @property
    def history_list(self) -> int | None:
        """Which of ``lists`` is the history-folded utterance (None: none)."""
        return self.ranking.history_list if self.ranking is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tools": [{"id": t.id, "name": t.name, "score": round(float(t.score), 6), "subtask": t.subtask,
                       "why": t.why()} for t in self.tools],
            "k": self.k,
            "cut": {"rule": self.cut.rule, "k_score": self.cut.k_score, "k_sim": self.cut.k_sim},
            "subtasks": list(self.subtasks),
            "retrieved_texts": self.retrieved_texts,
            "candidates": self.candidates,
            "decomposer": self.decomposer,
            "decomposition": self.trace.to_dict(),
            "budget": {"max_tools": self.budget.max_tools, "max_schema_tokens": self.budget.max_schema_tokens,
                       "format": self.budget.format},
            "schema_tokens": self.schema_tokens,
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }


class _Timer:
    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t0 = time.perf_counter()

    def lap(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.ms[stage] = self.ms.get(stage, 0.0) + (now - since) * 1e3
        return now

    def total(self) -> None:
        self.ms["total"] = (time.perf_counter() - self._t0) * 1e3


class Selector:
    """Selects the tools a phone assistant needs for a dialogue turn.

    One Selector can be shared across threads: inference sessions are thread-safe, and catalog
    changes (add_tool / remove_tool) swap the catalog under a lock. Selectors made from it by
    ``with_config`` share its catalog and indexes (``live``, a ``LiveCatalog``).
    """

    def __init__(self, catalog: Catalog, embedder: Embedder, index: ToolIndex,
                 config: SelectorConfig | None = None, decomposer: Decomposer | None = None,
                 bundle: Bundle | None = None, lexical: LexicalIndex | None = None, head: HeadModel | None = None, *,
                 live: LiveCatalog | None = None) -> None:
        self.config = config or SelectorConfig()
        self.embedder = embedder
        self.decomposer = decomposer or _decomposer_for(self.config, bundle=bundle)
        self.bundle = bundle
        self.head = head  # the learned head (stages/head.py), where the bundle has one
        self.live = live if live is not None else LiveCatalog(catalog, index, lexical)

    @property
    def catalog(self) -> Catalog:
        """The catalog as it is now (``add_tool`` / ``remove_tool`` replace it)."""
        return self.live.catalog

    @property
    def index(self) -> ToolIndex:
        return self.live.index

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_bundle(cls, path: str | Path | None = None, config: SelectorConfig | None = None,
                    verify: bool = True, progress: bool = False, public_key: Any = None,
                    min_release: int | None = None) -> "Selector":
        """Load a bundle folder (the default bundle, built on first use, when ``path`` is None).

        Every model, index, catalog and lexical file is read once, checked against the manifest
        (with ``verify``) and loaded from those bytes now (``magicselector.sections.load_artifacts``):
        a damaged or missing file is a BundleError naming it, and nothing is opened again later, so
        a rebuild of the folder does not disturb a running Selector. ``public_key`` (an Ed25519
        public key: PEM file, or its 32 raw bytes or their base64): the bundle must be signed by it
        (``magicselector.signing``), else BundleError; its files are then always checked against
        the signed manifest, whatever ``verify`` says. ``min_release``: refuse a bundle whose
        manifest's ``release`` is lower (a rollback to an older bundle)."""
        from .sections import load_artifacts

        config = config or SelectorConfig()
        if path is None:
            from .default_bundle import ensure_default_bundle

            path = ensure_default_bundle(progress=progress)
        verify = verify or public_key is not None
        for attempt in range(3):  # a rebuild swapping the folder mid-load: read the new one from the start
            bundle = Bundle.open(path, verify=False, public_key=public_key, min_release=min_release)
            try:
                parts = load_artifacts(bundle, threads=config.threads, verify=verify)
                break
            except BundleError:
                if attempt == 2 or not bundle.changed_on_disk():
                    raise
        warn_if_other_target(bundle.manifest.get("target"), bundle.path)
        dec = bundle.section("decomposer")
        if dec and config.llm.model is None:
            # the bundle's own decomposer (and the prompt it was trained with) replaces the pinned default
            config = replace(config, llm=replace(config.llm, model=str(bundle.file(dec["file"])),
                                                 prompt=dec.get("prompt", "few_shot")))
        return cls(parts.catalog, parts.embedder, parts.index, config=config, bundle=bundle,
                   lexical=parts.lexical, head=parts.head)

    def with_config(self, **changes: Any) -> "Selector":
        """A Selector sharing this one's models and index, with some settings changed."""
        config = replace(self.config, **changes)
        return Selector(self.catalog, self.embedder, self.index, config=config, bundle=self.bundle,
                        decomposer=_decomposer_for(config, self.decomposer, self.bundle), head=self.head,
                        live=self.live)

    def with_catalog(self, catalog: Catalog, config: SelectorConfig | None = None) -> "Selector":
        """A Selector over another catalog sharing this one's embedder and head; the catalog's
        tool vectors are cached on disk by the embedder's ``vectors_key`` (the bytes a bundle opened
        it from) and the tool texts (``tool_vectors``), so an embedder put in by hand, whatever the
        bundle, never reads another model's vectors."""
        key = getattr(self.embedder, "vectors_key", "")
        index = catalog_index(self.embedder, catalog, key, self.index.dtype)  # in batches, bounded memory
        config = config or self.config
        # else built on first use
        lexical = LexicalIndex.from_catalog(catalog, **self.live.lexical_params) if config.lexical else None
        return Selector(catalog, self.embedder, index, config=config, bundle=self.bundle,
                        lexical=lexical, head=self.head)

    # -- catalog changes at run time ------------------------------------------------------------
    def add_tool(self, tool: Tool) -> None:
        """Add a tool, or replace the tool with the same id, without rebuilding anything."""
        self.live.add(tool, self.embedder.embed)

    def remove_tool(self, tool_id: str) -> None:
        self.live.remove(tool_id)

    @property
    def catalog_version(self) -> int:
        """How many tools have been added or removed at run time (``Selection.catalog_version``)."""
        return self.live.version

    @property
    def lexical(self) -> LexicalIndex:
        """The BM25 index of the catalog's tool texts (the bundle's, else built on first use)."""
        return self.live.lexical_index()

    # -- selection ----------------------------------------------------------------------------
    def plan(self, query: str, history: Iterable[Any] | None = ()) -> RetrievalPlan:
        """What ``select(query, history)`` retrieves with, before any model runs (``plan.plan_turn``:
        the checked utterance and bounded history, the decomposition and the retrieval texts)."""
        return plan_turn(self.config, self.decomposer, query, history)

    def retrieval_texts(self, query: str, history: Iterable[Any] | None = None) -> list[str]:
        """The texts ``select(query, history)`` embeds, one retrieval list each, in its order
        (``plan``; runs the decomposer, not the models)."""
        return self.plan(query, history).texts

    def rank(self, query: str, history: Iterable[Any] | None = ()) -> Ranking:
        """The turn's retrieval before the cut: decompose, embed, search + lexical and fuse
        (``Ranking``); what ``select`` cuts, and what the bench and the head's trainer read to
        re-apply cuts offline (or to score another stage on top: bench/experiments)."""
        return self._rank(query, history, _Timer())

    def _rank(self, query: str, history: Iterable[Any] | None, timer: _Timer) -> Ranking:
        t = time.perf_counter()
        plan = self.plan(query, history)
        trace = plan.decomposition.trace
        t = timer.lap("decompose", t)
        if trace.load_ms > 0:  # the one-off model load is reported on its own
            timer.ms["decompose_load"] = trace.load_ms
            timer.ms["decompose"] = max(0.0, timer.ms["decompose"] - trace.load_ms)
        texts = plan.texts
        vectors = self.embedder.embed(texts)
        timer.lap("embed", t)
        catalog, version, lists, vectors_of = self._retrieve(texts, vectors, timer)
        t = time.perf_counter()
        fused = peak_rank_fusion(lists)
        ids, scores, source = fused.ids, np.asarray(fused.scores), fused.source
        timer.lap("fuse", t)
        return Ranking(texts, lists, ids, scores, source, plan.history_list, plan.subtasks, catalog, version,
                       trace, vectors_of)

    def select(self, query: str, history: Iterable[Any] | None = (), *, max_tools: int | None = None,
               max_schema_tokens: int | None = None, format: str = "mcp") -> Selection:
        """The tools for one turn: ``query`` (the user's utterance) after ``history`` (chat messages,
        oldest first). ``max_tools`` / ``max_schema_tokens`` (default: the config's) bound what is
        kept, the tokens counted for the definitions in ``format`` (``stages/budget.py``)."""
        budget = self.config.budget(max_tools, max_schema_tokens, format)
        timer = _Timer()
        ranking = self._rank(query, history, timer)
        t = time.perf_counter()
        order, cut, probability = self._cut(ranking)
        ids, scores, source = ([ranking.ids[i] for i in order], ranking.scores[order],
                               [ranking.source[i] for i in order])
        t = timer.lap("cut", t)
        ids, scores, source, k, tokens = self._spend(budget, ids, scores, source, cut.k, ranking,
                                                     by_probability=bool(probability))
        if budget.bounded:
            timer.lap("budget", t)
        chosen = [_selected(ranking, i, s, src, probability.get(i))
                  for i, s, src in zip(ids[:k], scores[:k], source[:k])]
        timer.total()
        return Selection(tools=chosen, k=k, cut=cut, subtasks=ranking.subtasks, candidates=len(ids), budget=budget,
                         schema_tokens=tokens, timings_ms=timer.ms, decomposer=self.decomposer.name,
                         ranked_ids=ids, ranked_scores=scores.tolist(), catalog_version=ranking.version,
                         trace=ranking.trace, ranking=ranking)

    def _cut(self, ranking: Ranking) -> tuple[list[int], Cut, dict[str, float]]:
        """The cut on the turn's lists (``cut_turn``) and, where the bundle has a learned head, the
        head's order and K of what it kept; with each scored tool's probability."""
        pairs = [(lst.ids, lst.scores) for lst in ranking.lists]
        order, cut = cut_turn(self.config.cut, pairs, ranking.ids, ranking.scores, ranking.vectors)
        if self.head is None or not self.config.head:
            return order, cut, {}
        rows = head_features(pairs, ranking.history_list, ranking.ids, ranking.scores, self.head.depth)
        probs = self.head.probabilities(rows)
        order, k = head_cut(probs, order, cut, self.config.cut)
        return order, replace(cut, k=k, rule=f"{cut.rule}+head"), dict(zip(ranking.ids, map(float, probs)))

    def _retrieve(self, texts: list[str], vectors: np.ndarray, timer: _Timer
                  ) -> tuple[Catalog, int, list[RankedList], Callable[[list[str]], np.ndarray] | None]:
        """Dense search and the lexical fusion, the only steps that read the mutable index, under
        the catalog lock; with them the catalog they saw and, where the cut reads tool vectors,
        those of every listed tool, so that the cut runs outside the lock on one
        consistent state (a concurrent remove_tool cannot take a listed tool away mid-turn)."""
        with self.live.lock:
            t = time.perf_counter()
            catalog, index, version = self.live.catalog, self.live.index, self.live.version
            results = index.search(vectors, self.config.candidates)
            t = timer.lap("search", t)
            lists = [RankedList(ids, scores) for ids, scores in results]
            if self.config.lexical:  # BM25 fused into each dense list
                lists = fuse_lexical(lists, texts, vectors, index, self.lexical, weight=self.config.lexical_weight,
                                     lexical_candidates=self.config.lexical_candidates,
                                     candidates=self.config.candidates)
                t = timer.lap("lexical", t)
            if not self.config.cut.uses_embeddings:
                return catalog, version, lists, None
            listed = list(dict.fromkeys(i for lst in lists for i in lst.ids))
            table = dict(zip(listed, index.vectors(listed))) if listed else {}
            timer.lap("search", t)
        dim = index.ndim
        return catalog, version, lists, (lambda ids: np.asarray([table[i] for i in ids], dtype=np.float32)
                                         if len(ids) else np.zeros((0, dim), dtype=np.float32))

    def _spend(self, budget: Budget, ids: list[str], scores: np.ndarray, source: list[int], k: int,
               ranking: Ranking, by_probability: bool = False
               ) -> tuple[list[str], np.ndarray, list[int], int, int | None]:
        """The budget on the cut's K tools: the kept ones move to the head, in ranked order."""
        if not budget.bounded:
            return ids, scores, source, k, None

        def cost(tid: str) -> int:
            return self.live.schema_tokens(ranking.catalog.get(tid), budget.format)

        kept = spend_budget(budget, ids, k, [lst.ids for lst in ranking.lists], cost, by_probability)
        order = kept_first(kept, len(ids))
        tokens = sum(cost(ids[i]) for i in kept) if budget.max_schema_tokens is not None else None
        return [ids[i] for i in order], np.asarray(scores)[order], [source[i] for i in order], len(kept), tokens

    def schemas(self, selection: Selection, format: str = "mcp") -> list[dict[str, Any]]:
        """The definitions of the selected tools to hand to the assistant's LLM, in ``format``:
        ``mcp`` (the MCP tool), ``openai`` (Chat Completions), ``openai-responses`` or ``anthropic``
        (``magicselector.formats``). The definitions are those of the catalog the turn searched
        (``Selection.catalog``): a tool removed or replaced since comes back as the turn saw it."""
        from .formats import tool_definitions

        catalog = selection.catalog if selection.catalog is not None else self.catalog
        return tool_definitions([catalog.get(t.id) for t in selection.tools], format)

    def save(self, path: str | Path, signing_key: Any = None, release: int | None = None) -> dict[str, Any]:
        """Write this Selector's catalog as it is now (tools added or removed at run time included),
        its index and its lexical index as a bundle at ``path`` (which may be the folder it was
        loaded from), with the models and probes of the bundle it was loaded from; returns the
        manifest. The folder is built aside, signed with ``signing_key`` (an Ed25519 private key)
        when given, and swapped into place, so ``path`` holds the old bundle or the complete new
        one, never a part. ``release``: ``magicselector.bundle_writer.resolve_release``.
        ``Selector.from_bundle(path)`` then selects exactly as this Selector does."""
        if self.bundle is None:
            raise InputError("save: this Selector was not loaded from a bundle, so it has no model files to write")
        return self.live.save(self.bundle, path, signing_key=signing_key, release=release)


# -- bounds, decomposer and cut helpers -----------------------------------------------------------
def _decomposer_for(config: SelectorConfig, current: Decomposer | None = None,
                    bundle: Bundle | None = None) -> Decomposer:
    """The decomposer a config asks for. A decomposer the caller handed in stays while the config
    asks for none; otherwise the LLM of ``current`` (loaded or not) is kept when it was built with
    the same model settings (``build_decomposer``'s ``reuse``). The bundle's own GGUF loads only
    with the sha256 its manifest lists, checked on the file that is opened (``files.pinned_file``)."""
    if current is not None and not isinstance(current, BUILT_IN) and config.decompose == "none":
        return current
    sha256 = None
    dec = bundle.section("decomposer") if bundle is not None else None
    if bundle is not None and dec and config.llm.model == str(bundle.file(dec["file"])):
        sha256 = bundle.sha256_of(dec["file"])
    llm = LlmSettings(model=config.llm.model, prompt=config.llm.prompt, threads=config.llm.threads,
                      n_ctx=config.llm.ctx, sha256=sha256)
    return build_decomposer(config.decompose, deadline_ms=config.llm.deadline_ms, llm=llm, reuse=current)


def _selected(ranking: Ranking, tool_id: str, score: float, src: int, probability: float | None = None
              ) -> SelectedTool:
    """A kept tool with why it was kept: its evidence in the list where it ranked best."""
    rank, dense, lexical = ranking.lists[src].evidence(tool_id) or (None, None, None)
    return SelectedTool(tool_id, ranking.catalog.get(tool_id).name, float(score), ranking.texts[src], list=src,
                        rank=rank, dense=dense, lexical=lexical, probability=probability)

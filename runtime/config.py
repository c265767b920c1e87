"""``SelectorConfig`` (``SelectorConfig()`` is the shipped product), the shipped cut and the modes; frozen."""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass, field

from .errors import InputError
from .stages.cut import CutConfig
from .decompose.prompts import PROMPT_STYLES

HISTORY_MODES = ("none", "user", "all")
# The shipped cut: keep the tools within 82.5 % of the score range of the list's first 15 below the
# top score. range_margin was chosen on the generated dev split (mean K <= 8) over the reranked
# scores; how it compares with a fixed k and the paper's Algorithm 2 is in docs/bench/reranker.md.
DEFAULT_CUT = CutConfig(rule="rmargin", range_margin=0.825, range_depth=15)
DECOMPOSE_MODES = ("none", "rules", "llm", "auto")
# Variants that lost on the development sets (docs/bench/defaults.md): setting one away from the
# shipped value still works in this release, with a DeprecationWarning; the next release drops it.
LOSING_VARIANTS = {"fusion": "peak", "rerank_scope": "turn", "rerank_min_margin": None, "cut_scope": "subtask",
                   "lexical_fusion": "zmix"}


@dataclass(frozen=True)
class SelectorConfig:
    """How a Selector turns a dialogue turn into a tool list; ``SelectorConfig()`` is the shipped product.

    The shipped defaults (history ``all``, rules decomposition, the lexical channel fused by
    z-score mix at weight 0.15, no rerank) were chosen on the mean NDCG@10 over every development
    set's evaluation part (generated test and test_ood, bfcl and metatool tool-disjoint). With the
    shipped embedder (fine-tuned on the generated and public train parts) the cross-encoder adds
    less than the +0.02 mean the product asks of it and loses on the public sets, so it is off by
    default (the tables and the commands: docs/bench/defaults.md). ``rerank=True`` turns it on:
    once per turn over the fused list's top 10, on the turns where retrieval is unsure
    (``rerank_skip_margin``), no gate.

    history: what of the dialogue the retrieval query carries: ``none`` (the utterance only),
      ``user`` (plus earlier user turns) or ``all`` (plus the whole dialogue).
    candidates: how many tools each retrieval list returns before fusion and the cut.
    rerank: run the bundle's cross-encoder (when it has one) over the top ``rerank_candidates``
      tools, once per turn over the fused list (``rerank_scope="turn"``) or over each retrieval
      list (``"list"``); with the turn scope the adaptive cut then runs on the reranked fused list.
      ``rerank_min_margin`` is the gate: the cross-encoder's order counts only where its best
      logit leads the runner-up by that much, else the retrieval order stands (None: no gate).
      ``rerank_skip_margin`` decides before the cross-encoder runs (turn scope): where the fused
      list's top tool leads the runner-up by at least that much, retrieval is sure and the turn
      costs no rerank (None: every turn reranks). The shipped 0.3 (fused-score units of the shipped
      fusion) reranks about a quarter of the development turns, with the same mean NDCG@10 gain as
      reranking all of them and a smaller loss on the set it hurts most.
      ``rerank_weight`` mixes its z-scored logits with the z-scored
      retrieval similarity (1.0 = cross-encoder alone). The default 0.5 weighs the two equally:
      the shipped cross-encoder alone loses to retrieval on tools unlike its training data
      (bfcl, metatool, the held-out domains), the equal mix gains on all of them
      (docs/bench/reranker.md).
    decompose: ``none`` (passthrough), ``rules`` (clause split + elliptical carry-over, no model),
      ``llm`` (the GGUF decomposer, ``decomposer_model`` or the pinned default; ``llm_threads``,
      ``llm_ctx``) or ``auto`` (the LLM only for multi-clause, long or elliptical turns, abandoned
      for the rules past ``decompose_deadline_ms``). The LLM loads on first use.
    cut_scope: with several retrieval lists (a decomposed turn), the adaptive cut runs on each list
      and the kept tools are united (``subtask``, default) or it runs once on the fused list
      (``fused``). On the generated dev split ``subtask`` beat a fixed K of the same mean K and
      ``fused`` did not (docs/bench/decomposition.md).
    Bounds, so that the work of one ``select`` is bounded whatever the input (the measured worst
    case is in docs/bench/robustness.md): an utterance longer than ``max_query_chars`` is refused
    (InputError); of the history, only the last ``max_history_turns`` turns are read, and of those
    only the most recent ``max_history_chars`` characters (older turns dropped, the oldest kept
    one clipped at its start); at most ``max_subtasks`` sub-tasks are retrieved (the decomposer's
    first ones). ``history_turns`` is how many of the considered turns a history mode folds into
    the retrieval text.
    """

    history: str = "all"
    history_turns: int = 4
    candidates: int = 30
    cut: CutConfig = field(default_factory=lambda: DEFAULT_CUT)
    fusion: str = "peak"
    rerank: bool = False
    rerank_candidates: int = 10
    rerank_weight: float = 0.5
    # turn: one cross-encoder call per turn over the fused list's head, each tool paired with the
    # text of the list it came from (a decomposed turn costs what a plain one does); list: each
    # retrieval list's head reranked on its own before the fusion
    rerank_scope: str = "turn"
    # the rerank gate (Selector._confident): a margin m keeps the cross-encoder's order only where
    # its best logit leads the runner-up by m. None reranks every turn: with the shipped models
    # every margin tried lowered the mean (docs/bench/defaults.md)
    rerank_min_margin: float | None = None
    # the rerank skip (Selector._retrieval_sure): the turn scope's cross-encoder runs only where the
    # fused list's top tool leads the runner-up by less than this; None reranks every turn
    rerank_skip_margin: float | None = 0.3
    threads: int = 1
    max_query_chars: int = 16_000
    # the bounds on one turn's work (see the docstring): history turns and characters considered,
    # sub-tasks retrieved
    max_history_turns: int = 32
    max_history_chars: int = 16_000
    max_subtasks: int = 8
    # decomposition (see decompose/): none | rules | llm | auto (gated, with a deadline)
    decompose: str = "rules"
    decomposer_model: str | None = None  # a GGUF path; None = the bundle's, else the pinned default (chunk packages)
    # few_shot for an instruction model (the default Qwen); zero_shot for one trained on the task
    # (a bundle's decomposer says which it was trained with)
    decomposer_prompt: str = "few_shot"
    decompose_deadline_ms: float | None = 1500.0  # auto only: past it, fall back to the rules
    llm_threads: int = 2
    llm_ctx: int = 2048
    cut_scope: str = "subtask"  # adaptive cut per sub-task list then union (measured), or on the fused list
    # the lexical channel (stages/lexical.py): BM25 over the tool texts, fused into every dense list
    # (the utterance and each sub-task) before the rerank; lexical_weight is its share in the
    # fusion (rrf: weighted reciprocal ranks; zmix: weighted z-scores of cosine and BM25);
    # lexical_candidates: BM25 hits per list that enter the fusion
    lexical: bool = True
    lexical_fusion: str = "zmix"
    lexical_weight: float = 0.15
    lexical_candidates: int = 30
    # the caller's budget (stages/budget.py): the cut never keeps more tools, or more tokens of tool
    # definitions (counted in the format select is asked for); None: only the cut decides
    max_tools: int | None = None
    max_schema_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.history not in HISTORY_MODES:
            raise InputError(f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        if self.candidates < 1:
            raise InputError("candidates must be >= 1")
        for name in ("history_turns", "max_query_chars", "max_history_turns", "max_history_chars", "max_subtasks"):
            if not isinstance(getattr(self, name), numbers.Integral) or getattr(self, name) < 1:
                raise InputError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.fusion not in ("peak", "rrf"):
            raise InputError(f"fusion must be 'peak' or 'rrf', got {self.fusion!r}")
        if self.rerank_candidates < 1:
            raise InputError("rerank_candidates must be >= 1")
        if self.rerank_min_margin is not None and not (isinstance(self.rerank_min_margin, numbers.Real)
                                                        and self.rerank_min_margin >= 0):
            raise InputError(f"rerank_min_margin must be a number >= 0 or None, got {self.rerank_min_margin!r}")
        if self.rerank_skip_margin is not None and not (isinstance(self.rerank_skip_margin, numbers.Real)
                                                         and self.rerank_skip_margin >= 0):
            raise InputError(f"rerank_skip_margin must be a number >= 0 or None, got {self.rerank_skip_margin!r}")
        if self.rerank_scope not in ("turn", "list"):
            raise InputError(f"rerank_scope must be 'turn' or 'list', got {self.rerank_scope!r}")
        if not 0.0 <= self.rerank_weight <= 1.0:
            raise InputError("rerank_weight must be within [0, 1]")
        if self.threads < 1:
            raise InputError("threads must be >= 1")
        if self.decompose not in DECOMPOSE_MODES:
            raise InputError(f"decompose must be one of {DECOMPOSE_MODES}, got {self.decompose!r}")
        if self.decompose_deadline_ms is not None and self.decompose_deadline_ms <= 0:
            raise InputError("decompose_deadline_ms must be > 0 (or None for no deadline)")
        if self.llm_threads < 1 or self.llm_ctx < 256:
            raise InputError("llm_threads must be >= 1 and llm_ctx >= 256")
        if self.decomposer_prompt not in PROMPT_STYLES:
            raise InputError(f"decomposer_prompt must be one of {PROMPT_STYLES}, got {self.decomposer_prompt!r}")
        if self.cut_scope not in ("fused", "subtask"):
            raise InputError(f"cut_scope must be 'fused' or 'subtask', got {self.cut_scope!r}")
        if self.lexical_fusion not in ("rrf", "zmix"):
            raise InputError(f"lexical_fusion must be 'rrf' or 'zmix', got {self.lexical_fusion!r}")
        if not 0.0 <= self.lexical_weight <= 1.0:
            raise InputError("lexical_weight must be within [0, 1]")
        if self.lexical_candidates < 1:
            raise InputError("lexical_candidates must be >= 1")
        from .stages.budget import Budget

        Budget(self.max_tools, self.max_schema_tokens)  # InputError naming the field
        for name, shipped in LOSING_VARIANTS.items():
            if getattr(self, name) != shipped:
                warnings.warn(f"SelectorConfig.{name}={getattr(self, name)!r} is deprecated: it lost to the shipped "
                              f"{shipped!r} on the development sets (docs/bench/defaults.md) and goes in the next "
                              "release", DeprecationWarning, stacklevel=3)

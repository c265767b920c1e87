"""``SelectorConfig`` (``SelectorConfig()`` is the shipped product), the shipped cut and the modes; frozen."""
from __future__ import annotations

import numbers
from dataclasses import InitVar, dataclass, field

from .errors import InputError
from .stages.cut import CutConfig
from .decompose.prompts import PROMPT_STYLES

HISTORY_MODES = ("none", "user", "all")
# The shipped cut: keep the tools within 80 % of the score range of the list's first 15 below the
# top score: with the shipped embedder, the fewest tools whose completeness stays within 0.01 of the
# previous default's on every development part (docs/bench/budget.md).
DEFAULT_CUT = CutConfig(rule="rmargin", range_margin=0.8, range_depth=15)
DECOMPOSE_MODES = ("none", "rules", "llm", "auto")
# Settings whose other values lost on the development sets (docs/bench/defaults.md) and left the
# runtime before 0.1.0: the keyword still takes the shipped value (so old code runs unchanged), and
# any other value is an InputError naming it. They are not fields of the config.
REMOVED_VARIANTS = {"fusion": "peak", "rerank_scope": "turn", "rerank_min_margin": None, "cut_scope": "subtask",
                    "lexical_fusion": "zmix"}


@dataclass(frozen=True)
class SelectorConfig:
    """How a Selector turns a dialogue turn into a tool list; ``SelectorConfig()`` is the shipped product.

    The shipped defaults were chosen on the mean over every development set's evaluation part
    (generated test and test_ood, bfcl and metatool tool-disjoint; docs/bench/defaults.md holds
    the tables and the commands); the cross-encoder is off, ``rerank=True`` turns it on.

    history: what of the dialogue the retrieval query carries: ``none`` (the utterance only),
      ``user`` (plus earlier user turns) or ``all`` (plus the whole dialogue).
    candidates: how many tools each retrieval list returns before fusion and the cut.
    rerank: run the bundle's cross-encoder (when it has one) once per turn over the fused list's
      top ``rerank_candidates`` tools (``stages/rerank.py`` ``rerank_fused``); the cut then runs on
      the reranked list. ``rerank_skip_margin``: where the fused list's top tool leads the runner-up
      by at least that much, retrieval is sure and the turn costs no rerank (None: every turn
      reranks). ``rerank_weight`` mixes the cross-encoder's z-scored logits with the z-scored
      retrieval scores (1.0 = cross-encoder alone).
    decompose: ``none`` (passthrough), ``rules`` (clause split + elliptical carry-over, no model),
      ``llm`` (the GGUF decomposer, ``decomposer_model`` or the pinned default; ``llm_threads``,
      ``llm_ctx``) or ``auto`` (the LLM only for multi-clause, long or elliptical turns, abandoned
      for the rules past ``decompose_deadline_ms``). The LLM loads on first use.
    cut: the adaptive cut (``stages/cut.py``). With several retrieval lists (a decomposed turn)
      and no rerank it runs on each list and the kept tools are united; on a reranked turn it runs
      once on the reranked list.
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
    rerank: bool = False
    rerank_candidates: int = 10
    rerank_weight: float = 0.5
    # the rerank skip: the cross-encoder runs only where the fused list's top tool leads the
    # runner-up by less than this; None reranks every turn
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
    # the lexical channel (stages/lexical.py): BM25 over the tool texts, fused into every dense list
    # (the utterance and each sub-task) as weighted z-scores of cosine and BM25; lexical_weight is
    # BM25's share; lexical_candidates: BM25 hits per list that enter the fusion
    lexical: bool = True
    lexical_weight: float = 0.15
    lexical_candidates: int = 30
    # the caller's budget (stages/budget.py): the cut never keeps more tools, or more tokens of tool
    # definitions (counted in the format select is asked for); None: only the cut decides
    max_tools: int | None = None
    max_schema_tokens: int | None = None
    # removed settings (REMOVED_VARIANTS): keywords only, the shipped value or an InputError
    fusion: InitVar[str] = "peak"
    rerank_scope: InitVar[str] = "turn"
    rerank_min_margin: InitVar[float | None] = None
    cut_scope: InitVar[str] = "subtask"
    lexical_fusion: InitVar[str] = "zmix"

    def __post_init__(self, fusion: str, rerank_scope: str, rerank_min_margin: float | None, cut_scope: str,
                      lexical_fusion: str) -> None:
        given = {"fusion": fusion, "rerank_scope": rerank_scope, "rerank_min_margin": rerank_min_margin,
                 "cut_scope": cut_scope, "lexical_fusion": lexical_fusion}
        for name, shipped in REMOVED_VARIANTS.items():
            if given[name] != shipped:
                raise InputError(f"SelectorConfig.{name}={given[name]!r} was removed: only {shipped!r} is left, "
                                 "the others lost on the development sets (docs/bench/defaults.md)")
        if self.history not in HISTORY_MODES:
            raise InputError(f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        if self.candidates < 1:
            raise InputError("candidates must be >= 1")
        for name in ("history_turns", "max_query_chars", "max_history_turns", "max_history_chars", "max_subtasks"):
            if not isinstance(getattr(self, name), numbers.Integral) or getattr(self, name) < 1:
                raise InputError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.rerank_candidates < 1:
            raise InputError("rerank_candidates must be >= 1")
        if self.rerank_skip_margin is not None and not (isinstance(self.rerank_skip_margin, numbers.Real)
                                                         and self.rerank_skip_margin >= 0):
            raise InputError(f"rerank_skip_margin must be a number >= 0 or None, got {self.rerank_skip_margin!r}")
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
        if not 0.0 <= self.lexical_weight <= 1.0:
            raise InputError("lexical_weight must be within [0, 1]")
        if self.lexical_candidates < 1:
            raise InputError("lexical_candidates must be >= 1")
        from .stages.budget import Budget

        Budget(self.max_tools, self.max_schema_tokens)  # InputError naming the field

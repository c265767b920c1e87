"""``SelectorConfig`` (``SelectorConfig()`` ships) and its groups ``InputLimits`` and ``LLMDecomposerConfig``."""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field

from .errors import InputError
from .stages.budget import Budget
from .stages.cut import CutConfig, CutRule
from .decompose.prompts import PROMPT_STYLES

HISTORY_MODES = ("none", "user", "questions", "all")
DECOMPOSE_MODES = ("none", "rules", "llm", "auto")


@dataclass(frozen=True)
class InputLimits:
    """The bounds on one turn's input, so that the work of one ``select`` is bounded whatever the
    input (the measured worst case is in docs/bench/robustness.md).

    max_query_chars: a longer utterance is refused (InputError).
    max_history_turns, max_history_chars: of the history, only the last ``max_history_turns`` turns
      are read, and of those only the most recent ``max_history_chars`` characters (older turns
      dropped, the oldest kept one clipped at its start).
    max_subtasks: at most this many sub-tasks are retrieved (the decomposer's first ones).
    """

    max_query_chars: int = 16_000
    max_history_turns: int = 32
    max_history_chars: int = 16_000
    max_subtasks: int = 8

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, numbers.Integral) or value < 1:
                raise InputError(f"InputLimits.{f.name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class LLMDecomposerConfig:
    """The LLM decomposer's settings (``SelectorConfig.decompose`` ``llm`` or ``auto``; the model
    loads on first use).

    model: a GGUF path; None: the bundle's decomposer, else the pinned default (chunk packages).
    prompt: ``few_shot`` for an instruction model (the default Qwen); ``zero_shot`` for one trained
      on the task (a bundle's decomposer says which it was trained with).
    deadline_ms: ``auto`` only: past it the LLM is abandoned and the rules' tasks stand (None: no deadline).
    threads, ctx: llama.cpp's threads and context size.
    """

    model: str | None = None
    prompt: str = "few_shot"
    deadline_ms: float | None = 1500.0
    threads: int = 2
    ctx: int = 2048

    def __post_init__(self) -> None:
        if self.prompt not in PROMPT_STYLES:
            raise InputError(f"LLMDecomposerConfig.prompt must be one of {PROMPT_STYLES}, got {self.prompt!r}")
        if self.deadline_ms is not None and self.deadline_ms <= 0:
            raise InputError("LLMDecomposerConfig.deadline_ms must be > 0 (or None for no deadline)")
        if self.threads < 1:
            raise InputError(f"LLMDecomposerConfig.threads must be >= 1, got {self.threads!r}")
        if self.ctx < 256:
            raise InputError(f"LLMDecomposerConfig.ctx must be >= 256, got {self.ctx!r}")


_GROUPS: dict[str, type] = {"limits": InputLimits, "llm": LLMDecomposerConfig}


@dataclass(frozen=True)
class SelectorConfig:
    """How a Selector turns a dialogue turn into a tool list; ``SelectorConfig()`` is the shipped product.

    The shipped defaults were chosen on the mean over every development set's evaluation part
    (docs/bench/defaults.md holds the tables and the commands). There is no cross-encoder stage:
    it never earned its place (docs/bench/reranker.md; an experiment in bench/experiments/rerank.py).

    history: what of the dialogue the retrieval query carries: ``none`` (the utterance only),
      ``user`` (plus earlier user turns), ``questions`` (plus earlier user turns and the questions
      the assistant asked) or ``all`` (plus the whole dialogue). ``history_turns`` is how many of
      the considered turns a history mode folds into the retrieval text. The bundle's learned head
      was fitted under the shipped mode; under another it still runs, on score shapes it did not learn.
    candidates: how many tools each retrieval list returns before fusion and the cut.
    cut: the adaptive cut, ``CutConfig`` (``stages/cut.py``; the bench's rules, bench/cut_rules.py,
      are ``CutRule``s too). With several retrieval lists (a decomposed turn) it runs on each list
      and the kept tools are united.
    threads: inference threads of the embedder.
    limits: the bounds on one turn's input (``InputLimits``).
    decompose: ``none`` (passthrough), ``rules`` (clause split + elliptical carry-over, no model),
      ``llm`` (the GGUF decomposer, ``llm``) or ``auto`` (the LLM only for multi-clause, long or
      elliptical turns, abandoned for the rules past ``llm.deadline_ms``).
    llm: the LLM decomposer's settings (``LLMDecomposerConfig``).
    lexical: BM25 over the tool texts (``stages/lexical.py``), fused into every dense list (the
      utterance and each sub-task) as weighted z-scores of cosine and BM25; ``lexical_weight`` is
      BM25's share; ``lexical_candidates``: BM25 hits per list that enter the fusion.
    head: order the kept tools by the bundle's learned head (``stages/head.py``: a relevance
      probability per candidate from how the retrieval lists rank it) and drop those under
      ``cut.min_probability``; bundles without a head are cut as before.
    max_tools, max_schema_tokens: the default budget (``stages/budget.py``; ``select`` takes the
      caller's own): the cut never keeps more tools, or more tokens of tool definitions (counted in
      the format select is asked for); None: only the cut decides. ``max_tools=5`` ships: the
      phone's LLM calls the right tool as often with the cut's first five as with all it keeps,
      in less time (docs/bench/agent.md, "The operating point").
    """

    history: str = "questions"
    history_turns: int = 4
    candidates: int = 30
    cut: CutRule = field(default_factory=CutConfig)
    threads: int = 1
    limits: InputLimits = field(default_factory=InputLimits)
    decompose: str = "rules"
    llm: LLMDecomposerConfig = field(default_factory=LLMDecomposerConfig)
    lexical: bool = True
    lexical_weight: float = 0.15
    lexical_candidates: int = 30
    max_tools: int | None = 5
    max_schema_tokens: int | None = None
    head: bool = True

    def __post_init__(self) -> None:
        self._check_retrieval()
        if self.threads < 1:
            raise InputError("threads must be >= 1")
        if self.decompose not in DECOMPOSE_MODES:
            raise InputError(f"decompose must be one of {DECOMPOSE_MODES}, got {self.decompose!r}")
        self._check_groups()
        if not isinstance(self.head, bool):
            raise InputError(f"head must be True or False, got {self.head!r}")
        Budget(self.max_tools, self.max_schema_tokens)  # InputError naming the field

    def budget(self, max_tools: int | None = None, max_schema_tokens: int | None = None, format: str = "mcp") -> Budget:
        """A turn's budget (``stages/budget.py``): the caller's bounds, this config's where left out."""
        return Budget(self.max_tools if max_tools is None else max_tools,
                      self.max_schema_tokens if max_schema_tokens is None else max_schema_tokens, format)

    def _check_groups(self) -> None:
        """The grouped settings (``limits``, ``llm``) are their config classes."""
        for name, group in _GROUPS.items():
            if not isinstance(getattr(self, name), group):
                raise InputError(f"{name} must be an {group.__name__}, got {type(getattr(self, name)).__name__}")

    def _check_retrieval(self) -> None:
        if self.history not in HISTORY_MODES:
            raise InputError(f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        if not isinstance(self.history_turns, numbers.Integral) or self.history_turns < 1:
            raise InputError(f"history_turns must be an integer >= 1, got {self.history_turns!r}")
        if self.candidates < 1:
            raise InputError("candidates must be >= 1")
        if not 0.0 <= self.lexical_weight <= 1.0:
            raise InputError("lexical_weight must be within [0, 1]")
        if self.lexical_candidates < 1:
            raise InputError("lexical_candidates must be >= 1")

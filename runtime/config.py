"""``SelectorConfig`` (``SelectorConfig()`` ships), its groups ``InputLimits`` and ``LLMDecomposerConfig``, the shipped cut."""
from __future__ import annotations

import dataclasses
import functools
import numbers
import sys
import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from .errors import InputError
from .stages.cut import CutConfig
from .decompose.prompts import PROMPT_STYLES

HISTORY_MODES = ("none", "user", "questions", "all")
# The shipped cut: keep the tools within 70 % of the score range of the list's first 15 below the
# top score; in a decomposed turn 80 % on each list, and at most 5 tools from the anchor list; of
# those, the bundle's learned head drops the ones it gives under 1.2 % and keeps at most the 10
# likeliest (stages/head.py). Why these values (the fewest tools at the same completeness on every
# development part): docs/bench/defaults.md, docs/bench/budget.md and docs/bench/history.md.
DEFAULT_CUT = CutConfig(rule="rmargin", k_max=10, range_margin=0.7, range_depth=15, list_range_margin=0.8,
                        anchor_k_max=5, min_probability=0.012)
DECOMPOSE_MODES = ("none", "rules", "llm", "auto")
# Settings whose other values lost on the development sets (docs/bench/defaults.md), so they are not
# fields of the config: for one release the keyword still takes the shipped value, with a
# DeprecationWarning (so old code runs unchanged), and any other value is an InputError naming it.
REMOVED_VARIANTS = {"fusion": "peak", "rerank_scope": "turn", "rerank_min_margin": None, "cut_scope": "subtask",
                    "lexical_fusion": "zmix"}


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


# The flat spellings of 0.1.0's development, now in a group: old keyword -> (group field, its field).
# ``SelectorConfig(old=...)``, ``with_config(old=...)`` and ``config.old`` keep working with a
# DeprecationWarning naming the new spelling; they go in the next release.
MOVED_SETTINGS = {
    "max_query_chars": ("limits", "max_query_chars"), "max_history_turns": ("limits", "max_history_turns"),
    "max_history_chars": ("limits", "max_history_chars"), "max_subtasks": ("limits", "max_subtasks"),
    "decomposer_model": ("llm", "model"), "decomposer_prompt": ("llm", "prompt"),
    "decompose_deadline_ms": ("llm", "deadline_ms"), "llm_threads": ("llm", "threads"), "llm_ctx": ("llm", "ctx"),
}
_GROUPS: dict[str, type] = {"limits": InputLimits, "llm": LLMDecomposerConfig}


def _warn_moved(message: str) -> None:
    """A DeprecationWarning pointing at the caller's line, past this module, ``dataclasses.replace``
    and ``Selector.with_config`` (Python shows a DeprecationWarning where it is attributed to __main__)."""
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and (frame.f_code.co_filename in (__file__, dataclasses.__file__)
                                        or frame.f_code.co_name == "with_config"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _moved_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each old flat keyword folded into its group (the group given, else its default)."""
    moved = [name for name in kwargs if name in MOVED_SETTINGS]
    for old in moved:
        group, name = MOVED_SETTINGS[old]
        _warn_moved(f"SelectorConfig keyword {old}= is deprecated and will be removed in the next release; "
                    f"use {group}={_GROUPS[group].__name__}({name}=...) (SelectorConfig.{group}.{name})")
        current = kwargs[group] if group in kwargs else _GROUPS[group]()
        kwargs[group] = replace(current, **{name: kwargs.pop(old)})
    return kwargs


def _removed_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without the removed settings' keywords (``REMOVED_VARIANTS``): the shipped value
    is taken with a DeprecationWarning, any other is an InputError naming it."""
    for name in [name for name in kwargs if name in REMOVED_VARIANTS]:
        value, shipped = kwargs.pop(name), REMOVED_VARIANTS[name]
        if value != shipped:
            raise InputError(f"SelectorConfig.{name}={value!r} was removed: only {shipped!r} is left, "
                             "the others lost on the development sets (docs/bench/defaults.md)")
        _warn_moved(f"SelectorConfig keyword {name}= is deprecated and will be removed in the next release; "
                    f"it has one value left, {shipped!r}, which is what runs: leave it out")
    return kwargs


def _takes_moved_keywords(cls: type[Any]) -> type[Any]:
    """Wrap the dataclass ``__init__`` so the old flat keywords still build the config, and the
    removed settings' keywords still take their one value (both deprecated). Neither are InitVars:
    a defaulted InitVar leaves a class attribute, which ``dataclasses.replace`` would read back
    (passing it to every copy) and which would hide ``__getattr__``'s deprecated reading."""
    generated: Callable[..., None] = cls.__init__

    @functools.wraps(generated)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.keys() & REMOVED_VARIANTS.keys():
            kwargs = _removed_keywords(kwargs)
        generated(self, *args, **(_moved_keywords(kwargs) if kwargs.keys() & MOVED_SETTINGS.keys() else kwargs))

    setattr(cls, "__init__", __init__)
    return cls


@_takes_moved_keywords
@dataclass(frozen=True)
class SelectorConfig:
    """How a Selector turns a dialogue turn into a tool list; ``SelectorConfig()`` is the shipped product.

    The shipped defaults were chosen on the mean over every development set's evaluation part
    (docs/bench/defaults.md holds the tables and the commands); the cross-encoder is off,
    ``rerank=True`` turns it on.

    history: what of the dialogue the retrieval query carries: ``none`` (the utterance only),
      ``user`` (plus earlier user turns), ``questions`` (plus earlier user turns and the questions
      the assistant asked) or ``all`` (plus the whole dialogue). ``history_turns`` is how many of
      the considered turns a history mode folds into the retrieval text. The bundle's learned head
      was fitted under the shipped mode; under another it still runs, on score shapes it did not learn.
    candidates: how many tools each retrieval list returns before fusion and the cut.
    cut: the adaptive cut (``stages/cut.py``). With several retrieval lists (a decomposed turn)
      and no rerank it runs on each list and the kept tools are united; on a reranked turn it runs
      once on the reranked list.
    rerank: run the bundle's cross-encoder (when it has one) once per turn over the fused list's
      top ``rerank_candidates`` tools (``stages/rerank.py`` ``rerank_fused``); the cut then runs on
      the reranked list. ``rerank_skip_margin``: where the fused list's top tool leads the runner-up
      by at least that much, retrieval is sure and the turn costs no rerank (None: every turn
      reranks). ``rerank_weight`` mixes the cross-encoder's z-scored logits with the z-scored
      retrieval scores (1.0 = cross-encoder alone).
    threads: inference threads of the embedder and the cross-encoder.
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
      ``cut.min_probability``; bundles without a head, and reranked turns, are cut as before.
    max_tools, max_schema_tokens: the caller's budget (``stages/budget.py``): the cut never keeps
      more tools, or more tokens of tool definitions (counted in the format select is asked for);
      None: only the cut decides.
    The flat spellings of the grouped settings (``max_history_chars``, ``llm_ctx``, ...:
    ``MOVED_SETTINGS``) still work as keywords and attributes, and the removed settings' keywords
    (``fusion``, ...: ``REMOVED_VARIANTS``) take and read back their one value, deprecated, for one release.
    """

    history: str = "questions"
    history_turns: int = 4
    candidates: int = 30
    cut: CutConfig = field(default_factory=lambda: DEFAULT_CUT)
    rerank: bool = False
    rerank_candidates: int = 10
    rerank_weight: float = 0.5
    rerank_skip_margin: float | None = 0.3
    threads: int = 1
    limits: InputLimits = field(default_factory=InputLimits)
    decompose: str = "rules"
    llm: LLMDecomposerConfig = field(default_factory=LLMDecomposerConfig)
    lexical: bool = True
    lexical_weight: float = 0.15
    lexical_candidates: int = 30
    max_tools: int | None = None
    max_schema_tokens: int | None = None
    head: bool = True

    def __post_init__(self) -> None:
        if self.history not in HISTORY_MODES:
            raise InputError(f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        if self.candidates < 1:
            raise InputError("candidates must be >= 1")
        if not isinstance(self.history_turns, numbers.Integral) or self.history_turns < 1:
            raise InputError(f"history_turns must be an integer >= 1, got {self.history_turns!r}")
        for name, group in _GROUPS.items():
            if not isinstance(getattr(self, name), group):
                raise InputError(f"{name} must be an {group.__name__}, got {type(getattr(self, name)).__name__}")
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
        if not 0.0 <= self.lexical_weight <= 1.0:
            raise InputError("lexical_weight must be within [0, 1]")
        if self.lexical_candidates < 1:
            raise InputError("lexical_candidates must be >= 1")
        if not isinstance(self.head, bool):
            raise InputError(f"head must be True or False, got {self.head!r}")
        from .stages.budget import Budget

        Budget(self.max_tools, self.max_schema_tokens)  # InputError naming the field

    if not TYPE_CHECKING:  # the deprecated reading; hidden from mypy so the runtime's own code cannot use it
        def __getattr__(self, name: str) -> Any:
            if name in REMOVED_VARIANTS:
                _warn_moved(f"SelectorConfig.{name} is deprecated and will be removed in the next release; "
                            f"it has one value left, {REMOVED_VARIANTS[name]!r}")
                return REMOVED_VARIANTS[name]
            if name not in MOVED_SETTINGS:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            group, field_name = MOVED_SETTINGS[name]
            _warn_moved(f"SelectorConfig.{name} is deprecated and will be removed in the next release; "
                        f"use SelectorConfig.{group}.{field_name}")
            return getattr(object.__getattribute__(self, group), field_name)


def flat_config(config: SelectorConfig) -> dict[str, Any]:
    """``config`` as one flat object under the flat names (``MOVED_SETTINGS``), in field order: the
    shape ``eval --json`` has always reported (a JSON contract)."""
    back = {(group, name): old for old, (group, name) in MOVED_SETTINGS.items()}
    out: dict[str, Any] = {}
    for key, value in dataclasses.asdict(config).items():
        if key in _GROUPS:
            out.update({back[(key, name)]: v for name, v in value.items()})
        else:
            out[key] = value
    return out

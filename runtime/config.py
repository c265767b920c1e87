"""Configuration, as frozen dataclasses."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InputError
from .stages.cut import CutConfig

HISTORY_MODES = ("none", "user", "all")


@dataclass(frozen=True)
class SelectorConfig:
    """How a Selector turns a dialogue turn into a tool list.

    history: what of the dialogue the retrieval query carries: ``none`` (the utterance only),
      ``user`` (plus earlier user turns) or ``all`` (plus the whole dialogue).
    candidates: how many tools each retrieval list returns before fusion and the cut.
    rerank: run the bundle's cross-encoder (when it has one) over each list's top
      ``rerank_candidates`` tools; ``rerank_weight`` mixes its z-scored logits with the z-scored
      retrieval similarity (1.0 = cross-encoder alone).
    """

    history: str = "none"
    history_turns: int = 4
    candidates: int = 30
    cut: CutConfig = field(default_factory=CutConfig)
    fusion: str = "peak"
    rerank: bool = True
    rerank_candidates: int = 20
    rerank_weight: float = 1.0
    threads: int = 1
    max_query_chars: int = 16_000

    def __post_init__(self) -> None:
        if self.history not in HISTORY_MODES:
            raise InputError(f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        if self.candidates < 1:
            raise InputError("candidates must be >= 1")
        if self.fusion not in ("peak", "rrf"):
            raise InputError(f"fusion must be 'peak' or 'rrf', got {self.fusion!r}")
        if self.rerank_candidates < 1:
            raise InputError("rerank_candidates must be >= 1")
        if not 0.0 <= self.rerank_weight <= 1.0:
            raise InputError("rerank_weight must be within [0, 1]")
        if self.threads < 1:
            raise InputError("threads must be >= 1")

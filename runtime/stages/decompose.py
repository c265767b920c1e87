"""Decomposers: a dialogue turn -> the sub-tasks retrieval runs on.

``PassthroughDecomposer`` keeps the turn as one sub-task (with history folded in by the
configured history mode).
"""
from __future__ import annotations

from typing import Protocol, Sequence

from ..dialogue import Turn, retrieval_text


class Decomposer(Protocol):
    name: str

    def decompose(self, query: str, history: Sequence[Turn]) -> list[str]: ...


class PassthroughDecomposer:
    """No decomposition: the (history-extended) utterance is the only sub-task."""

    name = "none"

    def __init__(self, history: str = "none", turns: int = 4) -> None:
        self.history = history
        self.turns = turns

    def decompose(self, query: str, history: Sequence[Turn]) -> list[str]:
        return [retrieval_text(query, history, self.history, self.turns)]

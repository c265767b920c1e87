"""What a turn retrieves with: the checked utterance, the bounded history, the decomposition and the retrieval texts (the history fold's one home)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .config import SelectorConfig
from .decompose import Decomposer, Decomposition, PassthroughDecomposer
from .dialogue import Turn, bounded_history, retrieval_text, validate_query


@dataclass(frozen=True)
class RetrievalPlan:
    """What a turn retrieves with (``plan_turn``, ``Selector.plan``): the checked utterance, the
    bounded history, the decomposition, the sub-tasks (capped), the texts (one retrieval list each)
    and which of them is the history-folded utterance (None: none)."""

    query: str
    turns: list[Turn]
    decomposition: Decomposition
    subtasks: list[str]
    texts: list[str]
    history_list: int | None


def plan_turn(config: SelectorConfig, decomposer: Decomposer, query: str,
              history: Iterable[Any] | None = ()) -> RetrievalPlan:
    """The plan of one turn before any model runs (the decomposer runs): the utterance (the anchor
    list, ToolQP), its sub-tasks and, where ``config`` decomposes under a history mode, the
    history-folded utterance. Without decomposition the folded utterance is the one sub-task. The
    history fold happens here and nowhere else (``dialogue.retrieval_text``)."""
    limits = config.limits
    query = validate_query(query, limits.max_query_chars)
    turns = bounded_history(history, limits.max_history_turns, limits.max_history_chars)
    decomposition = decomposer.decompose(query, turns)
    folds = config.history != "none" and bool(turns)
    if isinstance(decomposer, PassthroughDecomposer):
        return _undecomposed_plan(config, query, turns, decomposition, folds)
    subtasks = (list(decomposition.tasks) or [query])[: limits.max_subtasks]
    texts = list(dict.fromkeys([query, *subtasks]))
    if folds and config.decompose != "none":
        folded = retrieval_text(query, turns, config.history, config.history_turns)
        if folded not in texts:
            return RetrievalPlan(query, turns, decomposition, subtasks, [*texts, folded], len(texts))
    return RetrievalPlan(query, turns, decomposition, subtasks, texts, None)


def _undecomposed_plan(config: SelectorConfig, query: str, turns: list[Turn], decomposition: Decomposition,
                       folds: bool) -> RetrievalPlan:
    """The plan of a turn nobody decomposes: the history-folded utterance (where the history mode
    folds one) is its one sub-task, searched beside the utterance."""
    folded = retrieval_text(query, turns, config.history, config.history_turns) if folds else query
    return RetrievalPlan(query, turns, decomposition, [folded], list(dict.fromkeys([query, folded])), None)

"""The caller's budget on a turn's tools: at most ``max_tools`` tools and ``max_schema_tokens`` tokens of definitions.

The cut decides how many tools the ranking supports; the budget only ever keeps fewer. Where it
binds, it spends the slots where they buy the most expected completeness: a turn is complete only
when every intent has its tool, so each retrieval list (each sub-task, then the utterance) first
gets its best kept tool, then the rest follow in ranked order. A tool whose definition does not fit the
tokens left is skipped for a smaller one further down. The kept tools stay in ranked order.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import InputError


@dataclass(frozen=True)
class Budget:
    """At most ``max_tools`` tools and ``max_schema_tokens`` tokens of tool definitions in
    ``format`` (mcp, openai, openai-responses, anthropic) per turn; None: no bound."""

    max_tools: int | None = None
    max_schema_tokens: int | None = None
    format: str = "mcp"

    def __post_init__(self) -> None:
        for name in ("max_tools", "max_schema_tokens"):
            _check_bound(name, getattr(self, name))
        from ..formats import check_format

        check_format(self.format)

    @property
    def bounded(self) -> bool:
        return self.max_tools is not None or self.max_schema_tokens is not None


def _check_bound(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
        raise InputError(f"{name} must be an integer >= 1 or None, got {value!r}")


def spend_budget(budget: Budget, ids: Sequence[str], k: int, lists: Sequence[Sequence[str]],
                 tokens: Callable[[str], int], by_probability: bool = False) -> list[int]:
    """Positions in ``ids`` (the ranked list, of which the cut kept the first ``k``) that the budget
    keeps, in ranked order. ``lists``: each retrieval list's ids, best first; ``tokens(id)``: the
    size of a tool's definition in the budget's format (called only with a token bound).
    ``by_probability``: ``ids`` is ordered by the learned head's relevance probability, and the
    budget is spent in that order (it buys more completeness than a slot per sub-task first,
    docs/bench/budget.md); else each retrieval list's best kept tool comes first."""
    kept = list(range(min(k, len(ids))))
    if not budget.bounded:
        return kept
    priority = kept if by_probability else _slot_per_list(ids, kept, lists)
    slots = budget.max_tools if budget.max_tools is not None else len(priority)
    return sorted(_spend(priority, slots, budget.max_schema_tokens, lambda i: tokens(ids[i])))


def kept_first(kept: Sequence[int], n: int) -> list[int]:
    """The hand-over order of a ranked list of ``n`` after ``spend_budget`` kept the positions
    ``kept``: those first, in ranked order, then the others in ranked order."""
    rest = set(range(n)).difference(kept)
    return [*kept, *sorted(rest)]


def _spend(priority: list[int], slots: int, room: int | None, cost_of: Callable[[int], int]) -> list[int]:
    """The positions bought in priority order: at most ``slots``, each that fits what is left of
    ``room`` tokens (a tool too big is passed over, a smaller one after it may still fit)."""
    chosen: list[int] = []
    for i in priority:
        if len(chosen) == slots:
            break
        if room is not None:
            cost = cost_of(i)
            if cost > room:
                continue
            room -= cost
        chosen.append(i)
    return chosen


def _slot_per_list(ids: Sequence[str], kept: list[int], lists: Sequence[Sequence[str]]) -> list[int]:
    """The kept positions in the order the budget spends them: each list's best kept tool first,
    the sub-tasks' lists before the utterance's own (list 0), which on a multi-intent turn is the
    whole turn and would give its first intent two slots; then the rest in ranked order."""
    at = {ids[i]: i for i in kept}
    order = [*lists[1:], *lists[:1]]
    first = [next((at[t] for t in lst if t in at), None) for lst in order]
    return list(dict.fromkeys([*(i for i in first if i is not None), *kept]))

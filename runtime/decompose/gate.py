"""The gated decomposer (``auto``): the rules' tasks always, the LLM's added where it can help, within a deadline."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from ..dialogue import Turn
from .base import DecomposeTrace, Decomposition
from .llm import LlmDecomposer
from .rules import RuleDecomposer, task_key


class GatedDecomposer:
    """``auto``: the rules' tasks always (cheap); the LLM's tasks added first where the turn has
    several clauses, is long or needs the dialogue to be understood, and only within
    ``deadline_ms`` (past it the rules' tasks stand alone: for a one-request turn, the plain
    utterance). The model's one-off load is outside the deadline. Adding rather than replacing
    measured better (docs/bench/decomposition.md)."""

    name = "auto"

    def __init__(self, llm: LlmDecomposer, rules: RuleDecomposer | None = None, deadline_ms: float | None = 1500.0,
                 long_words: int = 16) -> None:
        self.llm = llm
        self.rules = rules or RuleDecomposer(max_tasks=llm.max_lines)
        self.deadline_ms = deadline_ms
        self.long_words = long_words

    def needs_llm(self, query: str, history: Sequence[Turn]) -> tuple[bool, str]:
        cues = self.rules.cues(query, history)
        if cues["elliptical"]:
            return True, "elliptical"
        if cues["multi_clause"] or cues["connector"]:
            return True, "multi-clause"
        if len(query.split()) > self.long_words:
            return True, "long"
        return False, "single intent"

    def decompose(self, query: str, history: Sequence[Turn]) -> Decomposition:
        run, why = self.needs_llm(query, history)
        if not run:
            return Decomposition(self.rules.decompose(query, history).tasks,
                                 DecomposeTrace(ran="rules", reason=f"gate: {why}"))
        load_ms = self.llm.ensure_loaded()  # a one-off, outside the per-turn budget
        deadline = None if self.deadline_ms is None else time.perf_counter() + self.deadline_ms / 1e3
        llm = self.llm.decompose(query, history, deadline=deadline)
        trace = replace(llm.trace, load_ms=load_ms + llm.trace.load_ms)
        cheap = self.rules.decompose(query, history).tasks
        if llm.trace.stopped == "deadline":
            return Decomposition(cheap, replace(trace, ran="rules", reason=f"deadline {self.deadline_ms:.0f} ms"))
        return Decomposition(_with_rules(llm.tasks, cheap, query), replace(trace, reason=f"gate: {why}"))


def _with_rules(llm_tasks: tuple[str, ...], rule_tasks: tuple[str, ...], query: str) -> tuple[str, ...]:
    """The LLM's tasks, then the rules' tasks it did not find (nor the utterance, which is the anchor list already)."""
    seen = {task_key(t) for t in llm_tasks} | {task_key(query)}
    return llm_tasks + tuple(t for t in rule_tasks if task_key(t) not in seen)

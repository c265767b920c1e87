"""What every decomposer returns: ``Decomposition`` (the sub-tasks and the ``DecomposeTrace`` of how they came)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, Sequence

from ..dialogue import Turn


@dataclass(frozen=True)
class DecomposeTrace:
    """How one turn was decomposed (the demo prints it, the eval counts it, ``Selection.trace`` carries it)."""

    ran: str = ""               # what produced the tasks: none, rules or llm
    reason: str = ""            # why (the gate's cue, or the deadline it missed)
    raw: str = ""               # the LLM's text, before parsing
    ms: float = 0.0             # LLM generation, prompt included
    ttft_ms: float = 0.0
    tokens: int = 0             # generated tokens
    stopped: str = ""           # why generation ended: eos, max_tokens, stop, deadline
    dropped: tuple[str, ...] = ()  # LLM lines that share no content word with the dialogue
    load_ms: float = 0.0        # the one-off model load (and prompt prefix) this turn paid; 0 once loaded

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dropped"] = list(self.dropped)
        for k in ("ms", "ttft_ms", "load_ms"):
            d[k] = round(d[k], 3)
        return d


@dataclass(frozen=True)
class Decomposition:
    """The sub-tasks of one turn (empty only when an LLM ran out of its deadline) and how they came."""

    tasks: tuple[str, ...]
    trace: DecomposeTrace = DecomposeTrace()


class Decomposer(Protocol):
    """A dialogue turn -> the sub-tasks retrieval runs on."""

    name: str

    def decompose(self, query: str, history: Sequence[Turn]) -> Decomposition: ...

"""Dialogue turns: validation, and the retrieval text a history mode builds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .errors import InputError

ROLES = ("user", "assistant", "system")


@dataclass(frozen=True)
class Turn:
    role: str
    content: str


def validate_query(query: Any, max_chars: int) -> str:
    if not isinstance(query, str):
        raise InputError(f"the utterance must be a string, got {type(query).__name__}")
    text = " ".join(query.split())
    if not text:
        raise InputError("the utterance is empty (or only whitespace); nothing to select tools for")
    if len(text) > max_chars:
        raise InputError(f"the utterance is {len(text):,} characters long; the limit is {max_chars:,} "
                         "(SelectorConfig.max_query_chars). Pass the user's request, not a document")
    return text


def validate_history(history: Iterable[Any] | None) -> list[Turn]:
    if history is None:
        return []
    if isinstance(history, (str, bytes)):
        raise InputError("history must be a list of {role, content} turns, not a string")
    turns = []
    for i, t in enumerate(history):
        if isinstance(t, Turn):
            role, content = t.role, t.content
        elif isinstance(t, Mapping):
            role, content = t.get("role"), t.get("content")
        elif isinstance(t, Sequence) and len(t) == 2:
            role, content = t
        else:
            raise InputError(f"history[{i}]: a turn is {{'role': ..., 'content': ...}}, got {t!r:.80}")
        if role not in ROLES:
            raise InputError(f"history[{i}]: unknown role {role!r}; roles are {ROLES}")
        if not isinstance(content, str):
            raise InputError(f"history[{i}]: content must be a string")
        turns.append(Turn(role, " ".join(content.split())))
    return turns


def retrieval_text(query: str, history: Sequence[Turn], mode: str, turns: int = 4) -> str:
    """The text retrieved with under a history mode.

    The utterance comes first and earlier turns follow, most recent first, so that the encoder's
    truncation drops the oldest context and never the request itself.
    """
    if mode == "none" or not history:
        return query
    earlier = [t.content for t in reversed(recent_turns(history, mode, turns)) if t.content]
    return " | ".join([query, *earlier]) if earlier else query


def recent_turns(history: Sequence[Turn], mode: str, turns: int = 4) -> list[Turn]:
    """The earlier turns a history mode keeps, oldest first: the last ``turns`` user turns (``user``)
    or turns of the conversation (``all``), none for ``none``. The one place history is folded:
    ``retrieval_text`` and the LLM decomposer's prompt both read it."""
    if mode == "none":
        return []
    keep = [t for t in history if t.role == "user"] if mode == "user" else [t for t in history if t.role != "system"]
    return keep[-turns:]

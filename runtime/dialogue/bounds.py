"""``bounded_history``: a history read within one character budget, newest first, bounded in depth and width before anything below is touched."""
from __future__ import annotations

import collections
import itertools
import re
import reprlib  # bounded in depth and length: a message may nest without end
from collections.abc import Iterable, Mapping, Sequence  # abc: isinstance is several times typing's speed
from dataclasses import replace
from typing import Any

from ..errors import InputError
from .messages import Turn, as_mapping, validate_history

_CLIP_DEPTH, _CLIP_ITEMS = 8, 64  # objects are read this deep, their keys and lists' last items this many
_RAW_FACTOR = 4  # the raw structure read (keys, ids, names, arguments, two per value) is 4 x max_chars
_FLOOR = 64  # a structural string (role, type, name, id) keeps at least its last 64 characters
# read first in every object, and read (to _FLOOR characters) even once the budget is spent, so that
# clipping never makes a valid message invalid; then the tool calls, then everything else in order
_STRUCTURAL = ("role", "type", "name", "id", "call_id", "tool_call_id", "tool_use_id", "is_error", "isError")
_FIRST = _STRUCTURAL + ("function", "custom", "function_call", "tool_calls")
_SCALARS = frozenset({int, float, bool, type(None)})
_VALUE_COST = 2  # every value costs at least what its JSON does: itself and a separator


class _Clip:
    """Copies raw messages as far as a turn reads them, charging one budget for every value and
    every character; nothing below a clipped level is touched (a 1M-key object costs 64 keys)."""

    def __init__(self, budget: int) -> None:
        self.left = budget

    def message(self, msg: Any, where: str) -> Any:
        if isinstance(msg, Turn):
            return self.turn(msg)
        if isinstance(msg, (list, tuple)) and len(msg) == 2 and isinstance(msg[0], str):  # (role, content)
            role = self.string(msg[0], True)
            return [role, self.value(msg[1], f"{where}[1]", 1, "content")]
        return self.value(msg, where, 0, "content")  # a message is read even when nothing is left

    def turn(self, msg: Turn) -> Turn:
        """A Turn given as it is: its content and last tool names clipped (what is not a string
        is left for the reader to refuse)."""
        tools = msg.tools
        if isinstance(tools, (list, tuple)):
            tools = tuple(self.string(n, True) if isinstance(n, str) else n for n in tools[-_CLIP_ITEMS:])
        content = self.string(msg.content, False) if isinstance(msg.content, str) else msg.content
        return replace(msg, content=content, tools=tools)

    def string(self, text: str, structural: bool) -> str:
        keep = max(self.left, _FLOOR) if structural else max(self.left, 0)
        if len(text) > keep:
            text = text[len(text) - keep:]
        self.left -= len(text)
        return text

    def value(self, value: Any, where: str, depth: int, key: str | None = None) -> Any:
        spent = self.left <= 0
        self.left -= _VALUE_COST
        kind = type(value)
        if kind in _SCALARS:
            return value
        if kind is str or isinstance(value, str):
            return self.string(value, key in _STRUCTURAL)
        if kind is list or kind is tuple or isinstance(value, (list, tuple)):
            return self.items(value, where, depth, spent)
        return self.object(value if kind is dict else as_mapping(value), value, where, depth, key, spent)

    def object(self, mapping: Mapping[Any, Any] | None, value: Any, where: str, depth: int, key: str | None,
               spent: bool) -> Any:
        """A value that may be an object (``mapping``: it read as one, else None): copied as far as
        the depth and the budget reach (a message's content and a call's function past the budget too)."""
        if mapping is None:
            return value  # numbers, booleans, None; anything else the reader refuses by its type
        if depth >= _CLIP_DEPTH or (spent and key not in ("content", "function", "custom")):
            return {}
        return self.mapping(mapping, where, depth)

    def items(self, values: Sequence[Any], where: str, depth: int, spent: bool) -> list[Any]:
        """A list's last items, as far as the budget reaches (none where it was spent before the
        list, or the list is too deep)."""
        if spent or depth >= _CLIP_DEPTH:
            return []
        out = []
        for j in range(len(values) - 1, max(len(values) - _CLIP_ITEMS, 0) - 1, -1):  # the last items, newest first
            if self.left <= 0:
                break
            out.append(self.value(values[j], f"{where}[{j}]", depth + 1))
        out.reverse()
        return out

    def mapping(self, mapping: Mapping[Any, Any], where: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in _read_order(mapping):
            if not isinstance(key, str):
                raise InputError(f"{where}: object keys must be strings, got {reprlib.repr(key)} "
                                 f"({type(key).__name__})")
            self.left -= len(key)
            out[key] = self.value(mapping[key], f"{where}.{key}", depth + 1, key)
        return out


def _read_order(mapping: Mapping[Any, Any]) -> list[Any]:
    """The keys of an object in the order ``_Clip`` reads them: the structural ones and the tool
    calls, the object's own type's key ({"type": "x", "x": {...}}), then the first others."""
    kind = mapping.get("type")
    first = [k for k in _FIRST if k in mapping]
    if isinstance(kind, str) and kind not in first and kind in mapping:
        first.append(kind)
    return first + list(itertools.islice((k for k in mapping if k not in first), _CLIP_ITEMS))


def _clip_messages(messages: Sequence[Any], budget: int) -> list[Any]:
    """The most recent messages that the budget reaches, each copied as far as it is read."""
    clip = _Clip(budget)
    out: list[Any] = []
    for j in range(len(messages) - 1, -1, -1):
        if out and clip.left <= 0:  # the older messages are past the budget: never read
            break
        out.append(clip.message(messages[j], f"history[{j}]"))
    out.reverse()
    return out


def _renumbered(error: InputError, offset: int) -> InputError:
    """``error`` naming its message by the caller's index (``offset`` messages were left out)."""
    if not offset:
        return error
    return InputError(re.sub(r"^history\[(\d+)\]", lambda m: f"history[{int(m.group(1)) + offset}]", str(error),
                             count=1))


def _is_messages(history: Any) -> bool:
    """Whether ``history`` is an iterable of messages (not a string or an object, which the reader refuses)."""
    return history is not None and not isinstance(history, (str, bytes, Mapping)) and isinstance(history, Iterable)


def _last_messages(history: Any, max_turns: int) -> tuple[Any, int]:
    """The last ``max_turns`` messages of a sequence or an iterator (anything else as it is), and how
    many were left out before them."""
    if isinstance(history, Sequence) and not isinstance(history, (str, bytes)) and len(history) > max_turns:
        offset = len(history) - max_turns
        return history[offset:], offset
    if _is_messages(history) and not isinstance(history, Sequence):
        tail = collections.deque(enumerate(history), maxlen=max_turns)  # a generator: keep only its tail
        return [message for _, message in tail], (tail[0][0] if tail else 0)
    return history, 0


def _tail_turns(turns: list[Turn], max_chars: int) -> list[Turn]:
    """The most recent ``max_chars`` characters of text and tool names: older turns dropped, the
    oldest kept one clipped at its start."""
    kept: list[Turn] = []
    budget = max_chars
    for turn in reversed(turns):
        if budget <= 0:
            break
        tools, budget = _tail_tools(turn.tools, budget)
        content = turn.content[len(turn.content) - budget:] if len(turn.content) > budget else turn.content
        budget -= len(content)
        kept.append(Turn(turn.role, content, tuple(tools)))
    return kept[::-1]


def _tail_tools(names: tuple[str, ...], budget: int) -> tuple[list[str], int]:
    """The last tool names a turn called within ``budget`` characters (they count as its text does),
    oldest first, and the budget left."""
    tools: list[str] = []
    for name in reversed(names):
        if budget <= 0:
            break
        name = name[len(name) - budget:] if len(name) > budget else name  # a name past it: its last characters
        tools.append(name)
        budget -= len(name)
    return tools[::-1], budget


def bounded_history(history: Iterable[Any] | None, max_turns: int, max_chars: int) -> list[Turn]:
    """A history as the Turns one selection reads, bounded in cost whatever its size or shape: the
    last ``max_turns`` messages, read newest first within ``_RAW_FACTOR * max_chars`` (every
    character of text, tool names, ids, arguments, keys and nested values, and two per value;
    older messages the budget does not reach are not read), then the most recent ``max_chars``
    characters of text and tool names (older turns dropped, the oldest kept one clipped at its
    start)."""
    history, offset = _last_messages(history, max_turns)
    if _is_messages(history):
        messages = list(history)
        try:
            history = _clip_messages(messages, max_chars * _RAW_FACTOR)
        except InputError as e:
            raise _renumbered(e, offset) from None
        offset += len(messages) - len(history)
    try:
        turns = validate_history(history)[-max_turns:]
    except InputError as e:  # name the message by its index in the caller's history
        raise _renumbered(e, offset) from None
    return _tail_turns(turns, max_chars)

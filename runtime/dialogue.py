"""Dialogue turns: chat histories as chat APIs write them, validated into Turns, and the retrieval
text a history mode builds.

A history is a list of messages in any of the shapes assistants keep them in:

- ``{role, content}`` with ``role`` one of system, developer (read as system), user, assistant,
  tool (or the legacy ``function``), ``content`` a string, a list of content parts
  (``{"type": "text", "text": ...}``, ``input_text``/``output_text``; image, audio and file parts
  are skipped) or ``None`` for an assistant message that only calls tools;
- OpenAI Chat Completions ``tool_calls`` (``{"id", "type": "function", "function": {"name",
  "arguments"}}``) on assistant messages, and ``tool`` messages answering them;
- Anthropic content blocks: ``tool_use`` in assistant messages, ``tool_result`` in user messages
  (a user message that carries tool results becomes a ``tool`` turn, plus a ``user`` turn for its
  text);
- MCP tool results (``{"content": [{"type": "text", ...}], "isError": ...}``) as a message's
  content, and MCP prompt or sampling messages whose content is one content block;
- OpenAI Responses API input items (``{"type": "message", ...}``, ``function_call``,
  ``function_call_output``).

Each message, content part or tool call may also be the SDKs' own object in the same shape: an
OpenAI ``ChatCompletionMessage`` (with its ``tool_calls``), Responses output items, an Anthropic
``Message`` or its ``TextBlock`` / ``ToolUseBlock``: anything with pydantic's ``model_fields`` is
read field by field (unset fields, i.e. ``None``, as absent), anything else with ``model_dump()``
through it, a dataclass or plain object through its attributes (``as_mapping``). Neither SDK is
imported.

``bounded_history`` reads a history within one budget, ``max_chars``
(``InputLimits.max_history_chars``): the raw structure is read newest message first, every string
(text, tool names, call ids, arguments, object keys, nested values) counting its characters and
every value two, until ``4 x max_chars`` is spent; objects are read at most ``_CLIP_DEPTH`` levels
down and ``_CLIP_ITEMS`` keys or items wide, before anything below them is touched; then the most
recent ``max_chars`` characters of text and tool names are kept.

Every Turn keeps the names of the tools it called (or answered for); a malformed message raises
InputError naming the message index and the field, e.g. ``history[3].content[1].text``.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import re
import reprlib  # bounded in depth and length: a message may nest without end
from collections.abc import Iterable, Iterator, Mapping, Sequence  # abc: isinstance is several times typing's speed
from dataclasses import dataclass, replace
from typing import Any

from .errors import InputError

# The roles a Turn can have; "developer" is read as "system" and "function" as "tool".
ROLES = ("user", "assistant", "system", "tool")
_ROLE_ALIASES = {"developer": "system", "function": "tool"}
_TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
# Parts that carry no text the retriever can use; skipped, not refused.
_SKIPPED_PARTS = {"image", "image_url", "input_image", "audio", "input_audio", "output_audio", "file",
                  "input_file", "document", "thinking", "redacted_thinking", "resource_link",
                  "search_result", "server_tool_use", "web_search_tool_result", "tool_reference",
                  "container_upload", "reasoning"}


@dataclass(frozen=True)
class Turn:
    """One message of the dialogue. ``tools`` names the tools it called (assistant) or whose result
    it carries (tool)."""

    role: str
    content: str
    tools: tuple[str, ...] = ()


class _Fields(Mapping[str, Any]):
    """An object read as the mapping of its attributes (an SDK model, a dataclass, a namespace)."""

    __slots__ = ("_obj", "_keys")

    def __init__(self, obj: Any, keys: Iterable[str]) -> None:
        self._obj = obj
        self._keys = tuple(keys)

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self._obj, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"<{type(self._obj).__name__} {reprlib.repr(dict(self))}>"


_PLAIN = (str, bytes, bytearray, int, float, complex, type(None), list, tuple, set, frozenset)


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """``value`` as a mapping when it is one or an object in the shape of one, else None: a pydantic
    model (an OpenAI or Anthropic SDK object) by its fields and extra fields whose value is not
    None, read lazily; another object with ``model_dump()`` through it; a dataclass by its fields; a
    plain object by its public attributes."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, _PLAIN) or isinstance(value, type):
        return None
    cls = type(value)
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, Mapping) and callable(getattr(value, "model_dump", None)):
        extra = getattr(value, "__pydantic_extra__", None) or {}
        keys = [k for k in itertools.chain(fields, extra) if isinstance(k, str) and getattr(value, k, None) is not None]
        return _Fields(value, dict.fromkeys(keys))
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump()
        except Exception:  # an object we cannot read is refused by type where it is used
            return None
        return dumped if isinstance(dumped, Mapping) else None
    if dataclasses.is_dataclass(value):
        return _Fields(value, [f.name for f in dataclasses.fields(value)])
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict) and not callable(value):
        return _Fields(value, [k for k in attrs if isinstance(k, str) and not k.startswith("_")
                               and attrs[k] is not None])
    return None


def plain(value: Any) -> Any:
    """An SDK object as the plain JSON data it stands for (``model_dump(mode="json",
    exclude_unset=True)`` for pydantic models); anything else as it is."""
    if isinstance(value, (Mapping, *_PLAIN)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump) and isinstance(getattr(type(value), "model_fields", None), Mapping):
        return dump(mode="json", exclude_unset=True)
    view = as_mapping(value)
    return {k: plain(v) for k, v in view.items()} if view is not None else value


def validate_query(query: Any, max_chars: int) -> str:
    if not isinstance(query, str):
        raise InputError(f"the utterance must be a string, got {type(query).__name__}")
    text = " ".join(query.split())
    if not text:
        raise InputError("the utterance is empty (or only whitespace); nothing to select tools for")
    if len(text) > max_chars:
        raise InputError(f"the utterance is {len(text):,} characters long; the limit is {max_chars:,} "
                         "(SelectorConfig.limits.max_query_chars). Pass the user's request, not a document")
    check_text(text, "the utterance")
    return text


def check_text(text: str, where: str) -> None:
    """Refuse text that is not valid Unicode: a lone surrogate (what truncated UTF-16 and some
    JavaScript bridges produce) cannot be encoded, so no tokenizer can read it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{where}: holds a lone surrogate {text[e.start]!r} at character {e.start} "
                         "(not valid Unicode; decode the UTF-16 with errors='replace')") from None


def _clean(text: str) -> str:
    return " ".join(text.split())


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: a tool name must be a non-empty string, got {reprlib.repr(value)}")
    return value


class _Reader:
    """Reads one history into Turns, remembering which tool each call id named."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.call_names: dict[str, str] = {}

    # -- content ------------------------------------------------------------------------------
    def text_of(self, content: Any, where: str, blocks: list[tuple[str, Mapping[str, Any]]] | None = None) -> str:
        """The text of a message's content; tool_use / tool_result blocks go to ``blocks``."""
        if content is None:
            return ""
        if isinstance(content, str):
            return _clean(content)
        if not isinstance(content, (list, tuple)):
            content = as_mapping(content) or content
        if isinstance(content, Mapping):
            if "type" in content:  # one content block (MCP prompt and sampling messages)
                return self.text_of([content], where, blocks)
            if "content" in content:  # an MCP CallToolResult
                return self.mcp_result(content, where)
            keys = sorted(reprlib.repr(k) if not isinstance(k, str) else k for k in itertools.islice(content, 64))
            raise InputError(f"{where}: content must be a string, a list of content parts or an MCP tool "
                             f"result, got an object with keys {keys[:6]}")
        if not isinstance(content, (list, tuple)):
            raise InputError(f"{where}: content must be a string or a list of content parts, "
                             f"got {type(content).__name__}")
        texts = []
        for j, part in enumerate(content):
            at = f"{where}[{j}]"
            if isinstance(part, str):
                texts.append(_clean(part))
                continue
            part = as_mapping(part) or part
            if not isinstance(part, Mapping):
                raise InputError(f"{at}: a content part must be an object with a 'type', got {type(part).__name__}")
            kind = part.get("type")
            if not isinstance(kind, str):
                raise InputError(f"{at}.type: a content part needs a string 'type'")
            if kind in _TEXT_PARTS:
                value = part.get(_TEXT_PARTS[kind])
                if not isinstance(value, str):
                    raise InputError(f"{at}.{_TEXT_PARTS[kind]}: a {kind} part needs a string {_TEXT_PARTS[kind]!r}")
                texts.append(_clean(value))
            elif kind in ("tool_use", "tool_result", "mcp_tool_use", "mcp_tool_result"):
                if blocks is None:
                    raise InputError(f"{at}: a {kind} block cannot appear here")
                blocks.append((at, part))
            elif kind == "resource":  # an MCP embedded resource: its text, if it has one
                res = as_mapping(part.get("resource"))
                if not isinstance(res, Mapping):
                    raise InputError(f"{at}.resource: an embedded resource must be an object")
                if isinstance(res.get("text"), str):
                    texts.append(_clean(res["text"]))
            # any other part type (images, audio, files, thinking, new block types) carries no text
        return " ".join(t for t in texts if t)

    def mcp_result(self, result: Mapping[str, Any], where: str) -> str:
        blocks = result.get("content")
        if not isinstance(blocks, (list, tuple)):
            raise InputError(f"{where}.content: an MCP tool result's 'content' must be a list of content blocks")
        if "isError" in result and not isinstance(result["isError"], bool):
            raise InputError(f"{where}.isError: must be true or false")
        text = self.text_of(blocks, f"{where}.content")
        if not text and result.get("structuredContent") is not None:
            try:
                data = json.dumps(result["structuredContent"], ensure_ascii=False,
                                  default=lambda o: plain(o) if as_mapping(o) is not None else f"<{type(o).__name__}>")
            except (TypeError, ValueError, RecursionError) as e:
                raise InputError(f"{where}.structuredContent: not JSON data ({str(e)[:80]})") from None
            text = _clean(data)
        return text

    # -- calls --------------------------------------------------------------------------------
    def call_name(self, call: Any, where: str) -> str:
        """The tool named by one Chat Completions ``tool_calls`` entry."""
        call = as_mapping(call) or call
        if not isinstance(call, Mapping):
            raise InputError(f"{where}: a tool call must be an object, got {type(call).__name__}")
        kind = call.get("type", "function")
        body = as_mapping(call.get(kind)) if isinstance(kind, str) else None
        if not isinstance(body, Mapping):
            raise InputError(f"{where}.{kind if isinstance(kind, str) else 'function'}: a tool call needs a "
                             "'function' object with the tool's 'name'")
        name = _name(body.get("name"), f"{where}.{kind}.name")
        args = body.get("arguments", body.get("input"))
        if args is not None and not isinstance(args, (str, Mapping)):
            raise InputError(f"{where}.{kind}.arguments: must be a JSON string or an object")
        self.remember(call.get("id"), name)
        return name

    def remember(self, call_id: Any, name: str) -> None:
        if isinstance(call_id, str):
            self.call_names[call_id] = name

    def answered(self, call_id: Any) -> tuple[str, ...]:
        name = self.call_names.get(call_id) if isinstance(call_id, str) else None
        return (name,) if name else ()

    # -- messages -----------------------------------------------------------------------------
    def add(self, turn: Any, i: int) -> None:
        where = f"history[{i}]"
        if isinstance(turn, Turn):
            if turn.role not in ROLES or not isinstance(turn.content, str) or not isinstance(turn.tools, (tuple, list)) \
                    or not all(isinstance(n, str) for n in turn.tools):
                raise InputError(f"{where}: a Turn needs a role in {ROLES}, string content and a tuple of tool names")
            self.turns.append(Turn(turn.role, _clean(turn.content), tuple(turn.tools)))
            return
        if not isinstance(turn, (list, tuple)):
            turn = as_mapping(turn) or turn
        if isinstance(turn, Mapping):
            if "role" not in turn and isinstance(turn.get("type"), str):
                return self.item(turn, where)
            return self.message(turn, where)
        if isinstance(turn, (list, tuple)) and len(turn) == 2 and isinstance(turn[0], str):
            return self.message({"role": turn[0], "content": turn[1]}, where)
        raise InputError(f"{where}: a message is {{'role': ..., 'content': ...}}, got {reprlib.repr(turn)}")

    def message(self, msg: Mapping[str, Any], where: str) -> None:
        role = msg.get("role")
        role = _ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
        if role not in ROLES:
            raise InputError(f"{where}.role: unknown role {reprlib.repr(msg.get('role'))}; roles are "
                             f"{ROLES + tuple(_ROLE_ALIASES)}")
        if "content" not in msg and not (role == "assistant" and (msg.get("tool_calls") or msg.get("function_call"))):
            raise InputError(f"{where}.content must be a string or a list of content parts (missing)")
        content = msg.get("content")
        if content is None and role in ("user", "system"):
            raise InputError(f"{where}.content must be a string or a list of content parts, got null")
        blocks: list[tuple[str, Mapping[str, Any]]] = []
        text = self.text_of(content, f"{where}.content", blocks if role in ("user", "assistant") else None)
        if role == "assistant":
            names = []
            calls = msg.get("tool_calls")
            if calls is not None:
                if not isinstance(calls, (list, tuple)):
                    raise InputError(f"{where}.tool_calls: must be a list of tool calls")
                names += [self.call_name(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
            if msg.get("function_call") is not None:  # the legacy single call
                fc = as_mapping(msg["function_call"])
                if not isinstance(fc, Mapping):
                    raise InputError(f"{where}.function_call: must be an object with a 'name'")
                names.append(_name(fc.get("name"), f"{where}.function_call.name"))
            for at, block in blocks:
                if block["type"] not in ("tool_use", "mcp_tool_use"):
                    raise InputError(f"{at}: a {block['type']} block belongs in a user message")
                name = _name(block.get("name"), f"{at}.name")
                self.remember(block.get("id"), name)
                names.append(name)
            self.turns.append(Turn("assistant", text, tuple(dict.fromkeys(names))))
        elif role == "tool":
            self.turns.append(Turn("tool", text, self.answered(msg.get("tool_call_id"))
                                   or ((msg["name"],) if isinstance(msg.get("name"), str) and msg["name"] else ())))
        elif role == "user" and blocks:
            results: list[str] = []
            answered: list[str] = []
            for at, block in blocks:
                if block["type"] not in ("tool_result", "mcp_tool_result"):
                    raise InputError(f"{at}: a {block['type']} block belongs in an assistant message")
                if not isinstance(block.get("tool_use_id"), str):
                    raise InputError(f"{at}.tool_use_id: a tool_result needs the id of its tool_use")
                if "is_error" in block and not isinstance(block["is_error"], bool):
                    raise InputError(f"{at}.is_error: must be true or false")
                results.append(self.text_of(block.get("content"), f"{at}.content"))
                answered += self.answered(block["tool_use_id"])
            self.turns.append(Turn("tool", " ".join(r for r in results if r), tuple(dict.fromkeys(answered))))
            if text:
                self.turns.append(Turn("user", text))
        else:
            self.turns.append(Turn(role, text))

    def item(self, item: Mapping[str, Any], where: str) -> None:
        """An OpenAI Responses API input item without a role."""
        kind = item["type"]
        if kind in ("function_call", "custom_tool_call"):
            name = _name(item.get("name"), f"{where}.name")
            self.remember(item.get("call_id"), name)
            self.turns.append(Turn("assistant", "", (name,)))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            text = output if isinstance(output, str) else self.text_of(output, f"{where}.output")
            self.turns.append(Turn("tool", _clean(text), self.answered(item.get("call_id"))))
        elif kind == "message":
            raise InputError(f"{where}.role: a message item needs a 'role'")
        # reasoning, tool_search_call/output, web_search_call and other items carry no dialogue


def validate_history(history: Iterable[Any] | None) -> list[Turn]:
    """A history (a list of messages in any shape the module docstring lists) as Turns."""
    if history is None:
        return []
    if isinstance(history, (str, bytes)):
        raise InputError("history must be a list of messages, not a string")
    if isinstance(history, Mapping) or not isinstance(history, Iterable):
        raise InputError(f"history must be a list of messages, got {type(history).__name__}")
    reader = _Reader()
    for i, turn in enumerate(history):
        first = len(reader.turns)
        reader.add(turn, i)
        for t in reader.turns[first:]:
            check_text(t.content, f"history[{i}].content")
            check_text(" ".join(t.tools), f"history[{i}]: a tool name")
    return reader.turns


# the 8 hex digits a wire name ends in when its catalog name had to change (magicselector.names)
_WIRE_HASH = re.compile(r"(?<=.)_[0-9a-f]{8}$")


def tool_phrase(names: Sequence[str]) -> str:
    """Called tools as words the embedder knows: ``github__create_issue`` -> ``github create issue``.
    A trailing ``_`` and 8 hex digits (the hash of a wire name, or an opaque id) are no words and
    are left out: ``ws__files_read_1a2b3c4d`` reads as ``ws files read``, like ``ws__files.read``."""
    return ", ".join(re.sub(r"[_.\-/:]+", " ", _WIRE_HASH.sub("", n)).strip() for n in names)


def _with_tools(text: str, tools: Sequence[str]) -> str:
    if not tools:
        return text
    return f"{text} ({tool_phrase(tools)})" if text else tool_phrase(tools)


def _exchanges(history: Sequence[Turn], tool_words: bool = True) -> list[Turn]:
    """User and assistant turns, tool results and system prompts dropped; an assistant message's
    text carries the tools it called (unless ``tool_words`` is off), and an assistant's consecutive
    messages (a tool call, then its reply) are merged, so that ``history_turns`` counts turns of the
    conversation, not tool plumbing."""
    out: list[Turn] = []
    for t in history:
        if t.role in ("system", "tool"):
            continue
        text = _with_tools(t.content, t.tools) if t.role == "assistant" and tool_words else t.content
        if out and t.role == "assistant" and out[-1].role == "assistant":
            prev = out[-1]
            out[-1] = Turn("assistant", " ".join(x for x in (prev.content, text) if x),
                           tuple(dict.fromkeys(prev.tools + t.tools)))
        else:
            out.append(Turn(t.role, text, t.tools))
    return out


def retrieval_text(query: str, history: Sequence[Turn], mode: str, turns: int = 4) -> str:
    """The text retrieved with under a history mode.

    The utterance comes first and earlier turns follow (``recent_turns``), most recent first, so
    that the encoder's truncation drops the oldest context and never the request itself.
    """
    if mode == "none" or not history:
        return query
    earlier = [t.content for t in reversed(recent_turns(history, mode, turns)) if t.content]
    return " | ".join([query, *earlier]) if earlier else query


_SENTENCE_END = re.compile(r"([.!?\n])")


def _questions(text: str) -> str:
    """The question sentences of a text (each from the last sentence end up to its "?"), joined. A
    split, not a search for questions: that search rescans a long run without a sentence end from
    every start, quadratic in the 16,000 characters a history may hold."""
    parts = _SENTENCE_END.split(text)  # text, end, text, end, ..., text
    return " ".join((parts[i] + "?").strip() for i in range(0, len(parts) - 1, 2) if parts[i + 1] == "?")


def recent_turns(history: Sequence[Turn], mode: str, turns: int = 4) -> list[Turn]:
    """The earlier turns a history mode keeps, oldest first: the last ``turns`` user turns (``user``),
    user turns and the questions the assistant asked (``questions``), or turns of the conversation
    (``all``); none for ``none``. The one place history is folded: ``retrieval_text`` and the LLM
    decomposer's prompt both read it.

    Tool results and system prompts are left out, and an assistant's tool call and its reply count
    as one turn. The tools called come along as words (measured in docs/bench/history.md): under
    ``all`` each assistant turn carries the tools it called, under ``user`` and ``questions`` each
    user turn carries the tools called in answer to it. ``questions`` keeps only the question
    sentences of an assistant turn ("To where?", "Which one, Priya or Luis?"): a real assistant's
    results, IDs and confirmations name no task, while its clarifying question names the one the
    next answer completes (docs/bench/history.md, "Weighting the history by role").
    """
    if mode == "none":
        return []
    if mode == "all":
        return _exchanges(history)[-turns:]
    merged = _exchanges(history, tool_words=False)
    answered = [nxt.tools if nxt.role == "assistant" else () for nxt in [*merged[1:], Turn("user", "")]]
    keep: list[Turn] = []
    for t, tools in zip(merged, answered):
        if t.role == "user":
            keep.append(Turn("user", _with_tools(t.content, tools), tools))
        elif mode == "questions" and (asked := _questions(t.content)):
            keep.append(Turn("assistant", asked))
    return keep[-turns:]


# -- one budget for everything a turn reads -------------------------------------------------------
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
            tools = msg.tools
            if isinstance(tools, (list, tuple)):
                tools = tuple(self.string(n, True) if isinstance(n, str) else n for n in tools[-_CLIP_ITEMS:])
            content = self.string(msg.content, False) if isinstance(msg.content, str) else msg.content
            return replace(msg, content=content, tools=tools)
        if isinstance(msg, (list, tuple)) and len(msg) == 2 and isinstance(msg[0], str):  # (role, content)
            role = self.string(msg[0], True)
            return [role, self.value(msg[1], f"{where}[1]", 1, "content")]
        return self.value(msg, where, 0, "content")  # a message is read even when nothing is left

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
            return [] if spent or depth >= _CLIP_DEPTH else self.items(value, where, depth)
        mapping = value if kind is dict else as_mapping(value)
        if mapping is None:
            return value  # numbers, booleans, None; anything else the reader refuses by its type
        if depth >= _CLIP_DEPTH or (spent and key not in ("content", "function", "custom")):
            return {}
        return self.mapping(mapping, where, depth)

    def items(self, values: Sequence[Any], where: str, depth: int) -> list[Any]:
        out = []
        for j in range(len(values) - 1, max(len(values) - _CLIP_ITEMS, 0) - 1, -1):  # the last items, newest first
            if self.left <= 0:
                break
            out.append(self.value(values[j], f"{where}[{j}]", depth + 1))
        out.reverse()
        return out

    def mapping(self, mapping: Mapping[Any, Any], where: str, depth: int) -> dict[str, Any]:
        kind = mapping.get("type")
        first = [k for k in _FIRST if k in mapping]
        if isinstance(kind, str) and kind not in first and kind in mapping:  # {"type": "x", "x": {...}}
            first.append(kind)
        rest = [k for k in itertools.islice((k for k in mapping if k not in first), _CLIP_ITEMS)]
        out: dict[str, Any] = {}
        for key in itertools.chain(first, rest):
            if not isinstance(key, str):
                raise InputError(f"{where}: object keys must be strings, got {reprlib.repr(key)} "
                                 f"({type(key).__name__})")
            self.left -= len(key)
            out[key] = self.value(mapping[key], f"{where}.{key}", depth + 1, key)
        return out


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


def bounded_history(history: Iterable[Any] | None, max_turns: int, max_chars: int) -> list[Turn]:
    """A history as the Turns one selection reads, bounded in cost whatever its size or shape: the
    last ``max_turns`` messages, read newest first within ``_RAW_FACTOR * max_chars`` (every
    character of text, tool names, ids, arguments, keys and nested values, and two per value;
    older messages the budget does not reach are not read), then the most recent ``max_chars``
    characters of text and tool names (older turns dropped, the oldest kept one clipped at its
    start)."""
    offset = 0
    if isinstance(history, Sequence) and not isinstance(history, (str, bytes)) and len(history) > max_turns:
        offset = len(history) - max_turns
        history = history[offset:]
    elif history is not None and not isinstance(history, (str, bytes, Sequence, Mapping)) \
            and isinstance(history, Iterable):
        tail = collections.deque(enumerate(history), maxlen=max_turns)  # a generator: keep only its tail
        offset = tail[0][0] if tail else 0
        history = [message for _, message in tail]
    if history is not None and not isinstance(history, (str, bytes, Mapping)) and isinstance(history, Iterable):
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
    kept: list[Turn] = []
    budget = max_chars
    for turn in reversed(turns):
        if budget <= 0:
            break
        tools: list[str] = []
        for name in reversed(turn.tools):  # the tools a turn called count as its text does
            if budget <= 0:
                break
            name = name[len(name) - budget:] if len(name) > budget else name  # a name past it: its last characters
            tools.append(name)
            budget -= len(name)
        content = turn.content[len(turn.content) - budget:] if len(turn.content) > budget else turn.content
        budget -= len(content)
        kept.append(Turn(turn.role, content, tuple(reversed(tools))))
    return kept[::-1]

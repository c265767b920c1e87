"""Chat histories as chat APIs write them (OpenAI Chat and Responses, Anthropic blocks, MCP results, the SDKs' objects) read into ``Turn``s, and the utterance's checks."""
from __future__ import annotations

import dataclasses
import itertools
import json
import reprlib  # bounded in depth and length: a message may nest without end
from collections.abc import Iterable, Iterator, Mapping  # abc: isinstance is several times typing's speed
from dataclasses import dataclass
from typing import Any

from ..errors import InputError


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
    if callable(getattr(value, "model_dump", None)):
        return _model_view(value)
    if dataclasses.is_dataclass(value):
        return _Fields(value, [f.name for f in dataclasses.fields(value)])
    return _attribute_view(value)


def _model_view(value: Any) -> Mapping[str, Any] | None:
    """An object with ``model_dump()``: a pydantic model by its set fields, read lazily; another
    through what ``model_dump()`` returns."""
    fields = getattr(type(value), "model_fields", None)
    if isinstance(fields, Mapping):
        return _pydantic_view(value, fields)
    try:
        dumped = value.model_dump()
    except Exception:  # an object we cannot read is refused by type where it is used
        return None
    return dumped if isinstance(dumped, Mapping) else None


def _pydantic_view(value: Any, fields: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pydantic model by its fields and extra fields whose value is not None (unset, read as absent)."""
    extra = getattr(value, "__pydantic_extra__", None) or {}
    keys = [k for k in itertools.chain(fields, extra) if isinstance(k, str) and getattr(value, k, None) is not None]
    return _Fields(value, dict.fromkeys(keys))


def _attribute_view(value: Any) -> Mapping[str, Any] | None:
    """A plain object by its public attributes that are not None; None for a callable or an object
    without ``__dict__``."""
    attrs = getattr(value, "__dict__", None)
    if not isinstance(attrs, dict) or callable(value):
        return None
    return _Fields(value, [k for k in attrs if isinstance(k, str) and not k.startswith("_") and attrs[k] is not None])


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


_CALL_BLOCKS = ("tool_use", "tool_result", "mcp_tool_use", "mcp_tool_result")
_USE_BLOCKS = ("tool_use", "mcp_tool_use")
_RESULT_BLOCKS = ("tool_result", "mcp_tool_result")
# Where a message's tool_use / tool_result blocks are collected; other roles' content may hold none.
_BLOCK_ROLES = ("user", "assistant")


def _checked_turn(turn: Turn, where: str) -> Turn:
    """A ``Turn`` passed as it is, checked and with its content cleaned."""
    if turn.role not in ROLES or not isinstance(turn.content, str) or not isinstance(turn.tools, (tuple, list)) \
            or not all(isinstance(n, str) for n in turn.tools):
        raise InputError(f"{where}: a Turn needs a role in {ROLES}, string content and a tuple of tool names")
    return Turn(turn.role, _clean(turn.content), tuple(turn.tools))


def _is_pair(turn: Any) -> bool:
    """A message written as a (role, content) pair."""
    return isinstance(turn, (list, tuple)) and len(turn) == 2 and isinstance(turn[0], str)


def _role(msg: Mapping[str, Any], where: str) -> str:
    """The message's role, aliases read as the role they stand for; its content checked present
    where the role needs one."""
    role = msg.get("role")
    role = _ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
    if role not in ROLES:
        raise InputError(f"{where}.role: unknown role {reprlib.repr(msg.get('role'))}; roles are "
                         f"{ROLES + tuple(_ROLE_ALIASES)}")
    _check_content_present(msg, str(role), where)
    return str(role)


def _check_content_present(msg: Mapping[str, Any], role: str, where: str) -> None:
    """A message's content is there, and not null for a user or system message (an assistant
    message that only calls tools may leave it out)."""
    if "content" not in msg and not (role == "assistant" and (msg.get("tool_calls") or msg.get("function_call"))):
        raise InputError(f"{where}.content must be a string or a list of content parts (missing)")
    if msg.get("content") is None and role in ("user", "system"):
        raise InputError(f"{where}.content must be a string or a list of content parts, got null")


def _object_keys(content: Mapping[Any, Any]) -> list[str]:
    """The first keys of an object, for an error message (a key that is not a string as its repr)."""
    return sorted(reprlib.repr(k) if not isinstance(k, str) else k for k in itertools.islice(content, 64))[:6]


def _text_part(part: Mapping[str, Any], kind: str, at: str) -> str:
    field = _TEXT_PARTS[kind]
    value = part.get(field)
    if not isinstance(value, str):
        raise InputError(f"{at}.{field}: a {kind} part needs a string {field!r}")
    return _clean(value)


def _resource_text(part: Mapping[str, Any], at: str) -> str:
    """An MCP embedded resource: its text, if it has one."""
    res = as_mapping(part.get("resource"))
    if not isinstance(res, Mapping):
        raise InputError(f"{at}.resource: an embedded resource must be an object")
    return _clean(res["text"]) if isinstance(res.get("text"), str) else ""


def _structured_text(result: Mapping[str, Any], where: str) -> str:
    """An MCP tool result's ``structuredContent`` as its JSON text."""
    try:
        data = json.dumps(result["structuredContent"], ensure_ascii=False,
                          default=lambda o: plain(o) if as_mapping(o) is not None else f"<{type(o).__name__}>")
    except (TypeError, ValueError, RecursionError) as e:
        raise InputError(f"{where}.structuredContent: not JSON data ({str(e)[:80]})") from None
    return _clean(data)


def _call_body(call: Mapping[str, Any], where: str) -> tuple[Any, Mapping[str, Any]]:
    """A Chat Completions tool call's type and its body (``call[type]``: the ``function`` object)."""
    kind = call.get("type", "function")
    body = as_mapping(call.get(kind)) if isinstance(kind, str) else None
    if not isinstance(body, Mapping):
        raise InputError(f"{where}.{kind if isinstance(kind, str) else 'function'}: a tool call needs a "
                         "'function' object with the tool's 'name'")
    return kind, body


def _check_tool_result(block: Mapping[str, Any], at: str) -> None:
    if block["type"] not in _RESULT_BLOCKS:
        raise InputError(f"{at}: a {block['type']} block belongs in an assistant message")
    if not isinstance(block.get("tool_use_id"), str):
        raise InputError(f"{at}.tool_use_id: a tool_result needs the id of its tool_use")
    if "is_error" in block and not isinstance(block["is_error"], bool):
        raise InputError(f"{at}.is_error: must be true or false")


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
            return self.object_text(as_mapping(content) or content, where, blocks)
        texts = [self.part_text(part, f"{where}[{j}]", blocks) for j, part in enumerate(content)]
        return " ".join(t for t in texts if t)

    def object_text(self, content: Any, where: str, blocks: list[tuple[str, Mapping[str, Any]]] | None) -> str:
        """Content that is one object: a content block (MCP prompt and sampling messages) or an MCP
        CallToolResult; anything else refused."""
        if not isinstance(content, Mapping):
            raise InputError(f"{where}: content must be a string or a list of content parts, "
                             f"got {type(content).__name__}")
        if "type" in content:
            return self.text_of([content], where, blocks)
        if "content" in content:
            return self.mcp_result(content, where)
        raise InputError(f"{where}: content must be a string, a list of content parts or an MCP tool "
                         f"result, got an object with keys {_object_keys(content)}")

    def part_text(self, part: Any, at: str, blocks: list[tuple[str, Mapping[str, Any]]] | None) -> str:
        """One content part's text ("" for a part that carries none); a tool block goes to ``blocks``."""
        if isinstance(part, str):
            return _clean(part)
        part = as_mapping(part) or part
        if not isinstance(part, Mapping):
            raise InputError(f"{at}: a content part must be an object with a 'type', got {type(part).__name__}")
        kind = part.get("type")
        if not isinstance(kind, str):
            raise InputError(f"{at}.type: a content part needs a string 'type'")
        if kind in _TEXT_PARTS:
            return _text_part(part, kind, at)
        if kind in _CALL_BLOCKS:
            if blocks is None:
                raise InputError(f"{at}: a {kind} block cannot appear here")
            blocks.append((at, part))
        elif kind == "resource":
            return _resource_text(part, at)
        # any other part type (images, audio, files, thinking, new block types) carries no text
        return ""

    def mcp_result(self, result: Mapping[str, Any], where: str) -> str:
        blocks = result.get("content")
        if not isinstance(blocks, (list, tuple)):
            raise InputError(f"{where}.content: an MCP tool result's 'content' must be a list of content blocks")
        if "isError" in result and not isinstance(result["isError"], bool):
            raise InputError(f"{where}.isError: must be true or false")
        text = self.text_of(blocks, f"{where}.content")
        if not text and result.get("structuredContent") is not None:
            text = _structured_text(result, where)
        return text

    # -- calls --------------------------------------------------------------------------------
    def call_name(self, call: Any, where: str) -> str:
        """The tool named by one Chat Completions ``tool_calls`` entry."""
        call = as_mapping(call) or call
        if not isinstance(call, Mapping):
            raise InputError(f"{where}: a tool call must be an object, got {type(call).__name__}")
        kind, body = _call_body(call, where)
        name = _name(body.get("name"), f"{where}.{kind}.name")
        args = body.get("arguments", body.get("input"))
        if args is not None and not isinstance(args, (str, Mapping)):
            raise InputError(f"{where}.{kind}.arguments: must be a JSON string or an object")
        self.remember(call.get("id"), name)
        return name

    def listed_calls(self, msg: Mapping[str, Any], where: str) -> list[str]:
        """The tools an assistant message's Chat Completions ``tool_calls`` name."""
        calls = msg.get("tool_calls")
        if calls is None:
            return []
        if not isinstance(calls, (list, tuple)):
            raise InputError(f"{where}.tool_calls: must be a list of tool calls")
        return [self.call_name(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]

    def used_tools(self, blocks: list[tuple[str, Mapping[str, Any]]]) -> list[str]:
        """The tools an assistant message's tool_use blocks call."""
        names = []
        for at, block in blocks:
            if block["type"] not in _USE_BLOCKS:
                raise InputError(f"{at}: a {block['type']} block belongs in a user message")
            name = _name(block.get("name"), f"{at}.name")
            self.remember(block.get("id"), name)
            names.append(name)
        return names

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
            self.turns.append(_checked_turn(turn, where))
            return
        if not isinstance(turn, (list, tuple)):
            turn = as_mapping(turn) or turn
        if isinstance(turn, Mapping):
            return self.entry(turn, where)
        if _is_pair(turn):
            return self.message({"role": turn[0], "content": turn[1]}, where)
        raise InputError(f"{where}: a message is {{'role': ..., 'content': ...}}, got {reprlib.repr(turn)}")

    def entry(self, entry: Mapping[str, Any], where: str) -> None:
        """A message, or an OpenAI Responses input item (an object with a ``type`` and no ``role``)."""
        if "role" not in entry and isinstance(entry.get("type"), str):
            return self.item(entry, where)
        return self.message(entry, where)

    def message(self, msg: Mapping[str, Any], where: str) -> None:
        role = _role(msg, where)
        blocks: list[tuple[str, Mapping[str, Any]]] = []
        text = self.text_of(msg.get("content"), f"{where}.content", blocks if role in _BLOCK_ROLES else None)
        if role == "assistant":
            self.assistant(msg, where, text, blocks)
        elif role == "tool":
            named = (msg["name"],) if isinstance(msg.get("name"), str) and msg["name"] else ()
            self.turns.append(Turn("tool", text, self.answered(msg.get("tool_call_id")) or named))
        elif role == "user" and blocks:
            self.tool_results(blocks, text)
        else:
            self.turns.append(Turn(role, text))

    def assistant(self, msg: Mapping[str, Any], where: str, text: str,
                  blocks: list[tuple[str, Mapping[str, Any]]]) -> None:
        """An assistant message: its text and the tools it calls, by ``tool_calls``, the legacy
        ``function_call`` and tool_use blocks."""
        names = self.listed_calls(msg, where)
        if msg.get("function_call") is not None:  # the legacy single call
            fc = as_mapping(msg["function_call"])
            if not isinstance(fc, Mapping):
                raise InputError(f"{where}.function_call: must be an object with a 'name'")
            names.append(_name(fc.get("name"), f"{where}.function_call.name"))
        names += self.used_tools(blocks)
        self.turns.append(Turn("assistant", text, tuple(dict.fromkeys(names))))

    def tool_results(self, blocks: list[tuple[str, Mapping[str, Any]]], text: str) -> None:
        """A user message carrying Anthropic tool_result blocks: a tool turn, then its text as a user turn."""
        results: list[str] = []
        answered: list[str] = []
        for at, block in blocks:
            _check_tool_result(block, at)
            results.append(self.text_of(block.get("content"), f"{at}.content"))
            answered += self.answered(block["tool_use_id"])
        self.turns.append(Turn("tool", " ".join(r for r in results if r), tuple(dict.fromkeys(answered))))
        if text:
            self.turns.append(Turn("user", text))

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


def _check_history_type(history: Any) -> None:
    if isinstance(history, (str, bytes)):
        raise InputError("history must be a list of messages, not a string")
    if isinstance(history, Mapping) or not isinstance(history, Iterable):
        raise InputError(f"history must be a list of messages, got {type(history).__name__}")


def validate_history(history: Iterable[Any] | None) -> list[Turn]:
    """A history (a list of messages in any shape the module docstring lists) as Turns."""
    if history is None:
        return []
    _check_history_type(history)
    reader = _Reader()
    for i, turn in enumerate(history):
        first = len(reader.turns)
        reader.add(turn, i)
        for t in reader.turns[first:]:
            check_text(t.content, f"history[{i}].content")
            check_text(" ".join(t.tools), f"history[{i}]: a tool name")
    return reader.turns

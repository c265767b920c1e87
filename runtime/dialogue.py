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

Every Turn keeps the names of the tools it called (or answered for); a malformed message raises
InputError naming the message index and the field, e.g. ``history[3].content[1].text``.
"""
from __future__ import annotations

import json
import re
import reprlib  # bounded in depth and length: a message may nest without end
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

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


def validate_query(query: Any, max_chars: int) -> str:
    if not isinstance(query, str):
        raise InputError(f"the utterance must be a string, got {type(query).__name__}")
    text = " ".join(query.split())
    if not text:
        raise InputError("the utterance is empty (or only whitespace); nothing to select tools for")
    if len(text) > max_chars:
        raise InputError(f"the utterance is {len(text):,} characters long; the limit is {max_chars:,} "
                         "(SelectorConfig.max_query_chars). Pass the user's request, not a document")
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
    def text_of(self, content: Any, where: str, blocks: list | None = None) -> str:
        """The text of a message's content; tool_use / tool_result blocks go to ``blocks``."""
        if content is None:
            return ""
        if isinstance(content, str):
            return _clean(content)
        if isinstance(content, Mapping):
            if "type" in content:  # one content block (MCP prompt and sampling messages)
                return self.text_of([content], where, blocks)
            if "content" in content:  # an MCP CallToolResult
                return self.mcp_result(content, where)
            raise InputError(f"{where}: content must be a string, a list of content parts or an MCP tool "
                             f"result, got an object with keys {sorted(content)[:6]}")
        if not isinstance(content, (list, tuple)):
            raise InputError(f"{where}: content must be a string or a list of content parts, "
                             f"got {type(content).__name__}")
        texts = []
        for j, part in enumerate(content):
            at = f"{where}[{j}]"
            if isinstance(part, str):
                texts.append(_clean(part))
                continue
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
                res = part.get("resource")
                if not isinstance(res, Mapping):
                    raise InputError(f"{at}.resource: an embedded resource must be an object")
                if isinstance(res.get("text"), str):
                    texts.append(_clean(res["text"]))
            # any other part type (images, audio, files, thinking, new block types) carries no text
        return " ".join(t for t in texts if t)

    def mcp_result(self, result: Mapping[str, Any], where: str) -> str:
        blocks = result.get("content")
        if not isinstance(blocks, list):
            raise InputError(f"{where}.content: an MCP tool result's 'content' must be a list of content blocks")
        if "isError" in result and not isinstance(result["isError"], bool):
            raise InputError(f"{where}.isError: must be true or false")
        text = self.text_of(blocks, f"{where}.content")
        if not text and result.get("structuredContent") is not None:
            text = _clean(json.dumps(result["structuredContent"], ensure_ascii=False))
        return text

    # -- calls --------------------------------------------------------------------------------
    def call_name(self, call: Any, where: str) -> str:
        """The tool named by one Chat Completions ``tool_calls`` entry."""
        if not isinstance(call, Mapping):
            raise InputError(f"{where}: a tool call must be an object, got {type(call).__name__}")
        kind = call.get("type", "function")
        body = call.get(kind) if isinstance(kind, str) else None
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
        blocks: list = []
        text = self.text_of(content, f"{where}.content", blocks if role in ("user", "assistant") else None)
        if role == "assistant":
            names = []
            calls = msg.get("tool_calls")
            if calls is not None:
                if not isinstance(calls, list):
                    raise InputError(f"{where}.tool_calls: must be a list of tool calls")
                names += [self.call_name(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
            if msg.get("function_call") is not None:  # the legacy single call
                fc = msg["function_call"]
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
            results, answered = [], []
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


def tool_phrase(names: Sequence[str]) -> str:
    """Called tools as words the embedder knows: ``github__create_issue`` -> ``github create issue``."""
    return ", ".join(re.sub(r"[_.\-/:]+", " ", n).strip() for n in names)


def _with_tools(text: str, tools: Sequence[str]) -> str:
    if not tools:
        return text
    return f"{text} ({tool_phrase(tools)})" if text else tool_phrase(tools)


def _exchanges(history: Sequence[Turn]) -> list[Turn]:
    """User and assistant turns, tool results and system prompts dropped; an assistant message's
    text carries the tools it called, and an assistant's consecutive messages (a tool call, then
    its reply) are merged, so that ``history_turns`` counts turns of the conversation, not tool
    plumbing."""
    out: list[Turn] = []
    for t in history:
        if t.role in ("system", "tool"):
            continue
        text = _with_tools(t.content, t.tools) if t.role == "assistant" else t.content
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


def recent_turns(history: Sequence[Turn], mode: str, turns: int = 4) -> list[Turn]:
    """The earlier turns a history mode keeps, oldest first: the last ``turns`` user turns (``user``)
    or turns of the conversation (``all``), none for ``none``. The one place history is folded:
    ``retrieval_text`` and the LLM decomposer's prompt both read it.

    Tool results and system prompts are left out, and an assistant's tool call and its reply count
    as one turn. The tools called come along as words (measured in docs/bench/history.md): under
    ``all`` each assistant turn carries the tools it called, under ``user`` each user turn carries
    the tools called in answer to it.
    """
    if mode == "none":
        return []
    merged = _exchanges(history)
    if mode == "user":
        answered = [nxt.tools if nxt.role == "assistant" else () for nxt in [*merged[1:], Turn("user", "")]]
        keep = [Turn("user", _with_tools(t.content, tools), tools)
                for t, tools in zip(merged, answered) if t.role == "user"]
    else:
        keep = merged
    return keep[-turns:]

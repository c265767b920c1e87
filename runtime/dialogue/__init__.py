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

The package holds ``messages`` (the message shapes read into Turns), ``fold`` (how a history mode
folds them into the retrieval text) and ``bounds`` (``bounded_history``).
"""
from __future__ import annotations

from .bounds import bounded_history
from .fold import recent_turns, retrieval_text, tool_phrase
from .messages import ROLES, Turn, as_mapping, check_text, plain, validate_history, validate_query

__all__ = ["ROLES", "Turn", "as_mapping", "bounded_history", "check_text", "plain", "recent_turns", "retrieval_text",
           "tool_phrase", "validate_history", "validate_query"]

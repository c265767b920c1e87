"""Tool definitions in the formats LLM APIs take: MCP, OpenAI (Chat Completions and Responses) and
Anthropic Messages.

- ``mcp``: the MCP ``tools/list`` tool, ``{"name", "title"?, "description", "inputSchema",
  "outputSchema"?, "annotations"?}``;
- ``openai``: a Chat Completions tool, ``{"type": "function", "function": {"name", "description",
  "parameters"}}``;
- ``openai-responses``: a Responses API function tool, ``{"type": "function", "name",
  "description", "parameters"}``;
- ``anthropic``: a Messages API client tool, ``{"name", "description", "input_schema"}``.

OpenAI function names are at most 64 of ``[A-Za-z0-9_-]``, Anthropic tool names at most 128; a
tool whose name a format cannot carry raises CatalogError naming it (the API would refuse the whole
request).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from .catalog import Tool
from .errors import CatalogError, InputError

FORMATS = ("mcp", "openai", "openai-responses", "anthropic")

_NAME_RULES = {
    "openai": (re.compile(r"^[A-Za-z0-9_-]{1,64}$"), "1-64 letters, digits, '_' or '-'"),
    "openai-responses": (re.compile(r"^[A-Za-z0-9_-]{1,64}$"), "1-64 letters, digits, '_' or '-'"),
    "anthropic": (re.compile(r"^[A-Za-z0-9_-]{1,128}$"), "1-128 letters, digits, '_' or '-'"),
}


def check_format(format: Any) -> str:
    if format not in FORMATS:
        raise InputError(f"format must be one of {FORMATS}, got {format!r}")
    return format


def _checked_name(tool: Tool, format: str) -> str:
    rule = _NAME_RULES.get(format)
    if rule and not rule[0].match(tool.name):
        raise CatalogError(f"tool {tool.name!r} cannot be sent as a {format} tool: names there are {rule[1]}")
    return tool.name


def tool_definition(tool: Tool, format: str = "mcp") -> dict[str, Any]:
    """One tool as the API named by ``format`` takes it (see the module docstring)."""
    check_format(format)
    if format == "mcp":
        return tool.to_mcp()
    name = _checked_name(tool, format)
    schema = dict(tool.parameters) or {"type": "object", "properties": {}}
    if format == "openai":
        return {"type": "function", "function": {"name": name, "description": tool.description, "parameters": schema}}
    if format == "openai-responses":
        return {"type": "function", "name": name, "description": tool.description, "parameters": schema}
    return {"name": name, "description": tool.description, "input_schema": schema}


def tool_definitions(tools: Iterable[Tool], format: str = "mcp") -> list[dict[str, Any]]:
    check_format(format)
    return [tool_definition(t, format) for t in tools]

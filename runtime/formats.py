"""Tool definitions in the formats LLM APIs take: MCP, OpenAI (Chat Completions and Responses) and
Anthropic Messages.

- ``mcp``: the MCP ``tools/list`` tool, ``{"name", "title"?, "description", "inputSchema",
  "outputSchema"?, "annotations"?}``;
- ``openai``: a Chat Completions tool, ``{"type": "function", "function": {"name", "description",
  "parameters"}}``;
- ``openai-responses``: a Responses API function tool, ``{"type": "function", "name",
  "description", "parameters", "strict": false}``;
- ``anthropic``: a Messages API client tool, ``{"name", "description", "input_schema"}``.

Every definition validates against the SDK's published type (``openai.types.chat.
ChatCompletionFunctionToolParam``, ``openai.types.responses.FunctionToolParam``, which requires
``strict``: sent as ``false``, since a strict function must close every object schema, and
``anthropic.types.ToolParam``, whose ``input_schema`` is an object schema). Tool names go out
through the one mapping of ``magicselector.names``: a name the API takes is sent unchanged, any
other (``ws__files.read``, a name over 64 characters) as a sanitized name with a short hash; map a
name the model calls back with ``catalog_name(wire_name, tools)`` or a ``NameMap``.
"""
from __future__ import annotations

from typing import Any, Iterable, cast

from .catalog import Tool
from .errors import InputError
from .names import NameMap, wire_name

FORMATS = ("mcp", "openai", "openai-responses", "anthropic")


def check_format(format: Any) -> str:
    if format not in FORMATS:
        raise InputError(f"format must be one of {FORMATS}, got {format!r}")
    return cast(str, format)  # one of FORMATS


def tool_definition(tool: Tool, format: str = "mcp", name: str | None = None) -> dict[str, Any]:
    """One tool as the API named by ``format`` takes it (see the module docstring); ``name`` is its
    wire name when a ``NameMap`` gave one (by default ``wire_name(tool.name, format)``)."""
    check_format(format)
    if format == "mcp":
        return tool.to_mcp()
    name = wire_name(tool.name, format) if name is None else name
    schema = dict(tool.parameters) or {"type": "object", "properties": {}}
    schema.setdefault("type", "object")  # the APIs take object schemas only; MCP's are objects too
    if format == "openai":
        return {"type": "function", "function": {"name": name, "description": tool.description, "parameters": schema}}
    if format == "openai-responses":
        return {"type": "function", "name": name, "description": tool.description, "parameters": schema,
                "strict": False}
    return {"name": name, "description": tool.description, "input_schema": schema}


def tool_definitions(tools: Iterable[Tool], format: str = "mcp") -> list[dict[str, Any]]:
    """The definitions of ``tools`` in ``format``, their wire names distinct (one ``NameMap``)."""
    check_format(format)
    tools = list(tools)
    names = NameMap(tools, format)
    return [tool_definition(t, format, names.wire(t.name)) for t in tools]


def catalog_name(wire: str, tools: Iterable[Any]) -> str:
    """The catalog name of the tool a model called as ``wire`` (its name in an OpenAI or Anthropic
    tool call), among ``tools`` (Tools, names, a Catalog). A name that went out unchanged comes
    back as it is; UnknownToolError when no tool of ``tools`` goes out as ``wire``."""
    tools = list(tools)
    for fmt in ("openai", "mcp"):  # every API format shares one name rule; mcp sends names as they are
        names = NameMap(tools, fmt)
        if wire in names:
            return names.catalog_name(wire)
    return NameMap(tools, "openai").catalog_name(wire)  # raises, naming the wire name

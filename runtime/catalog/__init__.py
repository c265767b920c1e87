"""Tool catalogs: MCP tool definitions, validated, and the text each tool is embedded with.

A catalog can be read from
- an MCP ``tools/list`` result as a server returns it: the JSON-RPC response
  ``{"jsonrpc", "id", "result": {"tools": [...], "nextCursor"?}}``, its ``result``, or a list of
  such responses (the pages of a paginated listing); each tool {name, title?, description,
  inputSchema, outputSchema?, annotations?};
- an MCP-style JSON file: a list of tools, or {"tools": [...]};
- a benchmark ``tools.jsonl`` (one {id, name, description, parameters} per line);
- a folder of such JSON files (the shipped phone catalog is one file per domain).

The tools of JSON catalogs are MCP tools: each ``inputSchema`` (and ``outputSchema``) must be a JSON
Schema object of type ``object`` that passes the JSON Schema meta-schema check (Draft 2020-12 unless
the schema names another ``$schema``), so that a broken schema is reported here, with its server and
tool, and never handed to an LLM. Benchmark ``tools.jsonl`` files keep their own schema dialects
(BFCL's ``"type": "dict"``) and are not checked.

Several MCP servers at once (``mcp_catalog``, ``load_catalogs``): every tool is named
``<server>__<tool>`` (two underscores), the convention MCP hosts use to keep the tools of different
servers apart, or with ``namespace="mcp"`` ``mcp__<server>__<tool>``, the names Claude Code gives MCP
tools; a tool's name depends only on its server's name and its own, never on which other servers are
loaded, and the first ``__`` separates them. Server names are sanitized as hosts do: every
character outside ``[A-Za-z0-9_-]`` becomes ``_`` (``My Server`` -> ``My_Server``); runs of ``_`` are
then folded into one and ``_`` at either end dropped, so that no server name holds the separator or
touches it, and the mapping is reversible (``a_`` + ``b`` is ``a__b``, never ``a___b``).

Limits (refused with a CatalogError, or an InputError from ``check_tool``, naming the tool and field):
a name of 1 to ``MAX_NAME_CHARS`` (128, MCP's limit) printable characters, an id of at most
``MAX_ID_CHARS``, a title of at most ``MAX_TITLE_CHARS``, a description of at most
``MAX_DESCRIPTION_CHARS``; a whole definition of at most ``MAX_TOOL_JSON_CHARS`` characters as JSON,
``MAX_TOOL_NODES`` values and ``MAX_TOOL_DEPTH`` levels of objects and arrays (checked before any
schema is walked). MCP fields this package does not model (``execution``, ``_meta``, ``icons``, and
whatever the specification adds) are kept on the Tool (``Tool.extra``) and passed through by
``Tool.to_mcp`` and the bundle's catalog file.

The package holds one module per part: ``tool`` (the Tool record and one definition's parsing),
``bounds`` (a definition's size, value and depth bounds), ``schema`` (the JSON Schema checks), ``collection`` (``Catalog``), ``files`` (the file
formats above, ``load_catalog``) and ``servers`` (several MCP servers).
"""
from __future__ import annotations

from .collection import PACK_AT, Catalog, catalog_digest
from .files import LAZY_JSON_AT, PHONE_CATALOG_DIR, load_catalog, load_phone_catalog
from .schema import check_json_schema
from .servers import load_catalogs, mcp_catalog, namespaced, sanitize_server_name, server_name_of
from .bounds import MAX_TOOL_DEPTH, MAX_TOOL_JSON_CHARS, MAX_TOOL_NODES
from .tool import (MAX_DESCRIPTION_CHARS, MAX_ID_CHARS, MAX_NAME_CHARS, MAX_TITLE_CHARS, MCP_PREFIX, NAMESPACE_SEP,
                   NAMESPACES, Tool, check_tool, check_tool_id, parse_tool, schema_tokens, tool_text)

__all__ = [
    "LAZY_JSON_AT", "MAX_DESCRIPTION_CHARS", "MAX_ID_CHARS", "MAX_NAME_CHARS", "MAX_TITLE_CHARS", "MAX_TOOL_DEPTH",
    "MAX_TOOL_JSON_CHARS", "MAX_TOOL_NODES", "MCP_PREFIX", "NAMESPACES", "NAMESPACE_SEP", "PACK_AT",
    "PHONE_CATALOG_DIR", "Catalog", "Tool", "catalog_digest", "check_json_schema", "check_tool", "check_tool_id",
    "load_catalog", "load_catalogs", "load_phone_catalog", "mcp_catalog", "namespaced", "parse_tool",
    "sanitize_server_name", "schema_tokens", "server_name_of", "tool_text",
]

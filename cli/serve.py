"""``magicselector serve``: an MCP server over stdio whose one tool, ``search_tools``, returns the
definitions of the tools the Selector picks for a request, so that any MCP host can use the
runtime as its tool retriever. Needs the ``serve`` extra (the ``mcp`` package)."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import replace
from typing import Any

from magicselector.cli_options import add_rerank_options, selector_config

SERVER_NAME = "magicselector"
TOOL_NAME = "search_tools"
TOOL_DESCRIPTION = ("Find the tools needed for a request among the catalog's tools, on this device. Returns the "
                    "selected tools' definitions (name, description, input schema) in the format asked for.")


def register(sub: Any) -> None:
    sp = sub.add_parser("serve", help="an MCP server over stdio exposing search_tools (needs the serve extra)")
    sp.add_argument("--bundle", help="bundle folder (default: the default bundle, built on first use)")
    sp.add_argument("--catalog", nargs="+", metavar="[SERVER=]FILE",
                    help="serve these tools instead of the bundle's: MCP tools/list results or any catalog file; "
                         "with several, tools are named SERVER__TOOL")
    sp.add_argument("--history-mode", choices=["none", "user", "all"],
                    help="what of a call's history retrieval sees (default: the Selector's)")
    sp.add_argument("--threads", type=int, help="inference threads (default: the Selector's)")
    add_rerank_options(sp)
    sp.add_argument("--rerank-batch-ms", type=float, default=None, metavar="MS",
                    help="merge the reranker runs of concurrent calls that arrive within MS milliseconds into one "
                         "(default off; refused for a reranker whose scores depend on its batch, as the shipped "
                         "INT8 one's do)")
    sp.add_argument("--rerank-batch-inexact", action="store_true",
                    help="with --rerank-batch-ms, batch such a reranker anyway: a call's scores then depend on what "
                         "else was called at the same time (for measuring what batching buys)")
    sp.set_defaults(func=cmd_serve)


def input_schema() -> dict[str, Any]:
    from magicselector.formats import FORMATS

    return {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "the user's request (or the task) to find tools for"},
            "history": {"type": "array", "items": {"type": "object"},
                        "description": "the conversation before the request, as chat messages: {role, content} "
                                       "(OpenAI, Anthropic and MCP shapes, tool calls included)"},
            "format": {"type": "string", "enum": list(FORMATS), "default": "mcp",
                       "description": "the format of the returned tool definitions"},
            "max_tools": {"type": "integer", "minimum": 1, "description": "return at most this many tools"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "tools": {"type": "array", "items": {"type": "object"}, "description": "the selected tools' definitions"},
        "scores": {"type": "array", "items": {"type": "number"}},
        "subtasks": {"type": "array", "items": {"type": "string"}},
        "timings_ms": {"type": "object"},
    },
    "required": ["tools"],
}


def search(selector: Any, arguments: Any) -> dict[str, Any]:
    """What ``search_tools`` answers: the selected tools' definitions (and their scores), or an
    InputError for arguments it cannot use."""
    from magicselector.errors import InputError
    from magicselector.formats import check_format

    if not isinstance(arguments, dict):
        raise InputError("search_tools takes an object of arguments")
    unknown = sorted(set(arguments) - set(input_schema()["properties"]))
    if unknown:
        raise InputError(f"search_tools: unknown arguments {unknown}")
    fmt = check_format(arguments.get("format", "mcp"))
    limit = arguments.get("max_tools")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InputError("max_tools must be an integer >= 1")
    selection = selector.select(arguments.get("query"), arguments.get("history"))
    tools = selection.tools[:limit] if limit else selection.tools
    return {"tools": selector.schemas(replace(selection, tools=tools), format=fmt),
            "scores": [round(float(t.score), 4) for t in tools], "subtasks": list(selection.subtasks),
            "timings_ms": {k: round(v, 2) for k, v in selection.timings_ms.items()}}


def cmd_serve(args: argparse.Namespace) -> int:
    from magicselector.errors import InputError

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise InputError("`magicselector serve` needs the mcp package: pip install 'magicselector[serve]'") from None
    import anyio

    from magicselector.selector import Selector

    batch_ms = getattr(args, "rerank_batch_ms", None)
    if batch_ms is None and getattr(args, "rerank_batch_inexact", False):
        raise InputError("--rerank-batch-inexact applies with --rerank-batch-ms")
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the protocol and nothing else
        selector = Selector.from_bundle(args.bundle, config=selector_config(args), progress=False)
        if args.catalog:
            from magicselector.catalog import load_catalogs

            selector = selector.with_catalog(load_catalogs(args.catalog))
        if batch_ms is not None:
            selector = with_rerank_batching(selector, batch_ms, exact=not args.rerank_batch_inexact)
    anyio.run(serve_stdio, selector)
    return 0


def with_rerank_batching(selector: Any, window_ms: float, exact: bool = True) -> Any:
    """``selector`` whose reranker merges concurrent callers' runs (``magicselector.stages.rerank_batch``)."""
    from magicselector.errors import InputError
    from magicselector.stages.rerank_batch import BatchingReranker, RerankBatching

    if selector.reranker is None or not selector.config.rerank:
        raise InputError("--rerank-batch-ms batches the reranker: give --rerank (and a bundle with a reranker)")
    return selector.with_reranker(BatchingReranker(selector.reranker, RerankBatching(window_ms=window_ms,
                                                                                     exact=exact)))


def build_server(selector: Any):
    """The MCP server: ``tools/list`` lists ``search_tools``; ``tools/call`` runs the one Selector
    (thread-safe) in a worker thread, so the event loop keeps answering."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from magicselector import __version__
    from magicselector.errors import MagicSelectorError

    tool = types.Tool(name=TOOL_NAME, title="Search tools", description=TOOL_DESCRIPTION, input_schema=input_schema(),
                      output_schema=OUTPUT_SCHEMA,
                      annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True,
                                                        open_world_hint=False, destructive_hint=False))

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: Any) -> Any:
        if params.name != TOOL_NAME:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"unknown tool {params.name!r}")],
                                        is_error=True)
        try:
            result = await anyio.to_thread.run_sync(search, selector, params.arguments or {})
        except MagicSelectorError as e:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(e))], is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(result))],
                                    structured_content=result)

    return Server(SERVER_NAME, version=__version__, instructions=f"Call {TOOL_NAME} with the user's request to get "
                  "the definitions of the tools it needs.", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(selector: Any) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(selector)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())

"""``magicselector serve``: an MCP server whose one tool, ``search_tools``, returns the definitions
of the tools the Selector picks for a request, so that any MCP host can use the runtime as its tool
retriever; over stdio, or over the specification's streamable HTTP transport (stateless, so several
replicas can share a port). Every message passes ``magicselector.cli.jsonrpc.screen`` first, so a
malformed one gets a JSON-RPC error; over HTTP, Host and Origin, the token, the method, the protocol
version and the declared size are checked before a body is read, under header and body timeouts and
caps on connections and on bytes in flight. Needs the ``serve`` extra (the ``mcp`` package)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

from magicselector.cli.options import (HISTORY_MODES, add_bundle_trust_options, bundle_trust,
                                       selector_config)

SERVER_NAME = "magicselector"
TOOL_NAME = "search_tools"
TOOL_DESCRIPTION = ("Find the tools needed for a request among the catalog's tools, on this device. Returns the "
                    "selected tools' definitions (name, description, input schema) in the format asked for.")
TRANSPORTS = ("stdio", "streamable-http")
HTTP_PATH = "/mcp"
TOKEN_ENV = "MAGICSELECTOR_SERVE_TOKEN"
DEFAULT_MAX_MESSAGE_MB = 64.0
# what a careful operator would set in front of a tool server: a client gets 10 s to send its
# request line and headers and 30 s for its body; 256 connections stay well inside a 1,024-file
# limit; 256 MB of bodies in flight is four messages at the largest default size
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_MAX_INFLIGHT_MB = 256.0


def register(sub: Any) -> None:
    sp = sub.add_parser("serve", help="an MCP server (stdio or streamable HTTP) exposing search_tools "
                                      "(needs the serve extra)")
    sp.add_argument("--bundle", help="bundle folder (default: the default bundle, built on first use)")
    sp.add_argument("--catalog", nargs="+", metavar="[SERVER=]FILE",
                    help="serve these tools instead of the bundle's: MCP tools/list results or any catalog file; "
                         "with several, tools are named SERVER__TOOL")
    sp.add_argument("--namespace", choices=["server", "mcp"], default="server",
                    help="how --catalog names tools: SERVER__TOOL (default), or mcp__SERVER__TOOL as MCP hosts such "
                         "as Claude Code do (also for one file); server names are sanitized as hosts do")
    sp.add_argument("--history-mode", choices=HISTORY_MODES,
                    help="what of a call's history retrieval sees (default: the Selector's)")
    sp.add_argument("--threads", type=int, help="inference threads (default: the Selector's)")
    add_bundle_trust_options(sp)
    add_transport_options(sp)
    sp.set_defaults(func=cmd_serve)


def add_transport_options(sp: Any) -> None:
    sp.add_argument("--transport", choices=TRANSPORTS, default="stdio",
                    help="stdio (default), or the MCP streamable HTTP transport at http://HOST:PORT/mcp "
                         "(stateless: JSON answers, no sessions, so replicas can share a port)")
    sp.add_argument("--host", default="127.0.0.1",
                    help="with streamable-http: the address to listen on (default 127.0.0.1; an address beyond "
                         "loopback needs --allow-remote)")
    sp.add_argument("--port", type=int, default=8765, help="with streamable-http: the port (default 8765; 0: any "
                                                             "free port, printed on stderr)")
    sp.add_argument("--allow-remote", action="store_true",
                    help="with streamable-http: allow a --host beyond loopback (give a --token too)")
    sp.add_argument("--token", default=None,
                    help=f"with streamable-http: require 'Authorization: Bearer TOKEN' on every request (default: "
                         f"${TOKEN_ENV} if set, else none)")
    sp.add_argument("--workers", type=int, default=1, metavar="N",
                    help="with streamable-http: run N server processes sharing the port (SO_REUSEPORT; the kernel "
                         "spreads connections over them)")
    sp.add_argument("--reuse-port", action="store_true",
                    help="with streamable-http: bind with SO_REUSEPORT, so that separately started servers can "
                         "share one port")
    sp.add_argument("--max-message-mb", type=float, default=DEFAULT_MAX_MESSAGE_MB, metavar="MB",
                    help=f"refuse a message (stdio line or HTTP body) over MB megabytes with a JSON-RPC error "
                         f"(default {DEFAULT_MAX_MESSAGE_MB:g}); over HTTP a declared Content-Length over it is "
                         f"refused before the body is read")
    sp.add_argument("--header-timeout", type=float, default=None, metavar="S",
                    help=f"with streamable-http: close a connection whose request line and headers have not all "
                         f"arrived within S seconds (default {DEFAULT_HEADER_TIMEOUT_S:g})")
    sp.add_argument("--body-timeout", type=float, default=None, metavar="S",
                    help=f"with streamable-http: answer 408 to a request whose body has not all arrived within S "
                         f"seconds of its headers (default {DEFAULT_BODY_TIMEOUT_S:g})")
    sp.add_argument("--max-connections", type=int, default=None, metavar="N",
                    help=f"with streamable-http: answer 503 and close a connection beyond N open ones, per "
                         f"process (default {DEFAULT_MAX_CONNECTIONS})")
    sp.add_argument("--max-inflight-mb", type=float, default=None, metavar="MB",
                    help=f"with streamable-http: answer 503 to a body that would take the bodies being read or "
                         f"served past MB megabytes, per process (default {DEFAULT_MAX_INFLIGHT_MB:g}; at least "
                         f"--max-message-mb)")


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
            "max_tools": {"type": "integer", "minimum": 1,
                          "description": "return at most this many tools (one per sub-task first)"},
            "max_schema_tokens": {"type": "integer", "minimum": 1,
                                  "description": "return at most this many tokens of tool definitions, counted "
                                                 "in the format asked for"},
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
    selection = selector.select(arguments.get("query"), arguments.get("history"),  # the budget checks its fields
                                max_tools=arguments.get("max_tools"),
                                max_schema_tokens=arguments.get("max_schema_tokens"), format=fmt)
    tools = selection.tools
    if not tools and arguments.get("max_schema_tokens") is not None:
        raise InputError(f"max_schema_tokens: {arguments['max_schema_tokens']} tokens fit none of the tools "
                         f"selected for this request (each one's {fmt} definition is larger); allow more tokens")
    return {"tools": selector.schemas(selection, format=fmt),
            "scores": [round(float(t.score), 4) for t in tools], "subtasks": list(selection.subtasks),
            "timings_ms": {k: round(v, 2) for k, v in selection.timings_ms.items()}}


def cmd_serve(args: argparse.Namespace) -> int:
    from magicselector.errors import InputError

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise InputError("`magicselector serve` needs the mcp package: pip install 'magicselector[serve]'") from None
    import anyio

    transport = getattr(args, "transport", "stdio")
    token = check_transport_options(args)
    if transport == "streamable-http" and getattr(args, "workers", 1) > 1:
        return run_workers(args)
    fix_malloc_mmap_threshold()
    selector = load_selector(args)
    max_bytes = int(getattr(args, "max_message_mb", DEFAULT_MAX_MESSAGE_MB) * 1024 * 1024)
    if transport == "stdio":
        anyio.run(serve_stdio, selector, max_bytes)
    else:
        serve_http(selector, host=args.host, port=args.port, token=token, reuse_port=args.reuse_port,
                   limits=http_limits(args))
    return 0


MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)


def fix_malloc_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Under glibc, serve every allocation of ``threshold`` bytes or more from its own mmap, so it
    goes back to the system when freed. glibc's default threshold is dynamic: the first large block
    freed raises it (up to 32 MiB), after which the buffers of later large messages come from the
    heap, which fragments and stays grown; a long-lived server then keeps the memory of its largest
    messages (docs/bench/serve.md, the memory section). Setting the threshold fixes it. Does nothing
    where the user set ``MALLOC_MMAP_THRESHOLD_`` or the C library is not glibc; True if set."""
    import ctypes
    import ctypes.util

    if "MALLOC_MMAP_THRESHOLD_" in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt, gnu_get_libc_version = libc.mallopt, libc.gnu_get_libc_version  # glibc has both
    except (OSError, AttributeError):
        return False
    del gnu_get_libc_version
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def load_selector(args: argparse.Namespace) -> Any:
    from magicselector.selector import Selector

    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the protocol and nothing else
        selector = Selector.from_bundle(args.bundle, config=selector_config(args), progress=False,
                                        **bundle_trust(args))
        if args.catalog:
            from magicselector.catalog import load_catalogs

            selector = selector.with_catalog(load_catalogs(args.catalog, namespace=getattr(args, "namespace", "server")))
    return selector


def check_transport_options(args: argparse.Namespace) -> str | None:
    """The bearer token to require (None: none), after refusing options that do not fit together."""
    import ipaddress

    from magicselector.errors import InputError

    transport = getattr(args, "transport", "stdio")
    mb = getattr(args, "max_message_mb", DEFAULT_MAX_MESSAGE_MB)
    if not mb > 0:
        raise InputError(f"--max-message-mb must be > 0, got {mb}")
    if transport == "stdio":
        given = [flag for flag, on in (("--token", getattr(args, "token", None) is not None),
                                       ("--allow-remote", getattr(args, "allow_remote", False)),
                                       ("--reuse-port", getattr(args, "reuse_port", False)),
                                       ("--workers", getattr(args, "workers", 1) != 1),
                                       *((flag, getattr(args, dest, None) is not None) for flag, dest in _LIMIT_FLAGS))
                 if on]
        if given:
            raise InputError(f"{', '.join(given)} applies with --transport streamable-http")
        return None
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be 0..65535, got {args.port}")
    if args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    if args.workers > 1 and args.port == 0:
        raise InputError("--workers N shares one port: give --port (not 0)")
    try:
        ipaddress.ip_address(args.host)
    except ValueError:
        if args.host != "localhost":
            raise InputError(f"--host must be an IP address or localhost, got {args.host!r}") from None
    loopback = is_loopback(args.host)
    if not loopback and not args.allow_remote:
        raise InputError(f"--host {args.host} is beyond this machine (not loopback): add --allow-remote to serve "
                         "other machines, with a --token")
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise InputError("--token must not be empty")
    if not loopback and token is None:
        # a Host/Origin check cannot protect a server other machines reach: any of them could call it
        raise InputError(f"--host {args.host} --allow-remote without a token: anyone who can reach the port could "
                         f"call search_tools; give --token T (or set ${TOKEN_ENV})")
    http_limits(args)  # refuses bad values before the bundle loads
    return token


_LIMIT_FLAGS = (("--header-timeout", "header_timeout"), ("--body-timeout", "body_timeout"),
                ("--max-connections", "max_connections"), ("--max-inflight-mb", "max_inflight_mb"))


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost``, any 127.0.0.0/8 address, ``::1`` in any
    spelling, or an IPv4-mapped loopback (``::ffff:127.0.0.1``)."""
    import ipaddress

    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


@dataclass(frozen=True)
class HTTPLimits:
    """What one HTTP server process allows (``--header-timeout`` ... ``--max-inflight-mb``)."""

    max_message_bytes: int = int(DEFAULT_MAX_MESSAGE_MB * 1024 * 1024)
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_inflight_bytes: int = int(DEFAULT_MAX_INFLIGHT_MB * 1024 * 1024)


def http_limits(args: argparse.Namespace) -> HTTPLimits:
    """The HTTPLimits of the parsed flags, each checked (an InputError names the flag)."""
    from magicselector.errors import InputError

    def given(dest: str, default: Any) -> Any:
        value = getattr(args, dest, None)
        return default if value is None else value

    message_mb = float(getattr(args, "max_message_mb", DEFAULT_MAX_MESSAGE_MB))
    header, body = given("header_timeout", DEFAULT_HEADER_TIMEOUT_S), given("body_timeout", DEFAULT_BODY_TIMEOUT_S)
    connections, inflight_mb = given("max_connections", DEFAULT_MAX_CONNECTIONS), given("max_inflight_mb", None)
    for flag, value in (("--header-timeout", header), ("--body-timeout", body)):
        if not 0 < value < float("inf"):
            raise InputError(f"{flag} must be a number of seconds > 0, got {value}")
    if connections < 1:
        raise InputError(f"--max-connections must be >= 1, got {connections}")
    if inflight_mb is None:
        inflight_mb = max(DEFAULT_MAX_INFLIGHT_MB, message_mb)
    if not inflight_mb >= message_mb:
        raise InputError(f"--max-inflight-mb ({inflight_mb:g}) must be at least --max-message-mb ({message_mb:g}): "
                         "else the largest message allowed could never be read")
    return HTTPLimits(int(message_mb * 1024 * 1024), float(header), float(body), int(connections),
                      int(inflight_mb * 1024 * 1024))


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


async def serve_stdio(selector: Any, max_message_bytes: int = int(DEFAULT_MAX_MESSAGE_MB * 1024 * 1024),
                      wire_in: Any = None, wire_out: Any = None) -> None:
    """Serve MCP over stdin/stdout (or the binary files given), one JSON-RPC message per line.

    The mcp package's own stdio reader drops a line it cannot parse, leaving the client waiting;
    this reader passes every line through the screen, answers the malformed ones itself and hands
    the rest to the server. While serving, fd 1 points at stderr, so stray output from a library
    cannot corrupt the wire."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage
    from pydantic import ValidationError

    from magicselector.cli.jsonrpc import INVALID_REQUEST, error_response, screen, too_large

    server = build_server(selector)
    with _claimed_stdio(wire_in, wire_out) as (wire_in, wire_out):
        read_send, read_recv = anyio.create_memory_object_stream[Any](0)
        write_send, write_recv = anyio.create_memory_object_stream[Any](0)
        lock = anyio.Lock()

        async def emit(line: bytes) -> None:
            async with lock:
                await anyio.to_thread.run_sync(_write_line, wire_out, line)

        async def reader() -> None:
            async with read_send:
                while True:
                    raw = await anyio.to_thread.run_sync(_read_line, wire_in, max_message_bytes)
                    if raw is None:
                        return
                    if isinstance(raw, TooLong):
                        await emit(_dumps({**too_large(max_message_bytes), "id": raw.request_id()}))
                        continue
                    if not raw.strip():
                        continue
                    screened = screen(raw)
                    del raw
                    if screened.error is not None:
                        await emit(_dumps(screened.error))
                        continue
                    if screened.message is None:
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_python(screened.message, by_name=False)
                    except ValidationError as e:
                        if screened.message.get("method") is not None and "id" in screened.message:
                            await emit(_dumps(error_response(INVALID_REQUEST, "Invalid request: " + _first_error(e),
                                                              screened.message["id"])))
                        continue
                    await read_send.send(SessionMessage(message))

        async def writer() -> None:
            async with write_recv:
                async for session_message in write_recv:
                    line = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await emit(line.encode("utf-8", "backslashreplace"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            await server.run(read_recv, write_send, server.create_initialization_options())
            tg.cancel_scope.cancel()


@dataclass(frozen=True)
class TooLong:
    """A line over the message limit: its first bytes and its last, kept to find its id."""

    head: bytes
    tail: bytes

    def request_id(self) -> Any:
        """The message's id where it can be read: a member of the outer object found in its first
        MiB (the mcp client writes the id before params) or its last member (the TypeScript SDK
        writes it after); None otherwise, as for a message with no id."""
        found = _head_id(self.head[:HEAD_SCAN_BYTES])
        if found is _NO_ID:
            match = _TAIL_ID.search(self.tail)
            found = _id_value(match.group(1)) if match else _NO_ID
        return None if found is _NO_ID else found


HEAD_SCAN_BYTES = 1 << 20
TAIL_BYTES = 4096
_NO_ID: Any = object()
_TOKEN = re.compile(rb'\s*("(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+)', re.S)
_TAIL_ID = re.compile(rb',\s*"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")\s*}\s*$')


def _id_value(token: bytes) -> Any:
    """A JSON-RPC id from its JSON text: a string or an integer, else ``_NO_ID``."""
    try:
        value = json.loads(token)
    except ValueError:
        return _NO_ID
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else _NO_ID


def _head_id(head: bytes) -> Any:
    """The ``id`` member of the outer JSON object that ``head`` begins, read token by token up to
    where ``head`` is cut; ``_NO_ID`` when it is not there."""
    pos, depth, key, after_colon = 0, 0, b"", False
    while (match := _TOKEN.match(head, pos)) is not None:
        token, pos = match.group(1), match.end()
        if token in (b"{", b"["):
            depth += 1
            after_colon = False
        elif token in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                return _NO_ID
        elif depth != 1:
            continue
        elif token == b":":
            after_colon = True
        elif token == b",":
            key, after_colon = b"", False
        elif after_colon:
            if key == b'"id"':
                return _id_value(token)
            after_colon = False
        else:
            key = token
    return _NO_ID


def _read_line(stream: Any, limit: int) -> bytes | TooLong | None:
    """The next line (None at the end), or a ``TooLong`` for a line over ``limit`` bytes, whose rest
    is read and dropped in bounded pieces (its last ``TAIL_BYTES`` kept)."""
    line = stream.readline(limit + 1)
    if not line:
        return None
    if len(line) <= limit or line.endswith(b"\n"):
        return line
    tail = line[-TAIL_BYTES:]
    while True:
        rest = stream.readline(1 << 20)
        if rest:
            tail = (tail + rest)[-TAIL_BYTES:]
        if not rest or rest.endswith(b"\n"):
            return TooLong(line[:HEAD_SCAN_BYTES], tail.rstrip(b"\r\n"))


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def _write_line(stream: Any, line: bytes) -> None:
    stream.write(line + b"\n")
    stream.flush()


def _first_error(e: Any) -> str:
    first = e.errors()[0] if e.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', str(e))}" if where else str(first.get("msg", e))


@contextlib.contextmanager
def _claimed_stdio(wire_in: Any, wire_out: Any) -> Any:
    """Binary files for the wire: the given ones, or private duplicates of fds 0 and 1 while fd 0
    reads /dev/null and fd 1 writes to stderr (restored on exit)."""
    if wire_in is not None and wire_out is not None:
        yield wire_in, wire_out
        return
    sys.stdout.flush()
    saved = os.dup(0), os.dup(1)
    wire_in, wire_out = os.fdopen(os.dup(0), "rb", buffering=1 << 16), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    try:
        yield wire_in, wire_out
    finally:
        with contextlib.suppress(OSError):
            wire_out.close()
        with contextlib.suppress(OSError):
            wire_in.close()
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        os.close(saved[0])
        os.close(saved[1])


class ScreenedHTTP:
    """ASGI middleware in front of the mcp package's streamable HTTP app. Before a body is read it
    checks, in order: Host and Origin (``check_host``: on a loopback server, whatever the token, against
    DNS rebinding), the bearer token, the method (POST only: a stateless server has no event stream
    for GET and no session to DELETE, so 405), the ``MCP-Protocol-Version`` header, the declared
    ``Content-Length`` against the message limit and the bytes in flight. Then it reads the body
    under the body timeout, screens it, answers a malformed one itself (400 with the JSON-RPC error,
    as the transport's specification asks; 200 for invalid params of a well-formed request) and
    replays a good one to the app. An early refusal closes the connection (the rest of the body is
    never read)."""

    def __init__(self, app: Any, token: str | None, limits: HTTPLimits, check_host: bool) -> None:
        self.app, self.token, self.limits, self.check_host = app, token, limits, check_host
        self.max_bytes = limits.max_message_bytes
        self.inflight = 0  # bytes of bodies reserved by requests being read or served (one event loop: no lock)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if self.check_host:
            refusal = foreign_host_or_origin(headers)
            if refusal is not None:
                await _send_json(send, refusal[0], {"error": refusal[1]}, [_CLOSE])
                return
        if self.token is not None and not self._authorized(headers):
            await _send_json(send, 401, {"error": "unauthorized: send Authorization: Bearer <token>"},
                             [(b"www-authenticate", b'Bearer realm="magicselector"'), _CLOSE])
            return
        if scope["method"] != "POST":
            if scope.get("path") == HTTP_PATH:
                await _send_json(send, 405, {"error": f"{scope['method']} {HTTP_PATH}: this server is stateless and "
                                                      "answers POST only (no event stream, no session)"},
                                 [(b"allow", b"POST"), _CLOSE])
            else:
                await self.app(scope, receive, send)
            return
        refusal = _unsupported_protocol_version(headers)
        if refusal is not None:
            await _send_json(send, 400, refusal, [_CLOSE])
            return
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                await _send_json(send, 400, {"error": f"Content-Length must be a byte count, got {declared[:40]!r}"},
                                 [_CLOSE])
                return
            if int(declared) > self.max_bytes:
                from magicselector.cli.jsonrpc import too_large

                await _send_json(send, 413, too_large(self.max_bytes), [_CLOSE])
                return
        reserved = int(declared) if declared is not None else 0
        if self.inflight + reserved > self.limits.max_inflight_bytes:
            await self._busy(send)
            return
        self.inflight += reserved
        try:
            await self._read_and_serve(scope, receive, send, reserved)
        finally:
            self.inflight -= reserved

    async def _read_and_serve(self, scope: Any, receive: Any, send: Any, reserved: int) -> None:
        import anyio

        grown = [0]  # bytes read beyond the reservation (a body without Content-Length), given back below
        try:
            with anyio.fail_after(self.limits.body_timeout_s):
                body = await self._body(receive, reserved, grown)
        except TimeoutError:
            self.inflight -= grown[0]
            await _send_json(send, 408, {"error": f"the request body did not arrive within "
                                                  f"{self.limits.body_timeout_s:g} s"}, [_CLOSE])
            return
        try:
            if body is _BUSY:
                await self._busy(send)
            elif body is None:
                from magicselector.cli.jsonrpc import too_large

                await _send_json(send, 413, too_large(self.max_bytes), [_CLOSE])
            else:
                await self._screened(scope, receive, send, body)
        finally:
            self.inflight -= grown[0]

    async def _busy(self, send: Any) -> None:
        await _send_json(send, 503, {"error": f"busy: the request bodies in flight would pass "
                                              f"{self.limits.max_inflight_bytes // (1024 * 1024)} MB; retry"},
                         [(b"retry-after", b"1"), _CLOSE])

    async def _screened(self, scope: Any, receive: Any, send: Any, body: bytes) -> None:
        from magicselector.cli.jsonrpc import INVALID_PARAMS, screen

        screened = screen(body)
        if screened.error is not None:
            error = screened.error
            ok = error["error"]["code"] == INVALID_PARAMS and error["id"] is not None
            await _send_json(send, 200 if ok else 400, error)
            return
        if screened.message is None:  # a notification or response with bad params: accepted, never answered
            await _send_json(send, 202, None)
            return
        del screened
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _authorized(self, headers: dict[str, str]) -> bool:
        import hmac

        value = headers.get("authorization")
        if value is None:
            return False
        scheme, _, given = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("latin-1"),
                                                                 str(self.token).encode())

    async def _body(self, receive: Any, reserved: int, grown: list[int]) -> Any:
        """The body (None: over the message limit; ``_BUSY``: over the bytes in flight); ``grown[0]``
        counts the bytes it took beyond ``reserved``, added to ``inflight`` here, given back by the caller."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            if size > reserved + grown[0]:  # more than declared (or nothing declared): reserve as it comes
                more = size - reserved - grown[0]
                if self.inflight + more > self.limits.max_inflight_bytes:
                    return _BUSY
                self.inflight += more
                grown[0] += more
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


_BUSY: Any = object()
_CLOSE = (b"connection", b"close")


def _headers(scope: Any) -> dict[str, str]:
    """The request's headers by lowercase name (the first of repeated ones), as text."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _hostname(authority: str) -> str:
    """The host of ``HOST[:PORT]`` or ``[V6][:PORT]``."""
    authority = authority.strip()
    if authority.startswith("["):
        return authority[: authority.find("]") + 1] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


def foreign_host_or_origin(headers: dict[str, str]) -> tuple[int, str] | None:
    """The refusal (status, why) of a request to a loopback server whose ``Host`` is not this machine
    (a page on another name that rebinds its DNS to 127.0.0.1) or whose ``Origin`` is a web page not
    served from this machine; None when both are local. No Origin is fine (a client that is not a
    browser); ``Origin: null`` is not."""
    host = headers.get("host")
    if host is None or not is_loopback(_hostname(host)):
        return 421, f"Host {host!r:.80} is not this machine; a loopback server answers localhost, 127.0.0.0/8 and [::1]"
    origin = headers.get("origin")
    if origin is not None:
        scheme, sep, rest = origin.partition("://")
        if not (sep and scheme.lower() in ("http", "https") and is_loopback(_hostname(rest.split("/", 1)[0]))):
            return 403, f"Origin {origin!r:.80} is not a page of this machine; a loopback server refuses other origins"
    return None


def _unsupported_protocol_version(headers: dict[str, str]) -> dict[str, Any] | None:
    version = headers.get("mcp-protocol-version")
    if version is None:
        return None
    try:
        from mcp_types.version import SUPPORTED_PROTOCOL_VERSIONS
    except ImportError:  # another mcp package layout: its own check answers
        return None
    if version in SUPPORTED_PROTOCOL_VERSIONS:
        return None
    from magicselector.cli.jsonrpc import INVALID_REQUEST, error_response

    return error_response(INVALID_REQUEST, f"Unsupported MCP-Protocol-Version {version[:40]!r}: this server "
                                           f"supports {', '.join(SUPPORTED_PROTOCOL_VERSIONS)}")


async def _send_json(send: Any, status: int, payload: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = b"" if payload is None else _dumps(payload)
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def http_app(selector: Any, host: str = "127.0.0.1", token: str | None = None,
             limits: HTTPLimits = HTTPLimits()) -> Any:
    """The ASGI app: the mcp package's streamable HTTP app for ``build_server(selector)`` at
    ``/mcp``, stateless with JSON answers, behind ``ScreenedHTTP``, which checks Host and Origin
    when ``host`` is loopback (with a token too) or when there is no token (a server beyond loopback
    needs one: ``check_transport_options``)."""
    from mcp.server.transport_security import TransportSecuritySettings

    server = build_server(selector)
    # the package's own Host/Origin check (on only for three literal hosts) is off: ScreenedHTTP's
    # runs first, for every loopback spelling, before the body is read
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, json_response=True, stateless_http=True,
                                     host=host, max_request_body_size=limits.max_message_bytes,
                                     transport_security=TransportSecuritySettings(
                                         enable_dns_rebinding_protection=False))
    return ScreenedHTTP(app, token, limits, check_host=is_loopback(host) or token is None)


def limited_protocol(limits: HTTPLimits) -> Any:
    """uvicorn's h11 protocol with a header timeout and a connection cap: a connection beyond
    ``max_connections`` open ones gets a 503 and is closed at once; one whose request line and
    headers have not all arrived ``header_timeout_s`` after its first byte (or after it connected,
    or after its previous answer) gets a 408 and is closed, so half-sent requests cannot hold the
    process's files."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LimitedH11Protocol(H11Protocol):  # type: ignore[misc]
        _refused = False
        _header_timer: Any = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            if len(self.connections) >= limits.max_connections:
                self._refused = True
                transport.write(_RAW_RESPONSE % (b"503 Service Unavailable", b"retry-after: 1\r\n"))
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            before = self.cycle
            if self._header_timer is None and (before is None or before.response_complete):
                self._arm()  # the first byte of a next request on a kept-alive connection
            super().data_received(data)
            if self.cycle is not before:  # the headers arrived: a request is being served
                self._disarm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(limits.header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return
            if not self.transport.is_closing():
                self.transport.write(_RAW_RESPONSE % (b"408 Request Timeout", b""))
                self.transport.close()

    return LimitedH11Protocol


_RAW_RESPONSE = b"HTTP/1.1 %s\r\ncontent-length: 0\r\nconnection: close\r\n%s\r\n"


def default_http_limits() -> dict[str, float]:
    """``serve``'s default HTTP limits, in the units its flags take."""
    limits = HTTPLimits()
    return {"header_timeout_s": limits.header_timeout_s, "body_timeout_s": limits.body_timeout_s,
            "max_connections": limits.max_connections, "max_message_mb": limits.max_message_bytes / 2**20,
            "max_inflight_mb": limits.max_inflight_bytes / 2**20}


def checks_cost_us(requests: int = 5000) -> dict[str, float]:
    """Microseconds per request that ``ScreenedHTTP`` spends ahead of the mcp app on a search_tools
    call (in this process, a no-op app behind it): ``all`` with every check a loopback server with a
    token makes (Host, Origin, token, method, protocol version, Content-Length, bytes in flight, body
    read and JSON screen), ``screen`` with only the token, body read and JSON screen (what ran before
    the Host/Origin and limit checks were added)."""
    import anyio

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "search_tools", "arguments": {"query": CHECKS_QUERY, "max_tools": 5}}}).encode()
    full = [(b"host", b"127.0.0.1:8765"), (b"origin", b"http://localhost:6274"), (b"authorization", b"Bearer t"),
            (b"content-type", b"application/json"), (b"mcp-protocol-version", b"2025-06-18"),
            (b"content-length", str(len(body)).encode())]
    bare = [(b"authorization", b"Bearer t"), (b"content-type", b"application/json")]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()

    async def receive() -> Any:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        return None

    async def timed(check_host: bool, headers: list[tuple[bytes, bytes]]) -> float:
        screened = ScreenedHTTP(app, "t", HTTPLimits(), check_host=check_host)
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
        for _ in range(requests // 10):  # warm
            await screened(scope, receive, send)
        start = time.perf_counter()
        for _ in range(requests):
            await screened(scope, receive, send)
        return (time.perf_counter() - start) / requests * 1e6

    async def both() -> dict[str, float]:
        return {"all": round(await timed(True, full), 1), "screen": round(await timed(False, bare), 1)}

    return anyio.run(both)


CHECKS_QUERY = "turn on bluetooth and play some jazz, then text Sam that I'm running late"


def limits_report(requests: int = 5000) -> dict[str, Any]:
    """What ``bench serve --transport http`` reports of the servers it runs (``python -m
    magicselector.cli.serve --limits-report``): the default limits and ``checks_cost_us``."""
    return {"http_limits": default_http_limits(), "checks_us_per_request": checks_cost_us(requests)}


def listening_socket(host: str, port: int, reuse_port: bool = False) -> Any:
    import socket

    from magicselector.errors import InputError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it Nagle's algorithm and delayed ACKs add about 40 ms to every answer
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        if not hasattr(socket, "SO_REUSEPORT"):
            sock.close()
            raise InputError("--reuse-port / --workers need SO_REUSEPORT, which this platform lacks")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InputError(f"--host {host} --port {port}: cannot listen there ({e.strerror})") from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def serve_http(selector: Any, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
               reuse_port: bool = False, limits: HTTPLimits = HTTPLimits()) -> None:
    """Serve ``http_app`` with uvicorn on ``host:port`` until interrupted (its h11 protocol with
    ``limited_protocol``'s header timeout and connection cap); the address goes to stderr."""
    import uvicorn

    sock = listening_socket(host, port, reuse_port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"magicselector serve: listening on http://{shown}:{bound}{HTTP_PATH} (pid {os.getpid()})",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(http_app(selector, host, token, limits), log_level="warning", access_log=False,
                            lifespan="on", timeout_graceful_shutdown=5, http=limited_protocol(limits))
    uvicorn.Server(config).run(sockets=[sock])


def run_workers(args: argparse.Namespace) -> int:
    """``--workers N``: N server processes on one port (each ``--reuse-port``), supervised here; a
    signal is passed on to all, and the first to end ends the others."""
    import signal
    import subprocess

    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    child_argv = _without_workers(argv) + ["--reuse-port"]
    children = [subprocess.Popen([sys.executable, "-m", "magicselector", *child_argv]) for _ in range(args.workers)]

    def forward(signum: int, frame: Any) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    code = 0
    try:
        while all(child.poll() is None for child in children):
            with contextlib.suppress(subprocess.TimeoutExpired):
                children[0].wait(timeout=0.5)
    finally:
        forward(signal.SIGTERM, None)
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.returncode not in (0, -signal.SIGTERM, -signal.SIGINT) and not code:
                code = child.returncode if child.returncode > 0 else 1
    return code


def _without_workers(argv: list[str]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--workers":
            skip = True
        elif not item.startswith("--workers="):
            out.append(item)
    return out


if __name__ == "__main__" and sys.argv[1:] == ["--limits-report"]:  # bench serve runs this as a process
    print(json.dumps(limits_report()))

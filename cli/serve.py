"""``magicselector serve``: an MCP server whose one tool, ``search_tools``, returns the definitions
of the tools the Selector picks for a request, so that any MCP host can use the runtime as its tool
retriever; over stdio, or over the specification's streamable HTTP transport (stateless, so several
replicas can share a port). Every message passes ``magicselector.cli.jsonrpc.screen`` first, so a
malformed one gets a JSON-RPC error. Needs the ``serve`` extra (the ``mcp`` package)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any, Sequence

from magicselector.cli_options import HISTORY_MODES, add_rerank_options, selector_config

SERVER_NAME = "magicselector"
TOOL_NAME = "search_tools"
TOOL_DESCRIPTION = ("Find the tools needed for a request among the catalog's tools, on this device. Returns the "
                    "selected tools' definitions (name, description, input schema) in the format asked for.")
TRANSPORTS = ("stdio", "streamable-http")
HTTP_PATH = "/mcp"
TOKEN_ENV = "MAGICSELECTOR_SERVE_TOKEN"
DEFAULT_MAX_MESSAGE_MB = 64.0


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
    add_rerank_options(sp)
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
                         f"(default {DEFAULT_MAX_MESSAGE_MB:g})")


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
                   max_message_bytes=max_bytes)
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
        selector = Selector.from_bundle(args.bundle, config=selector_config(args), progress=False)
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
                                       ("--workers", getattr(args, "workers", 1) != 1)) if on]
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
        loopback = args.host == "localhost" or ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        raise InputError(f"--host must be an IP address or localhost, got {args.host!r}") from None
    if not loopback and not args.allow_remote:
        raise InputError(f"--host {args.host} is beyond this machine (not loopback): add --allow-remote to serve "
                         "other machines, with a --token")
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise InputError("--token must not be empty")
    if not loopback and token is None:
        print(f"magicselector serve: warning: serving {args.host} without a --token; anyone who can reach the "
              "port can call search_tools", file=sys.stderr)
    return token


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
                    if raw is _TOO_LONG:
                        await emit(_dumps(too_large(max_message_bytes)))
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


_TOO_LONG = b"\0too long"


def _read_line(stream: Any, limit: int) -> bytes | None:
    """The next line (None at the end), or ``_TOO_LONG`` for a line over ``limit`` bytes, whose rest
    is read and dropped in bounded pieces."""
    line = stream.readline(limit + 1)
    if not line:
        return None
    if len(line) <= limit or line.endswith(b"\n"):
        return line
    while True:
        rest = stream.readline(1 << 20)
        if not rest or rest.endswith(b"\n"):
            return _TOO_LONG


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
    """ASGI middleware in front of the mcp package's streamable HTTP app: checks the bearer token,
    bounds and screens every POST body, answers a malformed one itself (400 with the JSON-RPC error,
    as the transport's specification asks; 200 for invalid params of a well-formed request) and
    replays a good one to the app."""

    def __init__(self, app: Any, token: str | None, max_message_bytes: int) -> None:
        self.app, self.token, self.max_bytes = app, token, max_message_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.token is not None and not self._authorized(scope):
            await _send_json(send, 401, {"error": "unauthorized: send Authorization: Bearer <token>"},
                             [(b"www-authenticate", b'Bearer realm="magicselector"')])
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await self._body(receive)
        if body is None:
            from magicselector.cli.jsonrpc import too_large

            await _send_json(send, 413, too_large(self.max_bytes))
            return
        await self._screened(scope, receive, send, body)

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

    def _authorized(self, scope: Any) -> bool:
        import hmac

        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                                         str(self.token).encode())
        return False

    async def _body(self, receive: Any) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


async def _send_json(send: Any, status: int, payload: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = b"" if payload is None else _dumps(payload)
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def http_app(selector: Any, host: str = "127.0.0.1", token: str | None = None,
             max_message_bytes: int = int(DEFAULT_MAX_MESSAGE_MB * 1024 * 1024)) -> Any:
    """The ASGI app: the mcp package's streamable HTTP app for ``build_server(selector)`` at
    ``/mcp``, stateless with JSON answers, behind ``ScreenedHTTP``."""
    server = build_server(selector)
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, json_response=True, stateless_http=True,
                                     host=host, max_request_body_size=max_message_bytes)
    return ScreenedHTTP(app, token, max_message_bytes)


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
               reuse_port: bool = False, max_message_bytes: int = int(DEFAULT_MAX_MESSAGE_MB * 1024 * 1024)) -> None:
    """Serve ``http_app`` with uvicorn on ``host:port`` until interrupted; the address goes to stderr."""
    import uvicorn

    sock = listening_socket(host, port, reuse_port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"magicselector serve: listening on http://{shown}:{bound}{HTTP_PATH} (pid {os.getpid()})",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(http_app(selector, host, token, max_message_bytes), log_level="warning",
                            access_log=False, lifespan="on", timeout_graceful_shutdown=5)
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

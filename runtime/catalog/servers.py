"""Several MCP servers in one catalog: sanitized server names, ``<server>__<tool>`` (or ``mcp__<server>__<tool>``) names, ``mcp_catalog`` and ``load_catalogs``."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import CatalogError, InputError
from .collection import Catalog
from .files import _check_unique_names, _entries_from_data, load_catalog
from .tool import MAX_NAME_CHARS, MCP_PREFIX, NAMESPACE_SEP, NAMESPACES, _SERVER_RE, Tool, parse_tool

# -- several MCP servers -------------------------------------------------------------------------
def sanitize_server_name(server: Any, where: str = "server") -> str:
    """The name a server's tools are prefixed with: every character outside ``[A-Za-z0-9_-]``
    replaced by ``_`` (as Claude Code and Claude Desktop do: ``My Server`` -> ``My_Server``,
    ``my.server`` -> ``my_server``), runs of ``_`` folded into one and ``_`` at either end dropped,
    so that the name never holds or touches the separator ``__``; CatalogError if nothing is left."""
    if not isinstance(server, str):
        raise CatalogError(f"{where}: a server name must be a string, got {type(server).__name__}")
    name = re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_-]", "_", server)).strip("_")
    if not name:
        raise CatalogError(f"{where}: server name {server!r} has no letter, digit or '-' to name its tools by")
    if len(name) > MAX_NAME_CHARS:
        raise CatalogError(f"{where}: server name {server[:40]!r}... is longer than {MAX_NAME_CHARS} characters")
    return name


def _check_namespace(namespace: str) -> str:
    if namespace not in NAMESPACES:
        raise InputError(f"namespace must be one of {', '.join(NAMESPACES)}, got {namespace!r}")
    return namespace


def namespaced(server: str, tool_name: str, namespace: str = "server") -> str:
    """The name a server's tool has in a several-server catalog: ``<server>__<tool>``, or
    ``mcp__<server>__<tool>`` with ``namespace="mcp"``. ``server`` is a sanitized name
    (``sanitize_server_name``), else CatalogError: that is what makes the first ``__`` the separator."""
    _check_namespace(namespace)
    if not isinstance(server, str) or not _SERVER_RE.match(server):
        raise CatalogError(f"server name {server!r} is not sanitized (sanitize_server_name): letters, digits, "
                           f"'-' and single '_' inside, so that '{NAMESPACE_SEP}' only separates server and tool")
    if not isinstance(tool_name, str) or not tool_name:
        raise CatalogError(f"server {server!r}: a tool name must be a non-empty string")
    name = f"{server}{NAMESPACE_SEP}{tool_name}"
    return f"{MCP_PREFIX}{NAMESPACE_SEP}{name}" if namespace == "mcp" else name


def _namespaced_tool(t: Tool, server: str, prefix: str, namespace: str, where: str, tool_id: str) -> Tool:
    name = namespaced(prefix, t.name, namespace)
    if len(name) > MAX_NAME_CHARS:
        raise CatalogError(f"{where}: tool {t.name!r}: the namespaced name {name!r} is longer than "
                           f"{MAX_NAME_CHARS} characters")
    new_id = namespaced(prefix, tool_id, namespace)
    return replace(t, id=new_id, name=name, server=server)


def mcp_catalog(servers: Mapping[str, Any], *, source: str = "<mcp servers>", namespace: str = "server") -> Catalog:
    """One catalog from several MCP servers' ``tools/list`` results (each the JSON-RPC response, its
    ``result``, a list of pages, or a list of tools), keyed by server name. Every tool is named
    ``<server>__<tool>`` (``namespace="mcp"``: ``mcp__<server>__<tool>``, as Claude Code names them)
    with the server's sanitized name (``sanitize_server_name``) and keeps the server's name as given
    (``Tool.server``); schemas are checked as in ``load_catalog``."""
    _check_namespace(namespace)
    if not isinstance(servers, Mapping):
        raise CatalogError(f"{source}: servers must be a mapping of server name to tools/list result")
    tools: list[Tool] = []
    prefixes: dict[str, str] = {}
    for server, data in servers.items():
        prefix = sanitize_server_name(server, source)
        if prefix in prefixes:
            raise CatalogError(f"{source}: servers {prefixes[prefix]!r} and {server!r} both name their tools "
                               f"{prefix!r}; rename one")
        prefixes[prefix] = server
        tools += _server_tools(server, data, prefix, namespace, source)
    if not tools:
        raise CatalogError(f"{source}: no servers given")
    return Catalog(tools, source=source)


def _file_tools(server: str, path: Path, namespace: str, servers: dict[str, Path]) -> list[Tool]:
    """One catalog file's tools named under ``server``; ``servers``: the files each prefix came from
    so far (two files may not share one)."""
    prefix = sanitize_server_name(server, str(path))
    if prefix in servers:
        raise CatalogError(f"{path}: server name {prefix!r} is also {servers[prefix]}'s; name them apart "
                           "with SERVER=FILE")
    servers[prefix] = path
    return [_namespaced_tool(t, server, prefix, namespace, str(path), t.id) for t in load_catalog(path)]


def _server_tools(server: str, data: Any, prefix: str, namespace: str, source: str) -> list[Tool]:
    """One server's ``tools/list`` result as namespaced tools, its names checked unique."""
    where = f"{source}: server {server!r}"
    entries, _ = _entries_from_data(data, where)
    if not entries:
        raise CatalogError(f"{source}: server {server!r} lists no tools")
    local = [parse_tool(e, where=w, domain=prefix, check_schemas=True) for e, w in entries]
    _check_unique_names(local, where)
    return [_namespaced_tool(t, server, prefix, namespace, where, t.name) for t in local]


def server_name_of(path: str | Path) -> str:
    """The server name a catalog file stands for when none is given: its file name, without the
    extension, sanitized (``sanitize_server_name``; ``server`` when nothing is left)."""
    stem = Path(path).name.split(".")[0] or "server"
    try:
        return sanitize_server_name(stem)
    except CatalogError:
        return "server"


def _server_spec(text: str) -> tuple[str | None, Path]:
    """(server, file) of a ``SERVER=FILE`` spec, (None, file) of a ``FILE``: a text with "=" that names
    an existing file, or whose part before "=" is empty or a path, is a file."""
    server, sep, file = text.partition("=")
    if sep and not Path(text).exists() and server and "/" not in server:
        sanitize_server_name(server, text)  # a server name that names nothing is refused here
        return server, Path(file)
    return None, Path(text)


def load_catalogs(specs: Sequence[str | Path], namespace: str = "server") -> Catalog:
    """The catalog of ``select --catalog``: one or more ``FILE`` or ``SERVER=FILE`` (any form
    ``load_catalog`` reads). One file without a server name is used as it is (unless ``namespace`` is
    ``"mcp"``); otherwise every tool is named ``<server>__<tool>`` (``mcp__<server>__<tool>`` with
    ``namespace="mcp"``), the server being the given name, sanitized, or the file's name."""
    _check_namespace(namespace)
    if not specs:
        raise CatalogError("no catalog given")
    parsed = [_server_spec(str(spec)) for spec in specs]
    if len(parsed) == 1 and parsed[0][0] is None and namespace == "server":
        return load_catalog(parsed[0][1])
    tools: list[Tool] = []
    servers: dict[str, Path] = {}
    for named, path in parsed:
        tools += _file_tools(named or server_name_of(path), path, namespace, servers)
    return Catalog(tools, source=" ".join(str(s) for s in specs))

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
servers apart; a tool's name depends only on its server's name and its own, never on which other
servers are loaded, and ``split_name`` recovers both parts.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .errors import CatalogError, UnknownToolError

PHONE_CATALOG_DIR = Path(__file__).resolve().parent / "catalogs" / "phone"

# Names are shown to an LLM and used as identifiers: printable, one line, bounded. Real catalogs
# use more than MCP's [A-Za-z0-9_-] (MetaTool has "PDF&URLTool"), so only control characters fail.
_NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")
# A server's name becomes the prefix of its tools' names: the characters every tool format allows,
# and no "__" (the separator).
_SERVER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")
NAMESPACE_SEP = "__"


@dataclass(frozen=True)
class Tool:
    """One tool the assistant can call. ``id`` is unique in a catalog; ``name`` is what the LLM sees."""

    id: str
    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    domain: str | None = None
    title: str | None = None  # MCP: a human-readable name for display
    annotations: Mapping[str, Any] | None = None  # MCP: readOnlyHint, destructiveHint, ...
    output_schema: Mapping[str, Any] | None = None  # MCP: the JSON Schema of structuredContent
    server: str | None = None  # the MCP server a namespaced tool came from

    @property
    def parameter_names(self) -> list[str]:
        props = self.parameters.get("properties") if isinstance(self.parameters, Mapping) else None
        return list(props) if isinstance(props, Mapping) else []

    def to_mcp(self) -> dict[str, Any]:
        """The MCP tool definition (as in a ``tools/list`` result): name, title?, description,
        inputSchema, outputSchema?, annotations?."""
        out: dict[str, Any] = {"name": self.name}
        if self.title:
            out["title"] = self.title
        out["description"] = self.description
        out["inputSchema"] = dict(self.parameters) or {"type": "object"}  # MCP requires an object schema
        if self.output_schema is not None:
            out["outputSchema"] = dict(self.output_schema)
        if self.annotations is not None:
            out["annotations"] = dict(self.annotations)
        return out

    def to_record(self) -> dict[str, Any]:
        """The benchmark-format row (``tools.jsonl``); MCP fields are kept when set."""
        row = {"id": self.id, "name": self.name, "description": self.description,
               "parameters": dict(self.parameters)}
        if self.domain:
            row["domain"] = self.domain
        if self.title:
            row["title"] = self.title
        if self.annotations is not None:
            row["annotations"] = dict(self.annotations)
        if self.output_schema is not None:
            row["outputSchema"] = dict(self.output_schema)
        if self.server:
            row["server"] = self.server
        return row


def tool_text(tool: Tool, max_description_chars: int = 400) -> str:
    """The text a tool is embedded and reranked with: readable name, description, parameter names.

    Names are de-snake-cased because the embedder's vocabulary knows words, not identifiers.
    The description is cut at a word boundary so long API docs do not crowd out the name.
    """
    name = re.sub(r"[_.\-/:]+", " ", tool.name).strip()
    desc = " ".join(tool.description.split())
    if len(desc) > max_description_chars:
        cut = desc[:max_description_chars]
        desc = cut[: cut.rfind(" ")] if " " in cut else cut
    params = ", ".join(p.replace("_", " ") for p in tool.parameter_names[:12])
    text = f"{name}: {desc}" if desc else name
    if params:
        text += f" (parameters: {params})"
    return text


def schema_tokens(tool: Tool) -> int:
    """Rough count of the tokens a tool's schema costs in the assistant's context (4 chars a token):
    name, description and input schema, the part every tool format sends."""
    entry = {"name": tool.name, "description": tool.description, "inputSchema": dict(tool.parameters)}
    return max(1, len(json.dumps(entry, separators=(",", ":"))) // 4)


class Catalog(Sequence[Tool]):
    """An ordered, validated set of tools with unique ids."""

    def __init__(self, tools: Iterable[Tool], *, source: str = "<memory>") -> None:
        self._tools: list[Tool] = []
        self._by_id: dict[str, Tool] = {}
        self.source = source
        for tool in tools:
            if tool.id in self._by_id:
                raise CatalogError(f"{source}: duplicate tool id {tool.id!r}")
            self._by_id[tool.id] = tool
            self._tools.append(tool)

    def __len__(self) -> int:
        return len(self._tools)

    def __getitem__(self, i):  # type: ignore[override]
        return self._tools[i]

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._by_id

    def get(self, tool_id: str) -> Tool:
        try:
            return self._by_id[tool_id]
        except KeyError:
            raise UnknownToolError(f"unknown tool id {tool_id!r} (not in catalog {self.source})") from None

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self._tools]

    def with_tool(self, tool: Tool) -> "Catalog":
        """A copy with ``tool`` added, or replacing the tool of the same id."""
        tools = [t for t in self._tools if t.id != tool.id] + [tool]
        return Catalog(tools, source=self.source)

    def without(self, tool_id: str) -> "Catalog":
        self.get(tool_id)
        return Catalog([t for t in self._tools if t.id != tool_id], source=self.source)

    def write_jsonl(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for tool in self._tools:
                f.write(json.dumps(tool.to_record(), ensure_ascii=False, sort_keys=True) + "\n")


def parse_tool(entry: Any, *, where: str, domain: str | None = None,
               check_schemas: bool = False) -> Tool:
    """Validate one catalog entry (MCP or benchmark style) into a Tool, or raise CatalogError.

    ``check_schemas``: the entry is an MCP tool, so its inputSchema (and outputSchema) must be an
    object schema that passes the JSON Schema meta-schema check (``check_json_schema``).
    """
    if not isinstance(entry, Mapping):
        raise CatalogError(f"{where}: a tool must be a JSON object, got {type(entry).__name__}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CatalogError(f"{where}: tool has no 'name' (a non-empty string)")
    if not _NAME_RE.match(name):
        raise CatalogError(f"{where}: tool name {name!r} has characters a tool name cannot have")
    description = entry.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise CatalogError(f"{where}: tool {name!r}: 'description' must be a string")
    schema = entry.get("inputSchema", entry.get("input_schema", entry.get("parameters", {})))
    if schema is None:
        schema = {}
    if not isinstance(schema, Mapping):
        raise CatalogError(f"{where}: tool {name!r}: 'inputSchema'/'parameters' must be a JSON object")
    props = schema.get("properties")
    if props is not None and not isinstance(props, Mapping):
        raise CatalogError(f"{where}: tool {name!r}: schema 'properties' must be an object")
    tool_id = entry.get("id", name)
    if not isinstance(tool_id, str) or not tool_id:
        raise CatalogError(f"{where}: tool {name!r}: 'id' must be a non-empty string")
    title = entry.get("title")
    if title is not None and not isinstance(title, str):
        raise CatalogError(f"{where}: tool {name!r}: 'title' must be a string")
    annotations = entry.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise CatalogError(f"{where}: tool {name!r}: 'annotations' must be a JSON object")
    output_schema = entry.get("outputSchema")
    if output_schema is not None and not isinstance(output_schema, Mapping):
        raise CatalogError(f"{where}: tool {name!r}: 'outputSchema' must be a JSON object")
    server = entry.get("server")
    if server is not None and not isinstance(server, str):
        raise CatalogError(f"{where}: tool {name!r}: 'server' must be a string")
    if check_schemas and schema:  # a tool without parameters may leave its schema out
        check_json_schema(schema, f"{where}: tool {name!r}: inputSchema")
        if output_schema is not None:
            check_json_schema(output_schema, f"{where}: tool {name!r}: outputSchema")
    _check_unicode(entry, f"{where}: tool {name!r}")
    dom = entry.get("domain", domain)
    return Tool(id=tool_id, name=name, description=description.strip(), parameters=dict(schema),
                domain=dom if isinstance(dom, str) else None, title=title or None,
                annotations=dict(annotations) if annotations is not None else None,
                output_schema=dict(output_schema) if output_schema is not None else None,
                server=server or None)


def _check_unicode(entry: Mapping[str, Any], where: str) -> None:
    """Refuse an entry with a lone surrogate anywhere (JSON's "\\ud800" escapes decode to one): no
    tokenizer can read it and no JSON encoder writes it as UTF-8."""
    for key, value in entry.items():
        try:
            json.dumps({key: value}, ensure_ascii=False, default=str).encode("utf-8")
        except UnicodeEncodeError:
            raise CatalogError(f"{where}: {str(key).encode('utf-8', 'backslashreplace').decode()!r} holds a lone "
                               "surrogate (not valid Unicode)") from None
        except (RecursionError, ValueError):
            raise CatalogError(f"{where}: {key!r} is nested too deeply") from None


def check_json_schema(schema: Mapping[str, Any], where: str) -> None:
    """An MCP tool schema: a JSON object schema (``"type": "object"``) that passes its meta-schema
    (Draft 2020-12 unless ``$schema`` names another draft); else CatalogError naming ``where``."""
    from jsonschema import exceptions, validators  # imported here: only MCP catalogs need it

    if schema.get("type") != "object":
        raise CatalogError(f"{where}: must be a JSON Schema with \"type\": \"object\" (MCP), "
                           f"got type {schema.get('type')!r}")
    try:
        cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    except exceptions.SchemaError:  # an unknown $schema URI (only newer jsonschema releases raise)
        cls = None
    if cls is None or ("$schema" in schema and cls is validators.Draft202012Validator
                       and schema["$schema"].rstrip("#") not in _DRAFT_2020_12_URIS):
        raise CatalogError(f"{where}: unknown \"$schema\" {schema.get('$schema')!r}; use a JSON Schema draft URI "
                           "(MCP's default is https://json-schema.org/draft/2020-12/schema)")
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as e:
        at = "/".join(str(p) for p in e.path)
        raise CatalogError(f"{where}: not a valid JSON Schema: {e.message}" + (f" (at /{at})" if at else "")) from None


_DRAFT_2020_12_URIS = ("https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft/2020-12/schema")


def _tools_list_pages(data: Any, where: str) -> list[Mapping[str, Any]] | None:
    """The ``tools/list`` results in a parsed JSON document: a JSON-RPC response, a list of them
    (pages), or a bare result; None when the document is a plain list of tools."""
    if isinstance(data, list) and data and all(isinstance(d, Mapping) and "jsonrpc" in d for d in data):
        pages = []
        for i, page in enumerate(data):
            pages += _tools_list_pages(page, f"{where}[{i}]") or []
        return pages
    if not isinstance(data, Mapping):
        return None
    if "jsonrpc" in data or "result" in data or "error" in data:
        if data.get("error") is not None:
            err = data["error"]
            msg = err.get("message") if isinstance(err, Mapping) else err
            raise CatalogError(f"{where}: the server answered tools/list with an error: {msg!r}")
        result = data.get("result")
        if not isinstance(result, Mapping) or "tools" not in result:
            raise CatalogError(f"{where}: a JSON-RPC response without a tools/list 'result' "
                               "({\"tools\": [...]})")
        data = result
    if "tools" not in data:
        raise CatalogError(f"{where}: expected a list of tools, an object with a 'tools' list, or a "
                           "JSON-RPC tools/list response")
    cursor = data.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise CatalogError(f"{where}: 'nextCursor' must be a string")
    return [data]


def _entries_from_json(path: Path) -> tuple[list[tuple[Any, str]], str | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is allowed
    except json.JSONDecodeError as e:
        raise CatalogError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise CatalogError(f"{path}: not UTF-8 text ({e})") from None
    except RecursionError:
        raise CatalogError(f"{path}: JSON nested too deeply to be a catalog") from None
    return _entries_from_data(data, str(path))


def _entries_from_data(data: Any, where: str) -> tuple[list[tuple[Any, str]], str | None]:
    """(entry, where) pairs and the domain, from a parsed JSON catalog document."""
    pages = _tools_list_pages(data, where)
    if pages is None:
        if not isinstance(data, list):
            raise CatalogError(f"{where}: expected a list of tools or an object with a 'tools' list")
        return [(e, f"{where}[{i}]") for i, e in enumerate(data)], None
    entries, domain = [], None
    for page in pages:
        tools = page["tools"]
        if not isinstance(tools, list):
            raise CatalogError(f"{where}: 'tools' must be a list")
        offset = len(entries)  # pages number their tools on, so that every index is unique
        entries += [(e, f"{where}[{offset + i}]") for i, e in enumerate(tools)]
        if isinstance(page.get("domain"), str):
            domain = page["domain"]
    return entries, domain


def _entries_from_jsonl(path: Path) -> list[tuple[Any, str]]:
    out = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # a byte-order mark is allowed
            except UnicodeDecodeError as e:
                raise CatalogError(f"{path}:{n}: not UTF-8 text ({e})") from None
            if not line.strip():
                continue
            try:
                out.append((json.loads(line), f"{path}:{n}"))
            except json.JSONDecodeError as e:
                raise CatalogError(f"{path}:{n}: not valid JSON ({e})") from None
            except RecursionError:
                raise CatalogError(f"{path}:{n}: JSON nested too deeply to be a tool") from None
    return out


def _check_unique_names(tools: Sequence[Tool], where: str) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(tools):
        if t.name in seen:
            raise CatalogError(f"{where}: duplicate tool name {t.name!r} (entries {seen[t.name]} and {i})")
        seen[t.name] = i


def load_catalog(path: str | Path) -> Catalog:
    """Read a catalog from an MCP JSON file (a tools/list response, its result, or a list of tools),
    a ``tools.jsonl`` file, a benchmark folder or a folder of JSON files."""
    path = Path(path)
    if not path.exists():
        raise CatalogError(f"{path}: no such catalog file or folder")
    tools: list[Tool] = []
    if path.is_dir():
        if (path / "tools.jsonl").exists():
            return load_catalog(path / "tools.jsonl")
        files = sorted(path.glob("*.json"))
        if not files:
            raise CatalogError(f"{path}: folder holds no tools.jsonl and no *.json catalog files")
        for file in files:
            entries, domain = _entries_from_json(file)
            domain = domain or file.stem
            tools += [parse_tool(e, where=w, domain=domain, check_schemas=True) for e, w in entries]
        strict_names = True
    elif path.suffix == ".jsonl":
        tools = [parse_tool(e, where=w) for e, w in _entries_from_jsonl(path)]
        # Benchmark folders may reuse a name with different descriptions; ids tell them apart.
        strict_names = all(t.id == t.name for t in tools)
    else:
        entries, domain = _entries_from_json(path)
        tools = [parse_tool(e, where=w, domain=domain, check_schemas=True) for e, w in entries]
        strict_names = True
    if not tools:
        raise CatalogError(f"{path}: the catalog holds no tools")
    if strict_names:
        _check_unique_names(tools, str(path))
    return Catalog(tools, source=str(path))


def load_phone_catalog() -> Catalog:
    """The phone tool catalog shipped with the package (one JSON file per domain)."""
    return load_catalog(PHONE_CATALOG_DIR)


# -- several MCP servers -------------------------------------------------------------------------
def namespaced(server: str, tool_name: str) -> str:
    """The name a server's tool has in a several-server catalog: ``<server>__<tool>``."""
    return f"{server}{NAMESPACE_SEP}{tool_name}"


def split_name(name: str) -> tuple[str, str]:
    """``<server>__<tool>`` -> (server, tool): server names never hold ``__``, tool names may."""
    server, sep, tool = name.partition(NAMESPACE_SEP)
    if not sep or not server or not tool:
        raise UnknownToolError(f"{name!r} is not a namespaced tool name (<server>{NAMESPACE_SEP}<tool>)")
    return server, tool


def check_server_name(server: Any, where: str) -> str:
    if not isinstance(server, str) or not _SERVER_RE.match(server):
        raise CatalogError(f"{where}: server name {server!r} must be letters, digits, '-' and single '_' "
                           f"(no '{NAMESPACE_SEP}': it separates server and tool in tool names)")
    return server


def mcp_catalog(servers: Mapping[str, Any], *, source: str = "<mcp servers>") -> Catalog:
    """One catalog from several MCP servers' ``tools/list`` results (each the JSON-RPC response, its
    ``result``, a list of pages, or a list of tools), keyed by server name. Every tool is named
    ``<server>__<tool>`` and keeps its server (``Tool.server``); schemas are checked as in
    ``load_catalog``."""
    tools: list[Tool] = []
    for server, data in servers.items():
        check_server_name(server, source)
        entries, _ = _entries_from_data(data, f"{source}: server {server!r}")
        if not entries:
            raise CatalogError(f"{source}: server {server!r} lists no tools")
        local = [parse_tool(e, where=w, domain=server, check_schemas=True) for e, w in entries]
        _check_unique_names(local, f"{source}: server {server!r}")
        for t in local:
            name = namespaced(server, t.name)
            if not _NAME_RE.match(name):
                raise CatalogError(f"{source}: server {server!r}: tool {t.name!r}: the namespaced name "
                                   f"{name!r} is longer than 128 characters")
            tools.append(replace(t, id=name, name=name, server=server))
    if not tools:
        raise CatalogError(f"{source}: no servers given")
    return Catalog(tools, source=source)


def server_name_of(path: str | Path) -> str:
    """The server name a catalog file stands for when none is given: its file name, without the
    extension, in the characters a server name allows."""
    stem = Path(path).name.split(".")[0] or "server"
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_-]", "_", stem)).strip("_-") or "server"
    return name


def load_catalogs(specs: Sequence[str | Path]) -> Catalog:
    """The catalog of ``select --catalog``: one or more ``FILE`` or ``SERVER=FILE`` (any form
    ``load_catalog`` reads). One file without a server name is used as it is; otherwise every tool
    is named ``<server>__<tool>``, the server being the given name or the file's name."""
    if not specs:
        raise CatalogError("no catalog given")
    parsed: list[tuple[str | None, Path]] = []
    for spec in specs:
        text = str(spec)
        server, sep, file = text.partition("=")
        if sep and not Path(text).exists() and server and "/" not in server:
            parsed.append((check_server_name(server, text), Path(file)))
        else:
            parsed.append((None, Path(text)))
    if len(parsed) == 1 and parsed[0][0] is None:
        return load_catalog(parsed[0][1])
    tools: list[Tool] = []
    servers: dict[str, Path] = {}
    for server, path in parsed:
        server = server or server_name_of(path)
        if server in servers:
            raise CatalogError(f"{path}: server name {server!r} is also {servers[server]}'s; name them apart "
                               "with SERVER=FILE")
        servers[server] = path
        for t in load_catalog(path):
            name = namespaced(server, t.name)
            if not _NAME_RE.match(name):
                raise CatalogError(f"{path}: tool {t.name!r}: the namespaced name {name!r} is longer than 128 "
                                   "characters")
            tools.append(replace(t, id=namespaced(server, t.id), name=name, server=server))
    return Catalog(tools, source=" ".join(str(s) for s in specs))


def catalog_digest(catalog: Catalog) -> str:
    """A hash of everything a catalog hands to an LLM (the MCP definitions, in order)."""
    blob = json.dumps([t.to_mcp() for t in catalog], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]

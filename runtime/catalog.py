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
"""
from __future__ import annotations

import collections.abc as _abc
import contextlib
import gc
import hashlib
import json
import re
from array import array
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from .errors import CatalogError, InputError, UnknownToolError
from .files import trim_heap

PHONE_CATALOG_DIR = Path(__file__).resolve().parent / "catalogs" / "phone"

MAX_NAME_CHARS = 128  # MCP's limit on a tool name (SEP-986: 1 to 128 characters)
MAX_ID_CHARS = 256
MAX_TITLE_CHARS = 1_024
MAX_DESCRIPTION_CHARS = 65_536
MAX_TOOL_JSON_CHARS = 1_048_576  # one tool's whole definition, serialized as JSON
MAX_TOOL_NODES = 50_000  # objects, arrays and scalars in one tool's definition
MAX_TOOL_DEPTH = 64  # levels of objects and arrays in one tool's definition
# Names are shown to an LLM and used as identifiers: printable, one line, bounded. Real catalogs
# use more than MCP's [A-Za-z0-9_-] (MetaTool has "PDF&URLTool"), so only control characters fail.
_NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,%d}$" % MAX_NAME_CHARS)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# A server's name becomes the prefix of its tools' names: the characters every tool format allows,
# and no "_" that could join the separator ("__").
_SERVER_RE = re.compile(r"^[A-Za-z0-9-](?:[A-Za-z0-9-]|_(?!_))*(?<!_)$")
NAMESPACE_SEP = "__"
NAMESPACES = ("server", "mcp")  # <server>__<tool> (the default), mcp__<server>__<tool> (Claude Code's)
MCP_PREFIX = "mcp"
# The keys of a catalog entry that Tool models; any other key is kept in Tool.extra.
_KNOWN_KEYS = frozenset({"id", "name", "title", "description", "inputSchema", "input_schema", "parameters",
                         "outputSchema", "annotations", "domain", "server"})


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
    extra: Mapping[str, Any] | None = None  # MCP fields not modelled here (execution, _meta, ...), kept as given

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
        for key, value in (self.extra or {}).items():
            out.setdefault(key, value)
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
        for key, value in (self.extra or {}).items():
            row.setdefault(key, value)
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


# A catalog of at least this many tools holds them packed (``_PackedTools``): 100,000 MCP tools as
# Tool objects over their decoded JSON take about 280 MB, packed about 60 (docs/bench/scaling-100k-mcp.md).
# A smaller one keeps Tool objects, so a turn over the phone catalog decodes nothing.
PACK_AT = 10_000
_PACKED_FIELDS = ("id", "name", "description", "parameters", "domain", "title", "annotations", "output_schema",
                  "server", "extra")


def _pack(tool: Tool) -> bytes | None:
    """The tool's fields as compact JSON, or None where JSON would not give them back exactly
    (tuples, keys that are not strings, mappings of other types, NaN)."""
    fields = [getattr(tool, f) for f in _PACKED_FIELDS]
    try:
        blob = json.dumps(fields, separators=(",", ":")).encode("ascii")
    except (TypeError, ValueError):
        return None
    return blob if json.loads(blob) == fields else None


class _PackedTools(Sequence[Tool]):
    """Tools as compact JSON in one buffer, each decoded into a Tool when read (the same values:
    a tool JSON would not give back exactly stays a Tool object). Copies share the buffer."""

    def __init__(self, buf: bytearray | None = None, offsets: "array[int] | None" = None,
                 order: "array[int] | None" = None, extras: list[Tool] | None = None) -> None:
        self._buf = buf if buf is not None else bytearray()
        self._offsets = offsets if offsets is not None else array("q", [0])  # row i: buf[off[i]:off[i+1]]
        self._order = order if order is not None else array("q")  # row i, or -1 - k for extras[k]
        self._extras = extras if extras is not None else []

    def append(self, tool: Tool) -> None:
        blob = _pack(tool)
        if blob is None:
            self._order.append(-1 - len(self._extras))
            self._extras.append(tool)
        else:
            self._buf += blob
            self._offsets.append(len(self._buf))
            self._order.append(len(self._offsets) - 2)

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, i: int) -> Tool:  # type: ignore[override]  # positions only, no slices
        row = self._order[i]
        if row < 0:
            return self._extras[-1 - row]
        values = json.loads(self._buf[self._offsets[row]:self._offsets[row + 1]])
        return Tool(**dict(zip(_PACKED_FIELDS, values)))

    def __iter__(self) -> Iterator[Tool]:
        return (self[i] for i in range(len(self._order)))

    def without(self, position: int) -> "_PackedTools":
        order = array("q", self._order)
        del order[position]
        return _PackedTools(self._buf, self._offsets, order, list(self._extras))

    def plus(self, tool: Tool) -> "_PackedTools":
        """A copy with ``tool`` at the end, kept as the Tool given (the buffer is shared, never grown)."""
        extras = list(self._extras) + [tool]
        order = array("q", self._order)
        order.append(-len(extras))
        return _PackedTools(self._buf, self._offsets, order, extras)


class Catalog(Sequence[Tool]):
    """An ordered, validated set of tools with unique ids. ``tools`` may be a generator: it is read
    once, and from ``PACK_AT`` tools on they are held packed, so a large catalog's Tool objects and
    the JSON they were parsed from need not be in memory together."""

    def __init__(self, tools: Iterable[Tool], *, source: str = "<memory>") -> None:
        self.source = source
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._named: dict[str, str | list[str]] = {}  # name -> its tool's id, or ids where several share it
        store: list[Tool] | _PackedTools = []
        for tool in tools:
            if tool.id in self._pos:
                raise CatalogError(f"{source}: duplicate tool id {tool.id!r}")
            self._pos[tool.id] = len(self._ids)
            self._ids.append(tool.id)
            self._add_name(tool.name, tool.id)
            store.append(tool)
            if type(store) is list and len(store) >= PACK_AT:
                packed = _PackedTools()
                for t in store:
                    packed.append(t)
                store = packed
        self._tools: Sequence[Tool] = store
        if isinstance(store, _PackedTools):
            self._compact_index()

    def _compact_index(self) -> None:
        """The ids and names again as new strings, made after the strings they came from (those of
        the decoded JSON, all over its memory) are let go, so that memory goes back whole."""
        joined = "\x00".join(self._ids)
        if joined.count("\x00") != len(self._ids) - 1:  # an id with a NUL (a Tool made by hand): kept as is
            return
        ids = joined.encode("utf-8", "surrogatepass")
        del joined
        named = json.dumps(self._named, separators=(",", ":")).encode("ascii")
        self._ids, self._pos, self._named = [], {}, {}
        self._ids = ids.decode("utf-8", "surrogatepass").split("\x00")
        self._pos = {tool_id: i for i, tool_id in enumerate(self._ids)}
        self._named = {self._same(name): self._same(tool_id) if isinstance(tool_id, str) else
                       [self._same(i) for i in tool_id] for name, tool_id in json.loads(named).items()}

    def _same(self, text: str) -> str:
        """The id string equal to ``text``, where there is one (a name that is its tool's id, and
        every id, are then held once), else ``text``."""
        position = self._pos.get(text)
        return self._ids[position] if position is not None else text

    def _add_name(self, name: str, tool_id: str) -> None:
        have = self._named.get(name)
        if have is None:
            self._named[name] = tool_id
        elif isinstance(have, str):
            self._named[name] = [have, tool_id]
        else:
            have.append(tool_id)

    def id_named(self, name: str, besides: str | None = None) -> str | None:
        """The id of a tool named ``name`` other than ``besides``, or None."""
        have = self._named.get(name)
        ids = [have] if isinstance(have, str) else (have or [])
        return next((i for i in ids if i != besides), None)

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i: int) -> Tool:  # type: ignore[override]  # positions only, no slices
        return self._tools[i]

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._pos

    def get(self, tool_id: str) -> Tool:
        try:
            return self._tools[self._pos[tool_id]]
        except (KeyError, TypeError):
            raise UnknownToolError(f"unknown tool id {tool_id!r} (not in catalog {self.source})") from None

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def with_tool(self, tool: Tool) -> "Catalog":
        """A copy with ``tool`` added, or replacing the tool of the same id."""
        base = self.without(tool.id) if tool.id in self._pos else self
        if isinstance(base._tools, _PackedTools):
            return Catalog._with_packed(base, tool)
        return Catalog(list(base._tools) + [tool], source=self.source)

    @staticmethod
    def _with_packed(base: "Catalog", tool: Tool) -> "Catalog":
        assert isinstance(base._tools, _PackedTools)
        copy = Catalog.__new__(Catalog)
        copy.source, copy._tools = base.source, base._tools.plus(tool)
        copy._ids = base._ids + [tool.id]
        copy._pos = dict(base._pos)
        copy._pos[tool.id] = len(base._ids)
        copy._named = {k: (v if isinstance(v, str) else list(v)) for k, v in base._named.items()}
        copy._add_name(tool.name, tool.id)
        return copy

    def without(self, tool_id: str) -> "Catalog":
        removed = self.get(tool_id)
        if not isinstance(self._tools, _PackedTools):
            return Catalog([t for t in self._tools if t.id != tool_id], source=self.source)
        position = self._pos[tool_id]
        copy = Catalog.__new__(Catalog)
        copy.source, copy._tools = self.source, self._tools.without(position)
        copy._ids = self._ids[:position] + self._ids[position + 1:]
        copy._pos = {i: (p if p < position else p - 1) for i, p in self._pos.items() if i != tool_id}
        copy._named = {k: (v if isinstance(v, str) else list(v)) for k, v in self._named.items()}
        have = copy._named[removed.name]
        if isinstance(have, str):
            del copy._named[removed.name]
        else:
            have.remove(tool_id)
            if len(have) == 1:
                copy._named[removed.name] = have[0]
        return copy

    def write_jsonl(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for tool in self._tools:
                f.write(json.dumps(tool.to_record(), ensure_ascii=False, sort_keys=True) + "\n")


def parse_tool(entry: Any, *, where: str, domain: str | None = None,
               check_schemas: bool = False) -> Tool:
    """Validate one catalog entry (MCP or benchmark style) into a Tool, or raise CatalogError.

    The entry's size, value count and nesting are bounded first (the module's limits), so nothing
    below walks an unbounded value. ``check_schemas``: the entry is an MCP tool, so its inputSchema
    (and outputSchema) must be an object schema that passes the JSON Schema meta-schema check
    (``check_json_schema``). Keys Tool does not model are kept in ``Tool.extra``.
    """
    return _parse_tool(entry, where, domain, check_schemas, decoded=False)


_SCHEMA_KEYS = ("inputSchema", "input_schema", "parameters")  # where a tool's input schema is, first found


def _parse_tool(entry: Any, where: str, domain: str | None, check_schemas: bool, *, decoded: bool) -> Tool:
    """``parse_tool``; ``decoded``: ``entry`` is what ``json.loads`` returned (dicts with string keys,
    lists and JSON scalars, no cycles), so its bounds are first tried with ``_decoded_bounds``."""
    if type(entry) is not dict and not isinstance(entry, _abc.Mapping):
        raise CatalogError(f"{where}: a tool must be a JSON object, got {type(entry).__name__}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CatalogError(f"{where}: tool has no 'name' (a non-empty string)")
    if len(name) > MAX_NAME_CHARS:
        raise CatalogError(f"{where}: tool name {name[:40]!r}... is {len(name):,} characters long; names have "
                           f"at most {MAX_NAME_CHARS} characters")
    if not _NAME_RE.match(name):
        raise CatalogError(f"{where}: tool name {name!r} has characters a tool name cannot have (control "
                           "characters or line breaks)")
    schema_key = "inputSchema" if "inputSchema" in entry else next((k for k in _SCHEMA_KEYS if k in entry), None)
    keys = _decoded_bounds(entry, schema_key) if decoded and type(entry) is dict else None
    if keys is None:
        keys = {}
        if not _check_bounds(entry, f"{where}: tool {name!r}"):
            entry = _plain_json(entry)  # nested mappings that are not dicts (MappingProxyType, UserDict) as dicts
    description = entry.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise CatalogError(f"{where}: tool {name!r}: 'description' must be a string")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise CatalogError(f"{where}: tool {name!r}: 'description' is {len(description):,} characters long "
                           f"(at most {MAX_DESCRIPTION_CHARS:,})")
    schema = entry[schema_key] if schema_key is not None else {}
    if schema is None:
        schema = {}
    if type(schema) is not dict:  # entry is plain JSON here: its mappings are dicts
        raise CatalogError(f"{where}: tool {name!r}: 'inputSchema'/'parameters' must be a JSON object")
    props = schema.get("properties")
    if props is not None and type(props) is not dict:
        raise CatalogError(f"{where}: tool {name!r}: schema 'properties' must be an object")
    if "type" in schema and not isinstance(schema["type"], (str, list)):
        raise CatalogError(f"{where}: tool {name!r}: schema 'type' must be a string")
    tool_id = entry.get("id", name)
    if not isinstance(tool_id, str) or not tool_id:
        raise CatalogError(f"{where}: tool {name!r}: 'id' must be a non-empty string")
    if len(tool_id) > MAX_ID_CHARS or _CONTROL_RE.search(tool_id):
        raise CatalogError(f"{where}: tool {name!r}: 'id' must be at most {MAX_ID_CHARS} printable characters")
    title = entry.get("title")
    if title is not None and not isinstance(title, str):
        raise CatalogError(f"{where}: tool {name!r}: 'title' must be a string")
    if title is not None and len(title) > MAX_TITLE_CHARS:
        raise CatalogError(f"{where}: tool {name!r}: 'title' is longer than {MAX_TITLE_CHARS:,} characters")
    annotations = entry.get("annotations")
    if annotations is not None and type(annotations) is not dict:
        raise CatalogError(f"{where}: tool {name!r}: 'annotations' must be a JSON object")
    output_schema = entry.get("outputSchema")
    if output_schema is not None and type(output_schema) is not dict:
        raise CatalogError(f"{where}: tool {name!r}: 'outputSchema' must be a JSON object")
    server = entry.get("server")
    if server is not None and not isinstance(server, str):
        raise CatalogError(f"{where}: tool {name!r}: 'server' must be a string")
    dom = entry.get("domain", domain)
    extra = {k: v for k, v in entry.items() if k not in _KNOWN_KEYS}
    for key in ("execution", "_meta"):  # MCP: objects when present
        if key in extra and type(extra[key]) is not dict:
            raise CatalogError(f"{where}: tool {name!r}: {key!r} must be a JSON object")
    if check_schemas and schema:  # a tool without parameters may leave its schema out
        _check_plain_schema(schema, f"{where}: tool {name!r}: inputSchema", keys.get(schema_key or ""))
        if output_schema is not None:
            _check_plain_schema(output_schema, f"{where}: tool {name!r}: outputSchema", keys.get("outputSchema"))
    return Tool(id=tool_id, name=name, description=description.strip(), parameters=dict(schema),
                domain=dom if isinstance(dom, str) else None, title=title or None,
                annotations=dict(annotations) if annotations is not None else None,
                output_schema=dict(output_schema) if output_schema is not None else None,
                server=server or None, extra=extra or None)


def check_tool(tool: Any, catalog: "Catalog | None" = None, *, where: str = "tool") -> Tool:
    """The Tool to add to a catalog at run time (``Selector.add_tool``), checked; else InputError
    naming the tool and the field. ``tool``: a Tool, or a JSON object in MCP shape (``inputSchema``:
    its schemas are meta-schema checked) or benchmark shape (``id``, ``parameters``), parsed as
    ``parse_tool`` does. Refused: an id or name that is empty, not a string, too long or holds
    control characters, parameters that are not a JSON object (a schema of ``"type": "object"`` is
    meta-schema checked), text over the module's limits, and (with ``catalog``) a name another tool
    of the catalog (another id) already has."""
    try:
        if isinstance(tool, Mapping):
            mcp_shape = "inputSchema" in tool or "input_schema" in tool or "parameters" not in tool
            checked = parse_tool(tool, where=where, check_schemas=mcp_shape)
        elif isinstance(tool, Tool):
            _check_tool_object(tool, where)
            checked = tool
            plain = {f: _plain_json(getattr(tool, f)) for f in ("parameters", "annotations", "output_schema", "extra")}
            if any(plain[f] is not getattr(tool, f) for f in plain):  # nested mappings that are not dicts
                checked = replace(tool, **plain)
        else:
            raise InputError(f"{where}: a tool is a Tool or a JSON object (MCP or benchmark shape), got "
                             f"{type(tool).__name__}")
    except CatalogError as e:
        raise InputError(str(e)) from None
    if catalog is not None:
        other = catalog.id_named(checked.name, besides=checked.id)
        if other is not None:
            raise InputError(f"{where} {checked.id!r}: name {checked.name!r} is already tool {other!r}'s (tool "
                             "names are what the LLM calls: they must differ)")
    return checked


def _check_tool_object(tool: Tool, where: str) -> None:
    for field_name in ("id", "name", "description"):
        if not isinstance(getattr(tool, field_name), str):
            raise CatalogError(f"{where}: {field_name} must be a string, got {type(getattr(tool, field_name)).__name__}")
    for field_name in ("title", "domain", "server"):
        value = getattr(tool, field_name)
        if value is not None and not isinstance(value, str):
            raise CatalogError(f"{where} {tool.id!r}: {field_name} must be a string or None")
    for field_name in ("parameters", "annotations", "output_schema", "extra"):
        value = getattr(tool, field_name)
        if value is not None and not isinstance(value, Mapping):
            raise CatalogError(f"{where} {tool.id!r}: {field_name} must be a JSON object (a mapping), got "
                               f"{type(value).__name__}")
    if tool.parameters is None:
        raise CatalogError(f"{where} {tool.id!r}: parameters must be a JSON object (a mapping), got None")
    record = {"id": tool.id, "name": tool.name, "description": tool.description, "parameters": tool.parameters}
    for key, value in (("title", tool.title), ("annotations", tool.annotations), ("outputSchema", tool.output_schema),
                       ("domain", tool.domain), ("server", tool.server)):
        if value is not None:
            record[key] = value
    for key, value in (tool.extra or {}).items():
        record.setdefault(key, value)
    parse_tool(record, where=f"{where} {tool.id!r}")
    if tool.parameters.get("type") == "object":  # a JSON Schema: it must be a valid one
        check_json_schema(tool.parameters, f"{where} {tool.id!r}: parameters", bounded=True)


def check_tool_id(tool_id: Any, where: str = "tool id") -> str:
    """A tool id as ``remove_tool`` takes it: a non-empty string of at most ``MAX_ID_CHARS``; else
    InputError."""
    if not isinstance(tool_id, str) or not tool_id:
        raise InputError(f"{where}: a tool id is a non-empty string, got {type(tool_id).__name__} {tool_id!r:.60}")
    if len(tool_id) > MAX_ID_CHARS:
        raise InputError(f"{where}: {tool_id[:40]!r}... is longer than {MAX_ID_CHARS} characters (no tool has it)")
    return tool_id


_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)


def _check_bounds(value: Any, where: str) -> bool:
    """Refuse a value that is not plain JSON within the module's limits: at most ``MAX_TOOL_DEPTH``
    levels, ``MAX_TOOL_NODES`` values and ``MAX_TOOL_JSON_CHARS`` characters as JSON, string keys,
    no lone surrogate (JSON's "\\ud800" escapes decode to one: no tokenizer can read it). Walked
    without recursion, so a hostile value costs at most the limits. True when every mapping in
    ``value`` is a dict (``_plain_json`` would return it unchanged), False when one is not."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    plain = True
    while stack:
        v, depth = stack.pop()
        nodes += 1
        t = type(v)
        if t is dict or (t not in _SCALAR_TYPES and t is not list and isinstance(v, _abc.Mapping)):
            if t is not dict:
                plain = False
            if depth >= MAX_TOOL_DEPTH:
                raise CatalogError(f"{where}: nested more than {MAX_TOOL_DEPTH} levels deep")
            nodes += len(v)
            for k, item in v.items():
                if type(k) is not str:
                    raise CatalogError(f"{where}: a key {k!r} is not a string")
                if type(item) not in _SCALAR_TYPES:
                    stack.append((item, depth + 1))
        elif t is list or t is tuple:
            if depth >= MAX_TOOL_DEPTH:
                raise CatalogError(f"{where}: nested more than {MAX_TOOL_DEPTH} levels deep")
            nodes += len(v)
            stack += [(item, depth + 1) for item in v if type(item) not in _SCALAR_TYPES]
        elif not isinstance(v, _SCALARS):
            raise CatalogError(f"{where}: holds a {type(v).__name__}, not a JSON value")
        if nodes > MAX_TOOL_NODES:
            raise CatalogError(f"{where}: holds more than {MAX_TOOL_NODES:,} values")
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
                   .encode("utf-8", "strict"))
    except UnicodeEncodeError:
        key = next((str(k) for k, v in value.items() if _has_surrogate(v) or _has_surrogate(k)), "a value") \
            if isinstance(value, Mapping) else "a value"
        raise CatalogError(f"{where}: {key.encode('utf-8', 'backslashreplace').decode()!r} holds a lone "
                           "surrogate (not valid Unicode)") from None
    except ValueError:  # NaN or infinity, or an integer past Python's digit limit: not JSON
        raise CatalogError(f"{where}: holds NaN, infinity or an integer too long to write, not a JSON "
                           "number") from None
    if size > MAX_TOOL_JSON_CHARS:
        raise CatalogError(f"{where}: is {size:,} bytes as JSON (at most {MAX_TOOL_JSON_CHARS:,})")
    return plain


# Compact JSON, in the key order given (the schema-cache key of a decoded schema, and the size bound).
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _decoded_bounds(entry: dict[str, Any], schema_key: str | None) -> dict[str, str] | None:
    """The bounds of ``_check_bounds`` for an entry ``json.loads`` returned, from its compact JSON
    (C speed) instead of a walk: {field: compact JSON} of the entry's input schema (the value at
    ``schema_key``) and ``outputSchema`` when they are objects (their schema-cache keys), or None
    when this cannot show that ``_check_bounds`` passes the entry; the caller then runs it, and it
    gives the verdict and the message. No limit is loosened: every count here is an upper bound of
    the one ``_check_bounds`` takes.

    In a decoded entry every value is a dict, a list or a JSON scalar, and every key a string, so
    ``_check_bounds`` counts each container twice (it pops it, and its parent counts it) and each
    scalar once: its count is at most 2 x (``{`` and ``[`` in the JSON) + ``,`` in the JSON (a
    container of n values holds n - 1 commas). A value n levels deep sits in n + 1 nested
    containers, so fewer than ``MAX_TOOL_DEPTH`` + 1 containers cannot be too deep. The size as
    ``_check_bounds`` writes it (``", "`` and ``": "``) is the compact size plus one for each
    separator: at most the commas and colons in the compact JSON. NaN, infinities, integers too
    long to write and lone surrogates raise here as there."""
    encode = _COMPACT_JSON.encode
    pieces: dict[str, str] = {}
    try:
        rest = entry
        for k in (schema_key, "outputSchema"):
            if k is not None and type(entry.get(k)) is dict:
                pieces[k] = encode(entry[k])
                if rest is entry:
                    rest = dict(entry)
                rest[k] = 0  # one character, "0", in place of the piece
        size = -len(pieces)  # the placeholders
        containers = commas = colons = 0
        for text in (encode(rest), *pieces.values()):
            size += len(text) if text.isascii() else len(text.encode("utf-8", "strict"))
            containers += text.count("{") + text.count("[")
            commas += text.count(",")
            colons += text.count(":")
    except Exception:  # NaN, an integer too long, a lone surrogate, nested too deeply to write: the walk says
        return None
    if containers > MAX_TOOL_DEPTH or 2 * containers + commas > MAX_TOOL_NODES \
            or size + commas + colons > MAX_TOOL_JSON_CHARS:
        return None
    return pieces


def _json_default(value: Any) -> Any:
    """A mapping that is not a dict (``MappingProxyType``, ``UserDict``), as JSON writes it: an object."""
    if isinstance(value, _abc.Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _plain_json(value: Any) -> Any:
    """``value`` (bounded by ``_check_bounds``) with every mapping that is not a dict copied into a
    dict, so what a Tool keeps writes as JSON; ``value`` itself when it holds none."""
    if isinstance(value, _abc.Mapping):
        items = {k: _plain_json(v) for k, v in value.items()}
        if type(value) is dict and all(items[k] is v for k, v in value.items()):
            return value
        return items
    if type(value) is list or type(value) is tuple:
        elements = [_plain_json(v) for v in value]
        return value if all(a is b for a, b in zip(elements, value)) else type(value)(elements)
    return value


def _has_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, default=_json_default).encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


# The SHA-256 of the JSON of schemas that passed their meta-schema (32 bytes a schema, not its text).
_SCHEMA_OK: dict[bytes, None] = {}
_SCHEMA_OK_MAX = 65_536


def check_json_schema(schema: Mapping[str, Any], where: str, *, bounded: bool = False) -> None:
    """An MCP tool schema: a JSON object schema (``"type": "object"``) that passes its meta-schema
    (Draft 2020-12 unless ``$schema`` names another draft); else CatalogError naming ``where``.

    The schema is bounded first (``_check_bounds``; ``bounded``: the caller did), then checked with
    jsonschema-rs (compiled, when installed) and, for the message of a schema it refuses, or when it
    is missing, with jsonschema; every ``pattern`` must compile. Schemas already passed (the same
    canonical JSON) are not checked again."""
    if not isinstance(schema, Mapping):
        raise CatalogError(f"{where}: must be a JSON object, got {type(schema).__name__}")
    if bounded or not _check_bounds(schema, where):
        schema = _plain_json(schema)  # mappings that are not dicts, as dicts: what JSON and jsonschema-rs read
    _check_plain_schema(schema, where)


def _schema_cache_key(text: str) -> bytes:
    """The ``_SCHEMA_OK`` key of a schema written as compact JSON (any key order: two schemas that
    write the same text are the same JSON value)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _jsonschema() -> tuple[Any, Any]:
    """jsonschema's ``exceptions`` and ``validators`` modules, imported on first use (only MCP
    catalogs need them) and kept: an import statement costs microseconds even when cached."""
    global _JSONSCHEMA
    if _JSONSCHEMA is None:
        from jsonschema import exceptions, validators

        _JSONSCHEMA = (exceptions, validators)
    return _JSONSCHEMA


_JSONSCHEMA: tuple[Any, Any] | None = None


def _check_plain_schema(schema: Mapping[str, Any], where: str, text: str | None = None) -> None:
    """``check_json_schema`` of a schema already bounded whose mappings are all dicts; ``text``:
    its compact JSON, when the caller wrote it (``_decoded_bounds``)."""
    if schema.get("type") != "object":
        raise CatalogError(f"{where}: must be a JSON Schema with \"type\": \"object\" (MCP), "
                           f"got type {schema.get('type')!r}")
    meta = schema.get("$schema")
    if "$schema" in schema and not isinstance(meta, str):
        raise CatalogError(f"{where}: \"$schema\" must be a string (a JSON Schema draft URI), got {meta!r}")
    if text is None:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    key = _schema_cache_key(text)
    if key in _SCHEMA_OK:
        return
    exceptions, validators = _jsonschema()

    try:
        cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    except exceptions.SchemaError:  # an unknown $schema URI (only newer jsonschema releases raise)
        cls = None
    if cls is None or (meta is not None and cls is validators.Draft202012Validator
                       and meta.rstrip("#") not in _DRAFT_2020_12_URIS):
        raise CatalogError(f"{where}: unknown \"$schema\" {meta!r}; use a JSON Schema draft URI "
                           "(MCP's default is https://json-schema.org/draft/2020-12/schema)")
    if '"pattern' in text:  # a "pattern" or "patternProperties" key writes so; else there is none to compile
        _check_patterns(schema, where)
    fast = _rs_meta_valid(schema)
    if fast is not True:
        try:
            cls.check_schema(schema)
        except exceptions.SchemaError as e:
            at = "/".join(str(p) for p in e.path)
            raise CatalogError(f"{where}: not a valid JSON Schema: {e.message}" + (f" (at /{at})" if at else "")) from None
        except RecursionError:
            raise CatalogError(f"{where}: nested too deeply to check as a JSON Schema") from None
        except (TypeError, ValueError, AttributeError) as e:
            raise CatalogError(f"{where}: not a valid JSON Schema ({type(e).__name__}: {e})") from None
        if fast is False:  # jsonschema-rs refused what jsonschema passed: report jsonschema-rs's reason
            raise CatalogError(f"{where}: not a valid JSON Schema: {_rs_meta_error(schema)}")
    if len(_SCHEMA_OK) >= _SCHEMA_OK_MAX:
        _SCHEMA_OK.clear()
    _SCHEMA_OK[key] = None


def _rs_meta_valid(schema: Mapping[str, Any]) -> bool | None:
    """jsonschema-rs's meta-schema verdict (True, False), or None where it is not installed or does
    not know the draft."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    try:
        return bool(jsonschema_rs.meta.is_valid(dict(schema)))
    except Exception:  # an unknown draft, a value it cannot take: let jsonschema decide
        return None


def _rs_meta_error(schema: Mapping[str, Any]) -> str:
    import jsonschema_rs

    try:
        jsonschema_rs.meta.validate(dict(schema))
    except jsonschema_rs.ValidationError as e:
        at = "/".join(str(p) for p in e.instance_path)
        return str(e.message) + (f" (at /{at})" if at else "")
    except Exception as e:  # pragma: no cover - is_valid said False
        return f"{type(e).__name__}: {e}"
    return "refused by its meta-schema"


_PATTERNS_OK: dict[str, None] = {}


def _check_patterns(schema: Mapping[str, Any], where: str) -> None:
    """Every ``pattern`` value and ``patternProperties`` key must compile as a regular expression
    (as the meta-schema's ``"format": "regex"`` asks); one that cannot (malformed, or nested too
    deeply for the regex parser) is a CatalogError naming it."""
    stack: list[tuple[Any, str]] = [(schema, "")]
    found: list[tuple[str, str]] = []
    while stack:  # the values are plain JSON here (_check_bounds ran): dicts and lists
        v, at = stack.pop()
        if type(v) is list:
            stack += [(item, f"{at}/{i}") for i, item in enumerate(v) if type(item) is dict or type(item) is list]
            continue
        pattern = v.get("pattern")
        if type(pattern) is str:
            found.append((pattern, f"{at}/pattern"))
        pprops = v.get("patternProperties")
        if type(pprops) is dict:
            found += [(p, f"{at}/patternProperties") for p in pprops]
        for k, item in v.items():
            if type(item) is dict or type(item) is list:
                stack.append((item, f"{at}/{k}"))
    for pattern, at in found:
        if pattern in _PATTERNS_OK:
            continue
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError, ValueError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            raise CatalogError(f"{where}: not a valid JSON Schema: pattern {pattern[:60]!r} is not a valid regular "
                               f"expression ({why}) (at {at})") from None
        if len(_PATTERNS_OK) < 65_536:
            _PATTERNS_OK[pattern] = None


_DRAFT_2020_12_URIS = ("https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft/2020-12/schema")


def _tools_list_pages(data: Any, where: str) -> list[Mapping[str, Any]] | None:
    """The ``tools/list`` results in a parsed JSON document: a JSON-RPC response, a list of them
    (pages), or a bare result; None when the document is a plain list of tools."""
    if isinstance(data, (list, _LazyArray)) and data and all(isinstance(d, Mapping) and "jsonrpc" in d for d in data):
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
    """(entry, where) pairs and the domain of a JSON catalog file. A large document's tools list
    is read one tool at a time: its entries are ``_Pending`` until ``_decoded``."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is allowed
    except UnicodeDecodeError as e:
        raise CatalogError(f"{path}: not UTF-8 text ({e})") from None
    data = _lazy_document(text) if len(text) >= LAZY_JSON_AT else None
    if data is None:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CatalogError(f"{path}: not valid JSON ({e})") from None
        except RecursionError:
            raise CatalogError(f"{path}: JSON nested too deeply to be a catalog") from None
    return _entries_from_data(data, str(path))


# A JSON catalog file of at least this many characters has its tools list decoded one tool at a
# time (``_lazy_document``): 100,000 MCP tools decoded at once take about 300 MB over the file.
LAZY_JSON_AT = 1 << 22
_JSON_WS = re.compile(r"[ \t\n\r]*")
_JSON_DECODER = json.JSONDecoder()  # stateless: one serves every read


class _LazyArray:
    """A JSON array of a document's text held as its elements' start offsets, each element decoded
    (by json's own scanner, so to the values ``json.loads`` gives) when it is read."""

    def __init__(self, text: str, starts: "array[int]") -> None:
        self._text, self._starts = text, starts

    def __len__(self) -> int:
        return len(self._starts)

    def item(self, i: int) -> Any:
        return _JSON_DECODER.raw_decode(self._text, self._starts[i])[0]

    def __iter__(self) -> Iterator[Any]:
        return (self.item(i) for i in range(len(self._starts)))


class _Pending:
    """An entry of a ``_LazyArray``, decoded by ``_decoded``."""

    __slots__ = ("array", "i")

    def __init__(self, array: _LazyArray, i: int) -> None:
        self.array, self.i = array, i


def _decoded(entry: Any) -> Any:
    return entry.array.item(entry.i) if isinstance(entry, _Pending) else entry


def _entry_values(seq: Any) -> Iterator[Any]:
    """A tools list's entries: its values, or for a ``_LazyArray`` each one ``_Pending``."""
    if isinstance(seq, _LazyArray):
        return (_Pending(seq, i) for i in range(len(seq)))
    return iter(seq)


def _lazy_document(text: str) -> Any:
    """``json.loads(text)`` where the document is an object (a ``tools/list`` response or result)
    or an array, with its tools list (``tools`` or ``result.tools``, or the array itself) a
    ``_LazyArray``; every element is scanned once, so the whole text is checked as JSON. None
    wherever the text is not valid JSON or not of that shape, and ``json.loads`` decides (the same
    values, the same errors)."""
    scan: Callable[[str, int], tuple[Any, int]] = getattr(_JSON_DECODER, "scan_once")
    scanstring: Callable[[str, int, bool], tuple[str, int]] = getattr(json.decoder, "scanstring")

    def skip(i: int) -> int:  # past the JSON whitespace at i
        return _JSON_WS.match(text, i).end()  # type: ignore[union-attr]  # the pattern matches anywhere

    lazy_keys = {"": ("result", "tools"), "result": ("tools",)}

    def value(i: int, kind: str) -> tuple[Any, int]:
        if kind in lazy_keys and text.startswith("{", i):
            return members(i + 1, kind)
        if kind in ("", "tools") and text.startswith("[", i):
            return elements(i + 1)
        return scan(text, i)

    def members(i: int, kind: str) -> tuple[dict[str, Any], int]:
        obj: dict[str, Any] = {}
        i = skip(i)
        if text.startswith("}", i):
            return obj, i + 1
        while True:
            if not text.startswith('"', i):
                raise ValueError
            key, i = scanstring(text, i + 1, True)
            i = skip(i)
            if not text.startswith(":", i):
                raise ValueError
            i = skip(i + 1)
            obj[key], i = value(i, key if key in lazy_keys[kind] else "-")
            i = skip(i)
            if text.startswith("}", i):
                return obj, i + 1
            if not text.startswith(",", i):
                raise ValueError
            i = skip(i + 1)

    def elements(i: int) -> tuple[_LazyArray, int]:
        starts = array("q")
        i = skip(i)
        if text.startswith("]", i):
            return _LazyArray(text, starts), i + 1
        while True:
            starts.append(i)
            _, i = scan(text, i)  # checked here, let go, decoded again when read
            i = skip(i)
            if text.startswith("]", i):
                return _LazyArray(text, starts), i + 1
            if not text.startswith(",", i):
                raise ValueError
            i = skip(i + 1)

    try:
        data, end = value(skip(0), "")
        if skip(end) != len(text):
            return None
    except (ValueError, StopIteration, RecursionError, IndexError):  # json.JSONDecodeError is a ValueError
        return None
    return data if isinstance(data, (dict, _LazyArray)) else None


def _entries_from_data(data: Any, where: str) -> tuple[list[tuple[Any, str]], str | None]:
    """(entry, where) pairs and the domain, from a parsed JSON catalog document."""
    pages = _tools_list_pages(data, where)
    if pages is None:
        if not isinstance(data, (list, _LazyArray)):
            raise CatalogError(f"{where}: expected a list of tools or an object with a 'tools' list")
        return [(e, f"{where}[{i}]") for i, e in enumerate(_entry_values(data))], None
    entries: list[tuple[Any, str]] = []
    domain = None
    for page in pages:
        tools = page["tools"]
        if not isinstance(tools, (list, _LazyArray)):
            raise CatalogError(f"{where}: 'tools' must be a list")
        offset = len(entries)  # pages number their tools on, so that every index is unique
        entries += [(e, f"{where}[{offset + i}]") for i, e in enumerate(_entry_values(tools))]
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


def _parsed_one_by_one(entries: list[Any], domain: str | None, where: str) -> Iterator[Tool]:
    """The MCP tools of a large JSON catalog for ``Catalog`` to pack, each parsed and its decoded
    JSON let go before the next (``entries`` is emptied as it goes). The errors are those of a small
    catalog, in its order: every entry is parsed first, then names and ids are checked unique."""
    names: dict[str, int] = {}
    ids: set[str] = set()
    duplicate_name: str | None = None
    duplicate_id: str | None = None
    for i in range(len(entries)):
        entry, at = entries[i]
        entries[i] = None  # the decoded JSON goes as soon as it is parsed
        tool = _parse_tool(_decoded(entry), at, domain, True, decoded=True)
        del entry
        if tool.name in names:
            duplicate_name = duplicate_name or f"{where}: duplicate tool name {tool.name!r} (entries {names[tool.name]} and {i})"
        names.setdefault(tool.name, i)
        if tool.id in ids:
            duplicate_id = duplicate_id or f"{where}: duplicate tool id {tool.id!r}"
        ids.add(tool.id)
        if duplicate_name is None and duplicate_id is None:
            yield tool
    if duplicate_name or duplicate_id:
        raise CatalogError(duplicate_name or duplicate_id)


def _check_unique_names(tools: Sequence[Tool], where: str) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(tools):
        if t.name in seen:
            raise CatalogError(f"{where}: duplicate tool name {t.name!r} (entries {seen[t.name]} and {i})")
        seen[t.name] = i


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused (when it runs) while a catalog is decoded and parsed:
    the millions of objects JSON decoding makes hold no cycles, yet they start collections that
    walk every object made so far again and again, a cost that grows with the catalog."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def load_catalog(path: str | Path) -> Catalog:
    """Read a catalog from an MCP JSON file (a tools/list response, its result, or a list of tools),
    a ``tools.jsonl`` file, a benchmark folder or a folder of JSON files."""
    with _gc_paused():
        return _load_catalog(Path(path))


def _load_catalog(path: Path) -> Catalog:
    if not path.exists():
        raise CatalogError(f"{path}: no such catalog file or folder")
    tools: list[Tool] = []
    if path.is_dir():
        if (path / "tools.jsonl").exists():
            return _load_catalog(path / "tools.jsonl")
        files = sorted(path.glob("*.json"))
        if not files:
            raise CatalogError(f"{path}: folder holds no tools.jsonl and no *.json catalog files")
        for file in files:
            entries, domain = _entries_from_json(file)
            domain = domain or file.stem
            tools += [_parse_tool(_decoded(e), w, domain, True, decoded=True) for e, w in entries]
        strict_names = True
    elif path.suffix == ".jsonl":
        tools = [_parse_tool(e, w, None, False, decoded=True) for e, w in _entries_from_jsonl(path)]
        # Benchmark folders may reuse a name with different descriptions; ids tell them apart.
        strict_names = all(t.id == t.name for t in tools)
    else:
        entries, domain = _entries_from_json(path)
        if len(entries) >= PACK_AT:
            catalog = Catalog(_parsed_one_by_one(entries, domain, str(path)), source=str(path))
            trim_heap()  # the decoded JSON's memory, back to the system
            return catalog
        tools = [_parse_tool(_decoded(e), w, domain, True, decoded=True) for e, w in entries]
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
        entries, _ = _entries_from_data(data, f"{source}: server {server!r}")
        if not entries:
            raise CatalogError(f"{source}: server {server!r} lists no tools")
        local = [parse_tool(e, where=w, domain=prefix, check_schemas=True) for e, w in entries]
        _check_unique_names(local, f"{source}: server {server!r}")
        for t in local:
            tools.append(_namespaced_tool(t, server, prefix, namespace, f"{source}: server {server!r}", t.name))
    if not tools:
        raise CatalogError(f"{source}: no servers given")
    return Catalog(tools, source=source)


def server_name_of(path: str | Path) -> str:
    """The server name a catalog file stands for when none is given: its file name, without the
    extension, sanitized (``sanitize_server_name``; ``server`` when nothing is left)."""
    stem = Path(path).name.split(".")[0] or "server"
    try:
        return sanitize_server_name(stem)
    except CatalogError:
        return "server"


def load_catalogs(specs: Sequence[str | Path], namespace: str = "server") -> Catalog:
    """The catalog of ``select --catalog``: one or more ``FILE`` or ``SERVER=FILE`` (any form
    ``load_catalog`` reads). One file without a server name is used as it is (unless ``namespace`` is
    ``"mcp"``); otherwise every tool is named ``<server>__<tool>`` (``mcp__<server>__<tool>`` with
    ``namespace="mcp"``), the server being the given name, sanitized, or the file's name."""
    _check_namespace(namespace)
    if not specs:
        raise CatalogError("no catalog given")
    parsed: list[tuple[str | None, Path]] = []
    for spec in specs:
        text = str(spec)
        server, sep, file = text.partition("=")
        if sep and not Path(text).exists() and server and "/" not in server:
            sanitize_server_name(server, text)  # a server name that names nothing is refused here
            parsed.append((server, Path(file)))
        else:
            parsed.append((None, Path(text)))
    if len(parsed) == 1 and parsed[0][0] is None and namespace == "server":
        return load_catalog(parsed[0][1])
    tools: list[Tool] = []
    servers: dict[str, Path] = {}
    for named, path in parsed:
        server = named or server_name_of(path)
        prefix = sanitize_server_name(server, str(path))
        if prefix in servers:
            raise CatalogError(f"{path}: server name {prefix!r} is also {servers[prefix]}'s; name them apart "
                               "with SERVER=FILE")
        servers[prefix] = path
        for t in load_catalog(path):
            tools.append(_namespaced_tool(t, server, prefix, namespace, str(path), t.id))
    return Catalog(tools, source=" ".join(str(s) for s in specs))


def catalog_digest(catalog: Catalog) -> str:
    """A hash of everything a catalog hands to an LLM (the MCP definitions, in order)."""
    blob = json.dumps([t.to_mcp() for t in catalog], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]

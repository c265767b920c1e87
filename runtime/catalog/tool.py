"""A tool: the ``Tool`` record (MCP's fields), the text it is embedded with, and the parsing and checks of one MCP or benchmark tool definition."""
from __future__ import annotations

import collections.abc as _abc
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from ..errors import CatalogError, InputError
from .bounds import _check_bounds, _decoded_bounds, _plain_json
from .schema import _check_plain_schema, check_json_schema


MAX_NAME_CHARS = 128  # MCP's limit on a tool name (SEP-986: 1 to 128 characters)
MAX_ID_CHARS = 256
MAX_TITLE_CHARS = 1_024
MAX_DESCRIPTION_CHARS = 65_536
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


_FIELD_OF_KEY = {"outputSchema": "output_schema"}  # an MCP key whose Tool field is spelled otherwise
_TEXT_FIELDS = frozenset({"title", "domain", "server"})  # optional text: left out when empty


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
        out: dict[str, Any] = {"name": self.name, **self._set_fields(("title",)), "description": self.description,
                               "inputSchema": dict(self.parameters) or {"type": "object"},  # MCP: an object schema
                               **self._set_fields(("outputSchema", "annotations"))}
        for key, value in (self.extra or {}).items():
            out.setdefault(key, value)
        return out

    def to_record(self) -> dict[str, Any]:
        """The benchmark-format row (``tools.jsonl``); MCP fields are kept when set."""
        row = {"id": self.id, "name": self.name, "description": self.description,
               "parameters": dict(self.parameters),
               **self._set_fields(("domain", "title", "annotations", "outputSchema", "server"))}
        for key, value in (self.extra or {}).items():
            row.setdefault(key, value)
        return row

    def _set_fields(self, keys: tuple[str, ...]) -> dict[str, Any]:
        """The optional fields that are set, by their MCP key: text fields when not empty, objects
        (copied) when not None."""
        out: dict[str, Any] = {}
        for key in keys:
            value = getattr(self, _FIELD_OF_KEY.get(key, key))
            if key in _TEXT_FIELDS and value:
                out[key] = value
            elif key not in _TEXT_FIELDS and value is not None:
                out[key] = dict(value)
        return out


def tool_text(tool: Tool, max_description_chars: int = 400) -> str:
    """The text a tool is embedded with: readable name, description, parameter names.

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
    lists and JSON scalars, no cycles), so its bounds are first tried with ``_decoded_bounds``.
    The fields are checked in a fixed order, so the first bad one is the one named."""
    name = _tool_name(entry, where)
    schema_key = "inputSchema" if "inputSchema" in entry else next((k for k in _SCHEMA_KEYS if k in entry), None)
    entry, keys = _bounded_entry(entry, f"{where}: tool {name!r}", schema_key, decoded)
    at = f"{where}: tool {name!r}"
    description = _description(entry.get("description", ""), at)
    schema = _input_schema(entry[schema_key] if schema_key is not None else {}, at)
    tool_id = _tool_id(entry.get("id", name), at)
    title, annotations, output_schema, server = _optional_fields(entry, at)
    extra = _extra(entry, at)
    if check_schemas and schema:  # a tool without parameters may leave its schema out
        _check_schemas(schema, output_schema, at, keys.get(schema_key or ""), keys.get("outputSchema"))
    dom = entry.get("domain", domain)
    return Tool(id=tool_id, name=name, description=description.strip(), parameters=dict(schema),
                domain=dom if isinstance(dom, str) else None, title=title or None,
                annotations=_dict_or_none(annotations), output_schema=_dict_or_none(output_schema),
                server=server or None, extra=extra or None)


def _check_schemas(schema: dict[str, Any], output_schema: dict[str, Any] | None, at: str,
                   schema_json: str | None, output_json: str | None) -> None:
    """A tool's input schema and output schema (when it has one) against the JSON Schema meta-schema;
    ``*_json``: their compact JSON where ``_decoded_bounds`` wrote it."""
    _check_plain_schema(schema, f"{at}: inputSchema", schema_json)
    if output_schema is not None:
        _check_plain_schema(output_schema, f"{at}: outputSchema", output_json)


def _bounded_entry(entry: Any, at: str, schema_key: str | None, decoded: bool) -> tuple[Any, dict[str, str]]:
    """The entry within the definition bounds, its nested mappings as dicts, and the compact JSON of
    its schemas when ``_decoded_bounds`` could show the bounds without a walk (else {})."""
    keys = _decoded_bounds(entry, schema_key) if decoded and type(entry) is dict else None
    if keys is not None:
        return entry, keys
    if not _check_bounds(entry, at):
        entry = _plain_json(entry)  # nested mappings that are not dicts (MappingProxyType, UserDict) as dicts
    return entry, {}


def _dict_or_none(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(value) if value is not None else None


def _extra(entry: Mapping[str, Any], at: str) -> dict[str, Any]:
    """The MCP fields Tool does not model, kept as they are (``execution`` and ``_meta`` objects)."""
    extra = {k: v for k, v in entry.items() if k not in _KNOWN_KEYS}
    for key in ("execution", "_meta"):  # MCP: objects when present
        if key in extra and type(extra[key]) is not dict:
            raise CatalogError(f"{at}: {key!r} must be a JSON object")
    return extra


def _tool_name(entry: Any, where: str) -> str:
    """The entry's ``name``, once the entry is known to be an object."""
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
    return name


def _description(description: Any, at: str) -> str:
    if description is None:
        return ""
    if not isinstance(description, str):
        raise CatalogError(f"{at}: 'description' must be a string")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise CatalogError(f"{at}: 'description' is {len(description):,} characters long "
                           f"(at most {MAX_DESCRIPTION_CHARS:,})")
    return description


def _input_schema(schema: Any, at: str) -> dict[str, Any]:
    if schema is None:
        return {}
    if type(schema) is not dict:  # the entry is plain JSON here: its mappings are dicts
        raise CatalogError(f"{at}: 'inputSchema'/'parameters' must be a JSON object")
    props = schema.get("properties")
    if props is not None and type(props) is not dict:
        raise CatalogError(f"{at}: schema 'properties' must be an object")
    if "type" in schema and not isinstance(schema["type"], (str, list)):
        raise CatalogError(f"{at}: schema 'type' must be a string")
    return schema


def _tool_id(tool_id: Any, at: str) -> str:
    if not isinstance(tool_id, str) or not tool_id:
        raise CatalogError(f"{at}: 'id' must be a non-empty string")
    if len(tool_id) > MAX_ID_CHARS or _CONTROL_RE.search(tool_id):
        raise CatalogError(f"{at}: 'id' must be at most {MAX_ID_CHARS} printable characters")
    return tool_id


def _optional_fields(entry: Mapping[str, Any], at: str) -> tuple[Any, Any, Any, Any]:
    """(title, annotations, outputSchema, server), each None when absent."""
    title = _optional(entry, "title", _is_string, "a string", at)
    if title is not None and len(title) > MAX_TITLE_CHARS:
        raise CatalogError(f"{at}: 'title' is longer than {MAX_TITLE_CHARS:,} characters")
    return (title, _optional(entry, "annotations", _is_object, "a JSON object", at),
            _optional(entry, "outputSchema", _is_object, "a JSON object", at),
            _optional(entry, "server", _is_string, "a string", at))


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _is_object(value: Any) -> bool:
    return type(value) is dict  # the entry is plain JSON here: its mappings are dicts


def _optional(entry: Mapping[str, Any], key: str, valid: Callable[[Any], bool], kind: str, at: str) -> Any:
    """The entry's ``key``, None when absent; a value that is not ``kind`` refused."""
    value = entry.get(key)
    if value is not None and not valid(value):
        raise CatalogError(f"{at}: {key!r} must be {kind}")
    return value


def check_tool(tool: Any, catalog: Any = None, *, where: str = "tool") -> Tool:
    """The Tool to add to a catalog at run time (``Selector.add_tool``), checked; else InputError
    naming the tool and the field. ``tool``: a Tool, or a JSON object in MCP shape (``inputSchema``:
    its schemas are meta-schema checked) or benchmark shape (``id``, ``parameters``), parsed as
    ``parse_tool`` does. Refused: an id or name that is empty, not a string, too long or holds
    control characters, parameters that are not a JSON object (a schema of ``"type": "object"`` is
    meta-schema checked), text over the module's limits, and (with ``catalog``) a name another tool
    of the catalog (another id) already has."""
    try:
        checked = _parsed_tool(tool, where)
    except CatalogError as e:
        raise InputError(str(e)) from None
    if catalog is not None:
        other = catalog.id_named(checked.name, besides=checked.id)
        if other is not None:
            raise InputError(f"{where} {checked.id!r}: name {checked.name!r} is already tool {other!r}'s (tool "
                             "names are what the LLM calls: they must differ)")
    return checked


def _parsed_tool(tool: Any, where: str) -> Tool:
    """``check_tool``'s Tool of a JSON object or a Tool, before the catalog's name check."""
    if isinstance(tool, Mapping):
        mcp_shape = "inputSchema" in tool or "input_schema" in tool or "parameters" not in tool
        return parse_tool(tool, where=where, check_schemas=mcp_shape)
    if isinstance(tool, Tool):
        _check_tool_object(tool, where)
        plain = {f: _plain_json(getattr(tool, f)) for f in _OBJECT_FIELDS}
        if any(plain[f] is not getattr(tool, f) for f in plain):  # nested mappings that are not dicts
            return replace(tool, **plain)
        return tool
    raise InputError(f"{where}: a tool is a Tool or a JSON object (MCP or benchmark shape), got "
                     f"{type(tool).__name__}")


_OBJECT_FIELDS = ("parameters", "annotations", "output_schema", "extra")  # a Tool's JSON object fields


def _check_tool_object(tool: Tool, where: str) -> None:
    _check_field_types(tool, where)
    parse_tool(_tool_record(tool), where=f"{where} {tool.id!r}")
    if tool.parameters.get("type") == "object":  # a JSON Schema: it must be a valid one
        check_json_schema(tool.parameters, f"{where} {tool.id!r}: parameters", bounded=True)


def _check_field_types(tool: Tool, where: str) -> None:
    """A Tool built by hand: its text fields strings (or None where optional), its object fields mappings."""
    for field_name in ("id", "name", "description"):
        if not isinstance(getattr(tool, field_name), str):
            raise CatalogError(f"{where}: {field_name} must be a string, got {type(getattr(tool, field_name)).__name__}")
    _check_optional_types(tool, where)
    if tool.parameters is None:
        raise CatalogError(f"{where} {tool.id!r}: parameters must be a JSON object (a mapping), got None")


def _check_optional_types(tool: Tool, where: str) -> None:
    """A hand-built Tool's optional text fields strings and its object fields mappings, where set."""
    for field_name in ("title", "domain", "server"):
        value = getattr(tool, field_name)
        if value is not None and not isinstance(value, str):
            raise CatalogError(f"{where} {tool.id!r}: {field_name} must be a string or None")
    for field_name in _OBJECT_FIELDS:
        value = getattr(tool, field_name)
        if value is not None and not isinstance(value, Mapping):
            raise CatalogError(f"{where} {tool.id!r}: {field_name} must be a JSON object (a mapping), got "
                               f"{type(value).__name__}")


def _tool_record(tool: Tool) -> dict[str, Any]:
    """A Tool as the catalog entry ``parse_tool`` reads (its extra keys after the modelled ones)."""
    record = {"id": tool.id, "name": tool.name, "description": tool.description, "parameters": tool.parameters}
    for key, value in (("title", tool.title), ("annotations", tool.annotations), ("outputSchema", tool.output_schema),
                       ("domain", tool.domain), ("server", tool.server)):
        if value is not None:
            record[key] = value
    for key, value in (tool.extra or {}).items():
        record.setdefault(key, value)
    return record


def check_tool_id(tool_id: Any, where: str = "tool id") -> str:
    """A tool id as ``remove_tool`` takes it: a non-empty string of at most ``MAX_ID_CHARS``; else
    InputError."""
    if not isinstance(tool_id, str) or not tool_id:
        raise InputError(f"{where}: a tool id is a non-empty string, got {type(tool_id).__name__} {tool_id!r:.60}")
    if len(tool_id) > MAX_ID_CHARS:
        raise InputError(f"{where}: {tool_id[:40]!r}... is longer than {MAX_ID_CHARS} characters (no tool has it)")
    return tool_id

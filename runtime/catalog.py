"""Tool catalogs: MCP-style tool schemas, validated, and the text each tool is embedded with.

A catalog can be read from
- an MCP-style JSON file: a list of tools, or {"tools": [...]}, each {name, description, inputSchema};
- a benchmark ``tools.jsonl`` (one {id, name, description, parameters} per line);
- a folder of such JSON files (the shipped phone catalog is one file per domain).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .errors import CatalogError, UnknownToolError

PHONE_CATALOG_DIR = Path(__file__).resolve().parent / "catalogs" / "phone"

# Names are shown to an LLM and used as identifiers: printable, one line, bounded. Real catalogs
# use more than MCP's [A-Za-z0-9_-] (MetaTool has "PDF&URLTool"), so only control characters fail.
_NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")


@dataclass(frozen=True)
class Tool:
    """One tool the assistant can call. ``id`` is unique in a catalog; ``name`` is what the LLM sees."""

    id: str
    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    domain: str | None = None

    @property
    def parameter_names(self) -> list[str]:
        props = self.parameters.get("properties") if isinstance(self.parameters, Mapping) else None
        return list(props) if isinstance(props, Mapping) else []

    def to_mcp(self) -> dict[str, Any]:
        """The MCP tool entry handed to the assistant's LLM."""
        return {"name": self.name, "description": self.description, "inputSchema": dict(self.parameters)}

    def to_record(self) -> dict[str, Any]:
        """The benchmark-format row (``tools.jsonl``)."""
        row = {"id": self.id, "name": self.name, "description": self.description,
               "parameters": dict(self.parameters)}
        if self.domain:
            row["domain"] = self.domain
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
    """Rough count of the tokens a tool's schema costs in the assistant's context (4 chars a token)."""
    return max(1, len(json.dumps(tool.to_mcp(), separators=(",", ":"))) // 4)


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


def parse_tool(entry: Any, *, where: str, domain: str | None = None, unique_names: bool = True) -> Tool:
    """Validate one catalog entry (MCP or benchmark style) into a Tool, or raise CatalogError."""
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
    dom = entry.get("domain", domain)
    return Tool(id=tool_id, name=name, description=description.strip(), parameters=dict(schema),
                domain=dom if isinstance(dom, str) else None)


def _entries_from_json(path: Path) -> tuple[list[Any], str | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CatalogError(f"{path}: not valid JSON ({e})") from None
    if isinstance(data, Mapping) and "tools" in data:
        tools = data["tools"]
        domain = data.get("domain")
    else:
        tools, domain = data, None
    if not isinstance(tools, list):
        raise CatalogError(f"{path}: expected a list of tools or an object with a 'tools' list")
    return tools, domain if isinstance(domain, str) else None


def _entries_from_jsonl(path: Path) -> list[tuple[Any, str]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append((json.loads(line), f"{path}:{n}"))
            except json.JSONDecodeError as e:
                raise CatalogError(f"{path}:{n}: not valid JSON ({e})") from None
    return out


def load_catalog(path: str | Path) -> Catalog:
    """Read a catalog from an MCP JSON file, a ``tools.jsonl`` file, a benchmark folder or a folder of JSON files."""
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
            tools += [parse_tool(e, where=f"{file}[{i}]", domain=domain) for i, e in enumerate(entries)]
        strict_names = True
    elif path.suffix == ".jsonl":
        tools = [parse_tool(e, where=w) for e, w in _entries_from_jsonl(path)]
        # Benchmark folders may reuse a name with different descriptions; ids tell them apart.
        strict_names = all(t.id == t.name for t in tools)
    else:
        entries, domain = _entries_from_json(path)
        tools = [parse_tool(e, where=f"{path}[{i}]", domain=domain) for i, e in enumerate(entries)]
        strict_names = True
    if not tools:
        raise CatalogError(f"{path}: the catalog holds no tools")
    if strict_names:
        seen: dict[str, int] = {}
        for i, t in enumerate(tools):
            if t.name in seen:
                raise CatalogError(f"{path}: duplicate tool name {t.name!r} (entries {seen[t.name]} and {i})")
            seen[t.name] = i
    return Catalog(tools, source=str(path))


def load_phone_catalog() -> Catalog:
    """The phone tool catalog shipped with the package (one JSON file per domain)."""
    return load_catalog(PHONE_CATALOG_DIR)

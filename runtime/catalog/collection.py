"""``Catalog``: an ordered, id-indexed set of tools (packed past ``PACK_AT`` tools), and its digest."""
from __future__ import annotations

import hashlib
import json
from array import array
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from ..errors import CatalogError, UnknownToolError
from .tool import Tool

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


def _packed(tools: list[Tool]) -> _PackedTools:
    """The tools so far, packed (a catalog that reaches ``PACK_AT`` tools packs them and goes on packed)."""
    packed = _PackedTools()
    for t in tools:
        packed.append(t)
    return packed


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
                store = _packed(store)
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
        copy._named = base._named_copy()
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
        copy._named = self._named_copy()
        copy._drop_name(removed.name, tool_id)
        return copy

    def _named_copy(self) -> dict[str, str | list[str]]:
        """The name -> id(s) map, its lists copied (a copy's changes must not reach this catalog)."""
        return {k: (v if isinstance(v, str) else list(v)) for k, v in self._named.items()}

    def _drop_name(self, name: str, tool_id: str) -> None:
        """``tool_id`` no longer among the tools named ``name`` (the name gone with its last one)."""
        have = self._named[name]
        if isinstance(have, str):
            del self._named[name]
            return
        have.remove(tool_id)
        if len(have) == 1:
            self._named[name] = have[0]

    def write_jsonl(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for tool in self._tools:
                f.write(json.dumps(tool.to_record(), ensure_ascii=False, sort_keys=True) + "\n")


def catalog_digest(catalog: Catalog) -> str:
    """A hash of everything a catalog hands to an LLM (the MCP definitions, in order)."""
    blob = json.dumps([t.to_mcp() for t in catalog], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]

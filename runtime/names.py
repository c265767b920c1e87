"""Tool names on the wire: the one reversible mapping from a catalog's tool names to the names the
LLM APIs accept, and back from the name a model calls to the catalog's tool.

MCP lets a tool name be 1 to 128 of ``A-Z a-z 0-9 _ - .`` (the 2025-11-25 specification, "Tool
Names", a SHOULD; older servers send other characters as well, and the catalog keeps any printable
name). OpenAI function names must match ``^[a-zA-Z0-9_-]{1,64}$`` (Chat Completions and Responses);
Anthropic's Messages API documents the same pattern for a client tool's ``name`` and for a
``tool_reference``'s ``tool_name``. So one rule serves all three API formats:

- a name the rule accepts goes out unchanged;
- any other name goes out as its characters outside ``[A-Za-z0-9_-]`` replaced by ``_``, cut so that
  the whole fits in 64, then ``_`` and the first 8 hex digits of the SHA-256 of the catalog name
  (``ws__files.read`` -> ``ws__files_read_<8 hex>``). The result depends on the name alone, so the
  same tool has the same wire name in every selection and every process.

A :class:`NameMap` over a set of tools guarantees distinct wire names for distinct catalog names:
should a changed name's wire name equal another tool's (a name that is literally
``files_read_<that hash>``, or two hashes sharing 8 digits), the changed one takes a longer hash
(16, then 32 digits), deterministically. ``NameMap.catalog_name`` / ``NameMap.tool`` (or
``magicselector.formats.catalog_name``) map a called name back; MCP's own format sends the catalog
name as it is.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any, Iterable, cast

from .errors import InputError, UnknownToolError

WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
WIRE_NAME_CHARS = 64
# the formats whose names follow WIRE_NAME; "mcp" carries the catalog name itself
WIRE_FORMATS = ("openai", "openai-responses", "anthropic")
_HASHES = (8, 16, 32)  # hex digits of the name's SHA-256: the first, then on a collision in a NameMap
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]")


def _digest(name: str, digits: int) -> str:
    # surrogatepass: a lone surrogate in a name (which the catalog refuses) still hashes, never raises
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:digits]


def _mangled(name: str, digits: int) -> str:
    stem = _ILLEGAL.sub("_", name[:WIRE_NAME_CHARS])[: WIRE_NAME_CHARS - digits - 1]
    return f"{stem}_{_digest(name, digits)}"


def _check_format(format: Any) -> str:
    if format != "mcp" and format not in WIRE_FORMATS:
        raise InputError(f"format must be one of {('mcp', *WIRE_FORMATS)}, got {format!r:.80}")
    return cast(str, format)  # one of the names above


def wire_name(name: str, format: str = "openai") -> str:
    """The name ``name`` goes out under in ``format`` (see the module docstring): unchanged when the
    format takes it (and always for ``mcp``), else sanitized, cut and hashed."""
    _check_format(format)
    if not isinstance(name, str) or not name:
        raise InputError(f"a tool name must be a non-empty string, got {name!r:.80}")
    if format == "mcp" or WIRE_NAME.match(name):
        return name
    return _mangled(name, _HASHES[0])


def _name_of(tool: Any) -> str:
    name = tool if isinstance(tool, str) else getattr(tool, "name", None)
    if not isinstance(name, str) or not name:
        raise InputError(f"a tool (or a tool name) is needed, got {type(tool).__name__}")
    return name


class NameMap:
    """The wire names of a set of tools in one format, and the way back.

    ``tools`` are :class:`~magicselector.Tool` objects (or anything with a ``name``) or names.
    Tools that share a catalog name share its wire name; ``tool`` then gives the first of them.
    """

    def __init__(self, tools: Iterable[Any], format: str = "openai") -> None:
        self.format = _check_format(format)
        self._tools: dict[str, Any] = {}  # catalog name -> its (first) tool
        for tool in tools:
            self._tools.setdefault(_name_of(tool), tool)
        self._wire: dict[str, str] = {}
        self._back: dict[str, str] = {}
        changed = []
        for name in self._tools:  # names that go out unchanged claim themselves first
            if format == "mcp" or WIRE_NAME.match(name):
                self._wire[name] = name
                self._back[name] = name
            else:
                changed.append(name)
        for name in sorted(changed):  # sorted: the same set gives the same names whatever its order
            wire = self._free_wire_name(name)
            self._wire[name] = wire
            self._back[wire] = name

    def _free_wire_name(self, name: str) -> str:
        """The shortest hashed wire name of ``name`` that no other name of the map has taken."""
        for digits in _HASHES:
            wire = _mangled(name, digits)
            if wire not in self._back:
                return wire
        # 32 hex digits of SHA-256 colliding as well: not a thing that happens
        raise InputError(f"tool {name!r}: no collision-free wire name")

    def wire(self, name: str) -> str:
        """The wire name of the catalog name ``name``."""
        if name not in self._wire:
            raise UnknownToolError(f"no tool named {name!r:.140} in this name map")
        return self._wire[name]

    def catalog_name(self, wire: str) -> str:
        """The catalog name that ``wire`` (a name a model called) stands for."""
        if not isinstance(wire, str) or wire not in self._back:
            raise UnknownToolError(f"no tool goes out as {wire!r:.140} in {self.format}")
        return self._back[wire]

    def tool(self, wire: str) -> Any:
        """The tool (as given) that ``wire`` stands for; its ``id`` is the catalog id."""
        return self._tools[self.catalog_name(wire)]

    def __contains__(self, wire: object) -> bool:
        return wire in self._back

    def __len__(self) -> int:
        return len(self._back)

    def items(self) -> list[tuple[str, str]]:
        """``(wire name, catalog name)`` pairs, in the tools' order."""
        return [(self._wire[n], n) for n in self._tools]

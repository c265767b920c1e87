"""Catalog files: MCP ``tools/list`` results (a JSON-RPC response, its result, or pages), MCP JSON (a list of tools or {"tools": [...]}), benchmark ``tools.jsonl`` and folders of them; ``load_catalog``."""
from __future__ import annotations

import contextlib
import gc
import json
import re
from array import array
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..errors import CatalogError
from ..files import BLANK_LINE, json_line, trim_heap
from . import collection
from .collection import Catalog
from .tool import Tool, _parse_tool

PHONE_CATALOG_DIR = Path(__file__).resolve().parents[1] / "catalogs" / "phone"

def _tools_list_pages(data: Any, where: str) -> list[Mapping[str, Any]] | None:
    """The ``tools/list`` results in a parsed JSON document: a JSON-RPC response, a list of them
    (pages), or a bare result; None when the document is a plain list of tools."""
    if _is_response_list(data):
        return [page for i, response in enumerate(data) for page in _tools_list_pages(response, f"{where}[{i}]") or []]
    if not isinstance(data, Mapping):
        return None
    if "jsonrpc" in data or "result" in data or "error" in data:
        data = _response_result(data, where)
    return [_checked_result(data, where)]


def _checked_result(result: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """A ``tools/list`` result: it has a 'tools' member, and its cursor (if any) is a string."""
    if "tools" not in result:
        raise CatalogError(f"{where}: expected a list of tools, an object with a 'tools' list, or a "
                           "JSON-RPC tools/list response")
    cursor = result.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise CatalogError(f"{where}: 'nextCursor' must be a string")
    return result


def _is_response_list(data: Any) -> bool:
    """Whether ``data`` is a non-empty list of JSON-RPC responses (the pages of ``tools/list``)."""
    return isinstance(data, (list, _LazyArray)) and bool(data) and all(
        isinstance(d, Mapping) and "jsonrpc" in d for d in data)


def _response_result(response: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """The ``tools/list`` result of a JSON-RPC response; an error response refused with its message."""
    if response.get("error") is not None:
        err = response["error"]
        msg = err.get("message") if isinstance(err, Mapping) else err
        raise CatalogError(f"{where}: the server answered tools/list with an error: {msg!r}")
    result = response.get("result")
    if not isinstance(result, Mapping) or "tools" not in result:
        raise CatalogError(f"{where}: a JSON-RPC response without a tools/list 'result' "
                           "({\"tools\": [...]})")
    return result


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
    scanner = _LazyScanner(text)
    try:
        data, end = scanner.value(scanner.skip(0), "")
        if scanner.skip(end) != len(text):
            return None
    except (ValueError, StopIteration, RecursionError, IndexError):  # json.JSONDecodeError is a ValueError
        return None
    return data if isinstance(data, (dict, _LazyArray)) else None


class _LazyScanner:
    """Scans a JSON document for ``_lazy_document``: the objects on the way to the tools list
    member by member, the tools list as element offsets, every other value by json's scanner.
    Raises ValueError (or what json's scanner raises) where the text is not JSON."""

    # the keys read member by member in an object reached by a key (the document itself: "")
    LAZY_KEYS = {"": ("result", "tools"), "result": ("tools",)}

    def __init__(self, text: str) -> None:
        self.text = text
        self.scan: Callable[[str, int], tuple[Any, int]] = getattr(_JSON_DECODER, "scan_once")
        self.scanstring: Callable[[str, int, bool], tuple[str, int]] = getattr(json.decoder, "scanstring")

    def skip(self, i: int) -> int:
        """Past the JSON whitespace at ``i``."""
        return _JSON_WS.match(self.text, i).end()  # type: ignore[union-attr]  # the pattern matches anywhere

    def expect(self, token: str, i: int) -> int:
        """Past ``token`` at ``i`` and the whitespace after it."""
        if not self.text.startswith(token, i):
            raise ValueError
        return self.skip(i + 1)

    def value(self, i: int, kind: str) -> tuple[Any, int]:
        if kind in self.LAZY_KEYS and self.text.startswith("{", i):
            return self.members(i + 1, kind)
        if kind in ("", "tools") and self.text.startswith("[", i):
            return self.elements(i + 1)
        return self.scan(self.text, i)

    def members(self, i: int, kind: str) -> tuple[dict[str, Any], int]:
        obj: dict[str, Any] = {}
        i = self.skip(i)
        if self.text.startswith("}", i):
            return obj, i + 1
        while True:
            if not self.text.startswith('"', i):
                raise ValueError
            key, i = self.scanstring(self.text, i + 1, True)
            i = self.expect(":", self.skip(i))
            obj[key], i = self.value(i, key if key in self.LAZY_KEYS[kind] else "-")
            i = self.skip(i)
            if self.text.startswith("}", i):
                return obj, i + 1
            i = self.expect(",", i)

    def elements(self, i: int) -> tuple[_LazyArray, int]:
        starts = array("q")
        i = self.skip(i)
        if self.text.startswith("]", i):
            return _LazyArray(self.text, starts), i + 1
        while True:
            starts.append(i)
            _, i = self.scan(self.text, i)  # checked here, let go, decoded again when read
            i = self.skip(i)
            if self.text.startswith("]", i):
                return _LazyArray(self.text, starts), i + 1
            i = self.expect(",", i)


def _entries_from_data(data: Any, where: str) -> tuple[list[tuple[Any, str]], str | None]:
    """(entry, where) pairs and the domain, from a parsed JSON catalog document."""
    pages = _tools_list_pages(data, where)
    if pages is None:
        if not isinstance(data, (list, _LazyArray)):
            raise CatalogError(f"{where}: expected a list of tools or an object with a 'tools' list")
        return [(e, f"{where}[{i}]") for i, e in enumerate(_entry_values(data))], None
    entries: list[tuple[Any, str]] = []
    for page in pages:
        entries += _page_entries(page, where, len(entries))  # pages number their tools on: every index is unique
    domains = [page["domain"] for page in pages if isinstance(page.get("domain"), str)]
    return entries, domains[-1] if domains else None


def _page_entries(page: Mapping[str, Any], where: str, offset: int) -> list[tuple[Any, str]]:
    """(entry, where) pairs of one ``tools/list`` page, numbered from ``offset``."""
    tools = page["tools"]
    if not isinstance(tools, (list, _LazyArray)):
        raise CatalogError(f"{where}: 'tools' must be a list")
    return [(e, f"{where}[{offset + i}]") for i, e in enumerate(_entry_values(tools))]


def _entries_from_jsonl(path: Path) -> list[tuple[Any, str]]:
    out = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            entry = json_line(raw, n, path, "a tool", CatalogError)
            if entry is not BLANK_LINE:
                out.append((entry, f"{path}:{n}"))
    return out


def _parsed_one_by_one(entries: list[Any], domain: str | None, where: str) -> Iterator[Tool]:
    """The MCP tools of a large JSON catalog for ``Catalog`` to pack, each parsed and its decoded
    JSON let go before the next (``entries`` is emptied as it goes). The errors are those of a small
    catalog, in its order: every entry is parsed first, then names and ids are checked unique."""
    duplicates = _Duplicates(where)
    for i in range(len(entries)):
        entry, at = entries[i]
        entries[i] = None  # the decoded JSON goes as soon as it is parsed
        tool = _parse_tool(_decoded(entry), at, domain, True, decoded=True)
        del entry
        if duplicates.note(tool, i):
            yield tool
    duplicates.check()


class _Duplicates:
    """The first duplicate name and the first duplicate id among tools seen one at a time, the
    error ``_check_unique_names`` and ``Catalog`` give for them raised once every tool is parsed."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.names: dict[str, int] = {}
        self.ids: set[str] = set()
        self.name: str | None = None
        self.id: str | None = None

    def note(self, tool: Tool, i: int) -> bool:
        """Remember the ``i``-th tool; True while no duplicate has been seen."""
        if tool.name in self.names:
            self.name = self.name or (f"{self.where}: duplicate tool name {tool.name!r} "
                                      f"(entries {self.names[tool.name]} and {i})")
        self.names.setdefault(tool.name, i)
        if tool.id in self.ids:
            self.id = self.id or f"{self.where}: duplicate tool id {tool.id!r}"
        self.ids.add(tool.id)
        return self.name is None and self.id is None

    def check(self) -> None:
        if self.name or self.id:
            raise CatalogError(self.name or self.id)


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
    if path.is_dir() and (path / "tools.jsonl").exists():
        return _load_catalog(path / "tools.jsonl")
    if path.is_dir():
        tools, strict_names = _folder_tools(path), True
    elif path.suffix == ".jsonl":
        tools = [_parse_tool(e, w, None, False, decoded=True) for e, w in _entries_from_jsonl(path)]
        # Benchmark folders may reuse a name with different descriptions; ids tell them apart.
        strict_names = all(t.id == t.name for t in tools)
    else:
        entries, domain = _entries_from_json(path)
        if len(entries) >= collection.PACK_AT:
            return _packed_catalog(entries, domain, path)
        tools, strict_names = [_parse_tool(_decoded(e), w, domain, True, decoded=True) for e, w in entries], True
    return _checked_catalog(tools, strict_names, path)


def _checked_catalog(tools: list[Tool], strict_names: bool, path: Path) -> Catalog:
    """The catalog of a file's tools: not empty, and (``strict_names``) no name twice."""
    if not tools:
        raise CatalogError(f"{path}: the catalog holds no tools")
    if strict_names:
        _check_unique_names(tools, str(path))
    return Catalog(tools, source=str(path))


def _folder_tools(path: Path) -> list[Tool]:
    """The tools of a folder's JSON catalog files, in file name order, each file's stem its domain
    where the file names none."""
    files = sorted(path.glob("*.json"))
    if not files:
        raise CatalogError(f"{path}: folder holds no tools.jsonl and no *.json catalog files")
    tools: list[Tool] = []
    for file in files:
        entries, domain = _entries_from_json(file)
        domain = domain or file.stem
        tools += [_parse_tool(_decoded(e), w, domain, True, decoded=True) for e, w in entries]
    return tools


def _packed_catalog(entries: list[Any], domain: str | None, path: Path) -> Catalog:
    """A large JSON catalog, parsed one tool at a time into a packed Catalog."""
    catalog = Catalog(_parsed_one_by_one(entries, domain, str(path)), source=str(path))
    trim_heap()  # the decoded JSON's memory, back to the system
    return catalog


def load_phone_catalog() -> Catalog:
    """The phone tool catalog shipped with the package (one JSON file per domain)."""
    return load_catalog(PHONE_CATALOG_DIR)

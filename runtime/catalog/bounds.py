"""The bounds of one tool definition (JSON size, values, depth), checked before any schema is walked, and its plain-JSON form."""
from __future__ import annotations

import collections.abc as _abc
import json
from typing import Any, Mapping

from ..errors import CatalogError

MAX_TOOL_JSON_CHARS = 1_048_576  # one tool's whole definition, serialized as JSON
MAX_TOOL_NODES = 50_000  # objects, arrays and scalars in one tool's definition
MAX_TOOL_DEPTH = 64  # levels of objects and arrays in one tool's definition


_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)


def _check_bounds(value: Any, where: str) -> bool:
    """Refuse a value that is not plain JSON within the module's limits: at most ``MAX_TOOL_DEPTH``
    levels, ``MAX_TOOL_NODES`` values and ``MAX_TOOL_JSON_CHARS`` characters as JSON, string keys,
    no lone surrogate (JSON's "\\ud800" escapes decode to one: no tokenizer can read it). Walked
    without recursion, so a hostile value costs at most the limits. True when every mapping in
    ``value`` is a dict (``_plain_json`` would return it unchanged), False when one is not."""
    plain = _walk_bounds(value, where)
    _check_json_size(value, where)
    return plain


def _walk_bounds(value: Any, where: str) -> bool:
    """The depth, value-count, key and type bounds of ``_check_bounds``; True when every mapping is a dict."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    plain = True
    while stack:
        v, depth = stack.pop()
        nodes += 1
        t = type(v)
        if _is_mapping(v, t):
            plain = plain and t is dict
            nodes += _push_mapping(v, depth, stack, where)
        elif t is list or t is tuple:
            nodes += _push_list(v, depth, stack, where)
        elif not isinstance(v, _SCALARS):
            raise CatalogError(f"{where}: holds a {type(v).__name__}, not a JSON value")
        if nodes > MAX_TOOL_NODES:
            raise CatalogError(f"{where}: holds more than {MAX_TOOL_NODES:,} values")
    return plain


def _is_mapping(v: Any, t: type) -> bool:
    """Whether ``v`` (of type ``t``) is an object: a dict, or another mapping (the type tests
    first: they are the common case)."""
    return t is dict or (t not in _SCALAR_TYPES and t is not list and isinstance(v, _abc.Mapping))


def _check_depth(depth: int, where: str) -> None:
    if depth >= MAX_TOOL_DEPTH:
        raise CatalogError(f"{where}: nested more than {MAX_TOOL_DEPTH} levels deep")


def _push_mapping(v: Mapping[Any, Any], depth: int, stack: list[tuple[Any, int]], where: str) -> int:
    """Checks one mapping's level and keys, pushes its values that are containers; its value count."""
    _check_depth(depth, where)
    for k, item in v.items():
        if type(k) is not str:
            raise CatalogError(f"{where}: a key {k!r} is not a string")
        if type(item) not in _SCALAR_TYPES:
            stack.append((item, depth + 1))
    return len(v)


def _push_list(v: list[Any] | tuple[Any, ...], depth: int, stack: list[tuple[Any, int]], where: str) -> int:
    """Checks one array's level, pushes its items that are containers; its value count."""
    _check_depth(depth, where)
    stack += [(item, depth + 1) for item in v if type(item) not in _SCALAR_TYPES]
    return len(v)


def _check_json_size(value: Any, where: str) -> None:
    """The size bound of ``_check_bounds``: the value written as JSON, in UTF-8 (a lone surrogate,
    NaN, an infinity or an integer too long to write refused)."""
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
                   .encode("utf-8", "strict"))
    except UnicodeEncodeError:
        key = _surrogate_key(value)
        raise CatalogError(f"{where}: {key.encode('utf-8', 'backslashreplace').decode()!r} holds a lone "
                           "surrogate (not valid Unicode)") from None
    except ValueError:  # NaN or infinity, or an integer past Python's digit limit: not JSON
        raise CatalogError(f"{where}: holds NaN, infinity or an integer too long to write, not a JSON "
                           "number") from None
    if size > MAX_TOOL_JSON_CHARS:
        raise CatalogError(f"{where}: is {size:,} bytes as JSON (at most {MAX_TOOL_JSON_CHARS:,})")


def _surrogate_key(value: Any) -> str:
    """The first key of an object whose key or value holds a lone surrogate, for the message."""
    if not isinstance(value, Mapping):
        return "a value"
    return next((str(k) for k, v in value.items() if _has_surrogate(v) or _has_surrogate(k)), "a value")


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
    try:
        pieces, rest = _schema_pieces(entry, schema_key)
        size, containers, commas, colons = _json_counts([_COMPACT_JSON.encode(rest), *pieces.values()])
    except Exception:  # NaN, an integer too long, a lone surrogate, nested too deeply to write: the walk says
        return None
    size -= len(pieces)  # the placeholders
    if containers > MAX_TOOL_DEPTH or 2 * containers + commas > MAX_TOOL_NODES \
            or size + commas + colons > MAX_TOOL_JSON_CHARS:
        return None
    return pieces


def _schema_pieces(entry: dict[str, Any], schema_key: str | None) -> tuple[dict[str, str], dict[str, Any]]:
    """The compact JSON of the entry's schemas that are objects ({field: JSON}), and the entry with
    a one-character 0 in their place (the entry itself where there is none)."""
    pieces: dict[str, str] = {}
    rest = entry
    for k in (schema_key, "outputSchema"):
        if k is not None and type(entry.get(k)) is dict:
            pieces[k] = _COMPACT_JSON.encode(entry[k])
            if rest is entry:
                rest = dict(entry)
            rest[k] = 0  # one character, "0", in place of the piece
    return pieces, rest


def _json_counts(texts: list[str]) -> tuple[int, int, int, int]:
    """(UTF-8 size, containers, commas, colons) over JSON texts."""
    size = containers = commas = colons = 0
    for text in texts:
        size += len(text) if text.isascii() else len(text.encode("utf-8", "strict"))
        containers += text.count("{") + text.count("[")
        commas += text.count(",")
        colons += text.count(":")
    return size, containers, commas, colons


def _json_default(value: Any) -> Any:
    """A mapping that is not a dict (``MappingProxyType``, ``UserDict``), as JSON writes it: an object."""
    if isinstance(value, _abc.Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _plain_json(value: Any) -> Any:
    """``value`` (bounded by ``_check_bounds``) with every mapping that is not a dict copied into a
    dict, so what a Tool keeps writes as JSON; ``value`` itself when it holds none."""
    if isinstance(value, _abc.Mapping):
        return _plain_mapping(value)
    if type(value) is list or type(value) is tuple:
        elements = [_plain_json(v) for v in value]
        return value if all(a is b for a, b in zip(elements, value)) else type(value)(elements)
    return value


def _plain_mapping(value: Mapping[str, Any]) -> Any:
    """``_plain_json`` of a mapping: a dict, ``value`` itself where it is one holding nothing to copy."""
    items = {k: _plain_json(v) for k, v in value.items()}
    if type(value) is dict and all(items[k] is v for k, v in value.items()):
        return value
    return items


def _has_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, default=_json_default).encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True

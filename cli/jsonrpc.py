"""The JSON-RPC screen in front of ``magicselector serve``: each stdio line or HTTP body is checked
here before the mcp package sees it, and a message the package would drop without a word (not
JSON, not UTF-8, a batch, an object as the id, ``params`` as a list, nesting too deep for its
parser, a lone surrogate escape) gets the JSON-RPC error the specification names instead.

No mcp import here: the screen works on plain JSON values, so both transports share it."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

# Deeper than this is no real search_tools call, and well inside the depth at which the parsers
# behind the screen give up (Python's json near 1,000 levels, the mcp package's pydantic-core 200).
MAX_DEPTH = 100
_MISSING = object()
_ESCAPE = re.compile(rb"\\.", re.S)
# a \uD800-\uDFFF escape; only a line that holds one can carry a lone surrogate into a string
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


@dataclass(frozen=True)
class Screened:
    """``message``: the parsed message, fit for the mcp package (None: nothing to pass on).
    ``error``: the JSON-RPC error response to send instead (None: no answer is owed, as for a
    notification or a client's response, which JSON-RPC never answers)."""

    message: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def error_response(code: int, message: str, request_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def too_large(limit: int) -> dict[str, Any]:
    return error_response(INVALID_REQUEST, f"Invalid request: a message is at most {limit} bytes")


def screen(raw: bytes | str, max_depth: int = MAX_DEPTH) -> Screened:
    """Parse and check one JSON-RPC message (MCP: one object, no batches)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    except UnicodeDecodeError as e:
        return Screened(error=error_response(PARSE_ERROR, f"Parse error: not UTF-8 (byte {e.start})"))
    too_deep = False
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        too_deep = True
        try:
            value = json.loads(shallow(text.encode("utf-8"), max_depth), parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as e:
            return Screened(error=error_response(PARSE_ERROR, f"Parse error: {e}"))
    except ValueError as e:
        return Screened(error=error_response(PARSE_ERROR, f"Parse error: {e}"))
    return _check_envelope(value, text, too_deep, max_depth)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_envelope(value: Any, text: str, too_deep: bool, max_depth: int) -> Screened:
    if isinstance(value, list):
        return _invalid("batches are not part of MCP (removed in 2025-06-18): send one message at a time")
    if not isinstance(value, dict):
        return _invalid(f"a message is a JSON object, got {_kind(value)}")
    rid = value.get("id", _MISSING)
    id_ok = rid is _MISSING or type(rid) is int or (type(rid) is str and _encodable(rid))
    reply_id = rid if id_ok and rid is not _MISSING else None
    if value.get("jsonrpc") != "2.0":
        return _invalid('jsonrpc must be "2.0"', reply_id)
    if not id_ok:
        return _invalid(f"id must be a string or an integer, got {_kind(rid)}")
    if "method" not in value:
        if rid is not _MISSING and ("result" in value or "error" in value):
            return Screened() if too_deep else Screened(message=value)  # a response: never answered
        return _invalid("a message has a method (request, notification) or a result or error (response)", reply_id)
    method = value["method"]
    if not isinstance(method, str) or not _encodable(method):
        return _invalid(f"method must be a string, got {_kind(method)}", reply_id)
    problem = _params_problem(value.get("params", _MISSING), text, too_deep, max_depth)
    if problem is None:
        return Screened(message=value)
    if rid is _MISSING:
        return Screened()  # a notification gets no answer, not even an error
    return Screened(error=error_response(INVALID_PARAMS, f"Invalid params: {problem}", rid))


def _invalid(why: str, request_id: Any = None) -> Screened:
    return Screened(error=error_response(INVALID_REQUEST, f"Invalid request: {why}", request_id))


def _params_problem(params: Any, text: str, too_deep: bool, max_depth: int) -> str | None:
    if params is _MISSING:
        return None
    if not isinstance(params, dict):
        return f"params must be an object, got {_kind(params)}"
    if too_deep:
        return f"params nest deeper than {max_depth} levels"
    # the walk is only needed where the text could hold what it looks for
    deep = text.count("[") + text.count("{") > max_depth
    surrogates = _SURROGATE_ESCAPE.search(text) is not None
    if deep or surrogates:
        return walk_problem(params, max_depth, check_strings=surrogates)
    return None


def walk_problem(value: Any, max_depth: int, check_strings: bool = True, root: str = "params") -> str | None:
    """The first problem found in a parsed value, naming its path: nesting deeper than
    ``max_depth``, or a string (or key) holding a lone surrogate. Iterative, so any depth is safe."""
    stack: list[tuple[Any, int, Any]] = [(value, 1, (None, root))]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                return f"{_path(where)} nests deeper than {max_depth} levels"
            for key, child in item.items():
                if check_strings and not _encodable(key):
                    return f"{_path(where)} has a key with a lone surrogate (a \\ud800-\\udfff escape not in a pair)"
                stack.append((child, depth + 1, (where, f".{key}")))
        elif isinstance(item, list):
            if depth > max_depth:
                return f"{_path(where)} nests deeper than {max_depth} levels"
            stack.extend((child, depth + 1, (where, f"[{i}]")) for i, child in enumerate(item))
        elif check_strings and isinstance(item, str) and not _encodable(item):
            return f"{_path(where)} holds a lone surrogate (a \\ud800-\\udfff escape not in a pair), not a character"
    return None


def _path(where: Any) -> str:
    parts = []
    while where is not None:
        where, part = where
        parts.append(part)
    path = "".join(reversed(parts))
    return path if len(path) <= 120 else f"{path[:60]}...{path[-40:]}"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", float: "a number",
            int: "an integer", type(None): "null"}.get(type(value), type(value).__name__)


def shallow(data: bytes, max_depth: int, chunk: int = 1 << 20) -> bytes:
    """``data`` (JSON text) with every array or object nested deeper than ``max_depth`` replaced
    by ``0``, so that a message too deep for the parser can still be read for its id and method.
    Works in chunks with numpy (bounded memory, no recursion); strings are left as they are."""
    import numpy as np

    blanked = _ESCAPE.sub(b"__", data)  # same length, and every quote left is a real one
    out: list[bytes] = []
    quotes = level = 0
    kept_last = True
    for start in range(0, len(data), chunk):
        b = np.frombuffer(blanked, dtype=np.uint8, count=min(chunk, len(data) - start), offset=start)
        quote = b == 34
        parity = (np.cumsum(quote, dtype=np.int64) + quotes) % 2
        in_string = parity.astype(bool) | quote
        opens = ((b == 91) | (b == 123)) & ~in_string
        closes = ((b == 93) | (b == 125)) & ~in_string
        depth = np.cumsum(opens.astype(np.int64) - closes, dtype=np.int64) + level
        keep = (depth + closes) <= max_depth
        run_start = ~keep & np.concatenate(([kept_last], keep[:-1]))
        original = np.frombuffer(data, dtype=np.uint8, count=len(b), offset=start).copy()
        original[run_start] = ord("0")
        out.append(original[keep | run_start].tobytes())
        quotes = int(parity[-1])
        level = int(depth[-1])
        kept_last = bool(keep[-1])
    return b"".join(out)

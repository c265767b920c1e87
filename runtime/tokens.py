"""Token counts of tool definitions as an LLM reads them: a calibrated approximation of the
Qwen2.5 tokenizer (byte-level BPE) that needs no tokenizer at run time.

``schema_tokens(definition)`` counts the compact JSON of one rendered definition
(``magicselector.formats.tool_definition(tool, format)``). The count is a linear model over a few
regex counts of that text: the Qwen2 pre-tokenizer's pieces (letter runs with one leading
non-letter, single digits, punctuation runs, whitespace), plus the pieces BPE splits further
(long lower-case runs, camelCase joints, upper-case runs, ``_`` before a capital, long punctuation
runs, non-ASCII bytes). The coefficients and how close it comes to the real tokenizer (per
catalog and format) are in docs/bench/tokens.md; it is an estimate within a few percent of the
total, not an upper bound per tool.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from .errors import InputError

# the Qwen2 pre-tokenizer, in stdlib ``re`` terms (\p{L} ~ [^\W\d_], \p{N} ~ \d)
_PIECE = re.compile(r"[^\r\n\w]?[^\W\d_]+|\d|[^\s\w]+|_+|\s+")
# what BPE splits inside a piece: long lower-case runs, camelCase joints, upper-case runs,
# '_' before a capital, long punctuation runs
_EXTRA = re.compile(r"(?a)[a-z]{7,}|[a-z](?=[A-Z])|[A-Z]{3,}|_(?=[A-Z])|[^\s\w]{5,}")
# fitted by least relative error against Qwen2.5's tokenizer, then scaled by 1.03 (docs/bench/tokens.md)
_PER_PIECE, _PER_LONG_LOWER, _PER_CAMEL, _PER_UPPER = 1.0, 0.052, 1.37, 0.175
_PER_UNDERSCORE_CAP, _PER_LONG_PUNCT, _PER_NON_ASCII_BYTE = 0.21, 0.69, 0.27


def text_tokens(text: str) -> int:
    """The estimated Qwen2.5 token count of ``text`` (at least 1 for a non-empty text)."""
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}")
    if not text:
        return 0
    n = _PER_PIECE * len(_PIECE.findall(text)) + _PER_NON_ASCII_BYTE * (len(text.encode("utf-8", "surrogatepass")) - len(text))
    for m in _EXTRA.findall(text):
        n += _extra_tokens(m)
    return max(1, round(n))


def _extra_tokens(m: str) -> float:
    """The tokens one ``_EXTRA`` match adds: an underscore before a capital or a camel-case hump,
    or a long run of lowercase letters, capitals or punctuation."""
    c = m[0]
    if len(m) == 1:
        return _PER_UNDERSCORE_CAP if c == "_" else _PER_CAMEL
    if c.islower():
        return _PER_LONG_LOWER * (len(m) - 6)
    if c.isupper():
        return _PER_UPPER * (len(m) - 2)
    return _PER_LONG_PUNCT * (len(m) - 4)


def compact_json(definition: Mapping[str, Any]) -> str:
    """The definition as sent: compact JSON, UTF-8 kept as is."""
    if not isinstance(definition, Mapping):
        raise InputError(f"definition must be a mapping (a rendered tool definition), got {type(definition).__name__}")
    try:
        return json.dumps(definition, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InputError(f"definition is not JSON-serializable: {e}") from None


def schema_tokens(definition: Mapping[str, Any]) -> int:
    """The estimated tokens an LLM reads for one tool definition as rendered for its API format."""
    return text_tokens(compact_json(definition))

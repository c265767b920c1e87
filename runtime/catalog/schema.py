"""JSON Schema checks of MCP tool schemas: an object schema that passes its meta-schema (``jsonschema``, imported only then), with bounded regular expressions."""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

from ..errors import CatalogError
from .bounds import _check_bounds, _plain_json

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
    meta = _schema_draft(schema, where)
    if text is None:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    key = _schema_cache_key(text)
    if key in _SCHEMA_OK:
        return
    cls = _validator_class(schema, meta, where)
    if '"pattern' in text:  # a "pattern" or "patternProperties" key writes so; else there is none to compile
        _check_patterns(schema, where)
    _check_meta_schema(schema, cls, where)
    if len(_SCHEMA_OK) >= _SCHEMA_OK_MAX:
        _SCHEMA_OK.clear()
    _SCHEMA_OK[key] = None


def _schema_draft(schema: Mapping[str, Any], where: str) -> str | None:
    """The ``$schema`` of an object schema (None when it names none); a schema of another type, or
    a ``$schema`` that is not a string, refused."""
    if schema.get("type") != "object":
        raise CatalogError(f"{where}: must be a JSON Schema with \"type\": \"object\" (MCP), "
                           f"got type {schema.get('type')!r}")
    meta = schema.get("$schema")
    if "$schema" in schema and not isinstance(meta, str):
        raise CatalogError(f"{where}: \"$schema\" must be a string (a JSON Schema draft URI), got {meta!r}")
    return meta


def _validator_class(schema: Mapping[str, Any], meta: str | None, where: str) -> Any:
    """jsonschema's validator class for the schema's draft; an unknown ``$schema`` refused."""
    exceptions, validators = _jsonschema()
    try:
        cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    except exceptions.SchemaError:  # an unknown $schema URI (only newer jsonschema releases raise)
        cls = None
    if cls is None or (meta is not None and cls is validators.Draft202012Validator
                       and meta.rstrip("#") not in _DRAFT_2020_12_URIS):
        raise CatalogError(f"{where}: unknown \"$schema\" {meta!r}; use a JSON Schema draft URI "
                           "(MCP's default is https://json-schema.org/draft/2020-12/schema)")
    return cls


def _check_meta_schema(schema: Mapping[str, Any], cls: Any, where: str) -> None:
    """The schema against its meta-schema: jsonschema-rs where installed, jsonschema for the
    message of a schema it refuses (or where it is missing)."""
    fast = _rs_meta_valid(schema)
    if fast is True:
        return
    exceptions, _ = _jsonschema()
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as e:
        raise CatalogError(f"{where}: not a valid JSON Schema: {e.message}{_at(e.path)}") from None
    except RecursionError:
        raise CatalogError(f"{where}: nested too deeply to check as a JSON Schema") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise CatalogError(f"{where}: not a valid JSON Schema ({type(e).__name__}: {e})") from None
    if fast is False:  # jsonschema-rs refused what jsonschema passed: report jsonschema-rs's reason
        raise CatalogError(f"{where}: not a valid JSON Schema: {_rs_meta_error(schema)}")


def _at(path: Any) -> str:
    """`` (at /a/b)``: where in a schema its validator found the error (nothing at the root)."""
    at = "/".join(str(p) for p in path)
    return f" (at /{at})" if at else ""


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
        return str(e.message) + _at(e.instance_path)
    except Exception as e:  # pragma: no cover - is_valid said False
        return f"{type(e).__name__}: {e}"
    return "refused by its meta-schema"


_PATTERNS_OK: dict[str, None] = {}


def _check_patterns(schema: Mapping[str, Any], where: str) -> None:
    """Every ``pattern`` value and ``patternProperties`` key must compile as a regular expression
    (as the meta-schema's ``"format": "regex"`` asks); one that cannot (malformed, or nested too
    deeply for the regex parser) is a CatalogError naming it."""
    for pattern, at in _patterns(schema):
        if pattern not in _PATTERNS_OK:
            _compile_pattern(pattern, at, where)


def _patterns(schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The schema's ``pattern`` values and ``patternProperties`` keys, each with its JSON pointer."""
    stack: list[tuple[Any, str]] = [(schema, "")]
    found: list[tuple[str, str]] = []
    while stack:  # the values are plain JSON here (_check_bounds ran): dicts and lists
        v, at = stack.pop()
        items = enumerate(v) if type(v) is list else v.items()
        stack += [(item, f"{at}/{k}") for k, item in items if type(item) is dict or type(item) is list]
        if type(v) is dict:
            found += _patterns_here(v, at)
    return found


def _patterns_here(v: dict[str, Any], at: str) -> list[tuple[str, str]]:
    """The patterns one schema object holds itself."""
    found = [(v["pattern"], f"{at}/pattern")] if type(v.get("pattern")) is str else []
    pprops = v.get("patternProperties")
    if type(pprops) is dict:
        found += [(p, f"{at}/patternProperties") for p in pprops]
    return found


def _compile_pattern(pattern: str, at: str, where: str) -> None:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise CatalogError(f"{where}: not a valid JSON Schema: pattern {pattern[:60]!r} is not a valid regular "
                           f"expression ({why}) (at {at})") from None
    if len(_PATTERNS_OK) < 65_536:
        _PATTERNS_OK[pattern] = None


_DRAFT_2020_12_URIS = ("https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft/2020-12/schema")

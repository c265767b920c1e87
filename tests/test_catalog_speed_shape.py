"""The fast paths of catalog loading (issue 27.7) give the verdicts and messages of the slow ones.

``load_catalog`` reads decoded JSON: it bounds each tool from its compact JSON (``_decoded_bounds``)
and falls back to the walk (``_check_bounds``) whenever that cannot show the tool is within the
limits; it keys the schema cache by the SHA-256 of a schema's JSON and compiles ``pattern`` values
only where the schema's JSON shows one. Correctness only: no test here times anything."""
from __future__ import annotations

import gc
import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from magicselector.catalog import bounds as cat_bounds, schema as cat_schema, tool as cat_tool
from magicselector.catalog import (MAX_TOOL_DEPTH, MAX_TOOL_JSON_CHARS, MAX_TOOL_NODES, check_json_schema,
                                   load_catalog, parse_tool)
from magicselector.errors import CatalogError

SETTINGS = dict(deadline=None, derandomize=True, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _outcome(fn, *args, **kwargs):
    """("ok", result) or (the exception's type, its message)."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as e:  # the comparison is the point: any exception type is recorded
        return type(e), str(e)


def _decoded(value):
    """``value`` as ``json.loads`` gives it back (lone surrogates, NaN and big integers survive)."""
    return json.loads(json.dumps(value))


def _same_both_ways(entry, check_schemas=True):
    """parse_tool (the walk) and the decoded fast path agree, cold cache and warm."""
    cat_schema._SCHEMA_OK.clear()
    walked = _outcome(parse_tool, entry, where="t", check_schemas=check_schemas)
    cat_schema._SCHEMA_OK.clear()
    fast = _outcome(cat_tool._parse_tool, entry, "t", None, check_schemas, decoded=True)
    assert fast == walked
    warm = _outcome(cat_tool._parse_tool, entry, "t", None, check_schemas, decoded=True)  # schema now cached
    assert warm == walked
    return walked


def _tool(schema=None, **fields):
    entry = {"name": "t", "description": "d", "inputSchema": {"type": "object"} if schema is None else schema}
    entry.update(fields)
    return entry


# -- the bounds at their edges ---------------------------------------------------------------------

def _deep(n):
    s = {"type": "object"}
    for _ in range(n):
        s = {"type": "object", "properties": {"a": s}}
    return s


@pytest.mark.parametrize("n", range(26, 34))  # two containers a level: the depth limit (64) falls inside
def test_depth_at_the_limit_is_judged_as_the_walk_judges_it(n):
    outcome = _same_both_ways(_tool(_deep(n)))
    if 1 + 2 * n >= MAX_TOOL_DEPTH:  # the innermost schema's depth (the entry is depth 0)
        assert outcome[0] is CatalogError and f"nested more than {MAX_TOOL_DEPTH} levels deep" in outcome[1]
    else:
        assert outcome[0] == "ok"


def test_lists_nested_to_the_limit():
    for n in range(MAX_TOOL_DEPTH - 3, MAX_TOOL_DEPTH + 3):
        value = 0
        for _ in range(n):
            value = [value]
        _same_both_ways(_tool({"type": "object", "default": value}))


@pytest.mark.parametrize("extra", [-2, -1, 0, 1, 2])
def test_value_count_at_the_limit(extra):
    # the walk counts the entry (1 + its 3 values), inputSchema (1 + 2), default (1 + its n values)
    n = MAX_TOOL_NODES - 8 + extra
    outcome = _same_both_ways(_tool({"type": "object", "default": [0] * n}))
    assert (outcome[0] == "ok") == (extra <= 0), outcome
    m = (MAX_TOOL_NODES - 8) // 2 + extra  # each empty list is counted twice
    outcome = _same_both_ways(_tool({"type": "object", "default": [[]] * m}))
    assert (outcome[0] == "ok") == (extra <= 0), outcome


@pytest.mark.parametrize("char", ["a", "\u00e9", "\u4e2d", "\U0001f600", '"', "\\", "\x01", ",", ":", "{"])
def test_size_at_the_limit(char):
    base = _tool(_meta={"x": ""})
    base_size = len(json.dumps(base, ensure_ascii=False).encode())
    per = len(json.dumps(char, ensure_ascii=False).encode()) - 2
    n = (MAX_TOOL_JSON_CHARS - base_size) // per
    for k in (n - 1, n, n + 1):
        entry = _tool(_meta={"x": char * k})
        outcome = _same_both_ways(_decoded(entry))
        size = len(json.dumps(entry, ensure_ascii=False).encode())
        assert (outcome[0] == "ok") == (size <= MAX_TOOL_JSON_CHARS)


def test_text_full_of_brackets_falls_back_to_the_walk_and_passes():
    entry = _tool(description="{[,:" * 5_000)  # loose upper bounds: the walk decides
    assert cat_bounds._decoded_bounds(entry, "inputSchema") is None
    assert _same_both_ways(entry)[0] == "ok"


@pytest.mark.parametrize("entry", [
    _tool(description="\ud800"), _tool(_meta={"\udfff": 1}), _tool({"type": "object", "default": math.nan}),
    _tool({"type": "object", "default": -math.inf}), _tool({"type": "object", "default": 10 ** 4000}),
    _tool({"type": "object", "description": "a\ud83d"}), _tool(description="\U0001f600 ok"),
    _tool({"type": "object", "properties": {"\ud800": {}}}), _tool(outputSchema={"type": "object", "x": math.nan}),
    _tool(outputSchema={"type": "string"}), _tool(outputSchema=[1]), _tool([]), _tool(None), _tool({}),
    {"name": "t", "parameters": {"type": "object", "properties": {"a": {"type": "dict"}}}},
    {"name": "t", "input_schema": {"type": "object"}, "parameters": 5},
    {"name": "t", "inputSchema": None, "parameters": {"type": "string"}},
])
def test_hostile_values_get_the_walks_message(entry):
    for check in (True, False):
        _same_both_ways(_decoded(entry), check)


# -- generated entries -----------------------------------------------------------------------------

CHARS = st.characters(codec=None, categories=None)  # lone surrogates and control characters too
TEXT = st.one_of(st.text(CHARS, max_size=12), st.sampled_from(["", "{", "[[", ",:", "\ud800", "\U0001f600",
                                                                  "pattern", "\\ud800"]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 30), 10 ** 30),
                    st.floats(allow_nan=True, allow_infinity=True), TEXT)
JSON = st.recursive(SCALARS, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(TEXT, c, max_size=4)),
                    max_leaves=25)
KEYWORDS = st.sampled_from(["type", "properties", "items", "pattern", "patternProperties", "required", "enum",
                            "const", "default", "$schema", "allOf", "minLength", "description"])
SCHEMA = st.recursive(
    st.one_of(SCALARS, st.fixed_dictionaries({"type": st.sampled_from(["string", "object", "strng", 1])},
                                             optional={"pattern": st.sampled_from(["a+", "(", "[", "\\d", "(?P<"])})),
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.one_of(KEYWORDS, TEXT), c, max_size=4)),
    max_leaves=20)


@st.composite
def entries(draw):
    entry = {"name": draw(st.one_of(st.sampled_from(["t", "get_x", "a" * 129, ""]), TEXT))}
    schema = draw(SCHEMA)
    if isinstance(schema, dict) and draw(st.booleans()):
        schema["type"] = "object"
    entry[draw(st.sampled_from(["inputSchema", "input_schema", "parameters"]))] = schema
    for key in draw(st.lists(st.sampled_from(["description", "title", "id", "annotations", "outputSchema",
                                              "_meta", "execution", "domain", "server", "icons"]), max_size=4)):
        entry[key] = draw(st.one_of(TEXT, JSON, SCHEMA))
    return entry


@settings(max_examples=400, **SETTINGS)
@given(entry=entries(), check_schemas=st.booleans())
@example(entry={"name": "t", "inputSchema": {"type": "object", "properties": {"p": {"pattern": "("}}}},
         check_schemas=True)
@example(entry={"name": "t", "inputSchema": {"type": "object", "patternProperties": {"(": {}}}}, check_schemas=True)
def test_decoded_entries_get_the_walks_verdict_and_message(entry, check_schemas):
    _same_both_ways(_decoded(entry), check_schemas)


@settings(max_examples=300, **SETTINGS)
@given(value=JSON)
def test_the_decoded_bounds_never_pass_what_the_walk_refuses(value):
    entry = _decoded({"name": "t", "inputSchema": value, "outputSchema": value, "x": value})
    texts = cat_bounds._decoded_bounds(entry, "inputSchema")
    if texts is not None:
        cat_bounds._check_bounds(entry, "t")  # raises if the fast path passed what the walk refuses
        for key, text in texts.items():
            assert text == json.dumps(entry[key], ensure_ascii=False, separators=(",", ":"))


# -- the schema cache and the pattern test ---------------------------------------------------------

@settings(max_examples=300, **SETTINGS)
@given(schema=SCHEMA)
def test_a_pattern_to_compile_always_shows_in_the_schemas_json(schema):
    if not isinstance(schema, dict):
        return
    try:
        cat_schema._check_patterns(schema, "s")
    except CatalogError:
        for text in (json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
                     json.dumps(schema, separators=(",", ":"), ensure_ascii=False)):
            assert '"pattern' in text


VARIED = [
    {"type": "object"}, {"type": "object", "minProperties": 1}, {"type": "object", "minProperties": 1.5},
    {"type": "object", "minProperties": True}, {"type": "object", "minProperties": -1},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "a+"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
    {"type": "object", "patternProperties": {"^x": {}}}, {"type": "object", "patternProperties": {"[": {}}},
    {"type": "object", "properties": {"pattern": {"type": "string"}}},
    {"type": "object", "const": {"pattern": "("}}, {"type": "object", "description": "pattern: ("},
    {"type": "object", "properties": {"a": {"type": "strng"}}}, {"type": "object", "required": "a"},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"a": {"type": "x"}}},
    {"$schema": "https://example.com/unknown", "type": "object"}, {"$schema": 5, "type": "object"},
    {"type": "string"}, {"type": ["object"]}, {"type": "object", "items": [{"type": "string"}, 1]},
    {"properties": {"a": {}}, "type": "object"}, {"type": "object", "properties": {"a": {}}},
]


def test_the_schema_cache_gives_what_an_uncached_check_gives():
    cold = []
    for schema in VARIED:
        cat_schema._SCHEMA_OK.clear()
        cold.append(_outcome(check_json_schema, schema, "s"))
    cat_schema._SCHEMA_OK.clear()
    for _ in range(2):  # the second round hits the cache for every schema that passed
        assert [_outcome(check_json_schema, s, "s") for s in VARIED] == cold
        assert [_outcome(cat_schema._check_plain_schema, s, "s", json.dumps(s, ensure_ascii=False, separators=(",", ":")))
                for s in VARIED] == cold
    assert any(o[0] == "ok" for o in cold) and any(o[0] is CatalogError for o in cold)
    assert all(isinstance(k, bytes) and len(k) == 32 for k in cat_schema._SCHEMA_OK)  # digests, not texts


# -- load_catalog ------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", [
    _tool(), _tool(_deep(40)), _tool({"type": "object", "default": [0] * MAX_TOOL_NODES}),
    _tool(description="\ud800"), _tool({"type": "object", "properties": {"a": {"pattern": "("}}}),
    _tool({"type": "object", "properties": {"a": {"type": "strng"}}}), _tool(_meta={"x": "a" * MAX_TOOL_JSON_CHARS}),
])
def test_load_catalog_says_what_parse_tool_says(tmp_path, entry):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": [entry]}}), encoding="utf-8")
    cat_schema._SCHEMA_OK.clear()
    loaded = _outcome(load_catalog, path)
    cat_schema._SCHEMA_OK.clear()
    parsed = _outcome(parse_tool, _decoded(entry), where=f"{path}[0]", check_schemas=True)
    if parsed[0] == "ok":
        assert loaded[0] == "ok" and list(loaded[1]) == [parsed[1]]
    else:
        assert loaded == parsed


def test_load_catalog_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"tools": [_tool()]}), encoding="utf-8")
    bad.write_text(json.dumps({"tools": [_tool(description=5)]}), encoding="utf-8")
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            gc.enable() if enabled else gc.disable()
            load_catalog(good)
            assert gc.isenabled() is enabled
            with pytest.raises(CatalogError):
                load_catalog(bad)
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


@pytest.mark.parametrize("schema, at", [
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}, "/properties/a/pattern"),
    ({"type": "object", "patternProperties": {"[": {}}}, "/patternProperties"),
    ({"type": "object", "const": {"pattern": "("}}, "/const/pattern"),
    ({"type": "object", "allOf": [{"pattern": "(?P<"}]}, "/allOf/0/pattern"),
])
@pytest.mark.parametrize("cached", [False, True])
def test_a_pattern_that_does_not_compile_is_named_on_every_path(schema, at, cached):
    if not cached:
        cat_schema._SCHEMA_OK.clear()
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    for check in (lambda: check_json_schema(schema, "s"), lambda: cat_schema._check_plain_schema(schema, "s", text),
                  lambda: cat_tool._parse_tool(_tool(schema), "t", None, True, decoded=True)):
        with pytest.raises(CatalogError, match=r"is not a valid regular expression .*\(at " + at + r"\)$"):
            check()

"""Property-based fuzzing of the shapes issue 27 added (item 1): hostile tools (``check_tool``,
``parse_tool``, ``mcp_catalog``), hostile schemas, histories with content objects, deep values and
tool-call lists (``bounded_history``, ``validate_history``), and hostile bundle manifests
(``Bundle.open``). The property: a result, or a ``MagicSelectorError``; never another exception. A
tool that is accepted renders in every format (``formats.tool_definitions``) as JSON. No model is
loaded: the bundle is a tiny folder of small files. Sized to run in well under a minute on 2 cores."""
from __future__ import annotations

import json
import os
import sys
from collections import UserDict
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from magicselector import Tool
from magicselector.bundle import MANIFEST, Bundle, write_manifest
from magicselector.catalog import check_json_schema, check_tool, mcp_catalog, parse_tool
from magicselector.dialogue import bounded_history, validate_history
from magicselector.errors import BundleError, MagicSelectorError
from magicselector.formats import FORMATS, catalog_name, tool_definitions

# MS_FUZZ_SCALE=10: ten times the examples, from a random seed (a longer hunt than CI's fixed one)
_SCALE = float(os.environ.get("MS_FUZZ_SCALE", "1"))
SETTINGS = dict(deadline=None, derandomize=_SCALE == 1, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])



def _n(examples: int) -> int:
    return max(1, int(examples * _SCALE))


# -- values ----------------------------------------------------------------------------------------

# any code point, lone surrogates and control characters included
ANY_CHAR = st.characters(codec=None, categories=None)
TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=40),
    st.sampled_from(["", " ", "\x00", "\x07", "\n", "\ud800", "a\udfffb", "\u2028", "\ufeff", "mcp__", "__",
                     "get_weather", "a" * 129, "é" * 300]),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "\x1f", "\ud83d", "é"]), st.integers(0, 70_000)),
)
KEYS = st.one_of(TEXT, st.integers(-3, 3), st.sampled_from([None, True, 1.5, (1, 2)]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(10**400), 10**400),
                    st.floats(allow_nan=True, allow_infinity=True), TEXT)


def _nest(value, depth: int, how: str):
    for i in range(depth):
        if how == "list":
            value = [value]
        elif how == "dict":
            value = {"a": value}
        elif how == "tuple":
            value = (value,)
        else:
            value = {"k": [value]} if i % 2 else [{"k": value}]
    return value


def values(keys=KEYS, leaves: int = 20, mappings: bool = True):
    """JSON-ish values: scalars, lists, tuples, dicts with any keys (and, with ``mappings``, mappings
    that are not dicts: MappingProxyType, UserDict), and some nested up to 200 deep."""
    def containers(c):
        dicts = st.dictionaries(keys, c, max_size=4)
        if mappings:
            dicts = st.one_of(dicts, dicts.map(MappingProxyType), dicts.map(UserDict))
        return st.one_of(st.lists(c, max_size=4), st.tuples(c), dicts)

    shallow = st.recursive(SCALARS, containers, max_leaves=leaves)
    deep = st.builds(_nest, shallow, st.integers(0, 200), st.sampled_from(["list", "dict", "tuple", "mixed"]))
    return st.one_of(shallow, deep)


VALUES = values()
STR_KEY_VALUES = values(keys=TEXT)

# -- schemas ---------------------------------------------------------------------------------------


def _allof(n: int, inner):
    s = inner
    for _ in range(n):
        s = {"allOf": [s]}
    return s


def _props(n: int, inner):
    s = inner
    for _ in range(n):
        s = {"type": "object", "properties": {"a": s}}
    return s


PATTERNS = st.one_of(
    st.text(st.sampled_from("()[]{}*+?|\\^$.a0-:,"), max_size=30),
    st.builds(lambda n, m: "(" * n + "a" + ")" * m, st.integers(0, 1200), st.integers(0, 1200)),
    st.builds(lambda n: "(?:" * n + "a" + ")" * n, st.integers(0, 600)),
    st.sampled_from(["[", "(?P<a>x)(?P<a>y)", "\\p{L}", "(?<=a+)b", "a{1,99999999999}", "\ud800"]),
    SCALARS,
)
LEAF_SCHEMAS = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "object", "array", "strng", 5, None,
                                                    ["string", "null"], []])},
                          optional={"pattern": PATTERNS, "enum": st.lists(SCALARS, max_size=3),
                                    "minimum": SCALARS, "items": VALUES, "required": VALUES,
                                    "$ref": st.sampled_from(["#", "#/definitions/x", "http://x/y", "\ud800", ""]),
                                    "format": TEXT}),
    st.booleans(),
    VALUES,
)
SCHEMA_BODIES = st.one_of(
    st.builds(_allof, st.integers(0, 120), LEAF_SCHEMAS),
    st.builds(_props, st.integers(0, 120), LEAF_SCHEMAS),
    st.dictionaries(st.sampled_from(["properties", "allOf", "anyOf", "oneOf", "not", "items", "$defs",
                                     "additionalProperties", "patternProperties", "if", "then", "required"]),
                    st.one_of(LEAF_SCHEMAS, st.dictionaries(TEXT, LEAF_SCHEMAS, max_size=3),
                              st.lists(LEAF_SCHEMAS, max_size=3)), max_size=4),
)


@st.composite
def schemas(draw):
    """An inputSchema: mostly object-shaped (so the meta-schema check runs), sometimes anything."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(VALUES)
    body = draw(SCHEMA_BODIES)
    schema = dict(body) if isinstance(body, dict) else {"allOf": [body]}
    schema["type"] = draw(st.sampled_from(["object"] * 6 + ["string", None, 5, ["object"]]))
    if draw(st.booleans()):
        schema["$schema"] = draw(st.one_of(
            st.none(), st.integers(), TEXT,
            st.sampled_from(["https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#",
                             "http://json-schema.org/draft-04/schema#", "https://example.com/unknown"])))
    return schema


# -- tools -----------------------------------------------------------------------------------------

NAMES = st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,20}\Z"), TEXT, SCALARS)
TOOL_FIELDS = {
    "name": NAMES, "id": NAMES, "description": st.one_of(TEXT, SCALARS), "title": st.one_of(TEXT, SCALARS),
    "inputSchema": schemas(), "input_schema": schemas(), "parameters": schemas(), "outputSchema": schemas(),
    "annotations": VALUES, "server": st.one_of(TEXT, SCALARS), "domain": st.one_of(TEXT, SCALARS),
    "_meta": VALUES, "execution": VALUES, "icons": VALUES,
}


GOOD_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,20}\Z")
PRINTABLE = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), max_size=60)
GOOD_PROPERTY = st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "array",
                                                                "object"])},
                                      optional={"description": PRINTABLE, "enum": st.lists(PRINTABLE, max_size=3),
                                                "pattern": st.sampled_from(["^a+$", "[0-9]{2}", "(a|b)*"])})
GOOD_SCHEMA = st.fixed_dictionaries({"type": st.just("object")},
                                    optional={"properties": st.dictionaries(GOOD_NAME, GOOD_PROPERTY, max_size=4),
                                              "required": st.lists(GOOD_NAME, max_size=2, unique=True),
                                              "additionalProperties": st.booleans()})
GOOD_TOOL = st.fixed_dictionaries({"name": GOOD_NAME},
                                  optional={"description": PRINTABLE, "inputSchema": GOOD_SCHEMA, "title": PRINTABLE,
                                            "annotations": st.dictionaries(GOOD_NAME, st.booleans(), max_size=2),
                                            "outputSchema": GOOD_SCHEMA})


@st.composite
def tools(draw):
    """A tool entry: a valid tool, a valid tool with one field made hostile, or a dict of some of a
    tool's fields (valid or hostile) plus stray keys; now and then not a dict at all."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(VALUES)
    if kind < 6:
        return draw(GOOD_TOOL)
    if kind < 12:
        entry = draw(GOOD_TOOL)
        key = draw(st.sampled_from(sorted(TOOL_FIELDS)))
        entry[key] = draw(TOOL_FIELDS[key])
        return entry
    entry = {}
    if draw(st.integers(0, 4)):  # mostly a usable name, so the later checks run
        entry["name"] = draw(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,20}\Z"))
    for key in draw(st.lists(st.sampled_from(sorted(TOOL_FIELDS)), max_size=5, unique=True)):
        entry[key] = draw(TOOL_FIELDS[key])
    entry.update(draw(st.dictionaries(KEYS, VALUES, max_size=2)))
    return entry


def _field(draw, strategy, default):
    return draw(strategy) if draw(st.booleans()) else default


@st.composite
def tool_objects(draw):
    """A Tool whose fields may be anything (a caller built it by hand)."""
    anything = st.one_of(SCALARS, VALUES)
    return Tool(id=_field(draw, anything, "t"), name=_field(draw, st.one_of(NAMES, anything), "t"),
                description=_field(draw, anything, "d"), parameters=_field(draw, schemas(), {}),
                domain=_field(draw, anything, None), title=_field(draw, anything, None),
                annotations=_field(draw, anything, None), output_schema=_field(draw, schemas(), None),
                server=_field(draw, anything, None), extra=_field(draw, VALUES, None))


def _renders(tool: Tool) -> None:
    for fmt in FORMATS:
        defs = tool_definitions([tool], fmt)
        assert len(defs) == 1
        json.dumps(defs, allow_nan=False)


def _only_magic(fn, *args, **kwargs):
    """fn's result, or None when it raised a MagicSelectorError; any other exception fails."""
    try:
        return fn(*args, **kwargs)
    except MagicSelectorError as e:
        assert str(e)
        return None


@settings(max_examples=_n(120), **SETTINGS)
@given(tools())
@example({"name": "t", "inputSchema": _allof(200, {"type": "object"})})
@example({"name": "t", "inputSchema": {"type": "object", "properties": {"a": _nest(1, 200, "dict")}}})
@example({"name": "t", "inputSchema": {"type": "object", "$schema": None}})
@example({"name": "t", "description": "\ud800"})
@example({"name": "t", 1: "x"})
# found by this fuzzer: a mapping that is not a dict inside a tool was a raw TypeError (json.dumps)
@example({"name": "t", "inputSchema": {"type": "object", "properties": MappingProxyType({"a": {"type": "string"}})}})
@example(MappingProxyType({"name": "t", "inputSchema": UserDict({"type": "object"})}))
@example({"name": "t", "inputSchema": {"type": "object", "minimum": 10**5000}})  # past int's digit limit
@example({"name": "A", "_meta": MappingProxyType({"\ud800": None})})  # the lone surrogate's report, likewise
@example({"name": "t", "parameters": {"type": "object", "properties": {"a": {"pattern": "(" * 1000}}}})
def test_check_tool_gives_a_tool_that_renders_or_a_magicselector_error(entry):
    tool = _only_magic(check_tool, entry)
    if tool is not None:
        assert isinstance(tool, Tool)
        _renders(tool)


@settings(max_examples=_n(80), **SETTINGS)
@given(tool_objects())
@example(Tool(id="t", name="t", description="", parameters=MappingProxyType({"type": "object",
                                                                           "properties": MappingProxyType({})})))
def test_check_tool_of_a_tool_object_renders_or_is_a_magicselector_error(tool):
    checked = _only_magic(check_tool, tool)
    if checked is not None:
        _renders(checked)


@settings(max_examples=_n(80), **SETTINGS)
@given(tools(), st.booleans())
def test_parse_tool_gives_a_tool_or_a_catalog_error(entry, check_schemas):
    tool = _only_magic(parse_tool, entry, where="fuzz", check_schemas=check_schemas)
    if tool is not None and check_schemas:
        _renders(tool)


@settings(max_examples=_n(60), **SETTINGS)
@given(st.lists(st.one_of(GOOD_NAME, st.text(ANY_CHAR, min_size=1, max_size=130),
                          st.sampled_from(["é", "..", "a" * 128, "a.b", "a_b", "a b", "日本", "a_12345678"])),
                min_size=1, max_size=8, unique=True))
def test_accepted_tools_render_with_distinct_wire_names_that_map_back(names):
    accepted = [t for t in (_only_magic(check_tool, {"name": n}) for n in names) if t is not None]
    for fmt in FORMATS:
        defs = tool_definitions(accepted, fmt)
        wires = [d["function"]["name"] if fmt == "openai" else d["name"] for d in defs]
        assert len(set(wires)) == len(wires)
        for wire, tool in zip(wires, accepted):
            assert catalog_name(wire, accepted) == tool.name


@st.composite
def servers(draw):
    """What a caller may hand mcp_catalog: server names to tools/list results in every shape."""
    if draw(st.integers(0, 14)) == 0:
        return draw(VALUES)
    out = {}
    for _ in range(draw(st.integers(0, 3))):
        good = draw(st.integers(0, 3)) > 0
        server = draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9-]{0,10}\Z") if good else
                      st.one_of(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,10}\Z"), KEYS))
        listed = draw(st.lists(GOOD_TOOL, min_size=1, max_size=3, unique_by=lambda t: t["name"]) if good else
                      st.lists(tools(), max_size=3))
        shape = draw(st.integers(0, 5))
        if shape == 0:
            data = {"tools": listed}
        elif shape == 1:
            data = {"jsonrpc": "2.0", "id": 1, "result": {"tools": listed, "nextCursor": draw(SCALARS)}}
        elif shape == 2:
            data = [{"tools": listed}, draw(VALUES)]
        elif shape == 3:
            data = listed
        elif shape == 4:
            data = {"tools": draw(VALUES)}
        else:
            data = draw(VALUES)
        out[server] = data
    return out


@settings(max_examples=_n(70), **SETTINGS)
@given(servers(), st.sampled_from(["server", "mcp"]))
@example({"srv": {"tools": [{"name": "t", "inputSchema": _props(150, {"type": "object"})}]}}, "server")
@example({"srv": {"result": {"tools": _nest({"name": "t"}, 200, "list")}}}, "server")
@example({("a", 1): {"tools": [{"name": "t"}]}}, "mcp")
def test_mcp_catalog_gives_a_catalog_or_a_catalog_error(data, namespace):
    catalog = _only_magic(mcp_catalog, data, namespace=namespace)
    if catalog is not None:
        for fmt in FORMATS:
            json.dumps(tool_definitions(list(catalog), fmt), allow_nan=False)


@settings(max_examples=_n(100), **SETTINGS)
@given(schemas())
@example({"type": "object", "$schema": None})
@example({"type": "object", "properties": {"a": {"type": "string", "pattern": "(" * 1000 + ")" * 1000}}})
@example(_props(120, {"type": "object"}))
@example(MappingProxyType({"type": "object", "properties": MappingProxyType({"a": UserDict({"type": "strng"})})}))
@example({"type": "object", "allOf": [_allof(200, True)]})
def test_check_json_schema_passes_or_is_a_catalog_error(schema):
    _only_magic(check_json_schema, schema, "fuzz")


# -- histories -------------------------------------------------------------------------------------


class Dumped:
    """An object a history may hold in place of a dict (an SDK object): read through model_dump."""

    def __init__(self, data):
        self.data = data

    def model_dump(self, **kwargs):
        return self.data

    def __repr__(self):
        return f"Dumped({self.data!r:.200})"


class Attrs:
    """A plain object whose public attributes are its fields."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return f"Attrs({self.__dict__!r:.200})"


ROLES = st.sampled_from(["user", "assistant", "system", "tool", "developer", "function", "model", "", "\x00"])
PART_TYPES = st.sampled_from(["text", "input_text", "output_text", "refusal", "image", "image_url", "tool_use",
                              "tool_result", "function_call", "function_call_output", "thinking", "resource",
                              "weird", None, 5])
PARTS = st.one_of(
    st.fixed_dictionaries({"type": PART_TYPES}, optional={"text": st.one_of(TEXT, VALUES), "id": SCALARS,
                                                          "name": st.one_of(NAMES, VALUES),
                                                          "input": VALUES, "content": VALUES,
                                                          "tool_use_id": SCALARS, "is_error": SCALARS}),
    VALUES,
)
CONTENT = st.one_of(TEXT, st.lists(PARTS, max_size=4), PARTS, VALUES,
                    st.builds(lambda p, n: _nest(p, n, "list"), PARTS, st.integers(0, 200)))
FUNCTION = st.one_of(st.fixed_dictionaries({}, optional={"name": st.one_of(NAMES, VALUES),
                                                          "arguments": st.one_of(TEXT, VALUES)}), VALUES)
TOOL_CALL = st.one_of(
    st.fixed_dictionaries({}, optional={"id": SCALARS, "type": st.one_of(st.just("function"), SCALARS),
                                        "function": FUNCTION, "custom": FUNCTION, "name": NAMES}),
    st.builds(Dumped, st.fixed_dictionaries({"id": SCALARS, "function": FUNCTION})),
    VALUES,
)
MESSAGE_FIELDS = {
    "role": st.one_of(ROLES, SCALARS, VALUES), "content": CONTENT, "tool_calls": st.one_of(
        st.lists(TOOL_CALL, max_size=4), VALUES), "tool_call_id": SCALARS, "name": st.one_of(NAMES, VALUES),
    "type": st.one_of(PART_TYPES, TEXT), "call_id": SCALARS, "arguments": st.one_of(TEXT, VALUES),
    "output": st.one_of(TEXT, VALUES), "function_call": FUNCTION, "result": VALUES, "parts": VALUES,
}


GOOD_CALL = st.fixed_dictionaries({"id": GOOD_NAME, "type": st.just("function"),
                                   "function": st.fixed_dictionaries({"name": GOOD_NAME,
                                                                      "arguments": st.just('{"a": 1}')})})
GOOD_MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "developer"]),
                           "content": st.one_of(PRINTABLE, st.lists(st.fixed_dictionaries(
                               {"type": st.just("text"), "text": PRINTABLE}), max_size=3))}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(),
                           "tool_calls": st.lists(GOOD_CALL, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": GOOD_NAME, "content": PRINTABLE}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": GOOD_NAME, "name": GOOD_NAME,
                           "arguments": st.just("{}")}),
)


@st.composite
def messages(draw):
    if draw(st.integers(0, 2)) == 0:
        return draw(GOOD_MESSAGE)
    fields = {}
    if draw(st.integers(0, 5)):
        fields["role"] = draw(ROLES)
    for key in draw(st.lists(st.sampled_from(sorted(MESSAGE_FIELDS)), max_size=4, unique=True)):
        fields[key] = draw(MESSAGE_FIELDS[key])
    fields.update(draw(st.dictionaries(KEYS, VALUES, max_size=2)))
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return Dumped(fields)
    if shape == 1:
        str_fields = {k: v for k, v in fields.items() if isinstance(k, str) and k.isidentifier()}
        return Attrs(**str_fields)
    if shape == 2:
        return draw(VALUES)
    if shape == 3:
        return Dumped(draw(VALUES))
    return fields


HISTORIES = st.one_of(st.lists(messages(), max_size=6), st.lists(GOOD_MESSAGE, max_size=6),
                      st.builds(lambda good, bad, i: good[:i] + [bad] + good[i:], st.lists(GOOD_MESSAGE, max_size=5),
                                messages(), st.integers(0, 5)),
                      VALUES, TEXT,
                      st.builds(lambda ms: iter(ms), st.lists(messages(), max_size=4)))


@settings(max_examples=_n(120), **SETTINGS)
@given(HISTORIES, st.integers(0, 8), st.integers(0, 20_000))
@example([{"role": "user", "content": _nest("x", 200, "list")}], 8, 16_000)
@example([{"role": "assistant", "tool_calls": [None, 5, {"function": None}, {"function": {"name": 5}}]}], 8, 16_000)
@example([{"role": "user", "content": {1: "x"}}], 8, 16_000)
@example([Dumped({"role": "user", "content": _nest({"type": "text", "text": "x"}, 200, "mixed")})], 8, 16_000)
def test_bounded_history_gives_turns_or_an_input_error(history, max_turns, max_chars):
    turns = _only_magic(bounded_history, history, max_turns, max_chars)
    if turns is not None:
        assert len(turns) <= max(max_turns, 0)
        assert sum(len(t.content) for t in turns) <= max(max_chars, 0)


@settings(max_examples=_n(60), **SETTINGS)
@given(HISTORIES)
@example([{"role": "tool", "content": [{"type": "tool_result", "content": _nest("x", 200, "dict")}]}])
def test_validate_history_gives_turns_or_an_input_error(history):
    turns = _only_magic(validate_history, history)
    if turns is not None:
        assert isinstance(turns, list)


# -- manifests -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory) -> tuple[Path, dict]:
    """A bundle folder of a few small files (no models): its manifest is what the fuzzer mutates."""
    root = tmp_path_factory.mktemp("tiny-bundle")
    (root / "catalog").mkdir()
    (root / "catalog" / "tools.jsonl").write_text('{"name": "t", "description": "d"}\n')
    (root / "embedder").mkdir()
    (root / "embedder" / "model.onnx").write_bytes(b"not a model")
    (root / "embedder" / "tokenizer.json").write_text("{}")
    manifest = write_manifest(root, {"release": 3, "catalog": {"file": "catalog/tools.jsonl"},
                                     "embedder": {"file": "embedder/model.onnx",
                                                  "tokenizer": "embedder/tokenizer.json"}})
    Bundle.open(root)  # the unmutated bundle opens
    return root, manifest


def _mutate(value, path, new):
    """``value`` with the item at ``path`` (keys / indexes, as far as they reach) replaced by ``new``."""
    if not path:
        return new
    key, rest = path[0], path[1:]
    if isinstance(value, dict) and value:
        k = sorted(value, key=str)[key % len(value)]
        return {**value, k: _mutate(value[k], rest, new)}
    if isinstance(value, list) and value:
        i = key % len(value)
        return value[:i] + [_mutate(value[i], rest, new)] + value[i + 1:]
    return new


JSON_VALUES = values(keys=TEXT, mappings=False).filter(lambda v: not isinstance(v, tuple))


@st.composite
def manifests(draw, base):
    kind = draw(st.integers(0, 4))
    if kind == 0:  # raw bytes, near-JSON or not
        return draw(st.one_of(st.binary(max_size=200), st.sampled_from([b"", b"\xef\xbb\xbf{}", b"[" * 100_000,
                                                                        b'{"format": "magicselector-bundle"']),
                              st.builds(lambda n: b"[" * n + b"]" * n, st.integers(0, 5000))))
    if kind == 1:  # any JSON value
        value = draw(JSON_VALUES)
    elif kind == 2:  # one top-level field replaced, removed or added
        value = dict(base)
        key = draw(st.one_of(st.sampled_from(sorted(base) + ["signature", "lexical", "reranker", "index"]), TEXT))
        if draw(st.booleans()) and key in value:
            del value[key]
        else:
            value[key] = draw(JSON_VALUES)
    else:  # something deep inside replaced (files entries, section paths)
        path = draw(st.lists(st.integers(0, 10), min_size=1, max_size=4))
        new = draw(st.one_of(JSON_VALUES, st.sampled_from(["../x", "/etc/passwd", ".", "", "a\x00b", "C:\\x",
                                                           "catalog", "catalog/tools.jsonl", "\ud800", -1, 10**30])))
        value = _mutate(base, path, new)
    try:
        return json.dumps(value, ensure_ascii=draw(st.booleans()), allow_nan=True).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return b"{}"


@settings(max_examples=_n(120), **SETTINGS)
@given(data=st.data(), verify=st.booleans())
def test_a_mutated_manifest_opens_or_is_a_bundle_error(tiny_bundle, data, verify, tmp_path_factory):
    root, base = tiny_bundle
    raw = data.draw(manifests(base), label="manifest")
    (root / MANIFEST).write_bytes(raw)
    try:
        try:
            bundle = Bundle.open(root, verify=verify)
        except BundleError as e:
            assert str(e)
            return
        except MagicSelectorError as e:  # allowed by the property, but a manifest's faults are BundleErrors
            assert str(e)
            return
        _only_magic(lambda: bundle.release)
        for name in ("catalog", "embedder", "reranker", "index", "lexical", "signature", "files"):
            _only_magic(bundle.section, name)
        files = bundle.manifest.get("files")
        if isinstance(files, dict):
            for rel in list(files)[:5]:
                _only_magic(bundle.read, rel)
    finally:
        write_manifest(root, {k: v for k, v in base.items() if k != "files"})


def test_the_fuzzers_run_without_raising_the_recursion_limit():
    """The deep values above (200 levels) sit well inside Python's default limit: what they test is
    the code's own bounds, not a raised limit."""
    assert sys.getrecursionlimit() <= 10_000

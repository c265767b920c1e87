"""A large catalog holds its tools packed (runtime/catalog/collection.py PACK_AT): the same tools, ids, names,
copies and errors as the Tool objects it replaces."""
from __future__ import annotations

import json

import hypothesis
import pytest

from magicselector.catalog import collection, files
from magicselector.catalog import Catalog, Tool, load_catalog, load_phone_catalog
from magicselector.errors import CatalogError, UnknownToolError


@pytest.fixture
def small_pack(monkeypatch):
    monkeypatch.setattr(collection, "PACK_AT", 5)


def test_a_packed_catalog_gives_back_the_same_tools(small_pack):
    tools = list(load_phone_catalog())[:40]
    packed = Catalog(tools, source="x")
    assert isinstance(packed._tools, collection._PackedTools)
    assert list(packed) == tools and packed.ids == [t.id for t in tools]
    assert all(packed.get(t.id) == t and packed[i] == t for i, t in enumerate(tools))
    assert packed.id_named(tools[3].name) == tools[3].id and packed.id_named(tools[3].name, tools[3].id) is None
    with pytest.raises(UnknownToolError):
        packed.get("nope")


def test_a_tool_json_cannot_give_back_stays_a_tool_object(small_pack):
    odd = Tool(id="odd", name="odd", description="d", parameters={"enum": (1, 2)})  # a tuple: JSON gives a list
    tools = [Tool(id=f"t{i}", name=f"t{i}", description="x") for i in range(6)] + [odd]
    packed = Catalog(tools)
    assert packed.get("odd").parameters["enum"] == (1, 2) and packed.get("odd") is odd


def test_copies_of_a_packed_catalog_add_replace_and_remove_as_a_list_does(small_pack):
    tools = [Tool(id=f"t{i}", name=f"n{i}", description=f"d{i}") for i in range(8)]
    packed = Catalog(tools)
    new = Tool(id="t3", name="n3b", description="new")
    replaced = packed.with_tool(new)
    assert [t.id for t in replaced] == ["t0", "t1", "t2", "t4", "t5", "t6", "t7", "t3"]
    assert replaced.get("t3") == new and replaced.id_named("n3") is None and replaced.id_named("n3b") == "t3"
    assert packed.get("t3") == tools[3]  # the original is untouched
    removed = replaced.without("t5")
    assert removed.ids == ["t0", "t1", "t2", "t4", "t6", "t7", "t3"] and "t5" not in removed
    assert list(removed) == [t for t in replaced if t.id != "t5"]


def test_a_large_json_catalog_loads_as_a_small_one_does(small_pack, tmp_path, monkeypatch):
    tools = [t.to_mcp() for t in load_phone_catalog()][:30]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": tools}))
    packed = load_catalog(path)
    monkeypatch.setattr(collection, "PACK_AT", 10**9)
    plain = load_catalog(path)
    assert isinstance(packed._tools, collection._PackedTools) and not isinstance(plain._tools, collection._PackedTools)
    assert list(packed) == list(plain) and packed.ids == plain.ids


def test_a_large_json_catalog_reports_errors_as_a_small_one_does(small_pack, tmp_path, monkeypatch):
    tools = [t.to_mcp() for t in load_phone_catalog()][:12]
    dup = tools + [dict(tools[2])]
    bad = dup + [{"name": 5}]  # a later entry that does not parse: reported before the duplicate
    for data in (dup, bad):
        path = tmp_path / "c.json"
        path.write_text(json.dumps(data))
        with pytest.raises(CatalogError) as packed_err:
            load_catalog(path)
        monkeypatch.setattr(collection, "PACK_AT", 10**9)
        with pytest.raises(CatalogError) as plain_err:
            load_catalog(path)
        monkeypatch.setattr(collection, "PACK_AT", 5)
        assert str(packed_err.value) == str(plain_err.value)


# -- a large JSON document decoded one tool at a time (LAZY_JSON_AT) ------------------------------

def _materialized(value):
    if isinstance(value, files._LazyArray):
        return [_materialized(v) for v in value]
    if isinstance(value, dict):
        return {k: _materialized(v) for k, v in value.items()}
    return value


_LAZY_CASES = ['{"tools": []}', ' {\n "tools" : [ {"name":"a"} ,\t{"name":"b"} ] }\r\n', '[{"a":1},{"b":[1,2]}]', "[]",
               "{}", '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x"}],"nextCursor":"c"},"error":null}',
               '{"tools": [NaN, -Infinity, 1e400]}', '{"result": {"tools": 5}, "tools": [1]}',
               '{"tools":[1],"tools":[2,3]}', '{"tools":["\\ud800"]}', '[{"jsonrpc":"2.0","result":{"tools":[1]}}]',
               # not JSON, or not of the shape: json.loads decides
               '{"tools": [1,]}', '{"tools": [1] ', '{"tools": [1]} x', '{"tools" [1]}', "{tools: []}", '{"a":1,}',
               "[1 2]", '"tools"', "5", '\ufeff{"tools":[]}', '{"tools": [1]}\x00', "", "[" * 3000 + "]" * 3000]


@pytest.mark.parametrize("text", _LAZY_CASES)
def test_the_lazy_decoder_gives_json_loads_values_or_leaves_the_text_to_it(text):
    lazy = files._lazy_document(text)
    try:
        want = json.loads(text)
    except (ValueError, RecursionError):
        assert lazy is None
        return
    if lazy is not None:
        assert _materialized(lazy) == want


@pytest.mark.parametrize("shape", ["response", "result", "list", "pages"])
def test_a_catalog_decoded_one_tool_at_a_time_is_the_one_json_loads_gives(small_pack, tmp_path, monkeypatch, shape):
    tools = [t.to_mcp() for t in load_phone_catalog()][:30]
    data = {"response": {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}, "result": {"tools": tools},
            "list": tools, "pages": [{"jsonrpc": "2.0", "result": {"tools": tools[:10], "nextCursor": "a"}},
                                     {"jsonrpc": "2.0", "result": {"tools": tools[10:]}}]}[shape]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data, indent=1))
    monkeypatch.setattr(files, "LAZY_JSON_AT", 0)
    lazy = load_catalog(path)
    monkeypatch.setattr(files, "LAZY_JSON_AT", 10**12)
    whole = load_catalog(path)
    assert list(lazy) == list(whole) and lazy.ids == whole.ids


@pytest.mark.parametrize("broken", ['{"tools": [%s, {"name": 5}]}', '{"tools": [%s, %s]}', '{"tools": [%s,]}',
                                    '{"result": {"tools": [%s]}, "error": {"message": "no"}}',
                                    '{"tools": [%s], "nextCursor": 7}', '[%s, {"jsonrpc": "2.0"}]', '{"tools": [%s]} ]'])
def test_a_catalog_decoded_one_tool_at_a_time_fails_as_json_loads_does(small_pack, tmp_path, monkeypatch, broken):
    tool = json.dumps(load_phone_catalog()[0].to_mcp())
    path = tmp_path / "c.json"
    path.write_text(broken.replace("%s", tool))
    errors = []
    for at in (0, 10**12):
        monkeypatch.setattr(files, "LAZY_JSON_AT", at)
        with pytest.raises(CatalogError) as err:
            load_catalog(path)
        errors.append(str(err.value))
    assert errors[0] == errors[1]


def test_the_lazy_decoder_agrees_with_json_loads_on_fuzzed_documents():
    st = hypothesis.strategies
    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["tools", "result", "jsonrpc", "name", "x"]), inner, max_size=4), max_leaves=20)
    cut = st.integers(min_value=0, max_value=10**6)

    @hypothesis.settings(max_examples=400, derandomize=True, deadline=None)
    @hypothesis.given(values, cut, st.sampled_from(["", " ", ",", "]", "}", "x"]), st.booleans())
    def check(value, at, junk, indent):
        text = json.dumps(value, indent=1 if indent else None)
        for t in (text, text[:at % (len(text) + 1)] + junk + text[at % (len(text) + 1):]):
            test_the_lazy_decoder_gives_json_loads_values_or_leaves_the_text_to_it(t)

    check()

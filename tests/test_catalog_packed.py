"""A large catalog holds its tools packed (runtime/catalog.py PACK_AT): the same tools, ids, names,
copies and errors as the Tool objects it replaces."""
from __future__ import annotations

import json

import pytest

from magicselector import catalog as cat
from magicselector.catalog import Catalog, Tool, load_catalog, load_phone_catalog
from magicselector.errors import CatalogError, UnknownToolError


@pytest.fixture
def small_pack(monkeypatch):
    monkeypatch.setattr(cat, "PACK_AT", 5)


def test_a_packed_catalog_gives_back_the_same_tools(small_pack):
    tools = list(load_phone_catalog())[:40]
    packed = Catalog(tools, source="x")
    assert isinstance(packed._tools, cat._PackedTools)
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
    monkeypatch.setattr(cat, "PACK_AT", 10**9)
    plain = load_catalog(path)
    assert isinstance(packed._tools, cat._PackedTools) and not isinstance(plain._tools, cat._PackedTools)
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
        monkeypatch.setattr(cat, "PACK_AT", 10**9)
        with pytest.raises(CatalogError) as plain_err:
            load_catalog(path)
        monkeypatch.setattr(cat, "PACK_AT", 5)
        assert str(packed_err.value) == str(plain_err.value)

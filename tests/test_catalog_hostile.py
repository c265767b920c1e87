"""Hostile catalogs and tools (issue 27.3, 26.3, 26.6): refused with a MagicSelectorError naming the
tool and field, never a raw exception; server names sanitized and namespaces reversible."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magicselector import CatalogError, InputError, Tool, load_catalog
from magicselector.catalog import (MAX_NAME_CHARS, check_json_schema, check_tool, load_catalogs, mcp_catalog,
                                   namespaced, sanitize_server_name)


def split_name(name, namespace="server"):
    """(server, tool) of a namespaced name: after the ``mcp__`` prefix, the first ``__`` separates them."""
    rest = name.removeprefix("mcp__") if namespace == "mcp" else name
    server, _, tool = rest.partition("__")
    return server, tool


def _allof(n):
    s = {"type": "object"}
    for _ in range(n):
        s = {"allOf": [s]}
    s["type"] = "object"
    return s


def _props(n):
    s = {"type": "object"}
    for _ in range(n):
        s = {"type": "object", "properties": {"a": s}}
    return s


HOSTILE_SCHEMAS = {
    "allOf 82 deep": _allof(82),
    "properties 98 deep": _props(98),
    "pattern of 1,000 nested groups": {"type": "object", "properties": {
        "a": {"type": "string", "pattern": "(" * 1000 + ")" * 1000}}},
    "$schema null": {"$schema": None, "type": "object"},
    "$schema a number": {"$schema": 5, "type": "object"},
    "bad pattern": {"type": "object", "properties": {"a": {"type": "string", "pattern": "["}}},
}


@pytest.mark.parametrize("label", list(HOSTILE_SCHEMAS))
def test_hostile_schemas_are_catalog_errors_naming_the_tool(label):
    with pytest.raises(CatalogError) as err:
        mcp_catalog({"srv": {"tools": [{"name": "deep_tool", "inputSchema": HOSTILE_SCHEMAS[label]}]}})
    assert "'deep_tool'" in str(err.value) and "server 'srv'" in str(err.value)


def test_schemas_at_the_depth_limit_still_check_without_recursion_errors(monkeypatch):
    ok = _props(31)  # 62 levels of objects: inside MAX_TOOL_DEPTH
    check_json_schema(ok, "t")
    bad = _props(31)
    inner = bad
    while "properties" in inner:
        inner = inner["properties"]["a"]
    inner["type"] = "strng"
    import magicselector.catalog.schema as cat
    for rs in (True, False):  # with jsonschema-rs, and with jsonschema alone
        if not rs:
            monkeypatch.setattr(cat, "_rs_meta_valid", lambda schema: None)
        with pytest.raises(CatalogError, match="not a valid JSON Schema"):
            check_json_schema(bad, "t")


def test_the_cli_exits_2_on_a_hostile_schema(bundle_dir, tmp_path, capsys):
    from magicselector.cli.main import main

    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"tools": [{"name": "t", "inputSchema": _allof(82)}]}))
    rc = main(["select", "set an alarm", "--bundle", str(bundle_dir), "--catalog", str(path)])
    assert rc == 2
    assert "nested more than" in capsys.readouterr().err


@pytest.mark.parametrize("tool, field", [
    ({"name": "", "description": "x"}, "no 'name'"),
    ({"name": "bad\x07name", "description": "x"}, "characters"),
    ({"name": "x" * (MAX_NAME_CHARS + 1), "description": "x"}, "at most 128"),
    ({"name": "n" * 10_000_000, "description": "x"}, "at most 128"),
    ({"name": "ok", "description": "d" * 70_000}, "'description'"),
    ({"name": "ok", "description": "x", "inputSchema": []}, "must be a JSON object"),
    ({"name": "ok", "description": "x", "inputSchema": {"type": "object", "properties": {"a": {"type": "strng"}}}},
     "not a valid JSON Schema"),
    ({"name": "ok", "description": "x", "execution": "yes"}, "'execution' must be a JSON object"),
    (Tool(id="", name="a", description="x"), "'id'"),
    (Tool(id="a", name="a\nb", description="x"), "characters"),
    (Tool(id="a", name="a", description="x", parameters=[1, 2]), "parameters must be a JSON object"),
    (Tool(id="a", name="a", description="x", parameters="{}"), "parameters must be a JSON object"),
    (Tool(id="a", name="a", description="x", parameters={"type": "object", "required": "a"}), "not a valid JSON"),
    (Tool(id="a", name="a", description="x", parameters={"type": "object", "properties": {1: {}}}), "not a string"),
    (Tool(id="a", name="a", description=5), "description must be a string"),
    ("send_sms", "a Tool or a JSON object"),
])
def test_check_tool_refuses_with_the_field_named(tool, field):
    with pytest.raises(InputError, match=field):
        check_tool(tool)


def test_add_tool_takes_mcp_and_benchmark_dicts_and_refuses_bad_tools(selector):
    s = selector.with_catalog(selector.catalog)  # its own catalog state: the session's stays as it is
    n = len(s.catalog)
    s.add_tool({"name": "open_garage", "description": "Open the garage door.",
                "inputSchema": {"type": "object", "properties": {"door": {"type": "string"}}},
                "execution": {"taskSupport": "optional"}})
    assert s.catalog.get("open_garage").to_mcp()["execution"] == {"taskSupport": "optional"}
    s.add_tool({"id": "close-garage", "name": "close_garage", "description": "Close it.",
                "parameters": {"type": "dict", "properties": {}}})
    assert len(s.catalog) == n + 2
    with pytest.raises(InputError, match="already tool 'open_garage'"):
        s.add_tool(Tool(id="other", name="open_garage", description="x"))
    s.add_tool(Tool(id="open_garage", name="open_garage", description="Replaced."))  # same id: a replacement
    for bad in ({"name": "x" * 10_000_000}, {"name": ""}, Tool(id="z", name="z", description="x", parameters=[]), 42):
        with pytest.raises(InputError):
            s.add_tool(bad)
    for bad_id in ([], None, 3, "", {"a": 1}):
        with pytest.raises(InputError):
            s.remove_tool(bad_id)
    assert len(s.catalog) == n + 2
    assert all(isinstance(d, dict) for d in s.schemas(s.select("open the garage")))


# -- server names and namespaces -----------------------------------------------------------------
TOOLS = {"tools": [{"name": "b", "description": "B.", "inputSchema": {"type": "object"}}]}


def test_server_names_are_sanitized_as_hosts_do_and_the_split_is_exact():
    assert sanitize_server_name("My Server") == "My_Server"
    assert sanitize_server_name("my.server") == "my_server"
    cat = mcp_catalog({"a_": TOOLS})
    assert cat.ids == ["a__b"] and split_name("a__b") == ("a", "b")  # never a___b split as (a, _b)
    assert cat[0].server == "a_"  # the name as given, to route the call back
    assert mcp_catalog({"My Server": TOOLS}).ids == ["My_Server__b"]
    with pytest.raises(CatalogError, match="both name their tools 'my_server'"):
        mcp_catalog({"my server": TOOLS, "my.server": TOOLS})
    with pytest.raises(CatalogError, match="no letter"):
        mcp_catalog({"...": TOOLS})


def test_the_mcp_namespace_gives_host_names(tmp_path):
    cat = mcp_catalog({"my.server": TOOLS}, namespace="mcp")
    assert cat.ids == ["mcp__my_server__b"]
    assert split_name("mcp__my_server__b", namespace="mcp") == ("my_server", "b")
    path = tmp_path / "fs.json"
    path.write_text(json.dumps(TOOLS))
    assert load_catalogs([path], namespace="mcp").ids == ["mcp__fs__b"]
    assert load_catalogs([path]).ids == ["b"]  # the default is unchanged
    assert load_catalogs([f"My Files={path}"], namespace="mcp").ids == ["mcp__My_Files__b"]
    with pytest.raises(InputError, match="namespace"):
        load_catalogs([path], namespace="claude")


server_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=30)
tool_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cc",)), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(server=server_names, tool=tool_names, ns=st.sampled_from(["server", "mcp"]))
def test_namespacing_round_trips(server, tool, ns):
    try:
        clean = sanitize_server_name(server)
    except CatalogError:
        return
    assert sanitize_server_name(clean) == clean
    assert split_name(namespaced(clean, tool, ns), ns) == (clean, tool)


# -- unknown MCP fields pass through ------------------------------------------------------------
def test_unknown_mcp_fields_survive_to_mcp_the_jsonl_and_a_bundle_round_trip(tmp_path):
    tool = {"name": "get_time", "title": "Time", "description": "Current time.",
            "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"},
            "_meta": {"vendor/x": 1}, "icons": [{"src": "https://e.x/i.png"}], "annotations": {"readOnlyHint": True}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"tools": [tool]}))
    cat = load_catalog(path)
    assert cat[0].to_mcp() == tool
    cat.write_jsonl(tmp_path / "tools.jsonl")
    assert load_catalog(tmp_path / "tools.jsonl")[0].to_mcp() == tool
    from magicselector.catalog import Catalog
    from magicselector.sections import read_catalog

    class B:  # the bundle reader's view of a folder holding the catalog file
        def file(self, rel):
            return tmp_path / rel

        def read(self, rel, verify=True):
            return (tmp_path / rel).read_bytes()

    assert read_catalog(B(), "tools.jsonl")[0].to_mcp() == tool
    assert isinstance(cat, Catalog)

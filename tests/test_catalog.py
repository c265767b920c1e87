import json

import pytest

from magicselector import CatalogError, load_catalog, load_phone_catalog, tool_text
from magicselector.catalog import check_json_schema, load_catalogs, mcp_catalog


def test_shipped_phone_catalog_is_large_and_varied():
    catalog = load_phone_catalog()
    assert len(catalog) >= 200
    domains = {t.domain for t in catalog}
    assert len(domains) >= 20
    names = {t.name for t in catalog}
    # Families of easily confused tools are the point of the product.
    for family in (["set_alarm", "start_timer", "create_reminder", "create_calendar_event"],
                   ["bluetooth_toggle", "bluetooth_connect_device"],
                   ["send_sms", "send_chat_message", "send_email"]):
        assert set(family) <= names, family
    for tool in catalog:
        assert tool.description and len(tool.description) >= 20, tool.name
        assert tool.parameters.get("type") == "object", tool.name


def test_tool_text_is_readable():
    tool = load_phone_catalog().get("set_alarm")
    text = tool_text(tool)
    assert text.startswith("set alarm: ") and "(parameters:" in text


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


@pytest.mark.parametrize("entry, message", [
    ({"description": "no name"}, "no 'name'"),
    ({"name": "", "description": "x"}, "no 'name'"),
    ({"name": "bad\nname", "description": "x"}, "characters"),
    ({"name": "x" * 200, "description": "x"}, "characters"),
    ({"name": "a", "description": 5}, "'description' must be a string"),
    ({"name": "a", "description": "x", "inputSchema": []}, "must be a JSON object"),
    ({"name": "a", "description": "x", "inputSchema": {"properties": []}}, "'properties' must be an object"),
    ("just a string", "must be a JSON object"),
])
def test_malformed_entries_are_named(tmp_path, entry, message):
    path = write(tmp_path, "cat.json", [entry])
    with pytest.raises(CatalogError, match=message) as err:
        load_catalog(path)
    assert "cat.json[0]" in str(err.value)


def test_duplicate_names_and_bad_files(tmp_path):
    dup = [{"name": "a", "description": "x"}, {"name": "a", "description": "y"}]
    with pytest.raises(CatalogError, match="duplicate tool"):
        load_catalog(write(tmp_path, "dup.json", dup))
    with pytest.raises(CatalogError, match="not valid JSON"):
        load_catalog(write(tmp_path, "broken.json", "{nope"))
    with pytest.raises(CatalogError, match="no tools"):
        load_catalog(write(tmp_path, "empty.json", []))
    with pytest.raises(CatalogError, match="no such"):
        load_catalog(tmp_path / "missing.json")


def test_jsonl_catalog_allows_repeated_names_with_distinct_ids(tmp_path):
    rows = [{"id": "f-1", "name": "f", "description": "one"}, {"id": "f-2", "name": "f", "description": "two"}]
    path = write(tmp_path, "tools.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    cat = load_catalog(path)
    assert cat.ids == ["f-1", "f-2"]
    rows.append({"id": "f-1", "name": "g", "description": "three"})
    write(tmp_path, "tools.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(CatalogError, match="duplicate tool id"):
        load_catalog(path)


# -- MCP tools/list results ---------------------------------------------------------------------
GITHUB_TOOLS = [
    {"name": "create_issue", "title": "Create issue", "description": "Open a new issue in a repository.",
     "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}, "title": {"type": "string"}},
                     "required": ["repo", "title"]},
     "outputSchema": {"type": "object", "properties": {"number": {"type": "integer"}}},
     "annotations": {"readOnlyHint": False, "destructiveHint": False}},
    {"name": "list_issues", "description": "List the open issues of a repository.",
     "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}}},
]


def tools_list_response(tools, cursor=None, rpc_id=1):
    result = {"tools": tools}
    if cursor:
        result["nextCursor"] = cursor
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


def test_a_tools_list_response_keeps_title_annotations_and_output_schema(tmp_path):
    cat = load_catalog(write(tmp_path, "github.json", tools_list_response(GITHUB_TOOLS)))
    assert cat.ids == ["create_issue", "list_issues"]
    tool = cat.get("create_issue")
    assert tool.to_mcp() == GITHUB_TOOLS[0]  # the full MCP definition comes back out, key for key
    assert cat.get("list_issues").to_mcp() == GITHUB_TOOLS[1]  # no empty optional fields added
    # the bare result, and the pages of a paginated listing, read the same
    assert load_catalog(write(tmp_path, "result.json", {"tools": GITHUB_TOOLS})).ids == cat.ids
    pages = [tools_list_response(GITHUB_TOOLS[:1], cursor="p2"), tools_list_response(GITHUB_TOOLS[1:], rpc_id=2)]
    assert load_catalog(write(tmp_path, "pages.json", pages)).ids == cat.ids


def test_mcp_fields_survive_the_jsonl_round_trip(tmp_path):
    cat = load_catalog(write(tmp_path, "github.json", tools_list_response(GITHUB_TOOLS)))
    cat.write_jsonl(tmp_path / "tools.jsonl")
    again = load_catalog(tmp_path / "tools.jsonl")
    assert [t.to_mcp() for t in again] == [t.to_mcp() for t in cat]


@pytest.mark.parametrize("schema, message", [
    ({"type": "object", "properties": {"repo": {"type": "strng"}}}, r"not a valid JSON Schema.*properties/repo/type"),
    ({"type": "object", "required": "repo"}, r"not a valid JSON Schema.*/required"),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": "one"}}}, "not a valid JSON Schema"),
    ({"type": "array", "items": {"type": "string"}}, "\"type\": \"object\""),
    ({"properties": {"repo": {"type": "string"}}}, "\"type\": \"object\""),
    ({"$schema": "https://example.com/my-schema", "type": "object"}, "unknown \"\\$schema\""),
])
def test_a_broken_input_schema_names_the_server_and_tool(tmp_path, schema, message):
    tools = [GITHUB_TOOLS[1], {**GITHUB_TOOLS[0], "inputSchema": schema}]
    with pytest.raises(CatalogError, match=message) as err:
        mcp_catalog({"github": tools_list_response(tools)})
    assert "server 'github'" in str(err.value) and "'create_issue'" in str(err.value) and "[1]" in str(err.value)


def test_other_json_schema_drafts_are_checked_against_their_own_meta_schema(tmp_path):
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"a": {"type": "string"}}, "dependencies": {"a": ["b"]}}
    assert mcp_catalog({"s": {"tools": [{"name": "t", "inputSchema": draft7}]}}).get("s__t").parameters == draft7
    with pytest.raises(CatalogError, match="not a valid JSON Schema"):
        mcp_catalog({"s": {"tools": [{"name": "t", "inputSchema": {**draft7, "dependencies": {"a": 5}}}]}})


def test_bad_mcp_documents_are_named(tmp_path):
    with pytest.raises(CatalogError, match="answered tools/list with an error: 'Method not found'"):
        load_catalog(write(tmp_path, "err.json", {"jsonrpc": "2.0", "id": 1,
                                                  "error": {"code": -32601, "message": "Method not found"}}))
    with pytest.raises(CatalogError, match="without a tools/list 'result'"):
        load_catalog(write(tmp_path, "nores.json", {"jsonrpc": "2.0", "id": 1, "result": {"resources": []}}))
    with pytest.raises(CatalogError, match="'annotations' must be a JSON object"):
        load_catalog(write(tmp_path, "ann.json", {"tools": [{**GITHUB_TOOLS[1], "annotations": ["readOnly"]}]}))
    with pytest.raises(CatalogError, match="'title' must be a string"):
        load_catalog(write(tmp_path, "title.json", {"tools": [{**GITHUB_TOOLS[1], "title": 3}]}))
    with pytest.raises(CatalogError, match="outputSchema"):
        load_catalog(write(tmp_path, "out.json", {"tools": [{**GITHUB_TOOLS[1], "outputSchema": {"type": "nope"}}]}))


def test_several_servers_get_a_stable_namespace(tmp_path):
    slack = [{"name": "send_message", "description": "Post a message to a channel.",
              "inputSchema": {"type": "object", "properties": {"channel": {"type": "string"}}}},
             {"name": "list_issues", "description": "Slack also has a tool of this name.",
              "inputSchema": {"type": "object"}}]
    both = mcp_catalog({"github": tools_list_response(GITHUB_TOOLS), "slack": {"tools": slack}})
    assert both.ids == ["github__create_issue", "github__list_issues", "slack__send_message", "slack__list_issues"]
    tool = both.get("slack__list_issues")
    assert tool.server == "slack" and tool.name == "slack__list_issues"
    assert both.get("github__create_issue").to_mcp() == {**GITHUB_TOOLS[0], "name": "github__create_issue"}
    # a tool's name depends on its server and itself only, not on the other servers loaded
    alone = mcp_catalog({"slack": {"tools": slack}})
    assert alone.get("slack__send_message").to_mcp() == both.get("slack__send_message").to_mcp()
    # a server name holding the separator is sanitized as hosts do, never split wrongly
    assert mcp_catalog({"git__hub": {"tools": slack}}).ids[0] == "git_hub__send_message"


def test_load_catalogs_from_files(tmp_path):
    gh = write(tmp_path, "github.tools.json", tools_list_response(GITHUB_TOOLS))
    sl = write(tmp_path, "slack.json", {"tools": [{"name": "send_message", "description": "Post.",
                                                   "inputSchema": {"type": "object"}}]})
    assert load_catalogs([gh]).ids == ["create_issue", "list_issues"]  # one catalog: used as it is
    assert load_catalogs([f"gh={gh}"]).ids == ["gh__create_issue", "gh__list_issues"]  # named: namespaced
    both = load_catalogs([gh, sl])
    assert both.ids == ["github__create_issue", "github__list_issues", "slack__send_message"]
    with pytest.raises(CatalogError, match="server name 'github' is also"):
        load_catalogs([gh, f"github={sl}"])
    with pytest.raises(CatalogError, match="no such catalog"):
        load_catalogs([gh, tmp_path / "missing.json"])


def test_the_shipped_catalog_passes_the_mcp_schema_check():
    for tool in load_phone_catalog():
        check_json_schema(tool.parameters, tool.name)

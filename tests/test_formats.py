"""Tool definitions out (MCP, OpenAI Chat Completions and Responses, Anthropic) and the client side
of the hosted tool search, end to end against recorded request/response fixtures."""
import copy
import json
import re
from pathlib import Path

import pytest

from conftest import needs
from magicselector import CatalogError, InputError, Tool, load_catalog, load_phone_catalog
from magicselector.formats import FORMATS, catalog_name, tool_definition, tool_definitions
from magicselector.tool_search import ToolSearch, next_openai_input

FIXTURES = Path(__file__).parent / "fixtures" / "tool_search"

SCHEMA = {"type": "object", "properties": {"time": {"type": "string"}}, "required": ["time"]}
ALARM = Tool(id="set_alarm", name="set_alarm", description="Set an alarm.", parameters=SCHEMA, title="Set alarm",
             annotations={"idempotentHint": False}, output_schema={"type": "object"})


def test_each_format_has_its_published_shape():
    assert tool_definition(ALARM, "mcp") == {"name": "set_alarm", "title": "Set alarm", "description": "Set an alarm.",
                                             "inputSchema": SCHEMA, "outputSchema": {"type": "object"},
                                             "annotations": {"idempotentHint": False}}
    assert tool_definition(ALARM, "openai") == {"type": "function", "function": {
        "name": "set_alarm", "description": "Set an alarm.", "parameters": SCHEMA}}
    assert tool_definition(ALARM, "openai-responses") == {"type": "function", "name": "set_alarm",
                                                          "description": "Set an alarm.", "parameters": SCHEMA,
                                                          "strict": False}
    assert tool_definition(ALARM, "anthropic") == {"name": "set_alarm", "description": "Set an alarm.",
                                                   "input_schema": SCHEMA}
    bare = Tool(id="ping", name="ping", description="Ping.")  # no parameters: still an object schema
    assert tool_definition(bare, "anthropic")["input_schema"] == {"type": "object", "properties": {}}
    assert tool_definition(bare, "mcp")["inputSchema"] == {"type": "object"}


def test_names_a_format_cannot_carry_go_out_mapped_not_refused():
    dotted = Tool(id="calendar.list", name="calendar.list", description="List events.")
    assert tool_definition(dotted, "mcp")["name"] == "calendar.list"  # MCP allows dots
    sent = tool_definition(dotted, "openai")["function"]["name"]
    assert re.match(r"^calendar_list_[0-9a-f]{8}$", sent)
    assert tool_definition(dotted, "openai-responses")["name"] == tool_definition(dotted, "anthropic")["name"] == sent
    assert catalog_name(sent, [dotted, ALARM]) == "calendar.list"
    long = Tool(id="x", name="s__" + "a" * 70, description="")  # 73 characters: over the APIs' 64
    for fmt in ("openai-responses", "anthropic"):
        name = tool_definition(long, fmt)["name"]
        assert len(name) == 64 and catalog_name(name, [long]) == long.name
    with pytest.raises(InputError, match="format must be one of"):
        tool_definitions([ALARM], "gemini")


def sdk_types():
    """The SDKs' published types of one tool definition per format (the dev extra)."""
    pytest.importorskip("openai", reason=needs("dev"))
    pytest.importorskip("anthropic", reason=needs("dev"))
    from anthropic.types import ToolParam
    from openai.types.chat import ChatCompletionFunctionToolParam
    from openai.types.responses import FunctionToolParam
    return {"openai": ChatCompletionFunctionToolParam, "openai-responses": FunctionToolParam, "anthropic": ToolParam}


def check_against_sdk(definition, kind):
    """``definition`` validates as the TypedDict ``kind`` and carries no key the type lacks (pydantic
    ignores extra keys of a TypedDict; the APIs refuse them)."""
    from pydantic import TypeAdapter

    TypeAdapter(kind).validate_python(definition)
    assert kind.__required_keys__ <= set(definition) <= kind.__required_keys__ | kind.__optional_keys__, definition
    if "function" in definition:  # Chat Completions: the FunctionDefinition inside
        from openai.types.shared_params import FunctionDefinition
        check_against_sdk(definition["function"], FunctionDefinition)


MCP_TOOLS = {"jsonrpc": "2.0", "id": 2, "result": {"tools": [
    {"name": "read_text_file", "description": "Read a file as text.", "inputSchema": {
        "type": "object", "properties": {"path": {"type": "string"}, "head": {"type": "number"}},
        "required": ["path"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}},
    {"name": "files.read", "description": "Read a file (dotted, as SEP-986 allows).",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "admin.tools.list", "description": "List the admin tools.", "inputSchema": {"type": "object"}},
    {"name": "get_current_time", "title": "Current time", "description": "The time in a timezone.",
     "inputSchema": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
     "annotations": {"readOnlyHint": True}, "outputSchema": {"type": "object"}},
    {"name": "git_log", "description": "Show the commit log.", "inputSchema": {
        "type": "object", "properties": {"max_count": {"type": "integer", "default": 10}}}},
    {"name": "srv__" + "very_long_tool_name_" * 6, "description": "A 125-character name (MCP allows 128).",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "Create Event", "description": "An older server's name with a space.",
     "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}}},
]}}


def test_every_format_validates_against_the_sdk_types_over_phone_and_mcp_catalogs(tmp_path):
    kinds = sdk_types()
    (tmp_path / "tools.json").write_text(json.dumps(MCP_TOOLS))
    for catalog in (load_phone_catalog(), load_catalog(tmp_path / "tools.json")):
        assert len(catalog) >= 7
        for fmt, kind in kinds.items():
            defs = tool_definitions(catalog, fmt)
            for d in defs:
                check_against_sdk(d, kind)
            names = [d["function"]["name"] if fmt == "openai" else d["name"] for d in defs]
            assert len(set(names)) == len(names)
            assert [catalog_name(n, catalog) for n in names] == [t.name for t in catalog]
            if fmt == "anthropic":
                assert all(d["input_schema"]["type"] == "object" for d in defs)
            if fmt == "openai-responses":  # Required[Optional[bool]]; false: MCP schemas are not strict-mode schemas
                assert all(d["strict"] is False for d in defs)


@pytest.mark.slow
def test_a_dotted_mcp_catalog_selects_in_every_format(selector, tmp_path):
    """Issue 26: ``tool 'ws__files.read' cannot be sent as a openai tool`` broke the whole selection."""
    (tmp_path / "tools.json").write_text(json.dumps(MCP_TOOLS))
    mcp = selector.with_catalog(load_catalog(tmp_path / "tools.json"))
    sel = mcp.select("read the file notes.txt")
    assert "files.read" in sel.ids or "read_text_file" in sel.ids
    for fmt in FORMATS:
        defs = mcp.schemas(sel, format=fmt)
        names = [d["function"]["name"] if fmt == "openai" else d["name"] for d in defs]
        assert [catalog_name(n, mcp.catalog) for n in names] == [t.name for t in sel.tools]
        if fmt != "mcp":
            assert all(re.match(r"^[a-zA-Z0-9_-]{1,64}$", n) for n in names)


@pytest.mark.slow
def test_selector_schemas_in_every_format(selector):
    sel = selector.select("wake me up at 7 tomorrow")
    assert selector.schemas(sel) == selector.schemas(sel, format="mcp")
    for fmt in FORMATS:
        defs = selector.schemas(sel, format=fmt)
        names = [d["function"]["name"] if fmt == "openai" else d["name"] for d in defs]
        assert names == [t.name for t in sel.tools]
    assert "set_alarm" in [d["name"] for d in selector.schemas(sel, format="anthropic")]


def load(name):
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_anthropic_custom_tool_search_end_to_end(selector):
    request, response = load("anthropic_request"), load("anthropic_response")
    deferred = {t["name"] for t in request["tools"] if t.get("defer_loading")}
    assert len(deferred) >= 200 and "search_tools" not in deferred
    search = ToolSearch(selector)
    answer = search.answer_anthropic(request, copy.deepcopy(response))
    # the next request: the conversation, the model's turn, and our tool_result (the documented
    # custom tool search: tool_reference blocks inside a standard tool_result)
    follow_up = {**request, "messages": [*request["messages"], {"role": "assistant", "content": response["content"]},
                                         answer]}
    assert answer["role"] == "user" and len(answer["content"]) == 1
    result = answer["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == response["content"][1]["id"]
    refs = result["content"]
    assert refs and all(set(r) == {"type", "tool_name"} and r["type"] == "tool_reference" for r in refs)
    names = [r["tool_name"] for r in refs]
    # the API refuses a reference without a deferred definition in the request's tools (HTTP 400)
    assert set(names) <= deferred and len(names) == len(set(names))
    assert "send_sms" in names
    assert len(names) < 20  # a handful, not the catalog
    assert follow_up["messages"][-1] is answer
    # the same deferred catalog is indexed once
    assert search.selector_for(search.anthropic_catalog(request)) is search.selector_for(search.anthropic_catalog(request))
    capped = ToolSearch(selector, max_tools=2).answer_anthropic(request, response)["content"][0]["content"]
    assert [r["tool_name"] for r in capped] == names[:2]


@pytest.mark.slow
def test_openai_client_executed_tool_search_end_to_end(selector):
    request, response = load("openai_request"), load("openai_response")
    original = copy.deepcopy(request)
    outputs = ToolSearch(selector).answer_openai(request, response)
    assert request == original  # the recorded request is not touched
    assert len(outputs) == 1
    out = outputs[0]
    call = response["output"][0]
    assert {k: out[k] for k in ("type", "call_id", "execution", "status")} == {
        "type": "tool_search_output", "call_id": call["call_id"], "execution": "client", "status": "completed"}
    # every loaded tool is the request's own deferred definition; namespaced ones come in their namespace
    top = {t["name"]: t for t in request["tools"] if t.get("type") == "function"}
    spaces = {t["name"]: t for t in request["tools"] if t.get("type") == "namespace"}
    loaded = []
    for item in out["tools"]:
        if item["type"] == "namespace":
            ns = spaces[item["name"]]
            assert item["description"] == ns["description"] and item["tools"]
            for member in item["tools"]:
                assert member in ns["tools"] and member["defer_loading"] is True
                loaded.append(member["name"])
        else:
            assert item == top[item["name"]]
            loaded.append(item["name"])
    assert "set_alarm" in loaded and len(loaded) < 20
    nxt = next_openai_input(request, response, outputs)
    assert nxt[: len(request["input"])] == request["input"] and nxt[-2] == call and nxt[-1] is out


@pytest.mark.slow
def test_tool_search_errors_are_clear(selector):
    search = ToolSearch(selector)
    request, response = load("anthropic_request"), load("anthropic_response")
    no_deferred = {**request, "tools": [t for t in request["tools"] if not t.get("defer_loading")]}
    with pytest.raises(InputError, match="defer_loading"):
        search.answer_anthropic(no_deferred, response)
    with pytest.raises(InputError, match="no tool_use of the search tool 'search_tools'"):
        search.answer_anthropic(request, {**response, "content": response["content"][:1]})
    blank = copy.deepcopy(response)
    blank["content"][1]["input"] = {"query": "  "}
    with pytest.raises(InputError, match="no query text"):
        search.answer_anthropic(request, blank)
    oa_request, oa_response = load("openai_request"), load("openai_response")
    with pytest.raises(InputError, match="execution"):
        search.answer_openai({**oa_request, "tools": oa_request["tools"][1:]}, oa_response)
    with pytest.raises(InputError, match="no client-executed tool_search_call"):
        search.answer_openai(oa_request, {**oa_response, "output": []})
    broken = copy.deepcopy(oa_request)
    broken["tools"][-1]["parameters"] = {"type": "object", "properties": {"x": {"type": "strng"}}}
    with pytest.raises(CatalogError, match=r"request.tools\[\d+\].*not a valid JSON Schema"):
        search.answer_openai(broken, oa_response)


@pytest.mark.slow
def test_select_with_mcp_catalogs_and_a_format_on_the_command_line(bundle_dir, tmp_path, capsys):
    from magicselector.cli.main import main

    github = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "create_issue", "description": "Open a new issue in a GitHub repository.",
         "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}}},
        {"name": "merge_pull_request", "description": "Merge an open pull request.",
         "inputSchema": {"type": "object", "properties": {"number": {"type": "integer"}}}}]}}
    slack = {"tools": [{"name": "send_message", "description": "Post a message to a Slack channel.",
                        "inputSchema": {"type": "object", "properties": {"channel": {"type": "string"}}}}]}
    (tmp_path / "github.json").write_text(json.dumps(github))
    (tmp_path / "slack.json").write_text(json.dumps(slack))
    history = tmp_path / "request.json"  # a recorded chat request works as the history file
    history.write_text(json.dumps({"messages": [{"role": "user", "content": "the login page is broken"}]}))
    code = main(["select", "file a bug about it", "--bundle", str(bundle_dir), "--history-file", str(history),
                 "--catalog", str(tmp_path / "github.json"), str(tmp_path / "slack.json"), "--format", "openai"])
    assert code == 0
    defs = json.loads(capsys.readouterr().out)
    assert defs[0] == {"type": "function", "function": {
        "name": "github__create_issue", "description": "Open a new issue in a GitHub repository.",
        "parameters": {"type": "object", "properties": {"title": {"type": "string"}}}}}
    broken = {"tools": [{"name": "x", "inputSchema": {"type": "object", "properties": {"a": {"type": 5}}}}]}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert main(["select", "hi", "--bundle", str(bundle_dir), "--catalog", str(tmp_path / "broken.json")]) == 2
    assert "broken.json[0]: tool 'x': inputSchema: not a valid JSON Schema" in capsys.readouterr().err

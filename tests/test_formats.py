"""Tool definitions out (MCP, OpenAI Chat Completions and Responses, Anthropic) and the client side
of the hosted tool search, end to end against recorded request/response fixtures."""
import copy
import json
from pathlib import Path

import pytest

from magicselector import CatalogError, InputError, Tool
from magicselector.formats import FORMATS, tool_definition, tool_definitions
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
                                                          "description": "Set an alarm.", "parameters": SCHEMA}
    assert tool_definition(ALARM, "anthropic") == {"name": "set_alarm", "description": "Set an alarm.",
                                                   "input_schema": SCHEMA}
    bare = Tool(id="ping", name="ping", description="Ping.")  # no parameters: still an object schema
    assert tool_definition(bare, "anthropic")["input_schema"] == {"type": "object", "properties": {}}
    assert tool_definition(bare, "mcp")["inputSchema"] == {"type": "object"}


def test_names_a_format_cannot_carry_are_refused_by_name():
    dotted = Tool(id="calendar.list", name="calendar.list", description="List events.")
    assert tool_definition(dotted, "mcp")["name"] == "calendar.list"  # MCP allows dots
    for fmt in ("openai", "openai-responses", "anthropic"):
        with pytest.raises(CatalogError, match="'calendar.list' cannot be sent as a"):
            tool_definition(dotted, fmt)
    long = Tool(id="x", name="s__" + "a" * 70, description="")
    assert tool_definition(long, "anthropic")["name"] == long.name
    with pytest.raises(CatalogError, match="1-64"):
        tool_definition(long, "openai")
    with pytest.raises(InputError, match="format must be one of"):
        tool_definitions([ALARM], "gemini")


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

"""The tool-search helpers with the SDKs' own objects: an Anthropic ``Message`` and an OpenAI
``Response`` (built offline from the recorded fixtures by model_validate) answer as their JSON does,
the answers validate as the SDKs' param types, and a catalog sent through ``formats`` maps back
(issue 26.1, 26.3)."""
import copy
import json
from pathlib import Path

import pytest

from conftest import needs
from magicselector import InputError, load_catalog
from magicselector.formats import catalog_name, tool_definitions
from magicselector.tool_search import ANTHROPIC_SEARCH_TOOL, ToolSearch, next_openai_input

pytest.importorskip("openai", reason=needs("dev"))
pytest.importorskip("anthropic", reason=needs("dev"))

from anthropic.types import Message, ToolResultBlockParam  # noqa: E402
from openai.types.chat import ChatCompletionMessage  # noqa: E402
from openai.types.responses import Response, ResponseToolSearchOutputItemParamParam  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "tool_search"
pytestmark = pytest.mark.slow  # a real Selector indexes the requests' deferred catalogs


def load(name):
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def sdk_response(data: dict) -> Response:
    return Response.model_validate({**{k: v for k, v in data.items() if k != "usage"},
                                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": []})


def test_answer_anthropic_takes_the_sdk_message(selector):
    request, response = load("anthropic_request"), load("anthropic_response")
    search = ToolSearch(selector)
    message = Message.model_validate(response)
    answer = search.answer_anthropic(request, message)
    assert answer == search.answer_anthropic(request, copy.deepcopy(response))
    TypeAdapter(ToolResultBlockParam).validate_python(answer["content"][0])
    # the conversation carried the SDK's way: the model's blocks as they came back
    carried = {**request, "messages": [*request["messages"], {"role": "assistant", "content": message.content}, answer]}
    again = Message.model_validate({**response, "content": [response["content"][1]]})
    assert search.answer_anthropic(carried, again)["content"][0]["tool_use_id"] == again.content[0].id
    history = [*request["messages"], {"role": "assistant", "content": message.content}]
    assert search.anthropic_result(request, message.content[1], history) == answer["content"][0]
    with pytest.raises(InputError, match="no tool_use of the search tool"):
        search.answer_anthropic(request, Message.model_validate({**response, "content": response["content"][:1]}))


def test_answer_openai_takes_the_sdk_response(selector):
    request, response = load("openai_request"), load("openai_response")
    search = ToolSearch(selector)
    sdk = sdk_response(response)
    outputs = search.answer_openai(request, sdk)
    assert outputs == search.answer_openai(request, copy.deepcopy(response))
    for out in outputs:
        TypeAdapter(ResponseToolSearchOutputItemParamParam).validate_python(out)
    nxt = next_openai_input(request, sdk, outputs)
    assert nxt == next_openai_input(request, response, outputs)  # SDK items come back as plain JSON data
    json.dumps(nxt)
    assert search.openai_output(request, sdk.output[0], [*request["input"], *sdk.output]) == outputs[0]


def test_chat_completion_messages_in_an_anthropic_request_history_are_read(selector):
    request, response = load("anthropic_request"), load("anthropic_response")
    earlier = ChatCompletionMessage.model_validate({"role": "assistant", "content": "Which Anna?"})
    with_sdk = {**request, "messages": [*request["messages"][:-1], earlier, request["messages"][-1]]}
    answer = ToolSearch(selector).answer_anthropic(with_sdk, Message.model_validate(response))
    assert answer["content"][0]["content"]


def test_a_catalog_sent_through_formats_maps_back_from_tool_search(selector, tmp_path):
    tools = {"tools": [
        {"name": "notes.create", "description": "Create a note with a title and a body.",
         "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}}},
        {"name": "notes.search", "description": "Search the notes for a phrase.",
         "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}},
        {"name": "Send Text Message", "description": "Send an SMS to a contact.",
         "inputSchema": {"type": "object", "properties": {"to": {"type": "string"}}}},
        {"name": "weather.forecast", "description": "The weather forecast for a city.",
         "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}]}
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    mcp = load_catalog(tmp_path / "tools.json")
    deferred = [{**d, "defer_loading": True} for d in tool_definitions(mcp, "anthropic")]
    request = {"model": "claude-sonnet-4-5", "max_tokens": 512,
               "tools": [ANTHROPIC_SEARCH_TOOL, *deferred],
               "messages": [{"role": "user", "content": "jot down a note about the meeting"}]}
    response = Message.model_validate({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
        "content": [{"type": "tool_use", "id": "toolu_9", "name": "search_tools", "input": {"query": "create a note"}}]})
    refs = ToolSearch(selector).answer_anthropic(request, response)["content"][0]["content"]
    sent = {d["name"] for d in deferred}
    names = [r["tool_name"] for r in refs]
    assert names and set(names) <= sent  # the request's own (API-legal) names
    back = [catalog_name(n, mcp) for n in names]
    assert "notes.create" in back and set(back) <= {t.name for t in mcp}

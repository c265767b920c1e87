"""Histories carried the SDKs' way: ``messages.append(completion.choices[0].message)`` (OpenAI),
``{"role": "assistant", "content": message.content}`` (Anthropic), ``input += response.output``
(Responses), read with the SDKs' own objects, built offline by model_validate (issue 26.1)."""
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from conftest import needs
from magicselector import InputError
from magicselector.dialogue import Turn, as_mapping, plain, validate_history
from magicselector.dialogue import bounded_history

openai = pytest.importorskip("openai", reason=needs("dev"))
anthropic = pytest.importorskip("anthropic", reason=needs("dev"))

from anthropic.types import Message, TextBlock, ToolUseBlock  # noqa: E402
from openai.types.chat import ChatCompletion  # noqa: E402
from openai.types.responses import Response  # noqa: E402


def completion(message: dict) -> ChatCompletion:
    return ChatCompletion.model_validate({"id": "chatcmpl-1", "object": "chat.completion", "created": 1767225600,
                                          "model": "gpt-5.4", "choices": [{"index": 0, "finish_reason": "tool_calls",
                                                                           "message": message}]})


def claude(content: list) -> Message:
    return Message.model_validate({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                                   "content": content, "stop_reason": "tool_use", "stop_sequence": None,
                                   "usage": {"input_tokens": 10, "output_tokens": 5}})


def test_openai_chat_completion_messages_as_the_sdk_returns_them():
    reply = completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bluetooth_toggle", "arguments": "{\"on\": true}"}},
        {"id": "call_2", "type": "function", "function": {"name": "play_music", "arguments": "{}"}}]})
    done = completion({"role": "assistant", "content": "Bluetooth is on and jazz is playing."})
    messages = [{"role": "user", "content": "turn on bluetooth and play jazz"}, reply.choices[0].message,
                {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
                {"role": "tool", "tool_call_id": "call_2", "content": "playing"}, done.choices[0].message]
    assert validate_history(messages) == [
        Turn("user", "turn on bluetooth and play jazz"),
        Turn("assistant", "", ("bluetooth_toggle", "play_music")),
        Turn("tool", "ok", ("bluetooth_toggle",)),
        Turn("tool", "playing", ("play_music",)),
        Turn("assistant", "Bluetooth is on and jazz is playing."),
    ]
    assert bounded_history(messages, 32, 16_000) == validate_history(messages)


def test_anthropic_messages_and_content_blocks_as_the_sdk_returns_them():
    msg = claude([{"type": "text", "text": "Sure."},
                  {"type": "tool_use", "id": "toolu_1", "name": "play_music", "input": {"query": "jazz"}}])
    assert isinstance(msg.content[0], TextBlock) and isinstance(msg.content[1], ToolUseBlock)
    result = {"type": "tool_result", "tool_use_id": "toolu_1",  # a ToolResultBlockParam (a TypedDict)
              "content": [{"type": "text", "text": "Playing Jazz Classics"}]}
    expected = [Turn("user", "play some jazz"), Turn("assistant", "Sure.", ("play_music",)),
                Turn("tool", "Playing Jazz Classics", ("play_music",)), Turn("user", "louder")]
    for turn in ({"role": "assistant", "content": msg.content}, msg):  # the documented way, and the Message itself
        history = [{"role": "user", "content": "play some jazz"}, turn,
                   {"role": "user", "content": [result, {"type": "text", "text": "louder"}]}]
        assert validate_history(history) == expected
        assert bounded_history(history, 32, 16_000) == expected
    one_block = [{"role": "user", "content": TextBlock(type="text", text="just a block")}]
    assert validate_history(one_block) == [Turn("user", "just a block")]


def test_responses_output_items_as_the_sdk_returns_them():
    response = Response.model_validate({
        "id": "resp_1", "object": "response", "created_at": 1767225600, "model": "gpt-5.4", "status": "completed",
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Setting it.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "set_alarm",
             "arguments": "{\"time\": \"7:00\"}", "status": "completed"}]})
    history = [{"role": "user", "content": "wake me at 7"}, *response.output,
               {"type": "function_call_output", "call_id": "call_9", "output": "alarm set"}]
    assert validate_history(history) == [
        Turn("user", "wake me at 7"), Turn("assistant", "Setting it."), Turn("assistant", "", ("set_alarm",)),
        Turn("tool", "alarm set", ("set_alarm",))]
    assert plain(response.output[2]) == {"type": "function_call", "id": "fc_1", "call_id": "call_9",
                                         "name": "set_alarm", "arguments": "{\"time\": \"7:00\"}",
                                         "status": "completed"}


def test_errors_in_sdk_objects_still_name_the_message_and_field():
    nameless = completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "", "arguments": "{}"}}]}).choices[0].message
    with pytest.raises(InputError, match=r"history\[1\]\.tool_calls\[0\]\.function\.name"):
        validate_history([{"role": "user", "content": "hi"}, nameless])
    with pytest.raises(InputError, match=r"history\[1\]\.tool_calls\[0\]\.function\.name"):
        bounded_history([{"role": "user", "content": "hi"}, nameless], 32, 16_000)
    blank = claude([{"type": "tool_use", "id": "toolu_1", "name": " ", "input": {}}])
    with pytest.raises(InputError, match=r"history\[0\]\.content\[0\]\.name"):
        validate_history([blank])
    with pytest.raises(InputError, match=r"history\[0\]: a message is"):
        validate_history([object()])


def test_any_object_in_the_same_shape_reads_like_its_dict():
    @dataclass
    class Msg:
        role: str
        content: object

    call = SimpleNamespace(id="c1", type="function", function=SimpleNamespace(name="set_alarm", arguments="{}"))
    history = [Msg("user", "wake me at 7"), SimpleNamespace(role="assistant", content=None, tool_calls=[call])]
    assert validate_history(history) == [Turn("user", "wake me at 7"), Turn("assistant", "", ("set_alarm",))]
    assert as_mapping("text") is None and as_mapping(5) is None and as_mapping([1]) is None
    assert dict(as_mapping(Msg("user", "x"))) == {"role": "user", "content": "x"}


@pytest.mark.slow
def test_select_reads_sdk_objects_in_its_history(selector):
    reply = completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "set_alarm", "arguments": "{\"time\": \"7:00\"}"}}]})
    history = [{"role": "user", "content": "wake me up at 7"}, reply.choices[0].message,
               {"role": "tool", "tool_call_id": "call_1", "content": "alarm set for 7:00"}]
    as_dicts = [history[0], reply.choices[0].message.model_dump(exclude_none=True), history[2]]
    sel = selector.select("and another one at 7:30", history)
    assert sel.ids == selector.select("and another one at 7:30", as_dicts).ids
    assert selector.retrieval_texts("and another one at 7:30", history) == \
        selector.retrieval_texts("and another one at 7:30", as_dicts)

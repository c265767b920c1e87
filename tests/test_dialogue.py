"""Chat histories as chat APIs write them: OpenAI Chat Completions and Responses, Anthropic
Messages, MCP tool results; clear errors naming the message and field; the retrieval text."""
import re

import pytest
from hypothesis import given, strategies as st

from magicselector import InputError
from magicselector.dialogue import Turn, recent_turns, retrieval_text, tool_phrase, validate_history


def test_openai_chat_history_with_tool_calls_and_content_parts():
    history = [
        {"role": "developer", "content": "You are a phone assistant."},
        {"role": "user", "content": [{"type": "text", "text": "turn on  bluetooth"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bluetooth_toggle", "arguments": "{\"on\": true}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"ok\": true}"},
        {"role": "assistant", "content": "Bluetooth is on."},
    ]
    turns = validate_history(history)
    assert turns == [
        Turn("system", "You are a phone assistant."),
        Turn("user", "turn on bluetooth"),
        Turn("assistant", "", ("bluetooth_toggle",)),
        Turn("tool", "{\"ok\": true}", ("bluetooth_toggle",)),  # the result knows the tool it answers
        Turn("assistant", "Bluetooth is on."),
    ]


def test_anthropic_blocks_split_tool_results_from_the_users_text():
    history = [
        {"role": "user", "content": "play some jazz"},
        {"role": "assistant", "content": [{"type": "text", "text": "Sure."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "play_music",
                                           "input": {"query": "jazz"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "Playing Jazz Classics"}]},
                                     {"type": "text", "text": "louder please"}]},
    ]
    turns = validate_history(history)
    assert turns[1] == Turn("assistant", "Sure.", ("play_music",))
    assert turns[2] == Turn("tool", "Playing Jazz Classics", ("play_music",))
    assert turns[3] == Turn("user", "louder please")


def test_mcp_tool_results_and_single_block_messages():
    history = [
        {"role": "user", "content": {"type": "text", "text": "what's on my calendar"}},  # an MCP prompt message
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "calendar__list_events", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": {
            "content": [{"type": "text", "text": "Dentist at 3pm"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "isError": False}},
    ]
    turns = validate_history(history)
    assert turns[0] == Turn("user", "what's on my calendar")
    assert turns[2] == Turn("tool", "Dentist at 3pm", ("calendar__list_events",))


def test_responses_api_items():
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "play jazz"}]},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "call_9", "name": "play_music", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_9", "output": "Playing."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Playing jazz."}]},
    ]
    assert validate_history(history) == [Turn("user", "play jazz"), Turn("assistant", "", ("play_music",)),
                                         Turn("tool", "Playing.", ("play_music",)), Turn("assistant", "Playing jazz.")]


def test_plain_histories_still_read_as_before():
    assert validate_history([("user", "hi"), {"role": "assistant", "content": "hello"}, Turn("user", "x")]) == [
        Turn("user", "hi"), Turn("assistant", "hello"), Turn("user", "x")]
    assert validate_history(None) == [] and validate_history(()) == []


@pytest.mark.parametrize("history, where", [
    ("turn it on", "not a string"),
    ({"role": "user", "content": "x"}, "must be a list of messages, got dict"),
    (5, "got int"),
    ([{"role": "user", "content": "ok"}, 7], r"history\[1\]"),
    ([{"role": "robot", "content": "beep"}], r"history\[0\]\.role: unknown role 'robot'"),
    ([{"role": "user"}], r"history\[0\]\.content must be"),
    ([{"role": "user", "content": None}], r"history\[0\]\.content must be"),
    ([{"role": "user", "content": 3}], r"history\[0\]\.content: content must be a string"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": ["ok", {"type": "text", "text": 1}]}],
     r"history\[1\]\.content\[1\]\.text"),
    ([{"role": "user", "content": [{"text": "no type"}]}], r"history\[0\]\.content\[0\]\.type"),
    ([{"role": "user", "content": [5]}], r"history\[0\]\.content\[0\]: a content part must be an object"),
    ([{"role": "assistant", "content": None, "tool_calls": {"id": "x"}}], r"history\[0\]\.tool_calls: must be a list"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function", "function": {}}]}],
     r"history\[0\]\.tool_calls\[0\]\.function\.name"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function"}]}],
     r"history\[0\]\.tool_calls\[0\]\.function: a tool call needs"),
    ([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": 3}}]}],
     r"history\[0\]\.tool_calls\[0\]\.function\.arguments"),
    ([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}],
     r"history\[0\]\.content\[0\]: a tool_result block belongs in a user message"),
    ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}],
     r"history\[0\]\.content\[0\]: a tool_use block belongs in an assistant message"),
    ([{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}], r"history\[0\]\.content\[0\]\.tool_use_id"),
    ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}], r"history\[0\]\.content\[0\]\.name"),
    ([{"role": "tool", "content": {"content": "not a list"}}], r"history\[0\]\.content\.content"),
    ([{"role": "tool", "content": {"content": [], "isError": "no"}}], r"history\[0\]\.content\.isError"),
    ([{"role": "tool", "content": {"foo": 1}}], r"history\[0\]\.content: content must be"),
    ([{"type": "function_call", "call_id": "c"}], r"history\[0\]\.name"),
    ([{"type": "message", "content": "x"}], r"history\[0\]\.role"),
])
def test_bad_shapes_name_the_message_and_field(history, where):
    with pytest.raises(InputError, match=where):
        validate_history(history)


def test_retrieval_text_merges_tool_plumbing_and_carries_called_tools():
    turns = validate_history([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "turn on bluetooth"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bluetooth_toggle", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"on\"}"},
        {"role": "assistant", "content": "Bluetooth is on."},
    ])
    assert retrieval_text("and off", turns, "none") == "and off"
    # user: each user turn carries the tools called in answer to it
    assert retrieval_text("and off", turns, "user") == "and off | turn on bluetooth (bluetooth toggle)"
    # all: the call and its reply are one assistant turn; the raw tool result and the system prompt stay out
    assert retrieval_text("and off", turns, "all") == "and off | bluetooth toggle Bluetooth is on. | turn on bluetooth"
    # history_turns counts conversation turns, not tool plumbing
    assert retrieval_text("and off", turns, "all", turns=1) == "and off | bluetooth toggle Bluetooth is on."
    assert recent_turns(turns, "all", 2) == [Turn("user", "turn on bluetooth"),
                                              Turn("assistant", "bluetooth toggle Bluetooth is on.", ("bluetooth_toggle",))]
    assert recent_turns(turns, "none") == []


def test_histories_without_tool_calls_fold_as_before():
    plain = validate_history([{"role": "user", "content": "weather in Paris"}, {"role": "assistant", "content": "Sunny."},
                              {"role": "system", "content": "x"}, {"role": "user", "content": "and Rome"}])
    assert retrieval_text("tomorrow?", plain, "user") == "tomorrow? | and Rome | weather in Paris"
    assert retrieval_text("tomorrow?", plain, "all") == "tomorrow? | and Rome | Sunny. | weather in Paris"
    assert retrieval_text("tomorrow?", plain, "all", turns=2) == "tomorrow? | and Rome | Sunny."


def test_questions_keeps_user_turns_and_only_what_the_assistant_asked():
    turns = validate_history([
        {"role": "user", "content": "Book a Lyft downtown and text Luis I'm late."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "request_ride", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"ride\": \"RX-99\"}"},
        {"role": "assistant", "content": "Ride RX-99 booked, ETA 7 min. Which Luis, Gomez or Park? Or someone else?"},
        {"role": "user", "content": "Gomez."},
        {"role": "assistant", "content": "Sent."},
    ])
    # the results and confirmations stay out; the question sentences stay, after the user turn they follow;
    # the tools called in answer to a user turn come along on it, as under ``user``
    assert retrieval_text("is it close?", turns, "questions") == (
        "is it close? | Gomez. | Which Luis, Gomez or Park? Or someone else? | "
        "Book a Lyft downtown and text Luis I'm late. (request ride)")
    assert recent_turns(turns, "questions", 1) == [Turn("user", "Gomez.")]
    # an assistant that asks nothing leaves the fold equal to ``user``
    plain = validate_history([{"role": "user", "content": "weather in Paris"}, {"role": "assistant", "content": "Sunny."},
                              {"role": "user", "content": "and Rome"}])
    assert retrieval_text("tomorrow?", plain, "questions") == retrieval_text("tomorrow?", plain, "user")


@given(st.text(alphabet="ab ?.!\n", max_size=40))
def test_questions_are_the_sentences_that_end_in_a_question_mark(text):
    # the split gives what the regex search the fold was measured with gives, in linear time
    from magicselector.dialogue.fold import _questions
    assert _questions(text) == " ".join(q.strip() for q in re.findall(r"[^.!?\n]*\?", text))


def test_tool_phrase_reads_namespaced_names_as_words():
    assert tool_phrase(["github__create_issue", "calendar.list-events"]) == "github create issue, calendar list events"

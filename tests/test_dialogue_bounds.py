"""One budget bounds everything a turn reads of its history (issue 27.2): tool-call names, arguments
and nested values count against ``max_history_chars``; depth and key counts are bounded before
anything below them is touched; content objects with non-string keys are InputErrors."""
from __future__ import annotations

import time
import tracemalloc
from collections.abc import Mapping

import pytest

from magicselector import InputError
from magicselector.dialogue import Turn, validate_history
from magicselector.dialogue import bounded_history

MAX = 16_000  # InputLimits.max_history_chars


class Watched(Mapping):
    """A mapping that counts the keys and values read from it."""

    def __init__(self, data):
        self.data, self.reads = data, 0

    def __getitem__(self, key):
        self.reads += 1
        return self.data[key]

    def __iter__(self):
        for key in self.data:
            self.reads += 1
            yield key

    def __len__(self):
        return len(self.data)


class Untouchable(Mapping):
    """A value below the depth a turn reads: any access fails the test."""

    def __getitem__(self, key):
        raise AssertionError("read below the depth bound")

    def __iter__(self):
        raise AssertionError("read below the depth bound")

    def __len__(self):
        raise AssertionError("read below the depth bound")


def chars(turns):
    return sum(len(t.content) + sum(len(n) for n in t.tools) for t in turns)


def calls(name_chars, messages=32, per_message=64):
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}_{j}", "type": "function",
         "function": {"name": "n" * name_chars + f"_{i}_{j}", "arguments": "{\"x\": \"" + "a" * 1000 + "\"}"}}
        for j in range(per_message)]} for i in range(messages)]


def peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_tool_call_names_count_against_the_budget():
    history = calls(16_000)  # 32 x 64 calls with 16,000-character names: 32 MB of names
    turns = bounded_history(history, 32, MAX)
    assert chars(turns) <= MAX
    newest = turns[-1].tools[-1]
    assert newest.endswith("_31_63")  # the most recent call is the one kept
    assert peak_bytes(lambda: bounded_history(history, 32, MAX)) < 4_000_000
    few = calls(10, messages=2, per_message=3)  # short histories keep every name, as before
    assert [t.tools for t in bounded_history(few, 32, MAX)] == [
        tuple(f"{'n' * 10}_{i}_{j}" for j in range(3)) for i in range(2)]


def test_a_million_keys_cost_what_64_do():
    content = Watched({f"k{i}": i for i in range(1_000_000)})
    with pytest.raises(InputError, match=r"history\[0\]\.content"):
        bounded_history([{"role": "user", "content": content}], 32, MAX)
    assert content.reads < 200
    structured = Watched({f"k{i}": "v" * 10 for i in range(1_000_000)})
    result = {"role": "tool", "tool_call_id": "c1", "content": {"content": [], "structuredContent": structured}}
    turns = bounded_history([{"role": "user", "content": "what did it say"}, result], 32, MAX)
    assert turns[-1].role == "tool" and turns[-1].content.startswith('{"k0": "vvvvvvvvvv"')
    assert structured.reads < 200


def test_values_deep_in_a_message_are_bounded_before_they_are_walked():
    deep = Untouchable()
    for key in "fedcba":
        deep = {key: deep}
    result = {"role": "tool", "content": {"content": [], "structuredContent": {"s": deep, "t": "x" * 30_000_000}}}
    turns = bounded_history([result], 32, MAX)  # the Untouchable, 8 levels down, is never read
    assert len(turns[0].content) <= MAX
    assert peak_bytes(lambda: bounded_history([result], 32, MAX)) < 1_000_000  # not a copy of the 30 MB
    nested = "x" * 30_000_000  # 30 MB six and more levels down, as in the issue
    for key in "gfedcba":
        nested = {key: nested}
    tool = {"role": "tool", "content": {"content": [], "structuredContent": nested}}
    assert peak_bytes(lambda: bounded_history([{"role": "user", "content": "hi"}, tool], 32, MAX)) < 1_000_000


def test_arguments_count_against_the_budget():
    huge_args = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{j}", "type": "function", "function": {"name": f"tool_{j}", "arguments": {
            "payload": "y" * 100_000, "deeper": {"list": ["y" * 100_000] * 64}}}} for j in range(64)]}]
    turns = bounded_history(huge_args * 32, 32, MAX)
    assert chars(turns) <= MAX and turns[-1].tools[-1] == "tool_63"
    assert peak_bytes(lambda: bounded_history(huge_args * 32, 32, MAX)) < 2_000_000


def test_non_string_keys_in_content_are_input_errors():
    with pytest.raises(InputError, match=r"history\[0\]\.content: object keys must be strings, got 1"):
        bounded_history([{"role": "user", "content": {1: "a", "b": 2}}], 32, MAX)
    with pytest.raises(InputError, match=r"history\[1\]\.content\.structuredContent"):
        bounded_history([{"role": "user", "content": "x"},
                         {"role": "tool", "content": {"content": [], "structuredContent": {(1, 2): "x"}}}], 32, MAX)
    with pytest.raises(InputError, match=r"history\[0\]\.content"):  # unbounded reader: no TypeError either
        validate_history([{"role": "user", "content": {1: "a", "b": 2}}])
    with pytest.raises(InputError, match=r"structuredContent"):
        validate_history([{"role": "tool", "content": {"content": [], "structuredContent": {(1, 2): "x"}}}])


def test_messages_past_the_budget_are_not_read_and_the_newest_always_is():
    big = {"role": "user", "content": "z" * (5 * MAX)}
    # a malformed message before what the budget reaches is never read (as before the turn window)
    turns = bounded_history([{"role": "nobody"}, big], 32, MAX)
    assert [len(t.content) for t in turns] == [MAX]
    with pytest.raises(InputError, match=r"history\[0\]\.role"):  # within the budget it is
        bounded_history([{"role": "nobody"}, {"role": "user", "content": "hi"}], 32, MAX)
    assert bounded_history([big], 32, 10) == [Turn("user", "z" * 10)]
    # a Turn's tools are bounded as well
    many = Turn("assistant", "done", tuple(f"tool_{i}" for i in range(100_000)))
    turns = bounded_history([many], 32, 100)
    assert chars(turns) <= 100 and turns[0].tools[-1] == "tool_99999"


@pytest.mark.slow
def test_worst_histories_select_in_bounded_time(selector):
    """Only where the old cost was seconds (docs/bench/robustness.md: 34 s and 2.4 GB for 16,000-character
    names); the bound is generous for a loaded 2-core host."""
    history = calls(16_000)
    selector.select("set an alarm", [{"role": "user", "content": "hi"}])
    t = time.perf_counter()
    selector.select("set an alarm for 7", history)
    assert time.perf_counter() - t < 3.0

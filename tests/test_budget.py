"""The caller's budget (stages/budget.py): never more tools or tokens than asked; in the head's order, or one per sub-task first without a head."""
from __future__ import annotations

import pytest

from magicselector.errors import InputError
from magicselector.stages.budget import Budget, spend_budget

IDS = ["a1", "b1", "a2", "c1", "b2", "a3"]
LISTS = [["a1", "a2", "b1"], ["a1", "a2", "a3"], ["b1", "b2"], ["c1"]]  # utterance, then three sub-tasks


def test_no_budget_keeps_the_cut():
    assert spend_budget(Budget(), IDS, 4, LISTS, tokens=lambda t: 1 / 0) == [0, 1, 2, 3]


def test_max_tools_gives_each_sub_task_its_best_tool_first():
    assert spend_budget(Budget(max_tools=3), IDS, 6, LISTS, tokens=len) == [0, 1, 3]  # a1, b1, c1
    assert spend_budget(Budget(max_tools=4), IDS, 6, LISTS, tokens=len) == [0, 1, 2, 3]  # then ranked order
    assert spend_budget(Budget(max_tools=10), IDS, 2, LISTS, tokens=len) == [0, 1]  # never more than the cut


def test_the_token_budget_skips_a_tool_too_big_for_a_smaller_one():
    cost = {"a1": 50, "b1": 200, "a2": 40, "c1": 30, "b2": 10, "a3": 10}.__getitem__
    kept = spend_budget(Budget(max_schema_tokens=100), IDS, 6, LISTS, tokens=cost)
    assert [IDS[i] for i in kept] == ["a1", "c1", "b2", "a3"] and sum(cost(IDS[i]) for i in kept) <= 100
    assert spend_budget(Budget(max_schema_tokens=5), IDS, 6, LISTS, tokens=cost) == []


@pytest.mark.parametrize("field,value", [("max_tools", 0), ("max_tools", 2.5), ("max_schema_tokens", True),
                                         ("max_schema_tokens", -3)])
def test_bad_budgets_are_input_errors_naming_the_field(field, value):
    with pytest.raises(InputError, match=field):
        Budget(**{field: value})
    with pytest.raises(InputError, match="format"):
        Budget(format="xml")


TURNS = ["turn on bluetooth and play some jazz, then text Sam I am late",
         "set an alarm for 7 and what's the weather tomorrow", "text Sam that I'm running ten minutes late",
         "navigate home and call mom"]


@pytest.mark.parametrize("fmt", ["mcp", "openai", "openai-responses", "anthropic"])
def test_select_stays_within_the_budget_in_every_format(selector, fmt):
    from magicselector.tokens import schema_tokens

    uncapped = selector.with_config(max_tools=None)  # the cut alone: a bound only ever takes from it
    for turn in TURNS:
        free = uncapped.select(turn, format=fmt)
        for limit in (1, 2, 3):
            sel = selector.select(turn, max_tools=limit, format=fmt)
            assert sel.k == len(sel.tools) == min(limit, free.k)
            assert set(sel.ids) <= set(free.ids)
        for tokens in (150, 400, 900):
            sel = selector.select(turn, max_schema_tokens=tokens, format=fmt)
            spent = sum(schema_tokens(d) for d in selector.schemas(sel, format=fmt))
            assert sel.schema_tokens == spent <= tokens and set(sel.ids) <= set(free.ids)


def test_with_the_head_the_budget_buys_the_likeliest_tools(selector):
    """The shipped head orders the kept tools by P(needed); a budget spends in that order (it buys
    more completeness than a slot per sub-task first: docs/bench/budget.md), not one per sub-task."""
    sel = selector.select(TURNS[0], max_tools=3)
    assert len(sel.subtasks) == 3
    free = selector.with_config(max_tools=None).select(TURNS[0])  # the same turn unbounded
    assert sel.ids == free.ids[:3] and free.k > 3
    probabilities = [t.probability for t in free.tools]
    assert probabilities == sorted(probabilities, reverse=True)
    assert [t.probability for t in sel.tools] == probabilities[:3]


def test_the_default_budget_hands_the_cuts_first_five(selector):
    """SelectorConfig.max_tools=5 ships (docs/bench/agent.md): a turn whose cut keeps more gets the
    first five in the head's order; one whose cut keeps five or fewer gets exactly the cut's."""
    from magicselector.config import SelectorConfig

    assert SelectorConfig().max_tools == 5
    uncapped = selector.with_config(max_tools=None)
    ks = []
    for turn in TURNS + ["book a table for two, order a taxi there, set a reminder and text Ann the time"]:
        cut, shipped = uncapped.select(turn), selector.select(turn)
        assert shipped.ids == cut.ids[:5] and shipped.k == min(cut.k, 5)
        assert selector.select(turn, max_tools=8).ids == cut.ids[:8]  # a caller's own bound replaces it
        ks.append(cut.k)
    assert min(ks) <= 5 < max(ks)  # both kinds of turn were checked


def test_without_a_head_a_multi_intent_turn_gets_one_tool_per_sub_task(bundle_dir):
    from magicselector import Selector
    from magicselector.config import SelectorConfig

    headless = Selector.from_bundle(bundle_dir, config=SelectorConfig(head=False))
    sel = headless.select(TURNS[0], max_tools=3)
    assert len(sel.subtasks) == 3
    ranked = headless.select(TURNS[0]).ranked_ids  # the same turn unbounded: the kept ones keep its order
    assert sel.ids == sorted(["bluetooth_toggle", "play_music", "send_sms"], key=ranked.index)
    assert sorted(t.list for t in sel.tools) == [1, 2, 3] and all(t.rank == 0 for t in sel.tools)


def test_tools_come_best_first_with_why_they_were_kept(selector):
    sel = selector.select("turn on bluetooth")
    assert sel.ids == sel.ranked_ids[: sel.k]
    top = sel.tools[0]
    assert top.id == "bluetooth_toggle" and top.rank == 0 and top.dense > 0.5 and top.lexical > 0
    why = sel.to_dict()["tools"][0]["why"]
    assert why["list"] == top.list and why["text"] == top.subtask and why["dense"] == pytest.approx(top.dense, abs=1e-5)


def test_the_config_carries_the_budget(selector):
    capped = selector.with_config(max_tools=2, max_schema_tokens=10_000)
    sel = capped.select(TURNS[1])
    assert sel.k == 2 and sel.budget.max_tools == 2 and sel.schema_tokens > 0
    assert capped.select(TURNS[1], max_tools=1).k == 1  # the call's bound wins over the config's
    with pytest.raises(InputError, match="max_schema_tokens"):
        selector.with_config(max_schema_tokens=0)


def test_search_tools_takes_the_budget(selector):
    from magicselector.cli.serve import input_schema, search
    from magicselector.tokens import schema_tokens

    assert {"max_tools", "max_schema_tokens"} <= set(input_schema()["properties"])
    out = search(selector, {"query": TURNS[0], "format": "anthropic", "max_schema_tokens": 300})
    assert out["tools"] and sum(schema_tokens(d) for d in out["tools"]) <= 300
    assert [d["name"] for d in search(selector, {"query": TURNS[0], "max_tools": 3})["tools"]] == \
        selector.select(TURNS[0], max_tools=3).ids
    with pytest.raises(InputError, match="max_schema_tokens"):
        search(selector, {"query": TURNS[0], "max_schema_tokens": "many"})

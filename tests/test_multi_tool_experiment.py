"""The multi-tool failure analysis (bench/experiments/multi_tool.py): each missing tool's cause, the
re-fused and protected orders on hand-made turns, and the replay that must cut as the Selector does."""
from __future__ import annotations

import numpy as np
import pytest

from magicselector.bench.experiments.multi_tool import (Replayed, Turn, as_turn, cause_of, protected, refused,
                                                        rank_part, shipped_replay)


def _turn(lists: list[list[str]], subtasks: list[str], history_list: int | None = None,
          gold: tuple[str, ...] = ("a", "b")) -> Turn:
    """A turn whose lists score 1.0, 0.9, ... down each list; fused by peak rank as the runtime fuses."""
    from magicselector.stages.fuse import RankedList, peak_rank_fusion

    scored = [(ids, np.linspace(1.0, 1.0 - 0.1 * (len(ids) - 1), len(ids)).astype(np.float32)) for ids in lists]
    fused = peak_rank_fusion([RankedList(ids, s) for ids, s in scored])
    return Turn("q", gold, "multi", "q", ["q", *subtasks], subtasks, history_list, scored, fused.ids,
                np.asarray(fused.scores), fused.source)


def _replayed(turn: Turn, ranked: list[str], cut_order: list[str] | None = None, k: int = 5) -> Replayed:
    return Replayed(ranked, k, cut_order or ranked, {t: 1.0 - i / 100 for i, t in enumerate(ranked)})


def test_each_missing_tool_gets_the_earliest_stage_that_lost_it():
    split = _turn([["x", "a"], ["a", "y"], ["z", "w", "v", "u", "b"]], ["first", "second"])
    r = _replayed(split, ["a", "x", "z", "y", "w", "v", "u", "b"])
    assert cause_of(split, r, "b") == "subtask_miss"  # its sub-task's list ranks it fifth
    assert cause_of(split, r, "c") == "not_retrieved"
    whole = _turn([["x", "a"], ["x", "y", "z", "w", "v", "b"]], ["the utterance"])
    assert cause_of(whole, _replayed(whole, ["x", "a", "y", "z", "w", "v", "b"]), "b") == "unsplit"
    tops = _turn([["x"], ["a", "y"], ["b", "z"]], ["first", "second"])
    # first in its sub-task's list, in the cut's first five, pushed out by the head
    head = _replayed(tops, ["a", "x", "y", "z", "w", "b"], cut_order=["a", "b", "x", "y", "z", "w"])
    assert cause_of(tops, head, "b") == "head"
    cut = _replayed(tops, ["a", "x", "y", "z", "w", "b"], cut_order=["a", "x", "y", "z", "w", "b"])
    assert cause_of(tops, cut, "b") == "cut"


def test_sub_task_first_fusion_puts_sub_task_hits_ahead_of_the_anchors_and_leaves_whole_turns_alone():
    turn = _turn([["n", "m"], ["a", "p"], ["b", "q"]], ["first", "second"])
    assert turn.ids[:3] == ["n", "a", "b"]  # peak rank: the anchor's top ties the sub-tasks' and comes first
    assert refused(turn, 0).ids[:3] == ["a", "b", "n"]
    assert refused(turn, 1).ids[:5] == ["a", "b", "p", "q", "n"]  # the anchor's rank counts one lower
    whole = _turn([["n", "m"], ["a", "p"]], ["the utterance"])
    assert refused(whole, 1) is whole


def test_protecting_each_sub_tasks_first_hit_keeps_it_first():
    turn = _turn([["n", "m"], ["a", "p"], ["b", "q"]], ["first", "second"])
    r = Replayed(["n", "m", "a", "p", "q", "b"], 3, ["n", "a", "b", "m", "p", "q"],
                 {"n": 0.9, "m": 0.8, "a": 0.7, "p": 0.2, "q": 0.1, "b": 0.6})
    out = protected(turn, r, depth=1)
    assert out.ranked[:2] == ["a", "b"] and out.k == 4  # b, dropped by the head, is kept again
    assert out.ranked[2:4] == ["n", "m"] and sorted(out.ranked) == sorted(r.ranked)


@pytest.mark.slow
def test_the_replay_cuts_as_the_selector_does(selector, tiny_benchmark):
    from magicselector.data.datasets import load_benchmark

    bench = load_benchmark(tiny_benchmark)
    over = selector.with_catalog(bench.catalog)
    turns = rank_part(over, bench.queries)
    assert len(turns) == len(bench.queries) and any(len(t.subtasks) > 1 for t in turns)
    for q, t in zip(bench.queries, turns):
        sel = over.select(q.query, list(q.history))
        r = shipped_replay(t, over.head)
        assert (r.ranked, r.k) == (sel.ranked_ids, sel.k)
        assert as_turn(q, over.rank(q.query, list(q.history))).ids == t.ids

"""The index-time expansion experiment (bench/experiments/expansion.py) on a tiny set with the real
default bundle: its views, the replay that must select as the Selector does, the per-part rows."""
from __future__ import annotations

import pytest

from magicselector.catalog import Tool
from magicselector.errors import InputError

pytestmark = pytest.mark.slow


def test_views_come_from_the_catalog_alone():
    from magicselector.bench.experiments.expansion import views_of

    tool = Tool(id="x", name="set_alarm", description="Set an  alarm.",
                parameters={"type": "object", "properties": {"time": {}, "alarm_label": {}}})
    assert views_of(tool, ("name", "params", "description")) == ["set alarm", "set alarm: time, alarm label",
                                                                 "Set an alarm."]
    bare = Tool(id="y", name="get_time", description="", parameters={})
    assert views_of(bare, ("name", "params", "description")) == ["get time"]  # empty views give no vector


def test_the_replay_selects_as_the_selector_and_the_expansion_is_scored(selector, tiny_benchmark):
    from magicselector.bench.experiments.expansion import run

    out = run([("tiny", tiny_benchmark)], selector, ("name", "params"), n=50)
    part = out["parts"]["tiny"]
    assert part["identity"] == 1.0  # without views the replay is the shipped path, turn for turn
    assert part["extra_vectors"] == 2 * part["tools"] and part["build_seconds"] > 0
    assert part["extra_bytes"] > 0
    for row in (part["shipped"], part["expanded"]):
        assert set(row) >= {"C@5", "C@10", "NDCG@10", "C@K", "K", "tokens"} and 0 <= row["NDCG@10"] <= 1
    assert part["expanded"]["C@10"] >= 0.5  # a 6-tool catalog: the needed tools stay in the first ten
    with pytest.raises(InputError, match="views must be some of"):
        run([("tiny", tiny_benchmark)], selector, ("synonyms",), n=5)

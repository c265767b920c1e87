"""Tool-disjoint splits: no evaluation tool occurs in the training part, not even as a distractor."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from magicselector.data.datasets import load_benchmark
from magicselector.data.splits import ToolSplitConfig, split_tools, write_tool_disjoint_split
from magicselector.errors import InputError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _check_disjoint(out: Path) -> dict:
    train, evalp = load_benchmark(out / "train"), load_benchmark(out / "eval")
    assert not set(train.catalog.ids) & set(evalp.catalog.ids)
    for part in (train, evalp):
        ids = set(part.catalog.ids)
        for q in part.queries:
            assert set(q.gold) <= ids
            assert set(q.extra.get("candidates", [])) <= ids
    return json.loads((out / "split.json").read_text())


def test_tiny_split_is_disjoint_and_reproducible(tiny_benchmark, tmp_path):
    a = write_tool_disjoint_split(tiny_benchmark, tmp_path / "a", ToolSplitConfig(eval_fraction=0.5, seed=3))
    b = write_tool_disjoint_split(tiny_benchmark, tmp_path / "b", ToolSplitConfig(eval_fraction=0.5, seed=3))
    _check_disjoint(tmp_path / "a")
    assert a["parts"] == b["parts"]
    assert (tmp_path / "a" / "eval" / "queries.jsonl").read_bytes() == (tmp_path / "b" / "eval" / "queries.jsonl").read_bytes()
    total = sum(p["queries"] for p in a["parts"].values()) + a["dropped_straddling"]
    assert total == len(load_benchmark(tiny_benchmark).queries)


def test_split_depends_on_ids_not_order():
    ids = [f"t{i}" for i in range(50)]
    assert split_tools(ids, ToolSplitConfig(seed=1)) == split_tools(list(reversed(ids)), ToolSplitConfig(seed=1))
    assert split_tools(ids, ToolSplitConfig(seed=1)) != split_tools(ids, ToolSplitConfig(seed=2))


def test_bad_fraction_is_an_input_error():
    with pytest.raises(InputError, match="eval_fraction"):
        ToolSplitConfig(eval_fraction=1.0)


@pytest.mark.parametrize("name", ["bfcl", "metatool"])
def test_shared_sets_split(name, tmp_path):
    if not (SHARED / name / "tools.jsonl").is_file():
        pytest.skip(f"../shared/data/{name} is not beside this checkout")
    info = write_tool_disjoint_split(SHARED / name, tmp_path / name)
    _check_disjoint(tmp_path / name)
    assert info["parts"]["eval"]["queries"] > 100 and info["parts"]["train"]["queries"] > 100

"""Tool-disjoint splits: no evaluation tool occurs in the training part, not even as a distractor;
the `magicselector split` command writes what the Python API writes."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from magicselector.data.datasets import load_benchmark
from magicselector.cli.main import main
from magicselector.data.splits import (
    SHARED_SETS,
    ToolSplitConfig,
    default_shared_data,
    split_part,
    split_tools,
    write_tool_disjoint_split,
)
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


def _files(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def _check_no_eval_tool_in_train(out: Path) -> None:
    """The eval part's tools occur nowhere in the train part: not in its catalog, gold or candidates."""
    eval_tools = {json.loads(line)["id"] for line in (out / "eval" / "tools.jsonl").read_text().splitlines()}
    train_tools = {json.loads(line)["id"] for line in (out / "train" / "tools.jsonl").read_text().splitlines()}
    assert eval_tools and train_tools and not eval_tools & train_tools
    for line in (out / "train" / "queries.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert not set(row["gold"]) & eval_tools
        assert not set(row.get("candidates", [])) & eval_tools


def test_split_command_writes_what_the_api_writes(tiny_benchmark, tmp_path, capsys):
    config = ToolSplitConfig(eval_fraction=0.5, seed=3)
    write_tool_disjoint_split(tiny_benchmark, tmp_path / "api", config)
    assert main(["split", str(tiny_benchmark), "--out", str(tmp_path / "cmd"), "--eval-fraction", "0.5",
                 "--seed", "3"]) == 0
    out, err = capsys.readouterr()
    name = tiny_benchmark.name
    assert _files(tmp_path / "cmd" / name) == _files(tmp_path / "api")  # split.json included
    summary = json.loads(out)
    assert summary["config"] == {"eval_fraction": 0.5, "seed": 3}
    assert summary["sets"][name] == json.loads((tmp_path / "api" / "split.json").read_text())
    assert f"split {name}:" in err  # progress goes to stderr, stdout holds only the JSON
    _check_no_eval_tool_in_train(tmp_path / "cmd" / name)
    assert split_part(tmp_path / "cmd" / name / "eval")["part"] == "eval"
    assert split_part(tmp_path / "cmd" / name / "train")["tools"] == summary["sets"][name]["parts"]["train"]["tools"]
    assert split_part(tiny_benchmark) is None


def test_split_command_refuses_bad_input_naming_the_path(tiny_benchmark, tmp_path, capsys):
    missing = tmp_path / "no_such_set"
    assert main(["split", str(missing), "--out", str(tmp_path / "o")]) == 2
    assert str(missing) in capsys.readouterr().err
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["split", str(tiny_benchmark), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "--force" in err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]  # nothing written before the refusal
    assert main(["split", str(tiny_benchmark), "--out", str(out), "--force"]) == 0
    assert (out / tiny_benchmark.name / "split.json").is_file()
    capsys.readouterr()
    assert main(["split", str(tiny_benchmark), "--out", str(tmp_path / "o2"), "--eval-fraction", "1"]) == 2
    assert "eval_fraction" in capsys.readouterr().err
    assert main(["split", "--out", str(tmp_path / "o3")]) == 2
    assert "--shared" in capsys.readouterr().err


def test_split_command_shared_splits_both_public_sets(tmp_path, capsys):
    if not all((default_shared_data() / name / "tools.jsonl").is_file() for name in SHARED_SETS):
        pytest.skip("../shared/data is not beside this checkout")
    assert default_shared_data() == SHARED
    assert main(["split", "--shared", "--out", str(tmp_path / "cmd")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(summary["sets"]) == sorted(SHARED_SETS)
    for name in SHARED_SETS:
        write_tool_disjoint_split(SHARED / name, tmp_path / "api" / name)
        assert _files(tmp_path / "cmd" / name) == _files(tmp_path / "api" / name)
        _check_no_eval_tool_in_train(tmp_path / "cmd" / name)


@pytest.mark.extra("train")
def test_trainers_refuse_a_split_eval_part(tiny_benchmark, tmp_path):
    from magicselector.train.queries import prepare_training_data
    from magicselector.train.reranker import RerankerTrainConfig

    write_tool_disjoint_split(tiny_benchmark, tmp_path / "split", ToolSplitConfig(eval_fraction=0.5))
    with pytest.raises(InputError, match=r"eval.*evaluation part of a tool-disjoint split"):
        prepare_training_data([tmp_path / "split" / "eval"], tmp_path / "out", RerankerTrainConfig(), False, "t")
    benches, queries, _, _ = prepare_training_data([tmp_path / "split" / "train"], tmp_path / "out2",
                                                   RerankerTrainConfig(), False, "t")
    assert queries and len(benches) == 1


@pytest.mark.extra("train")
def test_per_folder_cap_balances_a_mix(tiny_benchmark, tmp_path):
    from magicselector.train.queries import prepare_training_data
    from magicselector.train.reranker import RerankerTrainConfig

    config = RerankerTrainConfig(include_tasks=False, max_queries=None)
    _, full, available, _ = prepare_training_data([tiny_benchmark, tiny_benchmark], tmp_path / "a", config, False, "t")
    per_folder = len(full) // 2
    assert per_folder >= 3 and available == len(full)
    capped = replace(config, max_queries_per_folder=2)
    _, queries, available, _ = prepare_training_data([tiny_benchmark, tiny_benchmark], tmp_path / "b", capped, False, "t")
    assert available == len(full)  # counted before the sample
    assert [sum(q.bench == b for q in queries) for b in (0, 1)] == [2, 2]
    again = prepare_training_data([tiny_benchmark, tiny_benchmark], tmp_path / "c", capped, False, "t")[1]
    assert [q.id for q in again] == [q.id for q in queries]  # seeded
    both = replace(capped, max_queries=3)
    assert len(prepare_training_data([tiny_benchmark, tiny_benchmark], tmp_path / "d", both, False, "t")[1]) == 3
    with pytest.raises(InputError, match="max_queries_per_folder"):
        RerankerTrainConfig(max_queries_per_folder=0)

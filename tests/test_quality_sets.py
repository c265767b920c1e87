"""``bench quality --set DIR``: a team's own benchmark folders measured end to end, bad folders refused
naming the file and field before anything runs; the multi-tool group pools the multi-gold turns;
the development parts are every public set's evaluation part."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from magicselector.bench.quality import (MULTI_TOOL, MULTI_TOOL_GROUP, QualityConfig, development_sets,
                                         pooled_columns)
from magicselector.cli.main import main
from magicselector.data.splits import SHARED_SETS
from magicselector.errors import InputError


def test_set_runs_end_to_end_on_a_tiny_set(bundle_dir, tiny_benchmark, tmp_path, capsys):
    own = tmp_path / "own" / "team_catalog"
    shutil.copytree(tiny_benchmark, own, ignore=shutil.ignore_patterns("own"))
    out = tmp_path / "report" / "quality.md"
    assert main(["bench", "quality", "--bundle", str(bundle_dir), "--set", str(own), "--limit", "0",
                 "--row", "shipped", "--row", "bm25", "--no-peers", "--no-reference", "--quiet",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    report = json.loads(out.with_suffix(".json").read_text())
    assert list(report["sets"]) == ["team_catalog"] and report["configurations"] == ["bm25", "shipped"]
    rows = report["sets"]["team_catalog"]["rows"]
    assert rows["shipped"]["queries"] == 4 and rows["shipped"]["ndcg"] > 0.6
    assert "--set " + str(own) in report["command"] and "--row 'shipped'" in report["command"]
    # the group: the one turn with two gold tools (q2), pooled from the only set
    group = report["groups"][MULTI_TOOL]
    assert group["parts"] == {"team_catalog": 1}
    shipped = group["rows"]["shipped"]
    assert shipped["queries"] == 1 and shipped["completeness@10"] in (0.0, 1.0)
    # ... equal to what the same pipeline does on that turn alone
    from magicselector import Selector
    from magicselector.data.datasets import load_benchmark

    sel = Selector.from_bundle(bundle_dir).with_catalog(load_benchmark(own).catalog)
    ranked = sel.select("turn on bluetooth and play some jazz").ranked_ids
    assert shipped["completeness@10"] == float({"bluetooth_toggle", "play_music"} <= set(ranked[:10]))
    text = out.read_text()
    assert "| team_catalog (6 tools) | shipped | 4 |" in text and f"| {MULTI_TOOL} | shipped | 1 |" in text
    assert "Mean over the 1 sets" in text


def _bad_sets(tmp_path: Path, tiny_benchmark: Path) -> list[tuple[list[str], str]]:
    no_queries = tmp_path / "bad" / "no_queries"
    no_queries.mkdir(parents=True)
    shutil.copy(tiny_benchmark / "tools.jsonl", no_queries / "tools.jsonl")
    unknown_gold = tmp_path / "bad" / "unknown_gold"
    shutil.copytree(tiny_benchmark, unknown_gold, ignore=shutil.ignore_patterns("bad"))
    with open(unknown_gold / "queries.jsonl", "a") as f:
        f.write(json.dumps({"id": "q9", "query": "book a taxi", "gold": ["call_taxi"]}) + "\n")
    bad_tool = tmp_path / "bad" / "bad_tool"
    shutil.copytree(tiny_benchmark, bad_tool, ignore=shutil.ignore_patterns("bad"))
    (bad_tool / "tools.jsonl").write_text(json.dumps({"id": "x", "name": "x", "description": 5}) + "\n")
    twin = tmp_path / "bad" / "twin" / tiny_benchmark.name
    shutil.copytree(tiny_benchmark, twin, ignore=shutil.ignore_patterns("bad"))
    return [([str(tmp_path / "missing")], str(tmp_path / "missing")),
            ([str(no_queries)], "queries.jsonl"),
            ([str(unknown_gold)], f"{unknown_gold / 'queries.jsonl'}:5: gold tool ids not in tools.jsonl"),
            ([str(bad_tool)], "description"),
            ([str(tiny_benchmark), str(twin)], "two sets are named")]


def test_bad_sets_are_refused_naming_the_file_and_field_before_anything_runs(tiny_benchmark, tmp_path, capsys):
    for folders, words in _bad_sets(tmp_path, tiny_benchmark):
        out = tmp_path / "never" / "quality.md"
        args = ["bench", "quality", "--no-peers", "--no-reference", "--quiet", "--out", str(out)]
        for folder in folders:
            args += ["--set", folder]
        assert main(args) == 2, folders
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, (folders, err)
        assert not out.parent.exists()  # no bundle built, nothing measured, nothing written


def test_rows_name_known_rows_only():
    with pytest.raises(InputError, match=r"rows: unknown row\(s\) 'hybrid \+ magic'"):
        QualityConfig(rows=("shipped", "hybrid + magic"))
    with pytest.raises(InputError, match="rows"):
        QualityConfig(rows=())
    assert QualityConfig(rows=("shipped, no head", "graph-tool-call")).rows == ("shipped, no head", "graph-tool-call")


def test_pooled_columns_count_each_turn_once_with_its_own_sets_costs():
    # part A: tools cost 1 each; part B: 10 each. Three turns pooled: A's two and B's one.
    a = ([(["a1", "a2", "a3"], ["a1", "a2"], ["a1"], 1), (["a2", "a1"], ["a1", "a3"], ["a2", "a1"], 2)],
         lambda ids: len(ids))
    b = ([(["b1", "b2"], ["b2", "b1"], ["b1", "b2"], 2)], lambda ids: 10 * len(ids))
    cols = pooled_columns([a, b], at=10)
    assert cols["queries"] == 3
    assert cols["completeness"] == pytest.approx(2 / 3)  # a's second turn never finds a3
    assert cols["completeness@K"] == pytest.approx(1 / 3)  # only b's turn has all gold in its first K
    assert cols["mean_k"] == pytest.approx(5 / 3) and cols["fixed_k"] == 2
    assert cols["completeness@fixed_k"] == pytest.approx(2 / 3)
    assert cols["tokens"] == pytest.approx((1 + 2 + 20) / 3)
    assert cols["tokens@5"] == pytest.approx((3 + 2 + 20) / 3)
    # the same ids in two parts stay two tools: "x" costs 1 in A and 10 in B
    same = pooled_columns([([(["x"], ["x"], ["x"], 1)], lambda ids: len(ids)),
                           ([(["x"], ["x"], ["x"], 1)], lambda ids: 10 * len(ids))], at=10)
    assert same["tokens"] == pytest.approx(5.5) and same["completeness"] == 1.0


def test_development_parts_are_every_public_sets_eval_part(tiny_benchmark, tmp_path):
    shared = tmp_path / "shared"
    for name in SHARED_SETS:  # a stand-in for each public set
        shutil.copytree(tiny_benchmark, shared / name, ignore=shutil.ignore_patterns("shared"))
    notes: list[str] = []
    parts = development_sets(tmp_path / "work", shared, note=notes.append)
    assert [name for name, _ in parts] == ["mobile test", "mobile test_ood", "bfcl eval", "metatool eval",
                                           "nestful eval", "restbench eval", "toolalpaca eval",
                                           "gorilla_apibench eval", "sgd eval"]
    assert not notes
    for name, folder in parts[2:]:
        info = json.loads((folder.parent / "split.json").read_text())
        assert folder.name == "eval" and info["source"] == str((shared / name.split()[0]).resolve())
    assert json.loads((tmp_path / "work" / "nestful-split" / "split.json").read_text())["config"]["draw"] == "gold_sets"
    assert set(MULTI_TOOL_GROUP) <= {name for name, _ in parts}  # the group names development parts

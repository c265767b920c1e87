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
    PUBLIC_SPLITS,
    SHARED_SETS,
    ToolSplitConfig,
    default_shared_data,
    merge_service_versions,
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
    info = write_tool_disjoint_split(SHARED / name, tmp_path / name, PUBLIC_SPLITS[name])
    _check_disjoint(tmp_path / name)
    assert info["parts"]["eval"]["queries"] > 100 and info["parts"]["train"]["queries"] > 100


@pytest.mark.parametrize("name", ["nestful", "restbench"])
def test_multi_tool_public_sets_keep_more_queries_with_the_gold_set_draw(name, tmp_path):
    if not (SHARED / name / "tools.jsonl").is_file():
        pytest.skip(f"../shared/data/{name} is not beside this checkout")
    by_set = write_tool_disjoint_split(SHARED / name, tmp_path / "sets", PUBLIC_SPLITS[name])
    by_tool = write_tool_disjoint_split(SHARED / name, tmp_path / "tools", ToolSplitConfig())
    _check_disjoint(tmp_path / "sets")
    assert PUBLIC_SPLITS[name].draw == "gold_sets"
    assert by_set["parts"]["eval"]["tools"] == by_tool["parts"]["eval"]["tools"]  # the same share of tools
    assert by_set["dropped_straddling"] < by_tool["dropped_straddling"]
    assert by_set["parts"]["eval"]["queries"] > by_tool["parts"]["eval"]["queries"]


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
    assert summary["config"] == {"eval_fraction": 0.5, "seed": 3, "draw": "tools", "merge_versions": False}
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


def test_split_command_shared_splits_every_public_set(tmp_path, capsys):
    if not all((default_shared_data() / name / "tools.jsonl").is_file() for name in SHARED_SETS):
        pytest.skip("../shared/data is not beside this checkout")
    assert default_shared_data() == SHARED
    assert main(["split", "--shared", "--out", str(tmp_path / "cmd")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(summary["sets"]) == sorted(SHARED_SETS)
    for name in SHARED_SETS:
        write_tool_disjoint_split(SHARED / name, tmp_path / "api" / name, PUBLIC_SPLITS[name])
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


def _write_set(folder: Path, tools: list[dict], queries: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tools))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return folder


def _multi_tool_set(folder: Path) -> Path:
    """20 tools; 10 queries, each naming a pair of tools (t0+t1, t2+t3, ...; the last 0 ... 9 pairs
    repeat), so a tool-by-tool draw splits pairs and a gold-set draw keeps them whole."""
    tools = [{"id": f"t{i}", "name": f"tool_{i}", "description": f"Tool number {i} does thing {i}.",
              "parameters": {}} for i in range(20)]
    queries = [{"id": f"q{i}", "query": f"do thing {2 * i} and thing {2 * i + 1}",
                "gold": [f"t{2 * i}", f"t{2 * i + 1}"]} for i in range(10)]
    return _write_set(folder, tools, queries)


def test_gold_set_draw_keeps_gold_sets_whole_and_depends_only_on_ids(tmp_path):
    source = _multi_tool_set(tmp_path / "multi")
    config = ToolSplitConfig(eval_fraction=0.3, draw="gold_sets")
    info = write_tool_disjoint_split(source, tmp_path / "out", config)
    _check_no_eval_tool_in_train(tmp_path / "out")
    _check_disjoint(tmp_path / "out")
    assert info["parts"]["eval"]["tools"] == 6 and info["parts"]["eval"]["queries"] == 3  # three whole pairs
    assert info["dropped_straddling"] == 0 and info["parts"]["eval"]["multi_tool_queries"] == 3
    golds = [[f"t{2 * i}", f"t{2 * i + 1}"] for i in range(10)]
    ids = [f"t{i}" for i in range(20)]
    assert split_tools(ids, config, golds) == split_tools(ids[::-1], config, [g[::-1] for g in golds[::-1]])
    assert split_tools(ids, config, golds) != split_tools(ids, replace(config, seed=1), golds)
    tool_draw = write_tool_disjoint_split(source, tmp_path / "tools", ToolSplitConfig(eval_fraction=0.3))
    assert tool_draw["dropped_straddling"] > 0  # what the gold-set draw is for


def test_gold_set_draw_fills_with_tools_no_query_names_first():
    ids = [f"t{i}" for i in range(10)]
    # one gold set of 4 tools cannot fit in 3 eval tools: the fill takes the unnamed t4..t9, never t0..t3
    train, evals = split_tools(ids, ToolSplitConfig(eval_fraction=0.3, draw="gold_sets"), [["t0", "t1", "t2", "t3"]])
    assert len(evals) == 3 and not evals & {"t0", "t1", "t2", "t3"} and train | evals == set(ids)


def test_bad_draw_is_an_input_error():
    with pytest.raises(InputError, match="draw"):
        ToolSplitConfig(draw="queries")


def _versioned_tools() -> list[dict]:
    def tool(name: str, desc: str, props: list[str], required: list[str]) -> dict:
        return {"id": f"sgd:{name}", "name": name, "description": desc,
                "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in props},
                               "required": required}}

    return [
        tool("Restaurants_2.ReserveRestaurant", "Reserve a table (service Restaurants_2: book tables)",
             ["restaurant_name", "time", "number_of_seats"], ["restaurant_name", "time"]),
        tool("Restaurants_1.ReserveRestaurant", "Make a table reservation (service Restaurants_1: dine out)",
             ["restaurant_name", "time", "party_size"], ["restaurant_name", "party_size"]),
        tool("Services_1.BookAppointment", "Book an appointment at a hair stylist (service Services_1)", ["stylist_name"], []),
        tool("Services_2.BookAppointment", "Book an appointment at a dentist (service Services_2)", ["dentist_name"], []),
        tool("Music_1.LookupSong", "Search for a song (service Music_1)", ["artist"], []),
        tool("Music_2.LookupMusic", "Search for a song by name (service Music_2)", ["artist", "album"], []),
        tool("Weather_1.GetWeather", "Get the weather (service Weather_1)", ["city"], ["city"]),
        {"id": "plain_tool", "name": "plain_tool", "description": "Not a versioned service.", "parameters": {}},
    ]


def test_merge_service_versions_makes_one_tool_per_intent():
    records, mapping = merge_service_versions(_versioned_tools())
    by_id = {r["id"]: r for r in records}
    assert [r["id"] for r in records] == ["sgd:Restaurants.ReserveRestaurant", "sgd:Services_1.BookAppointment",
                                          "sgd:Services_2.BookAppointment", "sgd:Music.LookupMusic",
                                          "sgd:Weather.GetWeather", "plain_tool"]
    reserve = by_id["sgd:Restaurants.ReserveRestaurant"]
    # the lowest version's description, its service named without the version
    assert reserve["description"] == "Make a table reservation (service Restaurants: dine out)"
    assert list(reserve["parameters"]["properties"]) == ["restaurant_name", "time", "party_size", "number_of_seats"]
    assert reserve["parameters"]["required"] == ["restaurant_name"]  # required by every version only
    assert mapping["sgd:Restaurants_2.ReserveRestaurant"] == mapping["sgd:Restaurants_1.ReserveRestaurant"]
    assert mapping["sgd:Music_1.LookupSong"] == mapping["sgd:Music_2.LookupMusic"] == "sgd:Music.LookupMusic"
    assert "sgd:Services_1.BookAppointment" not in mapping and "plain_tool" not in mapping  # distinct services


def test_merged_versions_are_one_unit_of_the_split_and_of_the_gold(tmp_path):
    tools = _versioned_tools()
    queries = [{"id": f"q{i}", "query": f"turn {i}", "gold": [t["id"]]} for i, t in enumerate(tools)]
    source = _write_set(tmp_path / "sgd", tools, queries)
    info = write_tool_disjoint_split(source, tmp_path / "out", ToolSplitConfig(eval_fraction=0.4, merge_versions=True))
    _check_disjoint(tmp_path / "out")
    assert info["merged"]["tools_before"] == 8 and info["merged"]["tools_after"] == 6
    assert info["merged"]["groups"]["sgd:Restaurants.ReserveRestaurant"] == [
        "sgd:Restaurants_1.ReserveRestaurant", "sgd:Restaurants_2.ReserveRestaurant"]
    rows = [json.loads(line) for part in ("train", "eval")
            for line in (tmp_path / "out" / part / "queries.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and info["dropped_straddling"] == 0  # every turn kept, its gold the merged tool
    gold = {r["id"]: r["gold"] for r in rows}
    assert gold["q0"] == gold["q1"] == ["sgd:Restaurants.ReserveRestaurant"]
    assert gold["q2"] == ["sgd:Services_1.BookAppointment"]


def test_split_command_splits_each_public_set_its_own_way(tiny_benchmark, tmp_path, capsys):
    import shutil

    shared = tmp_path / "shared"
    for name in SHARED_SETS:  # a stand-in for each public set (tiny_benchmark is tmp_path itself)
        shutil.copytree(tiny_benchmark, shared / name, ignore=shutil.ignore_patterns("shared"))
    assert main(["split", "--shared-data", str(shared), "--out", str(tmp_path / "out"), "--seed", "2"]) == 0
    sets = json.loads(capsys.readouterr().out)["sets"]
    assert sorted(sets) == sorted(SHARED_SETS) == sorted(["bfcl", "metatool", "nestful", "restbench", "toolalpaca",
                                                          "gorilla_apibench", "sgd"])
    for name, info in sets.items():
        assert info["config"] == {**PUBLIC_SPLITS[name].__dict__, "seed": 2}, name  # the flag replaced the seed only
    assert sets["nestful"]["config"]["draw"] == "gold_sets" and sets["sgd"]["config"]["merge_versions"]
    assert main(["split", str(tiny_benchmark), "--out", str(tmp_path / "named"), "--draw", "gold_sets",
                 "--merge-versions"]) == 0
    named = json.loads(capsys.readouterr().out)["sets"][tiny_benchmark.name]
    assert named["config"] == {"eval_fraction": 0.3, "seed": 0, "draw": "gold_sets", "merge_versions": True}

"""The decomposer's data from public-format folders (rows with gold tools and no sub-task texts, as
bfcl and metatool are): multi-tool queries join GRPO only, short single-tool queries join both
stages kept whole in a capped share, the split's evaluation tools never occur, and a tiny SFT and
GRPO run on generated plus public folders records the counts per folder."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
pytest.importorskip("transformers", reason="needs the train extra: pip install -e .[train]")

from magicselector.data.datasets import load_benchmark  # noqa: E402
from magicselector.data.splits import ToolSplitConfig, write_tool_disjoint_split  # noqa: E402
from magicselector.errors import InputError  # noqa: E402
from magicselector.train.decomposer import (  # noqa: E402
    NEUTRAL_PREFERENCE,
    DecomposerSFTConfig,
    GRPOConfig,
    keep_whole_cap,
    public_examples,
    training_examples,
    train_decomposer_grpo,
    train_decomposer_sft,
)
from test_train_decomposer import GRPO_TINY, TOOLS, toy_retrieve, write_decomposer_data, write_tiny_lm  # noqa: E402

PUBLIC_ROWS = [
    {"id": "p1", "history": [], "query": "turn on bluetooth and then play some jazz",
     "gold": ["bluetooth_toggle", "play_music"], "category": "multi"},
    {"id": "p2", "history": [], "query": "what is the weather in Oslo, and email it to Kim",
     "gold": ["get_weather", "send_email"], "category": "multi"},
    {"id": "p3", "history": [], "query": "set an alarm for six   thirty", "gold": ["set_alarm"], "category": "single"},
    {"id": "p4", "history": [], "query": "start a countdown of ten minutes", "gold": ["start_timer"],
     "category": "single"},
    {"id": "p5", "history": [], "query": "play the new album by that band", "gold": ["play_music"],
     "category": "single"},
    # a repeat of p3 (same prompt, same gold): counted once
    {"id": "p6", "history": [], "query": "set an alarm for six thirty", "gold": ["set_alarm"], "category": "single"},
    # history: its sub-task would have to resolve "it" from the dialogue, so it is not kept whole
    {"id": "p7", "history": [{"role": "user", "content": "what's the weather in Rome?"}],
     "query": "email it to Kim", "gold": ["send_email"], "category": "single"},
    # longer than the runtime's line limit (max_chars): the grammar could not write it as one task
    {"id": "p8", "history": [], "query": "please " + "really " * 20 + "turn bluetooth off",
     "gold": ["bluetooth_toggle"], "category": "single"},
]


def write_public(d: Path, tools: list[dict] = TOOLS, rows: list[dict] = PUBLIC_ROWS) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tools))
    (d / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_decomposer_data(tmp_path_factory.mktemp("generated"))


@pytest.fixture(scope="module")
def public(tmp_path_factory) -> Path:
    return write_public(tmp_path_factory.mktemp("public") / "pub")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    return write_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


def test_public_rows_become_multi_tool_and_keep_whole_examples(public):
    multi, whole = public_examples(public)
    assert [ex.id for ex in multi] == ["0:p1", "0:p2"]
    assert all(ex.kind == "multi_tool" and ex.tasks == () and ex.target == "" for ex in multi)
    assert multi[1].gold == ("get_weather", "send_email")
    assert [ex.id for ex in whole] == ["0:p3", "0:p4", "0:p5"]  # p6 repeats p3; p7 has history; p8 is too long
    assert all(ex.kind == "keep_whole" and ex.tasks == (ex.query,) and len(ex.gold) == 1 for ex in whole)
    assert whole[0].tasks == ("set an alarm for six thirty",)  # whitespace folded as Selector.select does


def test_a_generated_folder_gives_no_public_examples(data):
    assert public_examples(data) == ([], [])  # its rows without tasks (q4) stay out, as before


def test_multi_tool_queries_join_grpo_only_and_keep_whole_is_capped(data, public):
    benches = [load_benchmark(data), load_benchmark(public)]
    sft, sources = training_examples(benches, "sft", keep_whole_share=0.5, seed=0)
    assert [ex.kind for ex in sft] == ["tasks"] * 3 + ["keep_whole"] * 3  # cap: 0.5 of the run -> 3 of 3
    assert sources[0] == {"format": "generated", "split": None, "multi_tool_available": 0, "keep_whole_available": 0}
    assert sources[1] == {"format": "public", "split": None, "multi_tool_available": 2, "keep_whole_available": 3}
    grpo, _ = training_examples(benches, "grpo", keep_whole_share=0.25, seed=0)
    kinds = [ex.kind for ex in grpo]
    assert kinds.count("tasks") == 3 and kinds.count("multi_tool") == 2
    assert kinds.count("keep_whole") == keep_whole_cap(0.25, 5) == 1  # at most a quarter of the 6
    assert [ex.bench for ex in grpo] == sorted(ex.bench for ex in grpo)
    one, _ = training_examples(benches, "grpo", keep_whole_share=0.25, seed=0)
    assert [ex.id for ex in one] == [ex.id for ex in grpo]  # seeded
    draws = {tuple(ex.id for ex in training_examples(benches, "grpo", 0.25, seed)[0] if ex.kind == "keep_whole")
             for seed in range(8)}
    assert len(draws) > 1  # the seed picks which one
    assert not [ex for ex in training_examples(benches, "sft", 0.0, 0)[0] if ex.kind == "keep_whole"]
    with pytest.raises(InputError, match="keep_whole_share"):
        GRPOConfig(keep_whole_share=1.0)


def test_split_train_part_never_names_an_eval_tool_and_the_eval_part_is_refused(tmp_path):
    tools = [{"id": f"tool_{i}", "name": f"tool_{i}", "description": f"Does thing number {i}."} for i in range(20)]
    rows = [{"id": f"m{i}", "history": [], "query": f"do thing {i} and thing {(i + 1) % 20}",
             "gold": [f"tool_{i}", f"tool_{(i + 1) % 20}"]} for i in range(20)]
    rows += [{"id": f"s{i}", "history": [], "query": f"do thing {i}", "gold": [f"tool_{i}"]} for i in range(20)]
    source = write_public(tmp_path / "pub", tools, rows)
    info = write_tool_disjoint_split(source, tmp_path / "split", ToolSplitConfig(eval_fraction=0.3, seed=1))
    eval_tools = {t.id for t in load_benchmark(tmp_path / "split" / "eval").catalog}
    assert len(eval_tools) == info["parts"]["eval"]["tools"] == 6
    bench = load_benchmark(tmp_path / "split" / "train")
    examples, sources = training_examples([bench], "grpo", keep_whole_share=0.5, seed=0)
    assert {ex.kind for ex in examples} == {"multi_tool", "keep_whole"}
    assert all(not set(ex.gold) & eval_tools for ex in examples)
    assert sources[0]["split"]["part"] == "train" and sources[0]["split"]["tools"] == 14
    with pytest.raises(InputError, match="evaluation part"):
        training_examples([load_benchmark(tmp_path / "split" / "eval")], "grpo", 0.2, 0)


def test_tiny_sft_and_grpo_on_generated_and_public_folders(data, public, tiny_lm, tmp_path):
    cfg = DecomposerSFTConfig(steps=2, batch_size=3, lr=1e-2, threads=1, keep_whole_share=0.5)
    sft = train_decomposer_sft(tiny_lm, [data, public], tmp_path / "sft", cfg, progress=False)
    assert sft["counts"]["examples_by_kind"] == {"tasks": 3, "multi_tool": 0, "keep_whole": 3}
    assert [d["examples"] for d in sft["data"]] == [3, 3]
    assert sft["data"][1]["format"] == "public" and sft["data"][1]["multi_tool_available"] == 2
    assert json.loads((tmp_path / "sft" / "train_config.json").read_text())["data"] == sft["data"]

    # only the public folder, no keep-whole: every group is a multi-tool query without reference tasks
    grpo_cfg = GRPOConfig(**{**GRPO_TINY, "keep_whole_share": 0.0})
    out = tmp_path / "grpo"
    summary = train_decomposer_grpo(tmp_path / "sft", [public], out, grpo_cfg, retrieve=toy_retrieve, progress=False)
    assert summary["counts"]["examples_by_kind"] == {"tasks": 0, "multi_tool": 2, "keep_whole": 0}
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 2 * 4
    for s in samples:
        assert s["kind"] == "multi_tool" and s["gold_tasks"] == []
        assert s["r_pref"] == NEUTRAL_PREFERENCE
        assert s["reward"] == pytest.approx(0.5 * NEUTRAL_PREFERENCE + s["r_cf"])
    assert summary["parser_agreement"]["examples"] == 0  # nothing to parse without targets


def test_sft_on_public_multi_tool_queries_alone_explains_why_there_is_nothing(public, tiny_lm, tmp_path):
    with pytest.raises(InputError, match="GRPO only"):
        train_decomposer_sft(tiny_lm, [public], tmp_path / "x", DecomposerSFTConfig(steps=1, keep_whole_share=0.0),
                             progress=False)


def test_cli_takes_several_folders_and_the_keep_whole_share(data, public, tiny_lm, tmp_path, capsys):
    from magicselector.cli.train_decomposer import add_decomposer_parser

    p = argparse.ArgumentParser()
    add_decomposer_parser(p.add_subparsers(dest="train_command", required=True))
    args = p.parse_args(["decomposer", "--stage", "sft", "--data", str(data), str(public), "--out",
                         str(tmp_path / "m"), "--base-model", str(tiny_lm), "--steps", "1", "--threads", "1",
                         "--keep-whole-share", "0.4", "--quiet"])
    assert args.func(args) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts["examples_by_kind"] == {"tasks": 3, "multi_tool": 0, "keep_whole": keep_whole_cap(0.4, 3)}
    config = json.loads((tmp_path / "m" / "train_config.json").read_text())["config"]
    assert config["keep_whole_share"] == 0.4

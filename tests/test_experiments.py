"""Smoke tests of bench/experiments/: each experiment runs on a tiny set written here, with the shipped models, and gives what the pipeline gives."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from magicselector.config import SelectorConfig

from magicselector.bench.experiments import cut_grid, domains, embedder_eval, fold_eval, worst_history, zero_shot
from magicselector.bench.experiments.common import part_arg

pytestmark = pytest.mark.slow


def tiny(tiny_benchmark: Path) -> str:
    return f"tiny={tiny_benchmark}"


def test_a_part_must_be_a_benchmark_folder(tmp_path, tiny_benchmark):
    assert part_arg(f"x={tiny_benchmark}") == ("x", tiny_benchmark)
    assert part_arg(str(tiny_benchmark))[1] == tiny_benchmark
    with pytest.raises(argparse.ArgumentTypeError, match="tools.jsonl and queries.jsonl"):
        part_arg(f"x={tmp_path / 'nowhere'}")
    with pytest.raises(SystemExit):
        fold_eval.main(["--n", "2"])  # no part at all


def test_fold_eval_measures_the_shipped_pipeline_and_the_budget(tmp_path, tiny_benchmark, bundle_dir):
    out = tmp_path / "fold.json"
    res = fold_eval.main([tiny(tiny_benchmark), "--bundle", str(bundle_dir), "--n", "4", "--out", str(out)])
    row = res["parts"]["tiny"]
    assert json.loads(out.read_text())["parts"]["tiny"] == row
    assert row["C@10"] == 1.0  # six tools: every gold tool is in the top 10
    assert row["C@K"] >= 0.75 and row["NDCG@10"] >= 0.75  # the shipped models find these easy ones
    assert 1 <= row["K"] <= SelectorConfig().cut.k_max and row["tokens"] > 0
    one = fold_eval.main([tiny(tiny_benchmark), "--bundle", str(bundle_dir), "--n", "4",
                          "--config", '{"max_tools": 1}'])["parts"]["tiny"]
    assert one["K"] == 1.0 and one["C@K"] <= 0.75  # the two-tool turn cannot be complete with one tool
    plain = fold_eval.main([tiny(tiny_benchmark), "--bundle", str(bundle_dir), "--n", "4", "--head", "none",
                            "--history", "none"])
    assert plain["history"] == "none" and plain["head"] == "none"


def test_cut_grid_reapplies_the_shipped_cut_as_select_does(tmp_path, tiny_benchmark, bundle_dir):
    rankings = tmp_path / "rankings.pkl"
    stored, head = cut_grid.main(["collect", tiny(tiny_benchmark), "--bundle", str(bundle_dir), "--n", "4",
                                  "--out", str(rankings)])
    assert len(stored["tiny"]) == 4 and head is not None
    selected = fold_eval.main([tiny(tiny_benchmark), "--bundle", str(bundle_dir), "--n", "4"])["parts"]["tiny"]
    report = cut_grid.main(["report", str(rankings)])["tiny"]
    assert report["cut"][1]["C@K"] == pytest.approx(selected["C@K"])  # offline == select
    assert report["cut"][1]["meanK"] == pytest.approx(selected["K"])
    shipped = SelectorConfig().cut
    out = tmp_path / "grid.json"
    found = cut_grid.main(["grid", str(rankings), "--vary", f"range_margin={shipped.range_margin},0.05",
                           "--vary", "k_max=1,10", "--out", str(out)])
    assert len(found["found"]) == 4 and json.loads(out.read_text())["reference"] == found["reference"]
    by = {(f["cut"]["range_margin"], f["cut"]["k_max"]): f for f in found["found"]}
    assert by[(shipped.range_margin, 10)]["holds"]  # the shipped cut holds itself
    assert by[(0.05, 1)]["meanK"] == 1.0 and not by[(0.05, 1)]["holds"]  # one tool loses the two-tool turn
    with pytest.raises(SystemExit, match="not a CutConfig field"):
        cut_grid.main(["grid", str(rankings), "--vary", "margin=1"])


def test_embedder_eval_with_the_bundles_own_embedder_ranks_as_the_bundle(tiny_benchmark, bundle_dir):
    shipped = fold_eval.main([tiny(tiny_benchmark), "--bundle", str(bundle_dir), "--n", "4"])["parts"]["tiny"]
    res = embedder_eval.main(["--model", str(bundle_dir / "embedder" / "model.onnx"), "--tokenizer",
                              str(bundle_dir / "embedder" / "tokenizer.json"), tiny(tiny_benchmark),
                              "--bundle", str(bundle_dir), "--n", "4"])["parts"]["tiny"]
    assert res["C@5"] == shipped["C@5"] and res["C@K"] == shipped["C@K"]
    with pytest.raises(SystemExit, match="--tokenizer"):
        embedder_eval.main(["--model", str(bundle_dir / "embedder" / "model.onnx"), tiny(tiny_benchmark)])


@pytest.mark.extra("export")
def test_zero_shot_minilm_finds_the_easy_tools(tiny_benchmark):
    res = zero_shot.main([tiny(tiny_benchmark), "--n", "4"])["tiny"]["minilm"]
    assert res["C@10"] == 1.0 and res["C@5"] >= 0.75
    cut = zero_shot.model_arg("m=/x/y@0,2")
    assert cut == ("m@0,2", "/x/y", [0, 2])


def test_domains_counts_each_domain_of_a_turn(tmp_path, tiny_benchmark, bundle_dir):
    rows = [json.loads(line) for line in (tiny_benchmark / "queries.jsonl").read_text().splitlines()]
    for row, doms in zip(rows, (["clock"], ["connectivity", "media"], ["weather"], ["clock"])):
        row["domains"] = doms
    (tiny_benchmark / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = domains.main([tiny(tiny_benchmark), "--bundle", str(bundle_dir), "--n", "4"])["tiny"]
    assert res["all"][1] == 4 and res["clock"][1] == 2 and res["media"][1] == 1
    assert list(res)[0] == "all" and 0.5 <= res["all"][0] <= 1.0
    slots = json.loads((Path(domains.__file__).parents[2] / "data" / "mobile" / "slots.json").read_text())
    show = slots["podcast_show"][0]
    assert domains.title_editor("X")(f"play {show} now") == "play X now"


def test_worst_history_never_raises_a_raw_error(bundle_dir):
    for case in ("limits", "nonstrkeys"):
        out = worst_history.run(case, str(bundle_dir))
        assert out["case"] == case and out["idle_rss_mb"] > 0
        for what in ("bounded_history", "select"):
            assert not out[what]["result"].startswith("RAW"), out
    assert worst_history.run("limits", str(bundle_dir))["select"]["result"] == "ok"

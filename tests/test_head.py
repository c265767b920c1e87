"""The learned head (runtime/stages/head.py): its features, its file, its order and cut, the shipped head in the default bundle, and its trainer (train/head.py)."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from magicselector.errors import BundleError, InputError
from magicselector.stages.cut import CutConfig
from magicselector.stages.head import FEATURES, HeadModel, head_features, head_order

F = {name: i for i, name in enumerate(FEATURES)}


def test_features_read_each_lists_rank_and_role():
    # anchor, one sub-task list, the history-folded list
    lists = [(["a", "b", "c"], [3.0, 2.0, 1.0]), (["b", "a"], [4.0, 1.0]), (["c", "a", "b"], [2.0, 1.5, 1.0])]
    rows = head_features(lists, 2, ["b", "a", "c"], [4.0, 3.0, 2.0], depth=2)
    assert rows.shape == (2, len(FEATURES))  # only the first `depth` fused tools
    b, a = rows
    assert b[F["fused_rank"]] == 0 and a[F["fused_rank"]] == 1
    assert a[F["fused_gap"]] == pytest.approx(1.0)
    assert b[F["lists"]] == 3 and b[F["decomposed"]] == 1
    assert b[F["log_anchor_rank"]] == pytest.approx(math.log1p(1))
    assert b[F["log_subtask_rank"]] == 0.0 and b[F["log_history_rank"]] == pytest.approx(math.log1p(2))
    assert b[F["count_top1"]] == 1 and b[F["count_top3"]] == 3 and b[F["share_top1"]] == pytest.approx(1 / 3)
    assert a[F["best_rank"]] == 0 and a[F["count_top1"]] == 1
    # a's gap below each list's top, on that list's spread of its first 10: 0, 1, 0.5
    assert a[F["min_norm_gap"]] == 0.0 and a[F["mean_norm_gap"]] == pytest.approx(0.5)
    assert a[F["reciprocal_ranks"]] == pytest.approx(1 + 1 / 2 + 1 / 2)


def test_a_tool_no_sub_task_list_holds_reads_absent():
    rows = head_features([(["a"], [1.0])], None, ["a"], [1.0], depth=20)
    assert rows[0][F["in_subtask"]] == 0 and rows[0][F["in_history"]] == 0 and rows[0][F["in_anchor"]] == 1
    assert rows[0][F["log_subtask_rank"]] == pytest.approx(math.log1p(30))


def _model(bias: float = 0.0) -> HeadModel:
    # one layer: the logit falls with the fused rank
    w = np.zeros((len(FEATURES), 1))
    w[F["fused_rank"], 0] = -1.0
    return HeadModel(np.zeros(len(FEATURES)), np.ones(len(FEATURES)), ((w, np.array([bias])),), depth=20)


def test_the_file_round_trips_and_gives_the_same_probabilities():
    model = _model(0.5)
    rows = head_features([(list("abcd"), [4.0, 3.0, 2.0, 1.0])], None, list("abcd"), [4.0, 3.0, 2.0, 1.0], 20)
    back = HeadModel.from_bytes(json.dumps(model.to_json()).encode())
    assert np.allclose(back.probabilities(rows), model.probabilities(rows))
    assert model.probabilities(rows)[0] == pytest.approx(1 / (1 + math.exp(-0.5)))


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(format="other"), "magicselector-head"),
    (lambda d: d.update(features=d["features"][:-1]), "features"),
    (lambda d: d.update(depth=0), "depth"),
    (lambda d: d.update(scale=[0.0] * len(FEATURES)), "scale"),
    (lambda d: d.update(mean=["x"] * len(FEATURES)), "mean"),
    (lambda d: d["layers"][0].update(weight=[[1.0]]), "layers[0].weight"),
    (lambda d: d["layers"][0].update(bias=[float("nan")]), "bias"),
    (lambda d: d.update(layers=[]), "layers"),
])
def test_a_malformed_file_is_a_bundle_error_naming_the_field(change, field):
    raw = _model().to_json()
    change(raw)
    with pytest.raises(BundleError, match=field.replace("[", r"\[").replace("]", r"\]")):
        HeadModel.from_bytes(json.dumps(raw).encode(), "head.json")
    with pytest.raises(BundleError, match="head.json"):
        HeadModel.from_bytes(b"\xff not json", "head.json")


def test_head_order_sorts_the_kept_tools_and_drops_the_unlikely():
    probs = np.array([0.2, 0.9, 0.0005, 0.3, 0.8])
    order, k = head_order(probs, [0, 1, 2, 3, 4], 3, min_probability=0.001)
    assert order[:k] == [1, 0] and k == 2  # kept 0, 1, 2 by probability; 2 is under the floor
    assert order[k:] == [4, 3, 2]          # the rest by probability
    # the surest kept tool stays even under the floor; a position past the scored ones counts 0
    order, k = head_order(np.array([0.0001]), [1, 0], 2, min_probability=0.5)
    assert (order, k) == ([0, 1], 1)
    # k_max keeps the likeliest of the kept ones, not the first in the cut's order
    order, k = head_order(probs, [0, 2, 3, 4, 1], 5, min_probability=0.001, k_max=2)
    assert order[:k] == [1, 4] and k == 2 and sorted(order) == [0, 1, 2, 3, 4]


def test_min_probability_is_checked():
    with pytest.raises(InputError, match="min_probability"):
        CutConfig(min_probability=1.5)


@pytest.fixture(scope="module")
def shipped(home):
    from magicselector import Selector
    return Selector.from_bundle()


TURNS = ["text Sam that I'm running ten minutes late", "turn on bluetooth and set an alarm for 7",
         "what's the weather tomorrow in Paris", "play some jazz and remind me to call mom at 5"]


def test_the_default_bundle_ships_a_head_and_select_uses_it(shipped):
    assert shipped.head is not None and shipped.bundle.section("head")["file"] == "head.json"
    cut = shipped.with_config(max_tools=None)  # the default budget takes the first five of either order
    off = cut.with_config(head=False)
    for turn in TURNS:
        s, plain = cut.select(turn), off.select(turn)
        probs = [t.probability for t in s.tools]
        assert all(p is not None and 0 <= p <= 1 for p in probs)
        assert probs == sorted(probs, reverse=True)  # best first
        assert s.cut.rule == plain.cut.rule + "+head"
        # the head only ever drops from the cut's kept tools, never adds one
        assert set(s.ids) <= set(plain.ids) and s.k >= 1
        assert all(p >= shipped.config.cut.min_probability for p in probs[1:])
        assert all(t.probability is None for t in plain.tools)


def test_the_head_reorders_but_a_fixed_k_stays_k(shipped):
    from magicselector.bench.cut_rules import FixedCut

    fixed = shipped.with_config(cut=FixedCut(7), max_tools=None)
    for turn in TURNS:
        s = fixed.select(turn)
        assert s.k == 7 and "+head" in s.cut.rule


def test_the_head_picks_k_max_tools_among_all_the_per_list_cuts_kept(shipped):
    """A decomposed turn's per-list cuts can keep more than k_max together; the bound then drops
    the least likely, so it keeps the likeliest k_max, not the first in fused order."""
    turn = "turn on bluetooth and set an alarm for 7 and play some jazz and remind me to call mom"
    loose = shipped.with_config(cut=replace(shipped.config.cut, min_probability=0.0, k_max=20))
    wide = loose.select(turn)
    assert wide.cut.pool is not None and wide.k > 4
    for k_max in (2, 4):
        s = loose.with_config(cut=replace(loose.config.cut, k_max=k_max)).select(turn)
        assert s.k == k_max and s.ids == wide.ids[:k_max]
    assert shipped.config.cut.k_max == 10 and all(shipped.select(t).k <= 10 for t in TURNS)


def test_a_budget_spends_in_the_heads_order(shipped):
    for turn in TURNS:
        full, five = shipped.select(turn), shipped.select(turn, max_tools=2)
        assert five.ids == full.ids[:2]


def test_a_bad_head_file_fails_the_build(home, tmp_path):
    from magicselector.bundle_writer import build_bundle
    from magicselector.catalog import load_phone_catalog
    from magicselector.default_bundle import shipped_embedder

    bad = tmp_path / "head.json"
    bad.write_text(json.dumps({"format": "magicselector-head", "version": 1}))
    emb = shipped_embedder()
    with pytest.raises(BundleError, match="head.json"):
        build_bundle(tmp_path / "b", embedder_onnx=emb["onnx"], tokenizer_file=emb["tokenizer"],
                     catalog=load_phone_catalog(), embedder_meta=emb["meta"], head=bad, log=lambda m: None)
    assert not (tmp_path / "b").exists()


@pytest.mark.extra("train", modules=("torch",))  # magicselector.train imports torch
def test_train_head_config_names_a_bad_history_mode():
    from magicselector.train.head import HeadTrainConfig
    with pytest.raises(InputError, match="history must be one of"):
        HeadTrainConfig(history="assistant")


@pytest.mark.extra("train", modules=("sklearn", "torch"))
def test_train_head_fits_a_head_that_ranks_gold_tools_up(home, tmp_path):
    from magicselector import Selector
    from magicselector.data.datasets import load_benchmark
    from magicselector.data.mobile import GeneratorConfig, generate_benchmark
    from magicselector.train.head import HeadTrainConfig, head_rows, train_head

    generate_benchmark(tmp_path / "mobile", GeneratorConfig(seed=0))
    out = tmp_path / "head.json"
    config = HeadTrainConfig(max_queries_per_folder=150, max_iter=200, history="questions")
    summary = train_head([tmp_path / "mobile" / "train"], out, config, log=lambda m: None)
    assert summary["rows"] > 0 and 0 < summary["relevant"] < summary["rows"]
    model = HeadModel.from_bytes(out.read_bytes())
    assert model.meta["data"][0]["queries_read"] == 150
    assert model.meta["config"]["history"] == "questions"  # the fold the rankings were made under
    # on turns it was not fitted on, a gold tool gets a higher probability than a non-gold one
    x, y, _ = head_rows(Selector.from_bundle(), load_benchmark(tmp_path / "mobile" / "test"),
                        HeadTrainConfig(max_queries_per_folder=100))
    p = model.probabilities(x)
    auc = np.mean([pg > pn for pg in p[y] for pn in p[~y][:2000]])
    assert auc > 0.85
    with pytest.raises(InputError, match="exists"):
        train_head([tmp_path / "mobile" / "train"], out, config, log=lambda m: None)

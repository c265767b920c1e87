"""The rerank stage with the reranker that ships in the package (real INT8 ONNX model)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from magicselector.bundle import shipped_reranker_dir
from magicselector.catalog import Tool, tool_text
from magicselector.errors import BundleError, InputError
from magicselector.stages.rerank import CrossEncoder, PairTokenizer, read_reranker_meta
from magicselector.targets import TARGETS


@pytest.fixture(scope="module")
def shipped():
    d = shipped_reranker_dir()
    assert d is not None, "the package ships a reranker folder (magicselector/models/reranker)"
    return d


@pytest.fixture(scope="module")
def reranker(shipped):
    return CrossEncoder.from_dir(shipped, threads=2)


def test_shipped_artifact_is_small_and_documented(shipped):
    meta = read_reranker_meta(shipped)
    assert sorted(meta["targets"]) == sorted(TARGETS)  # one INT8 file per quantization of the CPU targets
    for name, entry in meta["files"].items():
        assert (shipped / name).stat().st_size <= 25 * 2 ** 20
        assert entry["quantization"]["type"] == "dynamic-int8" and entry["quantization"]["per_channel"]
        assert entry["parity"]["spearman"] >= 0.9  # INT8 against the FP32 checkpoint it came from
    assert meta["truncation"] == "query_capped" and meta["max_length"] >= 32
    card = (shipped / "MODEL_CARD.md").read_text()
    for needed in ("magicselector train reranker", "sha256", "seed", "NDCG@10"):
        assert needed in card


@pytest.mark.parametrize("query, relevant, irrelevant", [
    ("turn on bluetooth", "bluetooth_toggle", "get_current_weather"),
    ("wake me up at 6:30 tomorrow", "set_alarm", "send_email"),
    ("what's the weather like in Lisbon this weekend", "get_weather_forecast", "set_alarm"),
])
def test_int8_reranker_ranks_the_relevant_tool_above_an_irrelevant_one(reranker, selector, query, relevant,
                                                                          irrelevant):
    cat = selector.catalog
    s = reranker.score(query, [tool_text(cat.get(relevant)), tool_text(cat.get(irrelevant))])
    assert s[0] > s[1] + 1.0, s


def test_bad_input(reranker):
    assert reranker.score("turn on bluetooth", []).shape == (0,)  # empty candidate list: nothing to score
    with pytest.raises(InputError, match="empty"):
        reranker.score("   ", ["bluetooth toggle: Turn Bluetooth on or off."])
    with pytest.raises(InputError, match="list of tool texts"):
        reranker.score("turn on bluetooth", "bluetooth toggle")
    # A tool with no description is scored from its name.
    bare = Tool(id="bluetooth_toggle", name="bluetooth_toggle", description="", parameters={})
    s = reranker.score("turn on bluetooth", [tool_text(bare), "play music: Play songs"])
    assert np.isfinite(s).all() and s[0] > s[1]


def test_a_query_longer_than_the_window_keeps_the_tool_side(reranker, shipped):
    meta = read_reranker_meta(shipped)
    tok: PairTokenizer = reranker.tokenizer
    long_query = "please turn on bluetooth " + " ".join(["and also remember the thing I said before"] * 200)
    long_tool = "bluetooth toggle: Turn Bluetooth on or off. " + "It also manages paired devices. " * 30
    batch = tok.encode_pairs([(long_query, long_tool), (long_query, "bluetooth toggle: Turn Bluetooth on or off.")])
    ids, types = batch["input_ids"], batch["token_type_ids"]
    assert ids.shape[1] == meta["max_length"]  # both long: the window is full ...
    assert int(types[0].sum()) == meta["max_length"] - tok.specials - tok.query_cap + 1  # ... tool side + its [SEP]
    assert int(types[1].sum()) >= 10  # a short tool keeps all of its tokens next to a capped query
    s = reranker.score(long_query, ["bluetooth toggle: Turn Bluetooth on or off.", "play music: Play songs"])
    assert np.isfinite(s).all() and s[0] > s[1]


def test_query_capped_matches_training(shipped):
    pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
    from magicselector.train.reranker import PairEncoder

    meta = read_reranker_meta(shipped)
    runtime = PairTokenizer(shipped / "tokenizer.json", meta["max_length"], "query_capped", meta["min_tool_tokens"])
    train = PairEncoder(shipped / "tokenizer.json", meta["max_length"], meta["min_tool_tokens"], "query_capped")
    qs = ["hi", "turn on bluetooth " * 30, "set an alarm for 7 and text mom I'm late"]
    ts = ["bluetooth toggle: Turn Bluetooth on or off. " * 10, "alarm", "send sms: Send a text message."]
    a = runtime.encode_pairs(list(zip(qs, ts)))
    b = train.encode(qs, ts)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_reranker_folder_errors(shipped, tmp_path):
    with pytest.raises(BundleError, match="not a reranker folder"):
        CrossEncoder.from_dir(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(shipped, broken)
    (broken / "reranker.json").write_text("{not json")
    with pytest.raises(BundleError, match="unreadable"):
        CrossEncoder.from_dir(broken)
    meta = read_reranker_meta(shipped)
    (broken / "reranker.json").write_text(json.dumps({**meta, "max_length": 64, "truncation": "sideways"}))
    with pytest.raises(InputError, match="truncation"):
        CrossEncoder.from_dir(broken)


def test_default_bundle_carries_the_shipped_reranker(selector, shipped):
    rr = selector.bundle.section("reranker")
    assert rr and rr["truncation"] == "query_capped"
    assert rr["parity"]["against"] == "pytorch-fp32" and "top1_agreement" in rr["parity"]
    assert selector.reranker is not None and not selector.config.rerank  # carried, off by default (docs/bench/defaults.md)
    on = selector.with_config(rerank=True, decompose="none", rerank_skip_margin=None)
    out = on.select("turn on bluetooth and play some jazz")
    assert "rerank" in out.timings_ms and out.candidates >= 1 and out.reranked == 1
    assert len(out.lists) == 1 and len(out.ranked_ids) == on.config.rerank_candidates
    assert "rerank" not in selector.select("turn on bluetooth and play some jazz").timings_ms
    assert on.with_config(decompose="rules").select(
        "turn on bluetooth and play some jazz").reranked == 1  # no skip: every turn reranked


class _CountingReranker:
    """The shipped cross-encoder, counting its calls and pairs."""

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, []

    def score(self, query, texts):
        self.calls.append(len(texts))
        return self.inner.score(query, texts)

    def score_pairs(self, pairs):
        self.calls.append(len(pairs))
        return self.inner.score_pairs(pairs)


def test_a_decomposed_turn_reranks_once_over_the_fused_head(selector):
    counting = _CountingReranker(selector.reranker)
    on = selector.with_config(rerank=True, decompose="rules", rerank_candidates=12,
                              rerank_skip_margin=None).with_reranker(counting)
    out = on.select("turn on bluetooth, then play some jazz and also set an alarm for 7 am")
    assert len(out.lists) >= 3  # the utterance and its sub-tasks
    assert counting.calls == [12] and len(out.ranked_ids) == 12
    texts = [t for t, _, _ in out.lists]
    assert {tool.subtask for tool in out.tools} <= set(texts)
    fused = on.with_config(rerank=False).rank(
        "turn on bluetooth, then play some jazz and also set an alarm for 7 am")  # the fused order, uncut and unheaded
    assert set(out.ranked_ids) == set(fused.ids[:12])  # the fused head, reordered; the rest dropped


def test_eval_no_rerank_switches_the_cross_encoder_off(bundle_dir, tiny_benchmark):
    from magicselector.bench.evaluate import EvalConfig, evaluate
    from magicselector.config import SelectorConfig

    on = evaluate(tiny_benchmark, EvalConfig(SelectorConfig(rerank=True)), bundle=bundle_dir, progress=False)
    off = evaluate(tiny_benchmark, EvalConfig(SelectorConfig(rerank=False)), bundle=bundle_dir, progress=False)
    assert evaluate(tiny_benchmark, EvalConfig(), bundle=bundle_dir, progress=False)["reranker"] is None  # shipped: off
    assert on["reranker"] == "bundle" and off["reranker"] is None
    assert on["overall"]["ndcg@10"] >= 0.5 and off["overall"]["ndcg@10"] >= 0.5


def test_rerank_skip_runs_no_cross_encoder_where_retrieval_is_sure(selector):
    utterance = "turn on bluetooth"
    off = selector.with_config(rerank=False).select(utterance)
    lead = off.ranked_scores[0] - off.ranked_scores[1]  # the fused head's top-1 lead, as the skip reads it
    assert lead > 0
    counting = _CountingReranker(selector.reranker)
    on = selector.with_config(rerank=True).with_reranker(counting)
    sure = on.with_config(rerank_skip_margin=lead / 2).select(utterance)
    assert counting.calls == [] and sure.reranked == 0
    assert sure.ids == off.ids and sure.ranked_ids == off.ranked_ids
    unsure = on.with_config(rerank_skip_margin=2 * lead).select(utterance)
    assert counting.calls == [on.config.rerank_candidates] and unsure.reranked == 1
    assert on.with_config(rerank_skip_margin=None).select(utterance).ids == unsure.ids  # None: every turn
    counting.calls.clear()
    on.with_config(rerank_skip_margin=0.0).select("play some jazz and set an alarm for 7")  # every lead is >= 0
    assert counting.calls == []
    from magicselector.config import SelectorConfig

    for bad in (-0.1, "wide"):
        with pytest.raises(InputError, match="rerank_skip_margin"):
            SelectorConfig(rerank_skip_margin=bad)

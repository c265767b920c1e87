"""The cross-encoder experiment (real INT8 ONNX model of bench/experiments/reranker) and the runtime without it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from magicselector.catalog import Tool, tool_text
from magicselector.errors import BundleError, InputError
from magicselector.data.cross_encoder import EXPERIMENT_RERANKER_DIR, CrossEncoder, PairTokenizer, read_reranker_meta
from magicselector.targets import TARGETS


@pytest.fixture(scope="module")
def shipped():
    d = EXPERIMENT_RERANKER_DIR
    if not (d / "reranker.json").is_file():
        pytest.skip("the experiment's reranker folder is in a source checkout only (bench/experiments/reranker)")
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


def test_the_runtime_carries_no_cross_encoder(selector):
    import importlib
    import importlib.util

    from magicselector.config import SelectorConfig

    assert importlib.util.find_spec("magicselector.stages.rerank") is None
    with pytest.raises(TypeError):
        SelectorConfig(rerank=True)  # type: ignore[call-arg]
    assert not any(name.startswith("rerank") for name in SelectorConfig.__dataclass_fields__)
    assert not hasattr(selector, "reranker") and not hasattr(selector, "with_reranker")
    out = selector.select("turn on bluetooth and play some jazz")
    assert "reranked" not in out.to_dict() and "rerank" not in out.timings_ms
    manifest = selector.bundle.manifest
    assert "reranker" not in manifest and not any(f.startswith("reranker/") for f in manifest["files"])
    assert not any(k.startswith("reranker") for k in json.loads((selector.bundle.path / "golden.json").read_text()))
    package = importlib.import_module("magicselector").__file__
    assert not (Path(package).parent / "models" / "reranker").exists()  # no model the runtime never loads


def test_a_bundle_built_with_a_reranker_still_opens_its_files_still_checked(bundle_dir, tmp_path):
    """A bundle built before the cross-encoder left (a ``reranker`` section, its files, golden scores)
    opens and selects as before: the section is ignored, its files still hashed against the manifest."""
    from magicselector import Selector
    from magicselector.bundle import MANIFEST, write_manifest
    from magicselector.bundle_check import verify_bundle

    old = tmp_path / "old"
    shutil.copytree(bundle_dir, old)
    (old / "reranker").mkdir()
    (old / "reranker" / "model.onnx").write_bytes(b"an INT8 cross-encoder, never loaded")
    (old / "reranker" / "tokenizer.json").write_text("{}")
    golden = json.loads((old / "golden.json").read_text())
    golden["reranker"] = [{"query": "turn on bluetooth", "text": "bluetooth toggle", "score": 3.1}]
    (old / "golden.json").write_text(json.dumps(golden) + "\n")
    manifest = json.loads((old / MANIFEST).read_text())
    for volatile in ("files", "content_sha256"):
        manifest.pop(volatile, None)
    manifest["reranker"] = {"file": "reranker/model.onnx", "tokenizer": "reranker/tokenizer.json",
                            "max_length": 64, "truncation": "query_capped"}
    write_manifest(old, manifest)
    want = Selector.from_bundle(bundle_dir).select("turn on bluetooth and play some jazz")
    got = Selector.from_bundle(old).select("turn on bluetooth and play some jazz")
    assert got.ids == want.ids and got.ranked_ids == want.ranked_ids
    assert verify_bundle(old)["smoke_selection"]
    (old / "reranker" / "model.onnx").write_bytes(b"damaged")
    with pytest.raises(BundleError, match="reranker/model.onnx"):
        Selector.from_bundle(old)


def test_rerank_fused_skips_where_retrieval_is_sure_and_mixes_the_head():
    from magicselector.bench.experiments.rerank import RerankSettings, mix_scores, rerank_fused

    class Counting:
        name = "counting"

        def __init__(self) -> None:
            self.calls: list[int] = []

        def score_pairs(self, pairs):
            self.calls.append(len(pairs))
            return np.arange(len(pairs), dtype=np.float32)  # the last pair the best

    scores = np.asarray([0.9, 0.5, 0.4, 0.3], dtype=np.float32)
    pairs = lambda n: [("q", f"t{i}") for i in range(n)]  # noqa: E731
    ce = Counting()
    assert rerank_fused(ce, pairs, scores, RerankSettings(candidates=3, skip_margin=0.3)) is None and ce.calls == []
    order, mixed = rerank_fused(ce, pairs, scores, RerankSettings(candidates=3, weight=1.0, skip_margin=None))
    assert ce.calls == [3] and list(order) == [2, 1, 0] and len(mixed) == 3  # the head only, the CE's order
    assert list(rerank_fused(ce, pairs, scores, RerankSettings(candidates=3, weight=0.0, skip_margin=0.5))[0]) \
        == [0, 1, 2]  # weight 0: retrieval's order
    np.testing.assert_allclose(mix_scores(np.asarray([1.0, 1.0]), np.asarray([2.0, 0.0]), 0.5), [0.5, -0.5])
    for bad in ({"candidates": 0}, {"weight": 1.5}, {"skip_margin": -0.1}):
        with pytest.raises(InputError, match=next(iter(bad))):
            RerankSettings(**bad)


def test_the_experiment_scores_the_cross_encoder_on_top_of_the_shipped_ranking(selector, reranker, tiny_benchmark):
    from magicselector.bench.experiments.rerank import RerankSettings, run

    every = run([("tiny", tiny_benchmark)], selector, reranker, RerankSettings(skip_margin=None), n=50)
    none = run([("tiny", tiny_benchmark)], selector, reranker, RerankSettings(skip_margin=0.0), n=50)  # every lead >= 0
    part, kept = every["parts"]["tiny"], none["parts"]["tiny"]
    assert part["queries"] >= 3 and part["reranked_share"] == 1.0 and part["rerank_ms_p50"] > 0
    assert kept["reranked_share"] == 0.0 and kept["rerank_ms_p50"] is None
    assert kept["reranked"] == kept["shipped"] == part["shipped"]  # never reranked: the shipped rows exactly
    for row in (part["shipped"], part["reranked"]):
        assert set(row) >= {"C@5", "C@10", "NDCG@10", "C@K", "K", "tokens"} and 0 <= row["NDCG@10"] <= 1
    assert part["reranked"]["K"] <= RerankSettings().candidates  # the cut keeps tools of the reranked head
    # the relevant tools of a 6-tool catalog stay near the top under the in-domain cross-encoder
    assert part["reranked"]["C@5"] >= 0.5

"""``bench latency --compare``'s reranker rows: a real tiny reranker (trained here, exported to INT8 and
built into a bundle) against its FP32 ONNX and PyTorch source on the pairs the Selector scores, and
the reasons given when rows are missing. No timing thresholds."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from magicselector.bench.compare import _RecordingReranker, compare_latency, rerank_calls, rerank_variants
from magicselector.bench.latency import WORKLOAD
from magicselector.config import SelectorConfig
from magicselector.errors import InputError

# a single intent, a follow-up with history, a two-intent request (decomposed by the rules)
TURNS = [WORKLOAD[0], WORKLOAD[1], WORKLOAD[8]]
RERANK_ROWS = ("ours_rerank", "onnx_fp32_rerank", "pytorch_fp32_rerank")

TOOLS = [
    {"id": "set_alarm", "name": "set_alarm", "description": "Set an alarm that rings at a clock time."},
    {"id": "bluetooth_toggle", "name": "bluetooth_toggle", "description": "Turn Bluetooth on or off."},
    {"id": "play_music", "name": "play_music", "description": "Play songs, artists, albums or genres."},
    {"id": "get_weather", "name": "get_weather", "description": "Get the weather forecast for a city."},
]
QUERIES = [
    {"id": "q1", "history": [], "query": "wake me up at 7", "gold": ["set_alarm"], "category": "single"},
    {"id": "q2", "history": [], "query": "turn on bluetooth and play some jazz",
     "gold": ["bluetooth_toggle", "play_music"], "category": "multi"},
    {"id": "q3", "history": [], "query": "will it rain in Paris", "gold": ["get_weather"], "category": "single"},
]


@pytest.fixture(scope="module")
def tiny_reranker_bundle(tmp_path_factory, home) -> tuple[Path, Path]:
    """(bundle with a 1-layer trained reranker, the reranker's FP32 checkpoint): the shipped embedder and
    phone catalog, the reranker trained for one epoch on a 4-tool set (window 32 tokens), INT8 exported."""
    pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
    pytest.importorskip("transformers", reason="needs the train extra: pip install -e .[train]")
    pytest.importorskip("onnx", reason="needs the train extra: pip install -e .[train]")
    from magicselector.bundle_writer import build_bundle
    from magicselector.catalog import load_phone_catalog
    from magicselector.default_bundle import shipped_embedder
    from magicselector.export.bundle import PROBE_QUERIES, export_reranker, rerank_probe_groups
    from magicselector.train import RerankerTrainConfig, train_reranker

    root = tmp_path_factory.mktemp("compare-rerank")
    data = root / "data"
    data.mkdir()
    (data / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TOOLS))
    (data / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    ckpt = root / "ckpt"
    config = RerankerTrainConfig(layers=1, max_length=32, negatives=2, list_size=3, pool=3, batch_size=8,
                                 epochs_pointwise=1, epochs_listwise=1, rounds=0, threads=1)
    train_reranker(data, ckpt, config, retrieve=lambda texts, cat: [cat.ids[:-1] for _ in texts], progress=False)
    catalog = load_phone_catalog()
    exported = export_reranker(ckpt, root / "work", groups=rerank_probe_groups(catalog, PROBE_QUERIES[:2], per_query=4),
                               min_spearman=-1.0, log=lambda m: None)
    emb = shipped_embedder()
    build_bundle(root / "bundle", embedder_onnx=emb["onnx"], tokenizer_file=emb["tokenizer"], catalog=catalog,
                 embedder_meta=emb["meta"], reranker=exported, log=lambda m: None)
    return root / "bundle", ckpt


def _int8_vs_pytorch(bundle: Path, ckpt: Path) -> tuple[float, float]:
    """Mean Spearman and top-1 agreement of the bundle's INT8 reranker against the FP32 checkpoint's
    PyTorch logits, over the rerank calls the selector makes on TURNS."""
    import numpy as np

    from magicselector.bench.compare import rerank_calls, replay
    from magicselector.export.onnx import reranker_scores_torch
    from magicselector.ranks import spearman
    from magicselector.selector import Selector

    selector = Selector.from_bundle(bundle, config=SelectorConfig(history="all", threads=1))
    calls = [call for turn in rerank_calls(selector, TURNS) for call in turn]
    groups: dict[str, list[str]] = {}
    for _, pairs in calls:
        for q, t in pairs:
            groups.setdefault(q, []).append(t)
    ref = reranker_scores_torch(ckpt, groups)
    at = {(q, t): float(ref[q][i]) for q, texts in groups.items() for i, t in enumerate(texts)}
    rhos, same = [], []
    for call in calls:
        got, want = np.asarray(replay(selector.reranker, call)), np.asarray([at[p] for p in call[1]])
        rhos.append(spearman(got, want))
        same.append(float(np.argmax(got) == np.argmax(want)))
    return float(np.mean(rhos)), float(np.mean(same))


@pytest.mark.slow
def test_reranker_rows_against_the_fp32_source(tiny_reranker_bundle):
    bundle, ckpt = tiny_reranker_bundle
    lines = []
    res = compare_latency(bundle, runs=2, warmup=1, workload=TURNS, history_mode="all", include_pytorch=False,
                          include_bm25=False, reference_reranker=ckpt, progress=lines.append)
    for name in RERANK_ROWS:  # one sample per turn and run
        st = res["variants"][name]
        assert st["n"] == 2 * len(TURNS) and 0 < st["min"] <= st["p50"] <= st["p90"] <= st["max"], name
    for num in RERANK_ROWS[1:]:
        assert res["ratios"][f"{num} / ours_rerank"] > 0 and res["ratios_mean"][f"{num} / ours_rerank"] > 0
    rr = res["rerank"]
    assert rr["available"] and rr["int8_timed"] and rr["reference"] == str(ckpt)
    assert rr["turns"] == len(TURNS) and rr["model"]["layers"] == 1 and rr["model"]["max_length"] == 32
    assert 0 < rr["pairs_per_turn"]["mean"] <= rr["pairs_per_turn"]["max"] <= SelectorConfig().rerank_candidates
    assert 0 < rr["tokens_per_pair"]["mean"] <= rr["tokens_per_pair"]["max"] <= 32
    assert rr["fp32_onnx"]["size_bytes"] > 0 and len(rr["input_sha256"]) == 64
    ag = rr["agreement"]
    assert ag["onnx_fp32_vs_pytorch_max_abs_diff"] < 1e-3  # the exported FP32 ONNX is the checkpoint
    # the agreement is the bundle's INT8 scores against the checkpoint's PyTorch logits, call by call
    rho, top1 = _int8_vs_pytorch(bundle, ckpt)
    assert ag["int8_vs_fp32_spearman_per_call_mean"] == pytest.approx(rho, abs=0.05)
    assert ag["int8_vs_fp32_top1_same"] == pytest.approx(top1)
    assert res["config"]["reference_reranker"] == str(ckpt)
    assert any("exporting" in line for line in lines) and any("rerank turns x 3" in line for line in lines)

    from magicselector.cli.bench import latency_summary

    summary = latency_summary({"device": {}, "config": {}, "stages": {}, "cold_start_ms": 1.0, "peak_rss_mb": 1.0,
                               "compare": res})
    assert "| pytorch_fp32_rerank |" in summary and "- onnx_fp32_rerank / ours_rerank = " in summary
    assert "- rerank agreement: " in summary and "1 layers, window 32" in summary


@pytest.mark.slow
def test_recorded_calls_are_the_selectors_rerank(tiny_reranker_bundle):
    from magicselector.catalog import tool_text
    from magicselector.selector import Selector

    bundle, _ = tiny_reranker_bundle
    selector = Selector.from_bundle(bundle, config=SelectorConfig(history="all", threads=1))
    calls = rerank_calls(selector, TURNS)
    reranking = selector.with_config(rerank=True, rerank_skip_margin=None)
    texts = {tool_text(t): t.id for t in selector.catalog}
    for turn, turn_calls in zip(TURNS, calls):
        sel = reranking.select(turn["utterance"], turn["history"])
        assert turn_calls, turn["utterance"]
        (method, pairs), = turn_calls  # one call over the fused head, scored in that order
        assert method == "score_pairs"
        assert len(pairs) == min(len(sel.ranked_ids), reranking.config.rerank_candidates)
        assert {texts[t] for _, t in pairs} == set(sel.ranked_ids[:len(pairs)])
        assert {q for q, _ in pairs} <= {text for text, _ids, _scores in sel.lists}
    # the recording proxy does not change what is selected
    recorded = reranking.with_reranker(_RecordingReranker(reranking.reranker))
    for t in TURNS:
        assert recorded.select(t["utterance"], t["history"]).ranked_ids == \
            reranking.select(t["utterance"], t["history"]).ranked_ids


@pytest.mark.slow
def test_without_a_reference_the_int8_row_stays_and_the_report_says_why(tiny_reranker_bundle):
    bundle, _ = tiny_reranker_bundle
    res = compare_latency(bundle, runs=1, warmup=0, workload=TURNS[:2], include_pytorch=False, include_bm25=False)
    assert res["variants"]["ours_rerank"]["n"] == 2
    assert not set(RERANK_ROWS[1:]) & set(res["variants"])
    assert not any("rerank" in k for k in res["ratios"])
    rr = res["rerank"]
    assert rr["int8_timed"] and not rr["available"] and "--reference-reranker" in rr["note"]
    off = compare_latency(bundle, runs=1, warmup=0, workload=TURNS[:1], include_pytorch=False, include_bm25=False,
                          include_rerank=False)
    assert "ours_rerank" not in off["variants"] and "not asked for" in off["rerank"]["note"]


@pytest.mark.slow
def test_a_bundle_without_reranker_says_so(tiny_reranker_bundle, tmp_path):
    from magicselector.selector import Selector

    bundle, ckpt = tiny_reranker_bundle
    bare = Selector.from_bundle(bundle, config=SelectorConfig(threads=1)).with_reranker(None)
    variants, info = rerank_variants(bare, [], None, tmp_path)
    assert variants == {} and not info["int8_timed"] and "the bundle has no reranker" in info["note"]
    with pytest.raises(InputError, match="no reranker to compare"):
        rerank_variants(bare, [], ckpt, tmp_path)


@pytest.mark.slow
def test_a_reference_that_is_not_the_source_is_refused(tiny_reranker_bundle, tmp_path):
    bundle, ckpt = tiny_reranker_bundle
    kw = dict(runs=1, warmup=0, workload=TURNS[:1], include_pytorch=False, include_bm25=False)
    other_window = tmp_path / "window"
    shutil.copytree(ckpt, other_window)
    info = json.loads((other_window / "train_config.json").read_text())
    info["tokenization"]["max_length"] = 24
    (other_window / "train_config.json").write_text(json.dumps(info))
    with pytest.raises(InputError, match="encodes the turns' pairs differently"):
        compare_latency(bundle, reference_reranker=other_window, **kw)
    deeper = tmp_path / "deeper"
    shutil.copytree(ckpt, deeper)
    config = json.loads((deeper / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (deeper / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="num_hidden_layers 2"):
        compare_latency(bundle, reference_reranker=deeper, **kw)
    with pytest.raises(InputError, match="not a Hugging Face cross-encoder"):
        compare_latency(bundle, reference_reranker=tmp_path / "missing", **kw)


def test_cli_reference_reranker_needs_compare_and_a_checkpoint(tmp_path, capsys):
    from magicselector.cli import main

    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    out = str(tmp_path / "o")
    assert main(["bench", "latency", "--bundle", str(bundle), "--reference-reranker", str(tmp_path), "--out", out]) == 2
    assert "add --compare" in capsys.readouterr().err
    assert main(["bench", "latency", "--bundle", str(bundle), "--compare", "--reference-reranker", str(tmp_path),
                 "--out", out]) == 2
    assert "no config.json" in capsys.readouterr().err

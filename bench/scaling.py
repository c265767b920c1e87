"""How search and the adaptive cut scale with the number of tools.

``search_scaling``: for each n (default 1k, 10k, 100k, 1M) and index dtype (f16, i8), build a
usearch cosine index over n synthetic 384-d unit vectors and report build time, index memory (size
of the saved file, RSS growth while building, usearch's own ``memory_usage``), single-query search
latency (1 thread, one query at a time, p50/p90 in ms) and recall@50 against exact search (numpy, in
chunks) on 100 queries (50 for n >= 1M), for each ``expansion_search`` tried; ``chosen`` is the
smallest one whose recall@50 >= 0.99 (else the one with the best recall).

Synthetic data: ``clustered`` (default) draws points around random centres (``sigma`` spread), the
way tool embeddings group by domain (n / 100 centres, so about 100 points each, more than k = 50);
queries are fresh draws from the same mixture.
``uniform`` draws points uniformly on the sphere: at d = 384 every point is nearly orthogonal to
every other, the worst case for any graph index, and unlike real embeddings.

``cut_scaling``: time of ``magicselector.stages.cut.paper_cut`` (with embeddings, i.e. K_score and
K_sim) for n = 10 .. 100k candidates, the median of repeats (each repeat averaged over enough calls
to be well above the timer's resolution), and a least-squares fit of time against n: slope (us per
candidate), intercept (us), R^2 in linear space, and the slope of log(time) against log(n) (1 for
linear growth; fixed per-call overhead pulls it below 1 at small n, so it is also reported over
n >= 1000 only).

Results (``run_scaling``)::

    {"schema": "magicselector-scaling/1", "device": {...}, "config": {...},
     "search": [{"n", "dtype", "connectivity", "expansion_add", "build_s", "file_bytes",
                 "rss_delta_mb", "memory_usage_bytes", "queries",
                 "settings": [{"expansion_search", "p50_ms", "p90_ms", "mean_ms", "recall@50"}],
                 "chosen": {...one of settings...}}],   # or, when a build ran past build_budget_s:
                # {"n", "dtype", "aborted": true, "built": vectors added, "build_s", "settings": [], "chosen": null}
     "cut": {"dim": 384, "points": [{"n", "us", "us_min", "us_scores_only", "repeats", "calls_per_repeat"}],
             "fit": {"slope_us_per_item", "intercept_us", "r2", "loglog_slope", "loglog_intercept",
                     "loglog_slope_n_ge_1000"},   # log: natural log of us and n
             "fit_min": {...the same over the per-point minima...}}}
"""
from __future__ import annotations

import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from .latency import machine_description, rss_mb

SCHEMA = "magicselector-scaling/1"
DEFAULT_NS = (1_000, 10_000, 100_000, 1_000_000)
DEFAULT_CUT_NS = (10, 100, 1_000, 10_000, 100_000)


def synthetic_vectors(n: int, dim: int = 384, seed: int = 0, kind: str = "clustered",
                      clusters: int | None = None, sigma: float = 1.0, centres_seed: int = 12345,
                      chunk: int = 65_536):
    """n float32 unit vectors. Clustered draws share their centres (``centres_seed``) across calls,
    so queries (another ``seed``) come from the same mixture as the indexed points."""
    import numpy as np

    out = np.empty((n, dim), dtype=np.float32)
    rng = np.random.default_rng(seed)
    if kind == "clustered":
        c = clusters or max(1, n // 100)
        centres = np.random.default_rng(centres_seed).standard_normal((c, dim), dtype=np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    elif kind != "uniform":
        raise ValueError(f"kind must be 'clustered' or 'uniform', got {kind!r}")
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        x = rng.standard_normal((m, dim), dtype=np.float32)
        if kind == "clustered":
            x *= sigma / np.sqrt(dim)
            x += centres[rng.integers(0, len(centres), m)]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s:s + m] = x
    return out


def exact_topk(db, queries, k: int, chunk: int = 131_072):
    """Exact cosine top-k (unit vectors: inner product) of each query over db, scanning db in chunks."""
    import numpy as np

    nq = len(queries)
    best_s = np.full((nq, k), -np.inf, dtype=np.float32)
    best_i = np.zeros((nq, k), dtype=np.int64)
    for s in range(0, len(db), chunk):
        block = queries @ db[s:s + chunk].T  # (nq, m)
        kk = min(k, block.shape[1])
        part = np.argpartition(-block, kk - 1, axis=1)[:, :kk]
        cand_s = np.concatenate([best_s, np.take_along_axis(block, part, axis=1)], axis=1)
        cand_i = np.concatenate([best_i, part + s], axis=1)
        keep = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        best_s = np.take_along_axis(cand_s, keep, axis=1)
        best_i = np.take_along_axis(cand_i, keep, axis=1)
    return best_i, best_s


def _linear_fit(x, y) -> tuple[float, float, float]:
    import numpy as np

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    a, b = np.polyfit(x, y, 1)
    pred = a * x + b
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return float(a), float(b), (1.0 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def fit_time_vs_n(ns: Sequence[int], us: Sequence[float]) -> dict[str, Any]:
    import numpy as np

    slope, intercept, r2 = _linear_fit(ns, us)
    logn, logt = np.log(np.asarray(ns, float)), np.log(np.maximum(np.asarray(us, float), 1e-9))
    ll, ll_b = (float(v) for v in np.polyfit(logn, logt, 1)) if len(ns) >= 2 else (None, None)
    big = [i for i, n in enumerate(ns) if n >= 1000]
    ll_big = float(np.polyfit(logn[big], logt[big], 1)[0]) if len(big) >= 2 else None
    return {"slope_us_per_item": slope, "intercept_us": intercept, "r2": r2, "loglog_slope": ll,
            "loglog_intercept": ll_b, "loglog_slope_n_ge_1000": ll_big}


def _calls_per_repeat(fn: Callable[[], Any], min_repeat_s: float) -> int:
    fn()
    t = time.perf_counter()
    fn()
    return max(1, int(min_repeat_s / max(time.perf_counter() - t, 1e-7)))


def _one_repeat(fn: Callable[[], Any], inner: int) -> float:
    t = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t) / inner * 1e6


def cut_scaling(ns: Sequence[int] = DEFAULT_CUT_NS, dim: int = 384, repeats: int = 7, seed: int = 0,
                min_repeat_s: float = 0.002, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time paper_cut (scores + embeddings) for each n; fit time against n.

    The embeddings are unit vectors and the cut is called with ``normalized=True``, exactly as the
    Selector calls it (the index returns unit vectors, so the rule skips re-normalising them).

    The repeats are interleaved across n (repeat 1 of every n, then repeat 2, ...), so background
    load on shared cores hits every n alike; each point is the median (and the min) over repeats of
    the mean time of one call. ``fit`` uses the medians, ``fit_min`` the minima.
    """
    import numpy as np

    from magicselector.stages.cut import paper_cut

    rng = np.random.default_rng(seed)
    cases = []
    for n in ns:
        scores = np.sort(rng.random(n).astype(np.float32))[::-1].copy()
        emb = synthetic_vectors(n, dim, seed=seed + n, kind="uniform")
        full = (lambda s=scores, e=emb: paper_cut(s, e, normalized=True))
        only = (lambda s=scores: paper_cut(s, None))
        cases.append((n, full, only, _calls_per_repeat(full, min_repeat_s), _calls_per_repeat(only, min_repeat_s)))
    times = {n: ([], []) for n, *_ in cases}
    for _ in range(repeats):
        for n, full, only, inner, inner_only in cases:
            times[n][0].append(_one_repeat(full, inner))
            times[n][1].append(_one_repeat(only, inner_only))
    points = []
    for n, _, _, inner, _ in cases:
        full_t, only_t = times[n]
        points.append({"n": int(n), "us": float(np.median(full_t)), "us_min": float(np.min(full_t)),
                       "us_scores_only": float(np.median(only_t)), "repeats": repeats, "calls_per_repeat": inner})
        if progress:
            progress(f"[scaling] cut n={n}: {points[-1]['us']:.1f} us median, {points[-1]['us_min']:.1f} us min "
                     f"(scores only {points[-1]['us_scores_only']:.1f} us)")
    del cases
    ok = len(points) >= 2
    return {"dim": dim, "points": points,
            "fit": fit_time_vs_n([p["n"] for p in points], [p["us"] for p in points]) if ok else None,
            "fit_min": fit_time_vs_n([p["n"] for p in points], [p["us_min"] for p in points]) if ok else None}


def _build_index(Index, db, keys, dtype: str, *, dim: int, connectivity: int, expansion_add: int, threads: int,
                 build_budget_s: float | None, say: Callable[[str], None]):
    """The usearch index over ``db``; returns (index, build seconds). An index may come back short of
    ``len(db)`` vectors when ``build_budget_s`` ran out."""
    n = len(keys)
    index = Index(ndim=dim, metric="cos", dtype=dtype, connectivity=connectivity, expansion_add=expansion_add)
    t = time.perf_counter()
    step = n if n <= 200_000 else 100_000  # big builds go in steps: progress lines and a time budget
    for s0 in range(0, n, step):
        index.add(keys[s0:s0 + step], db[s0:s0 + step], threads=threads)
        elapsed = time.perf_counter() - t
        if step < n:
            say(f"[scaling] n={n:,} {dtype}: built {min(n, s0 + step):,} in {elapsed:.0f} s")
        if build_budget_s is not None and elapsed > build_budget_s and s0 + step < n:
            break
    return index, time.perf_counter() - t


def _saved_bytes(index) -> int:
    """The size of the index's file on disk."""
    with tempfile.TemporaryDirectory(prefix="ms-scaling-") as tmp:
        path = os.path.join(tmp, "index.usearch")
        index.save(path)
        return os.path.getsize(path)


def _time_search(index, q, truth, expansion_search: int, kk: int, k: int) -> dict[str, Any]:
    """One ``expansion_search`` setting: single-query latency (1 thread) and recall against ``truth``."""
    import numpy as np

    index.expansion_search = expansion_search
    nq = len(q)
    for i in range(min(5, nq)):  # warm up
        index.search(q[i], kk, threads=1)
    lat, found = [], []
    for i in range(nq):
        t0 = time.perf_counter()
        m = index.search(q[i], kk, threads=1)
        lat.append((time.perf_counter() - t0) * 1e3)
        found.append(np.asarray(m.keys)[: int(getattr(m, "count", kk))])
    recall = float(np.mean([len(set(f.tolist()) & set(truth[i].tolist())) / kk for i, f in enumerate(found)]))
    lat_a = np.asarray(lat)
    return {"expansion_search": expansion_search, "p50_ms": float(np.percentile(lat_a, 50)),
            "p90_ms": float(np.percentile(lat_a, 90)), "mean_ms": float(lat_a.mean()), f"recall@{k}": recall}


def _chosen_setting(settings: Sequence[dict[str, Any]], k: int) -> dict[str, Any]:
    """The smallest ``expansion_search`` with recall >= 0.99, else the best recall (the smaller setting on a tie)."""
    good = [s for s in settings if s[f"recall@{k}"] >= 0.99]
    return min(good, key=lambda s: s["expansion_search"]) if good else max(
        settings, key=lambda s: (s[f"recall@{k}"], -s["expansion_search"]))


def search_scaling(ns: Sequence[int] = DEFAULT_NS, dtypes: Sequence[str] = ("f16", "i8"), dim: int = 384,
                   k: int = 50, queries: int = 100, queries_large: int = 50, kind: str = "clustered",
                   cluster_size: int = 100, connectivity: int = 16, expansion_add: int = 64,
                   expansion_search: Sequence[int] = (64, 128, 256), threads: int = 2, seed: int = 0,
                   build_budget_s: float | None = None, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    import numpy as np

    from magicselector.stages.index import usearch_index_class

    Index = usearch_index_class()

    def say(msg: str) -> None:
        if progress:
            progress(msg)

    rows = []
    for n in ns:
        t = time.perf_counter()
        clusters = max(1, n // cluster_size)
        db = synthetic_vectors(n, dim, seed=seed, kind=kind, clusters=clusters)
        nq = queries if n < 1_000_000 else queries_large
        q = synthetic_vectors(nq, dim, seed=seed + 1_000_003, kind=kind, clusters=clusters)
        kk = min(k, n)
        truth, _ = exact_topk(db, q, kk)
        say(f"[scaling] n={n:,}: data + exact top-{kk} of {nq} queries in {time.perf_counter() - t:.1f} s")
        keys = np.arange(n, dtype=np.uint64)
        for dtype in dtypes:
            gc.collect()
            rss0 = rss_mb()
            index, build_s = _build_index(Index, db, keys, dtype, dim=dim, connectivity=connectivity,
                                          expansion_add=expansion_add, threads=threads,
                                          build_budget_s=build_budget_s, say=say)
            rss_delta = rss_mb() - rss0
            row = {"n": int(n), "dtype": dtype, "dim": dim, "data": kind, "connectivity": connectivity,
                   "expansion_add": expansion_add, "build_s": build_s, "build_threads": threads}
            if len(index) < n:
                say(f"[scaling] n={n:,} {dtype}: build stopped at {len(index):,} vectors after {build_s:.0f} s "
                    f"(--build-budget-s {build_budget_s}); not searched")
                rows.append({**row, "aborted": True, "built": int(len(index)), "rss_delta_mb": rss_delta,
                             "settings": [], "chosen": None})
                del index
                gc.collect()
                continue
            file_bytes = _saved_bytes(index)
            settings = []
            for es in expansion_search:
                setting = _time_search(index, q, truth, es, kk, k)
                settings.append(setting)
                recall = setting[f"recall@{k}"]
                say(f"[scaling] n={n:,} {dtype} es={es}: p50 {setting['p50_ms']:.3f} ms, recall@{k} {recall:.4f}")
            chosen = _chosen_setting(settings, k)
            usage = getattr(index, "memory_usage", None)
            rows.append({**row, "file_bytes": int(file_bytes), "rss_delta_mb": rss_delta,
                         "memory_usage_bytes": int(usage) if isinstance(usage, (int, np.integer)) else None,
                         "queries": nq, "k": kk, "settings": settings, "chosen": chosen})
            say(f"[scaling] n={n:,} {dtype}: built in {build_s:.1f} s, file {file_bytes / 2**20:.1f} MB, "
                f"RSS +{rss_delta:.0f} MB; chosen expansion_search={chosen['expansion_search']}")
            del index
            gc.collect()
        del db, q, truth
        gc.collect()
    return rows


def run_scaling(ns: Sequence[int] = DEFAULT_NS, cut_ns: Sequence[int] = DEFAULT_CUT_NS, *,
                max_n: int | None = None, dtypes: Sequence[str] = ("f16", "i8"), kind: str = "clustered",
                queries: int = 100, expansion_search: Sequence[int] = (64, 128, 256),
                connectivity: int = 16, expansion_add: int = 64, threads: int = 2, cut_repeats: int = 7,
                build_budget_s: float | None = None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    ns = [n for n in ns if max_n is None or n <= max_n]
    t = time.perf_counter()
    search = search_scaling(ns, dtypes=dtypes, kind=kind, queries=queries, expansion_search=expansion_search,
                            connectivity=connectivity, expansion_add=expansion_add, threads=threads,
                            build_budget_s=build_budget_s, progress=progress)
    cut = cut_scaling(cut_ns, repeats=cut_repeats, progress=progress)
    return {"schema": SCHEMA, "device": machine_description(),
            "config": {"ns": list(ns), "max_n": max_n, "dtypes": list(dtypes), "data": kind, "dim": 384,
                       "queries": queries, "k": 50, "expansion_search": list(expansion_search),
                       "connectivity": connectivity, "expansion_add": expansion_add, "build_threads": threads, "build_budget_s": build_budget_s, "cut_ns": list(cut_ns),
                       "cut_repeats": cut_repeats, "wall_s": round(time.perf_counter() - t, 1)},
            "search": search, "cut": cut}

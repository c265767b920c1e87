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

``cut_scaling``: time of ``magicselector.bench.cut_rules.paper_cut`` (with embeddings, i.e. K_score and
K_sim) for n = 10 .. 100k candidates, the median of repeats (each repeat averaged over enough calls
to be well above the timer's resolution), and a least-squares fit of time against n: slope (us per
candidate), intercept (us), R^2 in linear space, and the slope of log(time) against log(n) (1 for
linear growth; fixed per-call overhead pulls it below 1 at small n, so it is also reported over
n >= 1000 only).

``mcp_scaling`` (``bench scaling --mcp N``; issue 27.7): a ``tools/list`` response of N MCP tools
(``mcp_catalog_payload``: the shipped phone tools renamed ``<name>_<i>``, 8 random words added to
each description and one extra string parameter ``x_<i>``, so no two input schemas are the same and
the schema cache never hits), written to a file by a child process, then in this process: the
parse and validation of that file (``load_catalog``), the embed stage's own batch throughput on the
catalog's tool texts (``Embedder.embed`` over the very batches indexing makes: the length-sorted
order cut in ``EMBED_BATCH``s, every ``embed_stride``-th of them timed, after one untimed warm-up
call), and the first ``Selector.with_catalog`` over the catalog (embedding, the usearch index, the
BM25 index; with an empty vector cache), with its tools/s, their ratio to the embed stage's, and the
peak RSS while it ran (VmHWM, reset before each step where Linux allows).

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

    from .cut_rules import paper_cut

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


# -- MCP catalogs: parse, validate, index (issue 27.7) -------------------------------------------------
MCP_SCHEMA = "magicselector-scaling-mcp/1"


def mcp_catalog_payload(n: int, seed: int = 0) -> dict[str, Any]:
    """A JSON-RPC ``tools/list`` response of n MCP tools, the same for the same (n, seed) (see the
    module docstring; docs/bench/scaling-100k-mcp.md holds a run)."""
    import json
    import random

    from magicselector.catalog import load_phone_catalog

    rng = random.Random(seed)
    base = [t.to_mcp() for t in load_phone_catalog()]
    words = sorted({w.strip(".,;:()'\"").lower() for t in base for w in t["description"].split()} - {""})
    tools = []
    for i in range(n):
        t = json.loads(json.dumps(base[i % len(base)]))
        t["name"] = f"{t['name']}_{i}"
        t["description"] += " " + " ".join(rng.choice(words) for _ in range(8))
        schema = t.setdefault("inputSchema", {"type": "object"})
        schema.setdefault("properties", {})[f"x_{i}"] = {
            "type": "string", "description": " ".join(rng.choice(words) for _ in range(3))}
        tools.append(t)
    return {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}


def write_mcp_catalog(n: int, path: str | Path, seed: int = 0) -> int:
    """Write ``mcp_catalog_payload(n, seed)`` as JSON to ``path``; returns its size in bytes."""
    import json

    Path(path).write_text(json.dumps(mcp_catalog_payload(n, seed)), encoding="utf-8")
    return Path(path).stat().st_size


def _reset_peak_rss() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux 4.0+: ``5`` into clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _write_in_child(n: int, path: Path, seed: int) -> int:
    """The catalog file, made by a child process, so the objects that generating it makes never
    sit in this process's heap (freed Python memory is not always given back to the system)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return int(pool.apply(write_mcp_catalog, (n, str(path), seed)))


def embed_stage_throughput(embedder: Any, catalog: Any, stride: int = 10) -> dict[str, Any]:
    """Tools/s of ``embedder.embed`` alone over every ``stride``-th of the batches that indexing
    ``catalog`` embeds (``tool_vectors.EMBED_BATCH`` texts each, in length order), one warm-up first."""
    import numpy as np

    from magicselector.catalog import tool_text
    from magicselector.tool_vectors import EMBED_BATCH, give_back

    order = np.argsort([len(tool_text(t)) for t in catalog])
    starts = list(range(0, len(order), EMBED_BATCH))[::max(1, int(stride))]
    batches = [[tool_text(catalog[int(i)]) for i in order[s:s + EMBED_BATCH]] for s in starts]
    if batches:
        embedder.embed(batches[0])  # warm-up: ONNX Runtime's first run sets up its buffers
    spent, tools = 0.0, 0
    for texts in batches:
        t = time.perf_counter()
        embedder.embed(texts)  # the stage at its own best: its arena kept (catalog_index gives it back)
        spent += time.perf_counter() - t
        tools += len(texts)
    timed = len(batches)
    del batches
    give_back(embedder)  # what the timing grew, back to the system as catalog_index gives it, so the
    # index's RSS starts where an app's would
    return {"batch": EMBED_BATCH, "stride": max(1, int(stride)), "batches_timed": timed,
            "batches_total": -(-len(order) // EMBED_BATCH), "tools_timed": tools, "s": spent,
            "tools_per_s": tools / spent if spent > 0 else None}


def mcp_scaling(n: int, selector: Any, *, embed_stride: int = 10, seed: int = 0,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One catalog size: parse + validate, the embed stage's batch throughput, the first with_catalog."""
    from magicselector.catalog import load_catalog

    from .latency import peak_rss_mb

    def say(msg: str) -> None:
        if progress:
            progress(msg)

    with tempfile.TemporaryDirectory(prefix="ms-scaling-mcp-") as tmp:
        path = Path(tmp) / f"mcp{n}.json"
        file_bytes = _write_in_child(n, path, seed)
        gc.collect()
        resettable = _reset_peak_rss()
        rss0 = rss_mb()
        t = time.perf_counter()
        catalog = load_catalog(path)
        parse_s = time.perf_counter() - t
        parse_peak = peak_rss_mb()
    gc.collect()
    row: dict[str, Any] = {"n": int(n), "file_bytes": int(file_bytes), "parse_s": parse_s,
                           "parse_rss_before_mb": rss0, "parse_peak_rss_mb": parse_peak,
                           "catalog_rss_mb": rss_mb(), "peak_rss_reset": resettable}
    say(f"[scaling] mcp n={n:,}: parsed and validated in {parse_s:.2f} s, peak RSS {parse_peak:.0f} MB")
    row["embed"] = embed_stage_throughput(selector.embedder, catalog, embed_stride)
    say(f"[scaling] mcp n={n:,}: embed stage {row['embed']['tools_per_s']:.1f} tools/s "
        f"({row['embed']['batches_timed']} of {row['embed']['batches_total']} batches)")
    home = os.environ.get("MAGICSELECTOR_HOME")
    with tempfile.TemporaryDirectory(prefix="ms-scaling-home-") as cache:
        os.environ["MAGICSELECTOR_HOME"] = cache  # an empty vector cache: the first with_catalog embeds
        try:
            gc.collect()
            _reset_peak_rss()
            rss1 = rss_mb()
            t = time.perf_counter()
            indexed = selector.with_catalog(catalog)
            index_s = time.perf_counter() - t
            peak = peak_rss_mb()
        finally:
            if home is None:
                os.environ.pop("MAGICSELECTOR_HOME", None)
            else:
                os.environ["MAGICSELECTOR_HOME"] = home
    row["index"] = {"s": index_s, "tools_per_s": n / index_s, "rss_before_mb": rss1, "peak_rss_mb": peak,
                    "peak_over_before_mb": peak - rss1, "rss_after_mb": rss_mb(), "tools": len(indexed.index)}
    embed_tps = row["embed"]["tools_per_s"]
    row["ratio"] = row["index"]["tools_per_s"] / embed_tps if embed_tps else None
    say(f"[scaling] mcp n={n:,}: with_catalog {index_s:.1f} s, {n / index_s:.1f} tools/s "
        f"(ratio {row['ratio']:.3f}), peak RSS {peak:.0f} MB (+{peak - rss1:.0f} MB over {rss1:.0f} MB)")
    del indexed, catalog
    gc.collect()
    return row


def run_mcp_scaling(ns: Sequence[int], bundle: str | Path | None = None, *, embed_stride: int = 10,
                    seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``mcp_scaling`` for each n with the bundle's Selector (the default bundle when None), as shipped."""
    from magicselector import Selector
    from magicselector.default_bundle import ensure_default_bundle

    t = time.perf_counter()
    selector = Selector.from_bundle(bundle if bundle is not None else ensure_default_bundle())
    rows = [mcp_scaling(n, selector, embed_stride=embed_stride, seed=seed, progress=progress) for n in ns]
    return {"schema": MCP_SCHEMA, "device": machine_description(),
            "config": {"ns": [int(n) for n in ns], "seed": seed, "embed_stride": embed_stride,
                       "threads": selector.config.threads, "index_dtype": selector.index.dtype,
                       "bundle": str(bundle) if bundle is not None else "default",
                       "wall_s": round(time.perf_counter() - t, 1)},
            "mcp": rows}


def mcp_scaling_summary(res: dict[str, Any]) -> str:
    """The MCP rows as a Markdown report (the issue 27.7 targets: parse <= 15 s, ratio >= 0.9, peak <= 500 MB)."""
    from .latency import isa_summary

    cfg, dev = res["config"], res["device"]
    lines = ["# magicselector scaling: MCP catalogs", "",
             f"Device: {isa_summary(dev)} (load avg at end {dev.get('loadavg')}); embedder threads "
             f"{cfg['threads']} (as shipped), index {cfg['index_dtype']}, bundle {cfg['bundle']}; the embed stage "
             f"timed on every {cfg['embed_stride']}th batch. Wall time {cfg['wall_s']} s.", "",
             "| tools | file MB | parse + validate s | parse peak RSS MB | index (with_catalog) s | index tools/s "
             "| embed batch tools/s | ratio | index peak RSS MB | RSS before index MB | peak over it MB |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["mcp"]:
        e, i = r["embed"], r["index"]
        lines.append(f"| {r['n']:,} | {r['file_bytes'] / 1e6:.1f} | {r['parse_s']:.2f} | {r['parse_peak_rss_mb']:.0f} | "
                     f"{i['s']:.1f} | {i['tools_per_s']:.1f} | {e['tools_per_s']:.1f} | {r['ratio']:.3f} | "
                     f"{i['peak_rss_mb']:.0f} | {i['rss_before_mb']:.0f} | {i['peak_over_before_mb']:.0f} |")
    return "\n".join(lines) + "\n"

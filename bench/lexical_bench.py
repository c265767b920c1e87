"""``magicselector bench lexical``: the runtime BM25 index's cost on synthetic catalogs of n tools.

For each n (default 10k and 100k): build time, file size, load time, one-text ``search`` latency
(tokenising included; p50/p90 over the queries, on one pinned core), the time of a run-time
``add`` and ``remove``, and of the first search after one (it recomputes the BM25 weights). The
process pins itself to one core, so the numbers are single-core.

Synthetic tools: texts of 20-60 words drawn from a Zipf (s = 1.1) vocabulary that grows with the
catalog (Heaps' law, 40 * n^0.6 words), so the most common words occur in most tools, as "the",
"a" and "to" do in tool descriptions; every tool also carries two rare identifier-like words.
Queries: 4 words from one tool's text, 2 of its rare words and 4 Zipf draws (the common words
make the longest posting lists, the costly case).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.stages.lexical import LexicalIndex

from .latency import machine_description

SCHEMA = "magicselector-lexical-bench/1"
DEFAULT_NS = (10_000, 100_000)


def _word(i: int) -> str:
    """A pronounceable pseudo-word per integer (letters only, so tokenising keeps it whole)."""
    cons, vow = "bdfgklmnprtvz", "aeiou"
    out = []
    i += 1
    while i:
        i, r = divmod(i, len(cons) * len(vow))
        out.append(cons[r % len(cons)] + vow[r // len(cons)])
    return "".join(out) + "x"  # a final x: the S-stemmer leaves it alone


def synthetic_catalog(n: int, seed: int = 0) -> tuple[list[str], list[str], list[list[str]]]:
    """(ids, texts, each tool's words) for n synthetic tools."""
    rng = np.random.default_rng(seed)
    vocab = int(40 * n ** 0.6)
    words = [_word(i) for i in range(vocab)]
    lengths = rng.integers(20, 61, size=n)
    draws = np.minimum(rng.zipf(1.1, size=int(lengths.sum())) - 1, vocab - 1)
    ids, texts, tokens, at = [], [], [], 0
    for i, length in enumerate(lengths):
        toks = [words[j] for j in draws[at:at + length]] + [f"zq{i}a", f"{_word(i)}id"]
        at += length
        ids.append(f"tool_{i}")
        tokens.append(toks)
        texts.append(" ".join(toks))
    return ids, texts, tokens


def synthetic_queries(tokens: Sequence[Sequence[str]], count: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab_words = [w for toks in tokens[:2000] for w in toks[:-2]]
    out = []
    for _ in range(count):
        toks = tokens[int(rng.integers(len(tokens)))]
        own = [toks[int(j)] for j in rng.integers(0, len(toks) - 2, size=4)] + list(toks[-2:])
        common = [vocab_words[int(j)] for j in rng.integers(0, len(vocab_words), size=4)]
        out.append(" ".join(own + common))
    return out


def _pin_one_core() -> int | None:
    try:
        core = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {core})
        return core
    except (AttributeError, OSError):
        return None


def cpu_flags() -> list[str]:
    """The ISA flags that matter for these numbers (/proc/cpuinfo's, less those this process's CPUID hides)."""
    from magicselector.targets import cpu_flags as proc_cpu_flags

    from .cpu_features import seen_flags

    flags = seen_flags(proc_cpu_flags())[0]
    return [f for f in ("sse4_2", "avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8") if f in flags]


def _pct(xs: Sequence[float]) -> dict[str, float]:
    a = np.asarray(xs, dtype=np.float64)
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)), "mean": float(a.mean()),
            "n": int(len(a))}


def measure(n: int, queries: int = 500, count: int = 30, updates: int = 20, seed: int = 0,
            progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    ids, texts, tokens = synthetic_catalog(n, seed)
    progress(f"bench lexical: n={n}: building")
    t0 = time.perf_counter()
    index = LexicalIndex.build(ids, texts)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="ms-lexical-") as tmp:
        path = Path(tmp) / "lexical.npz"
        index.save(path)
        size = path.stat().st_size
        loads = []
        for _ in range(3):
            t0 = time.perf_counter()
            LexicalIndex.load(path, ids)
            loads.append((time.perf_counter() - t0) * 1e3)
    qs = synthetic_queries(tokens, queries, seed + 1)
    for q in qs[:20]:  # warm-up
        index.search([q], count)
    progress(f"bench lexical: n={n}: {len(qs)} queries")
    lat, hits = [], []
    for q in qs:
        t0 = time.perf_counter()
        got = index.search([q], count)
        lat.append((time.perf_counter() - t0) * 1e3)
        hits.append(len(got[0][0]))
    progress(f"bench lexical: n={n}: {updates} adds and removes")
    add_ms, remove_ms, after_ms = [], [], []
    for i in range(updates):
        tid, text, q = f"new_{i}", f"{texts[i]} brandnew{i}x", qs[i % len(qs)]
        t0 = time.perf_counter()
        index.add(tid, text)
        t1 = time.perf_counter()
        index.search([q], count)  # recomputes the weights first
        t2 = time.perf_counter()
        index.remove(tid)
        t3 = time.perf_counter()
        index.search([q], count)
        t4 = time.perf_counter()
        add_ms.append((t1 - t0) * 1e3)
        remove_ms.append((t3 - t2) * 1e3)
        after_ms += [(t2 - t1) * 1e3, (t4 - t3) * 1e3]
    d = index.describe()
    return {"n": n, "terms": d["terms"], "postings": d["postings"], "build_s": round(build_s, 3),
            "file_bytes": size, "load_ms": min(loads), "search_ms": _pct(lat), "candidates": count,
            "mean_hits": float(np.mean(hits)), "add_ms": _pct(add_ms), "remove_ms": _pct(remove_ms),
            "first_search_after_change_ms": _pct(after_ms)}


def run_lexical_bench(ns: Sequence[int] = DEFAULT_NS, queries: int = 500, count: int = 30, updates: int = 20,
                      progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    core = _pin_one_core()
    device = machine_description()
    device["isa_flags"] = cpu_flags()
    results = [measure(n, queries, count, updates, progress=progress) for n in ns]
    return {"schema": SCHEMA, "device": device, "config": {"pinned_core": core, "threads": 1, "queries": queries,
                                                          "candidates": count, "updates": updates},
            "results": results}


def format_lexical_bench(res: dict[str, Any]) -> str:
    dev, cfg = res["device"], res["config"]
    lines = [f"CPU: {dev.get('cpu_model')} ({', '.join(dev.get('isa_flags') or []) or 'flags unknown'}), "
             f"{dev.get('cores')} cores, load average {dev.get('loadavg')} at the start; 1 thread pinned to core "
             f"{cfg.get('pinned_core')}; numpy {dev.get('numpy')}, python {dev.get('python')}; "
             f"{cfg['queries']} queries, top {cfg['candidates']}.", "",
             "| tools | terms | postings | build s | file MB | load ms | search p50 ms | search p90 ms | "
             "mean hits | add p50 ms | remove p50 ms | first search after a change p50 ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["results"]:
        lines.append(f"| {r['n']:,} | {r['terms']:,} | {r['postings']:,} | {r['build_s']:.2f} | "
                     f"{r['file_bytes'] / 1e6:.2f} | {r['load_ms']:.1f} | {r['search_ms']['p50']:.3f} | "
                     f"{r['search_ms']['p90']:.3f} | {r['mean_hits']:.0f} | {r['add_ms']['p50']:.2f} | "
                     f"{r['remove_ms']['p50']:.2f} | {r['first_search_after_change_ms']['p50']:.2f} |")
    return "\n".join(lines) + "\n"

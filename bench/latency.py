"""Latency of the lean runtime on a fixed phone workload: cold start, per-stage percentiles, peak RSS.

This module imports only the runtime (numpy, onnxruntime, usearch, tokenizers through
``magicselector``); it never imports torch or transformers, because the same code runs on the phone
(``python -m magicselector.bench.latency_runner``, pushed by the ADB harness).

Results schema ``magicselector-latency/1`` (what :func:`measure_latency` returns, and what the
runner writes as JSON; the ADB harness pulls the same dict back from a phone)::

    {
      "schema": "magicselector-latency/1",
      "device": {                      # where it ran
        "platform": str, "system": str, "release": str, "machine": str,
        "cpu_model": str,              # /proc/cpuinfo "model name" (or "Hardware"/"Processor" on ARM)
        "cores": int,                  # os.cpu_count()
        "cores_usable": int,           # the CPU affinity mask (after pinning, if any)
        "loadavg": [1m, 5m, 15m] | null,   # at the start of the run: other work on shared cores
        "isa": [str],                  # INT8-relevant ISA flags (avx2, avx512_vnni, amx_int8, asimddp, i8mm, ...)
                                       # as this process's CPUID reports them (bench/cpu_features.py)
        "cpuid_mask": str | null,      # "CPUID masked to avx2 by tools/run_as_cpu.sh" where CPUID hides flags
        "int8_target": str,            # the INT8 target this CPU is (arm64 | x86-avx2 | x86-vnni)
        "python": str, "numpy": str, "onnxruntime": str, "onnxruntime_build": str | null,
        "usearch": str, "tokenizers": str
      },
      "config": {
        "bundle": str, "runs": int, "warmup": int, "threads": int, "cool_down_s": float,
        "history_mode": str, "candidates": int, "cut": str, "decomposer": str, "verify": bool,
        "turns": int,                  # workload size; every stage has n = runs * turns samples
        "workload": {"name": str, "sha256": str | None},   # "phone" (WORKLOAD) or the --turns file's path
        "texts_per_turn": float, "tokens": {"mean": .., "max": ..},   # what the embedder saw
        "fresh_process": bool,         # True when run by the runner (cold start is process-level)
        "started": ISO-8601 UTC
      },
      "cold_start_ms": float,          # Selector.from_bundle() call -> end of the first select()
      "cold_start_breakdown": {"import_ms": float | null,   # runtime imports (runner only)
                               "load_ms": float,            # from_bundle: hashes, tokenizer, mmap index
                               "first_select_ms": float},   # incl. creating the ONNX session
      "peak_rss_mb": float,            # VmHWM of this process (/proc/self/status), MB = 2**20 bytes
      "rss_mb": float,                 # VmRSS at the end
      "artifacts": {"embedder_bytes", "tokenizer_bytes", "index_bytes", "catalog_bytes",
                    "total_bytes", "index_dtype", "tools", "embedder_quantization"},
      "stages": {                      # milliseconds over runs x workload; stages that did not run are absent
        "<stage>": {"p50": ms, "p90": ms, "p99": ms, "mean": ms, "min": ms, "max": ms, "n": int}
      },
      "handed_tokens": {               # schema tokens handed to the LLM per turn (bench/handed_tokens.py)
        "format": "mcp", "fixed_k": 10, "turns": int,
        "all" | "fixed_10" | "cut": {"mean": float, "p90": float, "min": int, "max": int}
      }
    }

Stages: ``decompose``, ``tokenize`` (the embedder's ``tokenizer.encode`` on the turn's texts),
``embed`` (the model run and pooling, i.e. the Selector's embed stage without tokenization),
``search``, ``lexical`` (BM25 fused into each dense list), ``fuse``, ``cut`` and ``total`` (end to end, ``select()`` from entry to return). The tokenizer is timed
on the very calls the embedder makes (the selector's tokenizer is wrapped by a timing proxy for the
measurement), so ``tokenize`` + ``embed`` is exactly the Selector's embed stage. Percentiles are
numpy's linear interpolation.

Honest caveats: the OS page cache is not dropped between runs (that needs root), so ``cold_start_ms``
is a warm-file-cache process cold start; timings come from ``time.perf_counter`` in-process.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

SCHEMA = "magicselector-latency/1"
# the order select() runs them in
STAGE_ORDER = ("decompose", "tokenize", "embed", "search", "lexical", "fuse", "cut", "budget", "total")

# A fixed set of phone dialogue turns: single intents, multi-intent requests, and follow-ups that
# only make sense with the history. Kept short, as spoken requests are.
WORKLOAD: list[dict[str, Any]] = [
    {"utterance": "turn on bluetooth", "history": []},
    {"utterance": "and turn it off", "history": [
        {"role": "user", "content": "turn on bluetooth"},
        {"role": "assistant", "content": "Bluetooth is on."}]},
    {"utterance": "wake me up at 6:30 tomorrow", "history": []},
    {"utterance": "set a timer for 12 minutes", "history": []},
    {"utterance": "what's the weather in Lisbon this weekend?", "history": []},
    {"utterance": "and in Porto?", "history": [
        {"role": "user", "content": "what's the weather in Lisbon this weekend?"},
        {"role": "assistant", "content": "Sunny, highs of 24."}]},
    {"utterance": "text Maria that I'm running ten minutes late", "history": []},
    {"utterance": "call mom", "history": []},
    {"utterance": "play some jazz and turn the volume down", "history": []},
    {"utterance": "skip this song", "history": [
        {"role": "user", "content": "play my running playlist"},
        {"role": "assistant", "content": "Playing Running Mix."}]},
    {"utterance": "navigate to the nearest gas station and share my ETA with Tom", "history": []},
    {"utterance": "take a selfie", "history": []},
    {"utterance": "remind me to buy milk when I leave work", "history": []},
    {"utterance": "move it to 5 pm", "history": [
        {"role": "user", "content": "add a dentist appointment on Friday at 3"},
        {"role": "assistant", "content": "Added: Dentist, Friday 3:00 PM."}]},
    {"utterance": "book an uber to the airport and email my boarding pass to Anna", "history": []},
    {"utterance": "how many steps did I walk today?", "history": []},
    {"utterance": "order a large pepperoni pizza", "history": []},
    {"utterance": "make it two", "history": [
        {"role": "user", "content": "order a large pepperoni pizza"},
        {"role": "assistant", "content": "One large pepperoni pizza from Tony's, 25 minutes."}]},
    {"utterance": "translate 'where is the train station' into German", "history": []},
    {"utterance": "turn on do not disturb until 8 am and set an alarm for 7", "history": []},
    {"utterance": "send 20 euros to Jake for dinner", "history": []},
    {"utterance": "show me photos from last summer", "history": []},
    {"utterance": "dim the living room lights and lock the front door", "history": []},
    {"utterance": "read me the latest headlines", "history": []},
]


# -- small helpers (also used by the compare / scaling benches and the CLI) ------------------------
def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean/min/max (ms) and n of a list of samples."""
    import numpy as np

    a = np.asarray(list(samples_ms), dtype=np.float64)
    if a.size == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean()),
            "min": float(a.min()), "max": float(a.max()), "n": int(a.size)}


def _proc_status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_mb() -> float:
    """Peak resident set size of this process (VmHWM), in MB (2**20 bytes)."""
    kb = _proc_status_kb("VmHWM")
    if kb is None:  # not Linux/Android: ru_maxrss is KB on Linux, bytes on macOS
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r / (1 << 20) if sys.platform == "darwin" else r / 1024
    return kb / 1024


def rss_mb() -> float:
    kb = _proc_status_kb("VmRSS")
    return (kb or 0) / 1024


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return platform.processor() or "unknown"
    for key in ("model name", "Hardware", "Processor", "cpu model"):
        for line in text.splitlines():
            if line.split(":")[0].strip() == key and ":" in line:
                value = line.split(":", 1)[1].strip()
                if value:
                    return value
    # ARM kernels without a model name: list the distinct CPU part numbers (big.LITTLE shows 2-3)
    parts = sorted({line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("CPU part")})
    return f"ARM CPU parts {', '.join(parts)}" if parts else (platform.processor() or "unknown")


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        mod = sys.modules.get(module)
        return getattr(mod, "__version__", None)


def machine_description() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    from magicselector.targets import cpu_flags, host_target

    from .cpu_features import mask_note, patched_onnxruntime_hides, seen_flags

    # the flags this process's CPUID reports: under tools/run_as_cpu.sh fewer than /proc/cpuinfo lists
    flags, hidden = seen_flags(cpu_flags())
    # without CPUID faulting only onnxruntime is masked: the kernels that matter dispatch on its view
    ort_hidden = patched_onnxruntime_hides(flags) if not hidden else frozenset()
    flags = flags - ort_hidden
    return {
        "platform": platform.platform(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "loadavg": load,
        # the instruction sets INT8 kernels dispatch on; a latency figure is only comparable between
        # machines with the same ones
        "isa": sorted(flags & ISA_FLAGS),
        "cpuid_mask": mask_note(ort_hidden, onnxruntime_only=True) if ort_hidden else mask_note(hidden),
        "int8_target": host_target(flags=flags),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "onnxruntime": _version("onnxruntime"),
        "onnxruntime_build": _onnxruntime_build(),
        "usearch": _version("usearch"),
        "tokenizers": _version("tokenizers"),
    }


# x86: AVX2 (vpmaddubsw INT8), AVX-512, VNNI (vpdpbusd), AMX tiles; ARM: dot product (asimddp), i8mm
ISA_FLAGS = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16",
                       "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm", "sve", "sve2", "bf16"})


def _onnxruntime_build() -> str | None:
    try:
        from onnxruntime.capi import _pybind_state

        return " ".join(_pybind_state.get_build_info().split())
    except Exception:  # an onnxruntime build without the call (older, or a custom mobile build)
        return None


def isa_summary(device: Mapping[str, Any]) -> str:
    """One line naming the CPU, its INT8-relevant ISA flags and cores, for report headers."""
    isa = ", ".join(device.get("isa") or []) or "ISA flags unknown"
    masked = f"; {device['cpuid_mask']}" if device.get("cpuid_mask") else ""
    return (f"{device.get('cpu_model')} ({isa}; {device.get('cores_usable')} of {device.get('cores')} "
            f"cores usable{masked})")


def artifact_sizes(manifest: Mapping[str, Any]) -> dict[str, Any]:
    files = manifest.get("files", {})
    emb = manifest.get("embedder") or {}
    idx = manifest.get("index") or {}
    cat = manifest.get("catalog") or {}

    def size(rel: str | None) -> int | None:
        return int(files[rel]["size"]) if rel and rel in files else None

    return {
        "embedder_bytes": size(emb.get("file")),
        "tokenizer_bytes": size(emb.get("tokenizer")),
        "index_bytes": size(idx.get("file")),
        "catalog_bytes": size(cat.get("file")),
        "total_bytes": int(sum(int(e.get("size", 0)) for e in files.values())),
        "index_dtype": idx.get("dtype"),
        "tools": cat.get("tools"),
        "embedder_quantization": (emb.get("quantization") or {}).get("type"),
    }


class _TimedTokenizer:
    """Wraps the embedder's tokenizer so that the encode calls the embedder makes are timed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.ms = 0.0
        self.tokens: list[int] = []

    def encode(self, texts):
        t = time.perf_counter()
        out = self._inner.encode(texts)
        self.ms += (time.perf_counter() - t) * 1e3
        mask = out.get("attention_mask") if isinstance(out, Mapping) else None
        if mask is not None:
            self.tokens.extend(int(x) for x in mask.sum(axis=1))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def turn_texts(selector: Any, turn: Mapping[str, Any]) -> list[str]:
    """The texts the selector embeds for a turn (``Selector.retrieval_texts``: the utterance anchor,
    its sub-tasks and, under a history mode, the history-folded utterance)."""
    return selector.retrieval_texts(turn["utterance"], turn.get("history") or [])


# -- the measurement --------------------------------------------------------------------------------
def load_turns(path: str | Path, limit: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """A workload from a benchmark ``queries.jsonl`` (``query`` and ``history`` of each row; the
    other fields are ignored), every history checked as ``select`` checks it. ``limit`` keeps that
    many rows drawn with ``seed`` (file order kept), so a large set times in bounded wall clock."""
    import json
    import random

    from magicselector.dialogue import validate_history
    from magicselector.errors import InputError

    path = Path(path)
    if not path.is_file():
        raise InputError(f"--turns: {path}: no such file (a queries.jsonl: one {{query, history}} object per line)")
    if limit is not None and limit < 1:
        raise InputError(f"--turns-limit must be >= 1, got {limit}")
    turns: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path.name} line {n}"
            try:
                row = json.loads(line)
            except ValueError as e:
                raise InputError(f"{where}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise InputError(f"{where}: a row must be a JSON object")
            query = row.get("query")
            if not isinstance(query, str) or not query.strip():
                raise InputError(f"{where}: field 'query' must be a non-empty string")
            history = row.get("history") or []
            if not isinstance(history, list):
                raise InputError(f"{where}: field 'history' must be a list of messages")
            try:
                validate_history(history)
            except InputError as e:
                raise InputError(f"{where}: field 'history': {e}") from None
            turns.append({"utterance": query, "history": history})
    if not turns:
        raise InputError(f"--turns: {path} holds no rows")
    if limit is not None and limit < len(turns):
        keep = sorted(random.Random(seed).sample(range(len(turns)), limit))
        turns = [turns[i] for i in keep]
    return turns


def _run_config(threads: int, history_mode: str | None, decompose: str | None) -> Any:
    """The shipped ``SelectorConfig`` with the settings given (None: the shipped one): the bench
    measures what users run."""
    from magicselector.config import SelectorConfig

    shipped = SelectorConfig()
    return SelectorConfig(history=shipped.history if history_mode is None else history_mode, threads=threads,
                          decompose=shipped.decompose if decompose is None else decompose)


@dataclass
class _PassSamples:
    """What the timed passes collect, turn by turn."""

    stages: dict[str, list[float]] = field(default_factory=dict)  # ms per stage (tokenize split from embed)
    texts_per_turn: list[int] = field(default_factory=list)       # first timed pass only


def _timed_turn(selector: Any, turn: Mapping[str, Any], timed: _TimedTokenizer | None, samples: _PassSamples,
                first_timed_pass: bool, handed: Any) -> None:
    """One timed select of ``turn``, its stage timings added to ``samples``."""
    sel = selector.select(turn["utterance"], turn.get("history") or [])
    ms = dict(sel.timings_ms)
    if timed is not None and "embed" in ms:
        ms["tokenize"] = timed.ms
        ms["embed"] = max(0.0, ms["embed"] - timed.ms)
    for stage, v in ms.items():
        samples.stages.setdefault(stage, []).append(float(v))
    if first_timed_pass:
        samples.texts_per_turn.append(len(turn_texts(selector, turn)))
        handed.add(sel)


def _passes(selector: Any, workload: Sequence[Mapping[str, Any]], runs: int, warmup: int, cool_down_s: float,
            timed: _TimedTokenizer | None, handed: Any, progress: Callable[[str], None] | None) -> _PassSamples:
    """``warmup`` untimed passes over the workload, then ``runs`` timed ones; one progress line per pass."""
    samples = _PassSamples()
    for r in range(warmup + runs):
        timing = r >= warmup
        t_pass = time.perf_counter()
        for turn in workload:
            if timed is not None:
                timed.ms = 0.0
                if not timing:
                    timed.tokens.clear()
            if timing:
                _timed_turn(selector, turn, timed, samples, r == warmup, handed)
            else:
                selector.select(turn["utterance"], turn.get("history") or [])
        if progress is not None:
            label = f"warmup {r + 1}/{warmup}" if not timing else f"run {r - warmup + 1}/{runs}"
            tot = samples.stages.get("total", [])[-len(workload):] if timing else []
            extra = f", p50 total so far {percentiles(samples.stages['total'])['p50']:.2f} ms" if tot else ""
            progress(f"[latency] {label}: {len(workload)} turns in {(time.perf_counter() - t_pass) * 1e3:.0f} ms"
                     f"{extra}")
        if cool_down_s > 0 and r + 1 < warmup + runs:
            time.sleep(cool_down_s)
    return samples


def _share(values: Sequence[int]) -> float | None:
    return (sum(values) / len(values)) if values else None


def measure_latency(bundle_dir: str | Path, runs: int = 20, warmup: int = 3, threads: int = 1,
                    workload: Sequence[Mapping[str, Any]] = WORKLOAD, *, cool_down_s: float = 0.0,
                    history_mode: str | None = None, verify: bool = True, decompose: str | None = None,
                    progress: Callable[[str], None] | None = None,
                    import_ms: float | None = None, fresh_process: bool = False,
                    workload_name: str = "phone", workload_sha256: str | None = None) -> dict[str, Any]:
    """Measure the runtime on ``workload`` (``runs`` timed passes after ``warmup`` untimed ones;
    ``workload_name`` / ``workload_sha256`` say where it came from: ``WORKLOAD`` or a ``--turns`` file).

    Returns the ``magicselector-latency/1`` dict described in the module docstring. ``progress``
    gets one line per pass. ``cool_down_s`` sleeps between passes (thermal headroom on phones).
    ``import_ms`` and ``fresh_process`` are filled in by the runner, which owns the process.
    ``history_mode`` / ``decompose`` default to the shipped ``SelectorConfig``.
    """
    if runs < 1 or warmup < 0 or threads < 1:
        raise ValueError("need runs >= 1, warmup >= 0, threads >= 1")
    workload = list(workload)
    if not workload:
        raise ValueError("the workload is empty")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    device = machine_description()

    from magicselector.selector import Selector

    # With a decomposer, the LLM (if any) loads in the first select: part of the cold start.
    config = _run_config(threads, history_mode, decompose)
    first = workload[0]
    t0 = time.perf_counter()
    selector = Selector.from_bundle(bundle_dir, config=config, verify=verify)
    t1 = time.perf_counter()
    selector.select(first["utterance"], first.get("history") or [])
    t2 = time.perf_counter()
    cold = {"import_ms": import_ms, "load_ms": (t1 - t0) * 1e3, "first_select_ms": (t2 - t1) * 1e3}

    tok = getattr(selector.embedder, "tokenizer", None)
    timed = _TimedTokenizer(tok) if tok is not None and hasattr(tok, "encode") else None
    if timed is not None:
        selector.embedder.tokenizer = timed
    from .handed_tokens import HandedTokens

    handed = HandedTokens(selector.catalog)  # schema tokens per turn (first timed pass; outside the timings)
    try:
        samples = _passes(selector, workload, runs, warmup, cool_down_s, timed, handed, progress)
    finally:
        if timed is not None:
            selector.embedder.tokenizer = tok

    stages = {s: percentiles(samples.stages[s]) for s in STAGE_ORDER if s in samples.stages}
    stages.update({s: percentiles(v) for s, v in samples.stages.items() if s not in stages})
    tokens = timed.tokens[-sum(samples.texts_per_turn):] if timed is not None and timed.tokens else []
    manifest = selector.bundle.manifest if selector.bundle is not None else {}
    return {
        "schema": SCHEMA,
        "device": device,
        "config": {
            "bundle": str(bundle_dir), "runs": runs, "warmup": warmup, "threads": threads,
            "cool_down_s": cool_down_s, "history_mode": config.history,
            "candidates": selector.config.candidates, "cut": selector.config.cut.rule,
            "decomposer": selector.decomposer.name, "verify": verify, "turns": len(workload),
            "workload": {"name": workload_name, "sha256": workload_sha256},
            "texts_per_turn": _share(samples.texts_per_turn),
            "tokens": ({"mean": sum(tokens) / len(tokens), "max": max(tokens)} if tokens else None),
            "fresh_process": fresh_process, "started": started,
        },
        "cold_start_ms": cold["load_ms"] + cold["first_select_ms"],
        "cold_start_breakdown": cold,
        "peak_rss_mb": peak_rss_mb(),
        "rss_mb": rss_mb(),
        "artifacts": artifact_sizes(manifest),
        "stages": stages,
        "handed_tokens": handed.summary(),
    }


def validate_results(results: Mapping[str, Any]) -> list[str]:
    """Problems with a results dict (empty when it follows the schema); used on pulled phone results."""
    problems = []
    if results.get("schema") != SCHEMA:
        problems.append(f"schema is {results.get('schema')!r}, not {SCHEMA!r}")
    for key in ("device", "config", "cold_start_ms", "peak_rss_mb", "artifacts", "stages"):
        if key not in results:
            problems.append(f"missing {key!r}")
    for stage, st in (results.get("stages") or {}).items():
        for f in ("p50", "p90", "p99", "mean", "n"):
            if f not in st:
                problems.append(f"stages.{stage} lacks {f!r}")
        if all(f in st for f in ("p50", "p90", "p99")) and not (st["p50"] <= st["p90"] <= st["p99"]):
            problems.append(f"stages.{stage}: percentiles out of order")
    return problems

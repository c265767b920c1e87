"""The cross-encoder experiment's latency: the INT8 ONNX reranker alone against its FP32 PyTorch source.

    python3 -m magicselector.bench.experiments.rerank_latency --reranker DIR [DIR...]
        [--checkpoint CKPT|- ...] [--candidates 20] [--threads 1 2] [--runs 30] [--json OUT] [--md OUT]

(The runtime has no rerank stage: docs/bench/reranker.md.)

The workload is fixed: ``DEFAULT_QUERIES`` (phone-assistant utterances of mixed length), each
against ``candidates`` tool texts of the phone catalog (``tool_text``, as the selector builds
them), picked by lexical overlap with the utterance (ties broken by a seeded shuffle), so every
list holds plausible, same-domain candidates the way a retriever would hand them over. One sample
is one rerank stage call: ``CrossEncoder.score(query, texts)`` for one list (pair
tokenization included), and for FP32 the same ``PairTokenizer`` + the PyTorch forward pass under
``torch.inference_mode()`` (also tokenization included), so both time the same work.

Both backends see identical token ids: the FP32 side tokenizes with the checkpoint's own pair
window (``checkpoint_pair_window``) and the run stops with an ``InputError`` unless its encoded
batches equal the INT8 folder's, byte for byte (``input_sha256`` in the result records both).
Per thread count the two backends are interleaved list by list (the order flips every run), so
background load on a shared machine hits both alike. Timings are ``time.perf_counter`` in-process;
percentiles are numpy's linear interpolation.

Result (``measure_rerank_latency``; schema ``magicselector-rerank-latency/1``)::

    {"schema", "name", "reranker_dir", "checkpoint",
     "host": {platform, cores, cores_usable, cpu_model, loadavg, loadavg_end, python, onnxruntime, torch},
     "config": {"queries", "candidates", "pairs_per_list", "threads", "runs", "warmup", "seed"},
     "model": {"layers", "max_length", "truncation", "min_tool_tokens", "tokens_per_pair": {"mean", "max"},
               "padded_width_mean", "model_mb", "checkpoint_mb", "quantization"},
     "int8": {"<threads>": {"p50", "p90", "p99", "mean", "min", "max", "n", "ms_per_pair"}},
     "fp32": {...same...} | absent without a checkpoint,
     "speedup": {"<threads>": fp32 p50 / int8 p50} | absent,
     "input_sha256": {"int8": hex, "fp32": hex | None},
     "agreement": {"spearman_per_list_mean", "max_abs_diff"} | absent}

``ms_per_pair`` is the p50 of (list time / pairs in the list). Thread counts are string keys (as
in JSON). torch and transformers are imported only when a checkpoint is given.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from magicselector.errors import InputError, MagicSelectorError
from magicselector.ranks import spearman

from ..latency import isa_summary

SCHEMA = "magicselector-rerank-latency/1"

# Phone requests from 2 to ~25 words: single intents, multi-intent requests, long rambling ones
# (the long ones exercise the query cap of the pair window).
DEFAULT_QUERIES = (
    "call mom",
    "turn the wifi off",
    "wake me up at 6:30 tomorrow",
    "what's the weather like in Berlin this weekend",
    "text Sam that I'm running late and ask him to order for me",
    "play some relaxing jazz on the living room speaker",
    "remind me to pick up the dry cleaning when I leave work tomorrow evening",
    "navigate to the nearest gas station that is still open and avoid highways",
    "book a table for four at an Italian place near the office on Friday at 8 and send the details to Anna",
    "I'm heading out for a run so start a 30 minute workout, turn on do not disturb and play my running playlist",
)

_STOP = frozenset("a an and the to of in on at for my me i i'm is it that this so with from by or be".split())



def _quantization_of(meta: dict[str, Any], model_path: Path) -> str | None:
    """The quantization type of the file this run timed: a per-target folder records it per file
    (``files``), a single-file folder at the top."""
    entry = (meta.get("files") or {}).get(Path(model_path).name) or meta
    return (entry.get("quantization") or {}).get("type")

def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in _STOP}


def build_workload(queries: Sequence[str] | None = None, catalog: Iterable[Any] | None = None,
                   candidates: int = 20, seed: int = 0) -> list[tuple[str, list[str]]]:
    """[(utterance, tool texts)]: per utterance the ``candidates`` catalog tools sharing the most
    words with it (ties broken by a shuffle seeded with ``seed``). Deterministic."""
    from magicselector.catalog import load_phone_catalog, tool_text

    if candidates < 1:
        raise InputError(f"candidates must be >= 1, got {candidates}")
    queries = list(DEFAULT_QUERIES if queries is None else queries)
    if not queries or not all(isinstance(q, str) and q.strip() for q in queries):
        raise InputError("rerank latency: the queries must be non-empty strings")
    tools = list(load_phone_catalog() if catalog is None else catalog)
    if not tools:
        raise InputError("rerank latency: the catalog is empty")
    texts = [tool_text(t) for t in tools]
    words = [_words(t) for t in texts]
    rng = np.random.default_rng(seed)
    k = min(candidates, len(texts))
    out = []
    for q in queries:
        qw = _words(q)
        overlap = np.array([len(qw & w) for w in words], dtype=np.float64)
        key = overlap + 0.5 * rng.random(len(texts))  # < 1: only breaks ties
        top = np.argsort(-key, kind="stable")[:k]
        out.append((q, [texts[i] for i in top]))
    return out


def rerank_inputs(tokenizer: Any, query: str, texts: Sequence[str], batch_size: int = 32) -> list[dict[str, np.ndarray]]:
    """The encoded batches the rerank stage feeds its model for one list: exactly
    ``CrossEncoder.score``'s tokenization (empty texts become " ", ``batch_size`` pairs a batch)."""
    return [tokenizer.encode_pairs([(query, t or " ") for t in texts[s:s + batch_size]])
            for s in range(0, len(texts), batch_size)]


def inputs_digest(batches: Iterable[Mapping[str, np.ndarray]]) -> str:
    """sha256 over the shapes and int64 bytes of every input array, in order."""
    h = hashlib.sha256()
    for batch in batches:
        for name in sorted(batch):
            a = np.ascontiguousarray(batch[name], dtype=np.int64)
            h.update(f"{name}{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _stats(samples_ms: list[float], per_pair_ms: list[float]) -> dict[str, float]:
    from ..latency import percentiles

    st = percentiles(samples_ms)
    st["ms_per_pair"] = float(np.percentile(per_pair_ms, 50)) if per_pair_ms else 0.0
    return st


def _host(torch_version: str | None) -> dict[str, Any]:
    from ..latency import machine_description

    d = machine_description()
    keep = ("platform", "machine", "cpu_model", "cores", "cores_usable", "isa", "cpuid_mask", "int8_target", "loadavg",
            "python", "numpy", "onnxruntime", "onnxruntime_build", "tokenizers")
    out = {k: d.get(k) for k in keep}
    out["torch"] = torch_version
    return out


def _loadavg() -> list[float] | None:
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _mb(path: Path) -> float | None:
    return round(path.stat().st_size / 2**20, 2) if path.is_file() else None


def _load_torch_model(checkpoint: Path):
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval()
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _load_fp32(ckpt: Path, folder: Path, workload, tok8, bs: int, digest8: str, say):
    """The FP32 checkpoint's torch, model, pair tokenizer and input digest; refused when it encodes
    the workload otherwise than the INT8 reranker (not the checkpoint it was exported from)."""
    import torch

    from magicselector.export.onnx import checkpoint_pair_window
    from magicselector.data.cross_encoder import PairTokenizer

    if not (ckpt / "config.json").is_file():
        raise InputError(f"{ckpt}: not a Hugging Face checkpoint (no config.json)")
    tok32 = PairTokenizer(ckpt / "tokenizer.json", **checkpoint_pair_window(ckpt))
    enc32 = [rerank_inputs(tok32, q, texts, bs) for q, texts in workload]
    digest32 = inputs_digest(b for lst in enc32 for b in lst)
    if digest32 != digest8:
        raise InputError(f"{ckpt} and {folder} encode the workload differently (pair window "
                         f"{tok32.describe()} vs {tok8.describe()}, or another tokenizer): is this "
                         "checkpoint the one the reranker was exported from?")
    say(f"rerank latency: loading the FP32 checkpoint {ckpt}")
    return torch, _load_torch_model(ckpt), tok32, digest32


class _Timings:
    """Per backend and thread count, the list timings and per-pair timings; the INT8-FP32 agreement
    of the first timed run at the first thread count."""

    def __init__(self) -> None:
        self.samples: dict[str, dict[str, list[float]]] = {"int8": {}, "fp32": {}}
        self.per_pair: dict[str, dict[str, list[float]]] = {"int8": {}, "fp32": {}}
        self.rhos: list[float] = []
        self.max_diff = 0.0

    def start(self, backend: str, key: str) -> None:
        self.samples[backend][key], self.per_pair[backend][key] = [], []

    def timed_list(self, order, q: str, texts: list[str], key: str, agree: bool) -> None:
        got = {}
        for b, fn in order:
            t0 = time.perf_counter()
            got[b] = fn(q, texts)
            ms = (time.perf_counter() - t0) * 1e3
            self.samples[b][key].append(ms)
            self.per_pair[b][key].append(ms / len(texts))
        if agree and "fp32" in got:
            if len(texts) > 1:  # a one-pair list has no ranking to agree on
                self.rhos.append(spearman(got["int8"], got["fp32"]))
            self.max_diff = max(self.max_diff, float(np.max(np.abs(got["int8"] - got["fp32"]))))

    def stats(self, backend: str) -> dict[str, Any]:
        return {k: _stats(self.samples[backend][k], self.per_pair[backend][k]) for k in self.samples[backend]}


def _time_backends(folder: Path, probe, threads: list[int], workload, runs: int, warmup: int, torch, run_fp32,
                   say) -> _Timings:
    """Per thread count: warm-up passes, then ``runs`` passes, the backends interleaved list by
    list (the order flips every run); torch's thread count is restored afterwards."""
    from magicselector.data.cross_encoder import CrossEncoder

    timings = _Timings()
    prev_threads = torch.get_num_threads() if torch is not None else None
    try:
        with torch.inference_mode() if torch is not None else contextlib.nullcontext():
            for n in threads:
                key = str(n)
                enc = probe if n == threads[0] else CrossEncoder.from_dir(folder, threads=n)
                backends: list[tuple[str, Callable[[str, list[str]], np.ndarray]]] = [("int8", enc.score)]
                if run_fp32 is not None:
                    torch.set_num_threads(n)
                    backends.append(("fp32", run_fp32))
                for b, _ in backends:
                    timings.start(b, key)
                say(f"rerank latency: {folder.name}, {n} thread(s), {warmup} warm-up + {runs} runs x "
                    f"{len(workload)} lists ({'int8 + fp32' if run_fp32 is not None else 'int8'})")
                for _ in range(warmup):
                    for q, texts in workload:
                        for _b, fn in backends:
                            fn(q, texts)
                for r in range(runs):
                    order = backends if r % 2 == 0 else backends[::-1]
                    for q, texts in workload:
                        timings.timed_list(order, q, texts, key, r == 0 and n == threads[0])
    finally:
        if prev_threads is not None:
            torch.set_num_threads(prev_threads)
    return timings


def _check_settings(threads: Sequence[int], runs: int, warmup: int) -> list[int]:
    threads = list(dict.fromkeys(int(n) for n in threads))  # in order, without repeats
    if not threads or any(n < 1 for n in threads):
        raise InputError(f"threads must be positive integers, got {list(threads)}")
    if runs < 1 or warmup < 0:
        raise InputError(f"runs must be >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    return threads


def measure_rerank_latency(reranker_dir: str | Path, checkpoint: str | Path | None = None, *,
                           queries: Sequence[str] | None = None, catalog: Iterable[Any] | None = None,
                           candidates: int = 20, threads: Sequence[int] = (1, 2), runs: int = 30, warmup: int = 3,
                           seed: int = 0, name: str | None = None,
                           progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time the rerank stage (one ``score(query, texts)`` call per list) for the INT8 reranker
    folder and, given its FP32 ``checkpoint``, for PyTorch on the same token ids; see the module
    docstring for the result. torch's thread count is restored afterwards."""
    from magicselector.data.cross_encoder import CrossEncoder, read_reranker_meta

    folder = Path(reranker_dir)
    meta = read_reranker_meta(folder)
    threads = _check_settings(threads, runs, warmup)
    say = progress or (lambda _m: None)
    workload = build_workload(queries, catalog, candidates, seed)
    loadavg_start = _loadavg()

    probe = CrossEncoder.from_dir(folder, threads=threads[0])
    tok8, bs = probe.tokenizer, probe.batch_size
    enc8 = [rerank_inputs(tok8, q, texts, bs) for q, texts in workload]
    digest8 = inputs_digest(b for lst in enc8 for b in lst)
    lens = np.concatenate([b["attention_mask"] for lst in enc8 for b in lst]).sum(axis=1)
    widths = [b["input_ids"].shape[1] for lst in enc8 for b in lst]

    torch = model = run_fp32 = digest32 = None
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if ckpt is not None:  # only with a checkpoint: the runtime stays torch-free
        torch, model, tok32, digest32 = _load_fp32(ckpt, folder, workload, tok8, bs, digest8, say)

        def run_fp32(query: str, texts: list[str]) -> np.ndarray:
            out = []
            for batch in rerank_inputs(tok32, query, texts, bs):
                logits = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits
                out.append(logits[:, 0].float().numpy())
            return np.concatenate(out)

    timings = _time_backends(folder, probe, threads, workload, runs, warmup, torch, run_fp32, say)
    host = _host(torch.__version__ if torch is not None else None)
    host["loadavg"] = loadavg_start
    host["loadavg_end"] = _loadavg()
    window = tok8.describe()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "name": name or folder.resolve().name,
        "reranker_dir": str(folder),
        "checkpoint": str(ckpt) if ckpt is not None else None,
        "host": host,
        "config": {"queries": len(workload), "candidates": candidates,
                   "pairs_per_list": float(np.mean([len(t) for _, t in workload])),
                   "threads": threads, "runs": runs, "warmup": warmup, "seed": seed,
                   "interleaved": model is not None},
        "model": {"layers": meta.get("layers"), "architecture": meta.get("architecture"),
                  "max_length": window["max_length"], "truncation": window["truncation"],
                  "min_tool_tokens": window["min_tool_tokens"],
                  "tokens_per_pair": {"mean": float(lens.mean()), "max": int(lens.max())},
                  "padded_width_mean": float(np.mean(widths)),
                  "model_mb": _mb(probe.model_path),
                  "checkpoint_mb": _mb(ckpt / "model.safetensors") if ckpt is not None else None,
                  "quantization": _quantization_of(meta, probe.model_path)},
        "int8": timings.stats("int8"),
        "input_sha256": {"int8": digest8, "fp32": digest32},
    }
    if model is not None:
        result["fp32"] = timings.stats("fp32")
        result["speedup"] = {k: (result["fp32"][k]["p50"] / result["int8"][k]["p50"]
                                 if result["int8"][k]["p50"] > 0 else None) for k in result["int8"]}
        result["agreement"] = {"spearman_per_list_mean": float(np.mean(timings.rhos)) if timings.rhos else None,
                               "max_abs_diff": timings.max_diff}
    return result


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_rerank_latency(result: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
    """A markdown table: one row per model x backend x thread count (one result or a list of them)."""
    results = [result] if isinstance(result, Mapping) else list(result)
    if not results:
        return "(no rerank latency results)\n"
    host, cfg = results[0]["host"], results[0]["config"]
    lines = ["# magicselector rerank latency", "",
             f"Host: {isa_summary(host)}, {host.get('platform')}, load avg {host.get('loadavg')} -> {host.get('loadavg_end')}; "
             f"onnxruntime {host.get('onnxruntime')}, torch {host.get('torch') or '-'}.",
             f"Workload: {cfg['queries']} utterances x {cfg['pairs_per_list']:g} candidates (one score() call "
             f"per list, tokenization included), {cfg['runs']} runs after {cfg['warmup']} warm-up passes"
             + (", INT8 and FP32 interleaved" if cfg.get("interleaved") else "") + ".", "",
             "| model | layers | max len | tokens/pair | size MB | backend | threads | p50 ms | p90 ms | "
             "mean ms | ms/pair | FP32/INT8 (p50) |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        m = r["model"]
        head = (f"| {r['name']} | {_fmt(m.get('layers'), 'd')} | {m['max_length']} | "
                f"{m['tokens_per_pair']['mean']:.1f} | ")
        for backend in ("int8", "fp32"):
            for key, st in (r.get(backend) or {}).items():
                size = m.get("model_mb") if backend == "int8" else m.get("checkpoint_mb")
                sp = (r.get("speedup") or {}).get(key) if backend == "int8" else None
                lines.append(head + f"{_fmt(size, '.1f')} | {'ORT INT8' if backend == 'int8' else 'PyTorch FP32'} "
                             f"| {key} | {st['p50']:.2f} | {st['p90']:.2f} | {st['mean']:.2f} | "
                             f"{st['ms_per_pair']:.3f} | {_fmt(sp, '.2f')}{'x' if sp is not None else ''} |")
    notes = [f"{r['name']}: INT8 vs FP32 logits Spearman per list {_fmt(a.get('spearman_per_list_mean'), '.3f')}, "
             f"max |diff| {a['max_abs_diff']:.3f}; identical token ids (sha256 {r['input_sha256']['int8'][:12]})"
             for r in results if (a := r.get("agreement"))]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


SCHEMA_SET = "magicselector-rerank-latency-set/1"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.rerank_latency",
                                description="the cross-encoder experiment's latency: INT8 ONNX reranker folder(s) "
                                            "against their FP32 PyTorch checkpoints")
    p.add_argument("--reranker", nargs="+", required=True, metavar="DIR",
                   help="reranker folder(s): model file(s), tokenizer.json, reranker.json "
                        "(e.g. bench/experiments/reranker)")
    p.add_argument("--checkpoint", nargs="+", metavar="DIR",
                   help="the FP32 checkpoint of each --reranker, paired by position ('-' for none); needs torch")
    p.add_argument("--candidates", type=int, default=20, help="tool texts per list (one score() call)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="seeds the candidate picking")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    p.add_argument("--md", metavar="OUT", help="write the markdown table")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rerankers, checkpoints = list(args.reranker), list(args.checkpoint or [])
    if checkpoints and len(checkpoints) != len(rerankers):
        raise SystemExit(f"--checkpoint takes one entry per --reranker, paired by position ('-' for none): got "
                         f"{len(rerankers)} reranker(s) and {len(checkpoints)} checkpoint(s)")
    pairs = [(r, None if not checkpoints or checkpoints[i] == "-" else checkpoints[i]) for i, r in enumerate(rerankers)]
    names = [Path(r).resolve().name for r, _ in pairs]
    results = []
    try:
        for (r, c), name in zip(pairs, names):
            results.append(measure_rerank_latency(r, c, candidates=args.candidates, threads=args.threads,
                                                  runs=args.runs, warmup=args.warmup, seed=args.seed,
                                                  name=name if names.count(name) == 1 else str(Path(r)),
                                                  progress=lambda line: print(line, file=sys.stderr, flush=True)))
    except MagicSelectorError as e:
        raise SystemExit(f"rerank_latency: error: {e}") from None
    table = format_rerank_latency(results)
    for path, text in ((args.json, json.dumps({"schema": SCHEMA_SET, "results": results}, indent=2) + "\n"),
                       (args.md, table)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

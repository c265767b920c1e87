"""llama-bench's figures for the GGUF decomposer on its own prompts: load, pp and tg tokens/s, time to first token.

The model is the one the runtime would run: ``model`` if given, else the bundle's decomposer (and
the prompt style it was trained with), else the pinned default assembled from its chunk packages
(``magicselector.decompose.model.ensure_default_model``). It is loaded through the runtime's own
path (``LlmDecomposer`` -> ``LlamaRunner`` -> ``load_llama``: the same threads, context, batch and
extra buffer types as ``select``), then for each of a few of the decomposer's real prompts (the
fixed prefix plus one turn of ``decompose_bench.TURNS``), ``runs`` times:

* ``pp`` (prompt processing): the whole prompt, prefix included, evaluated from an empty KV cache
  in ``n_batch`` chunks (``Llama.eval``); tokens / seconds.
* ``tg`` (text generation): ``gen_tokens`` single-token decodes after that prompt, as llama-bench's
  ``tg`` does (the token ids fed do not change the cost; here the prompt's own tokens, cyclically).
* ``ttft_ms``: a decomposition as ``select`` runs it (``LlmDecomposer.decompose``: the prefix reused
  from the KV cache, only the turn evaluated, grammar-constrained greedy decoding) from the call to
  its first generated token; ``decompose_ms`` the whole call, ``decode_tokens_per_s`` its rate
  after the first token (grammar and detokenization included).

``load_ms`` is the GGUF load (mmap, context) and ``prefix_eval_ms`` the one-off evaluation of the
prompt prefix that ``select`` pays on its first LLM turn. Timings are ``time.perf_counter``; the
order is fixed (decompose, then pp, then tg, prompt by prompt), one untimed warm-up call first.

Result (``measure_llm``; schema ``magicselector-llm-bench/1``)::

    {"schema", "host": {cpu_model, cores, isa, loadavg, ...}, "llama_cpp": version,
     "model": {"path", "source", "size_bytes", "prompt_style"},
     "config": {"n_threads", "n_threads_batch", "n_ctx", "n_batch", "extra_buffers", "prompts", "runs",
                "gen_tokens"},
     "load_ms", "prefix": {"tokens", "eval_ms"},
     "pp": {"prompt_tokens_mean", "tokens_per_s": {"mean", "std", "min", "max", "n"}},
     "tg": {"tokens", "tokens_per_s": {...}},
     "ttft_ms": {"p50", "p90", ...}, "decompose_ms": {...}, "decode_tokens_per_s": {...} | null,
     "prompts": [{"utterance", "prompt_tokens", "suffix_tokens", "pp_tokens_per_s", "tg_tokens_per_s",
                  "ttft_ms", "decompose_ms", "tasks"}]}     # per prompt, means over the runs
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.errors import InputError

SCHEMA = "magicselector-llm-bench/1"


def resolve_model(model: str | Path | None = None, bundle: str | Path | None = None) -> tuple[Path, str, str]:
    """(GGUF path, prompt style, where it came from) as the runtime picks them: ``model``, else the
    bundle's decomposer, else the pinned default."""
    if model is not None:
        return Path(model), "few_shot", "--model"
    if bundle is not None:
        from magicselector.bundle import Bundle

        b = Bundle.open(bundle, verify=False)
        dec = b.section("decomposer")
        if dec:
            return b.file(dec["file"]), str(dec.get("prompt", "few_shot")), "the bundle's decomposer"
    from magicselector.decompose.model import ensure_default_model

    return ensure_default_model(), "few_shot", "the pinned default, from its chunk packages"


def _rate_stats(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()), "max": float(a.max()),
            "n": int(a.size)}


def _llama_cpp_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("llama_cpp_python")
    except Exception:
        return None


def _time_prompt(dec, llm, turn: tuple[str, list], tokens: list[int], suffix: list[int], gen_tokens: int,
                 row: dict[str, Any]) -> None:
    """One run of one prompt, appended to ``row``'s series: the decomposer's turn (ttft, decompose,
    decode rate), then pp over the whole prompt ``tokens``, then ``gen_tokens`` single-token decodes."""
    # the decomposer's turn: prefix from the KV cache (the raw evals below leave it in place:
    # they start with the same prefix tokens)
    t0 = time.perf_counter()
    result = dec.decompose(*turn)
    row["decompose"].append((time.perf_counter() - t0) * 1e3)
    trace = result.trace
    row["ttft"].append(trace.ttft_ms)
    if trace.tokens > 1 and trace.ms > trace.ttft_ms:
        row["decode"].append((trace.tokens - 1) / ((trace.ms - trace.ttft_ms) / 1e3))
    row["tasks"] = list(result.tasks)
    # pp: the whole prompt from an empty cache
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(tokens)
    row["pp"].append(len(tokens) / (time.perf_counter() - t0))
    # tg: single-token decodes after the prompt
    feed = [suffix[i % len(suffix)] for i in range(gen_tokens)]
    t0 = time.perf_counter()
    for tok in feed:
        llm.eval([tok])
    row["tg"].append(gen_tokens / (time.perf_counter() - t0))


def _prompt_summary(row: dict[str, Any]) -> dict[str, Any]:
    """One entry of ``prompts``: the prompt's sizes and the means of its series over the runs."""
    return {"utterance": row["utterance"], "prompt_tokens": row["prompt_tokens"],
            "suffix_tokens": row["suffix_tokens"], "pp_tokens_per_s": float(np.mean(row["pp"])),
            "tg_tokens_per_s": float(np.mean(row["tg"])), "ttft_ms": float(np.mean(row["ttft"])),
            "decompose_ms": float(np.mean(row["decompose"])), "tasks": row["tasks"]}


def measure_llm(model: str | Path | None = None, *, bundle: str | Path | None = None, threads: int = 2,
                n_ctx: int = 2048, prompt_style: str | None = None, prompts: int = 3, runs: int = 2,
                gen_tokens: int = 32, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Load the decomposer's GGUF and measure it on ``prompts`` of its real prompts, ``runs`` times
    each; see the module docstring for what is timed and the result."""
    from magicselector.decompose import LlmDecomposer
    from magicselector.decompose.prompts import build_suffix, prompt_prefix
    from magicselector.dialogue import Turn

    from .decompose_bench import TURNS
    from .latency import machine_description

    if threads < 1 or prompts < 1 or runs < 1 or gen_tokens < 1:
        raise InputError(f"threads, prompts, runs and gen_tokens must be >= 1, got threads={threads}, "
                         f"prompts={prompts}, runs={runs}, gen_tokens={gen_tokens}")
    if prompts > len(TURNS):
        raise InputError(f"prompts must be <= {len(TURNS)} (the decomposer bench's turns), got {prompts}")
    say = progress or (lambda _m: None)
    host = machine_description()
    path, style, source = resolve_model(model, bundle)
    style = prompt_style or style
    say(f"[llm] loading {path} ({source}), {threads} thread(s), n_ctx {n_ctx}")
    dec = LlmDecomposer(path, threads=threads, n_ctx=n_ctx, prompt=style)
    runner = dec.load()  # the GGUF load, then the prefix evaluated once into the KV cache
    llm = runner.llm
    prefix_tokens = runner.tokenize(prompt_prefix(style))
    turns = [(q, [Turn(r, c) for r, c in hist]) for q, hist, _gold in TURNS[:prompts]]
    suffixes = [runner.tokenize(build_suffix(q, hist, dec.history_turns)) for q, hist in turns]
    longest = len(prefix_tokens) + max(len(s) for s in suffixes) + gen_tokens
    if longest > n_ctx:
        raise InputError(f"n_ctx {n_ctx} is too small for a {longest - gen_tokens}-token prompt + {gen_tokens} "
                         "generated tokens")
    dec.decompose(*turns[0])  # warm-up: first-call allocations land in no series

    rows = [{"utterance": q, "prompt_tokens": len(prefix_tokens) + len(s), "suffix_tokens": len(s), "pp": [],
             "tg": [], "ttft": [], "decompose": [], "decode": [], "tasks": None} for (q, _), s in zip(turns, suffixes)]
    for r in range(runs):
        t_pass = time.perf_counter()
        for turn, suffix, row in zip(turns, suffixes, rows):
            _time_prompt(dec, llm, turn, prefix_tokens + suffix, suffix, gen_tokens, row)
        say(f"[llm] run {r + 1}/{runs}: {len(turns)} prompts in {(time.perf_counter() - t_pass):.1f} s")

    from .latency import percentiles

    def series(name: str) -> list[float]:  # one series over every prompt and run
        return [x for row in rows for x in row[name]]

    decode = series("decode")
    result = {
        "schema": SCHEMA,
        "host": host,
        "llama_cpp": _llama_cpp_version(),
        "model": {"path": str(path), "source": source, "size_bytes": Path(path).stat().st_size,
                  "prompt_style": style},
        "config": {"n_threads": runner.n_threads, "n_threads_batch": runner.n_threads, "n_ctx": runner.n_ctx,
                   "n_batch": int(llm.n_batch), "extra_buffers": runner.extra_buffers, "prompts": len(turns),
                   "runs": runs, "gen_tokens": gen_tokens},
        "load_ms": runner.load_ms,
        "prefix": {"tokens": len(prefix_tokens), "eval_ms": runner.prefix_ms},
        "pp": {"prompt_tokens_mean": float(np.mean([row["prompt_tokens"] for row in rows])),
               "tokens_per_s": _rate_stats(series("pp"))},
        "tg": {"tokens": gen_tokens, "tokens_per_s": _rate_stats(series("tg"))},
        "ttft_ms": percentiles(series("ttft")),
        "decompose_ms": percentiles(series("decompose")),
        "decode_tokens_per_s": _rate_stats(decode) if decode else None,
        "prompts": [_prompt_summary(row) for row in rows],
    }
    runner.close()
    return result


def format_llm_bench(res: dict[str, Any], heading: str = "#") -> str:
    """A markdown report in llama-bench's terms: one table of the model's rates, one row per prompt
    (``heading``: the title's level, ``##`` inside another report)."""
    from .latency import isa_summary

    cfg, m = res["config"], res["model"]
    pp, tg = res["pp"]["tokens_per_s"], res["tg"]["tokens_per_s"]
    dec = res.get("decode_tokens_per_s") or {}
    lines = [f"{heading} GGUF decomposer (llama-bench figures)", "",
             f"Host: {isa_summary(res['host'])}, load avg {res['host'].get('loadavg')}; llama-cpp-python "
             f"{res.get('llama_cpp')}.",
             f"Model: {m['path']} ({m['source']}, {m['size_bytes'] / 2**20:.0f} MB, prompt {m['prompt_style']}); "
             f"n_threads {cfg['n_threads']} (batch {cfg['n_threads_batch']}), n_ctx {cfg['n_ctx']}, n_batch "
             f"{cfg['n_batch']}, extra buffer types {'on' if cfg['extra_buffers'] else 'off'}; {cfg['prompts']} "
             f"prompts x {cfg['runs']} runs.", "",
             "| test | t/s mean | t/s std | min | max | n |", "|---|---:|---:|---:|---:|---:|",
             f"| pp{res['pp']['prompt_tokens_mean']:.0f} (the whole decomposer prompt) | {pp['mean']:.1f} | "
             f"{pp['std']:.1f} | {pp['min']:.1f} | {pp['max']:.1f} | {pp['n']} |",
             f"| tg{res['tg']['tokens']} (single-token decodes) | {tg['mean']:.1f} | {tg['std']:.1f} | "
             f"{tg['min']:.1f} | {tg['max']:.1f} | {tg['n']} |"]
    if dec:
        lines.append(f"| decomposer decode (grammar, after the first token) | {dec['mean']:.1f} | {dec['std']:.1f} | "
                     f"{dec['min']:.1f} | {dec['max']:.1f} | {dec['n']} |")
    t, d = res["ttft_ms"], res["decompose_ms"]
    lines += ["", f"Load {res['load_ms']:.0f} ms; prompt prefix {res['prefix']['tokens']} tokens evaluated once in "
              f"{res['prefix']['eval_ms']:.0f} ms. Per turn (prefix from the KV cache): time to first token p50 "
              f"{t['p50']:.0f} ms (p90 {t['p90']:.0f}), decomposition p50 {d['p50']:.0f} ms (p90 {d['p90']:.0f}).",
              "", "| prompt | tokens (turn) | pp t/s | tg t/s | TTFT ms | decompose ms | sub-tasks |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for p in res["prompts"]:
        tasks = "; ".join(p["tasks"] or []).replace("|", "\\|")
        lines.append(f"| {p['utterance']} | {p['prompt_tokens']} ({p['suffix_tokens']}) | {p['pp_tokens_per_s']:.1f} | "
                     f"{p['tg_tokens_per_s']:.1f} | {p['ttft_ms']:.0f} | {p['decompose_ms']:.0f} | {tasks} |")
    return "\n".join(lines) + "\n"

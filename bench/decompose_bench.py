"""``python -m magicselector.bench.decompose_bench [--turns N] [--threads 2]``: LLM decomposer speed.

Loads the decomposer (the pinned default GGUF or ``--model``), then decomposes a fixed mix of
dialogue turns (two-intent, three-intent, elliptical, single) twice: with the few-shot prefix
reused from the KV cache, and with the whole prompt evaluated each time. Reports time to first
token, decode tokens/s, decomposition time per turn (p50 / p90), the same on the two-intent turns
alone, the model's load and prefix times, and the process's peak RSS (VmHWM).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from magicselector.dialogue import Turn
from magicselector.decompose import PROMPT_STYLES, LlmDecomposer
from magicselector.decompose.prompts import build_suffix

TURNS: list[tuple[str, list[tuple[str, str]], int]] = [  # (utterance, history, gold task count)
    ("what's the weather in Berlin tomorrow and play some jazz", [], 2),
    ("turn it off", [("user", "turn on Bluetooth"), ("assistant", "Bluetooth is on.")], 1),
    ("set an alarm for 6:30, text Sam that I'm running late and turn on do not disturb", [], 3),
    ("and for tomorrow?", [("user", "what's the weather in Paris?"), ("assistant", "Sunny, 21 degrees.")], 1),
    ("remind me to buy milk when I get home. Also how long is my commute right now?", [], 2),
    ("wake me up at 7", [], 1),
    ("6 pm", [("user", "remind me to call mom"), ("assistant", "What time should I remind you?")], 1),
    ("play some rock and roll and lower the brightness", [], 2),
]


def _status_kb(field: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run(turns: int = 16, threads: int = 2, model: str | None = None, n_ctx: int = 2048,
        prompt: str = "few_shot") -> dict[str, Any]:
    rss0 = _status_kb("VmRSS")
    t0 = time.perf_counter()
    dec = LlmDecomposer(model, threads=threads, n_ctx=n_ctx, prompt=prompt)
    runner = dec.load()
    load_s = time.perf_counter() - t0
    workload = [TURNS[i % len(TURNS)] for i in range(turns)]
    # one warm-up call so that first-call allocations do not land in either series
    runner.generate(build_suffix(*workload[0][:1], []), grammar=dec.grammar, max_tokens=4)
    out: dict[str, Any] = {
        "model": str(runner.path), "prompt": prompt, "threads": threads, "n_ctx": n_ctx, "turns": turns,
        "load_s": round(load_s, 3), "model_load_ms": round(runner.load_ms, 1),
        "prefix_tokens": runner.prefix_tokens, "prefix_eval_ms": round(runner.prefix_ms, 1),
        "extra_buffers": runner.extra_buffers,
    }
    for label, reuse in (("reuse", True), ("no_reuse", False)):
        dec.reuse_prefix = reuse
        ttft, total, tps, two, prompt = [], [], [], [], []
        for query, hist, gold in workload:
            history = [Turn(r, c) for r, c in hist]
            t = time.perf_counter()
            trace = dec.decompose(query, history).trace
            ms = (time.perf_counter() - t) * 1e3
            ttft.append(trace.ttft_ms)
            total.append(ms)
            if trace.tokens > 1 and trace.ms > trace.ttft_ms:
                tps.append((trace.tokens - 1) / ((trace.ms - trace.ttft_ms) / 1e3))
            if gold == 2:
                two.append(ms)
        gen = runner.generate(build_suffix(workload[0][0], []), grammar=dec.grammar, reuse_prefix=reuse)
        prompt.append(gen.prompt_tokens)
        out[label] = {
            "ttft_ms_p50": round(_pct(ttft, 50), 1), "ttft_ms_p90": round(_pct(ttft, 90), 1),
            "decompose_ms_p50": round(_pct(total, 50), 1), "decompose_ms_p90": round(_pct(total, 90), 1),
            "two_intent_ms_p50": round(_pct(two, 50), 1),
            "decode_tokens_per_s": round(float(np.median(tps)), 2) if tps else None,
            "prompt_tokens_per_call": prompt[0],
        }
    dec.reuse_prefix = True
    out["examples"] = {q: list(dec.decompose(q, [Turn(r, c) for r, c in h]).tasks) for q, h, _ in TURNS[:4]}
    out["rss_before_mb"] = round(rss0 / 1024, 1)
    out["rss_mb"] = round(_status_kb("VmRSS") / 1024, 1)
    out["peak_rss_mb"] = round(_status_kb("VmHWM") / 1024, 1)
    runner.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m magicselector.bench.decompose_bench", description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, default=16, help="decompositions per series (default 16)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", help="a GGUF file (default: the pinned Qwen2.5-Coder-0.5B Q4_K_M)")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--prompt", choices=PROMPT_STYLES, default="few_shot",
                   help="the decomposer prompt (zero_shot for a model trained with it)")
    p.add_argument("--json", metavar="OUT", help="also write the report here")
    args = p.parse_args(argv)
    report = run(args.turns, args.threads, args.model, args.ctx, args.prompt)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``magicselector bench worst-case``: the time and peak memory of one ``select`` for inputs at the
limits that ``SelectorConfig`` admits (the longest utterance, the most history considered, raw
histories far past the limits), per decomposer and history mode.

Every mode runs in a fresh process (so its peak RSS is its own): load the bundle, warm up with an
ordinary turn, then time ``runs`` selects of each input. Reports the slowest and median time per
input and the process's peak RSS (VmHWM) with the RSS after the warm-up.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

CLAUSE = "turn on the living room lights and set an alarm for 7, then play some jazz; "
# every clause a retry or status check, which the rules follow through earlier user turns
FOLLOW_UP = "try again, and is it done? "
MODES = ("none", "rules", "llm", "auto")


def inputs(max_query_chars: int = 16_000, max_history_turns: int = 32,
           max_history_chars: int = 16_000) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """The worst inputs: (utterance, history) by name."""
    long_query = (CLAUSE * (max_query_chars // len(CLAUSE) + 1))[:max_query_chars].strip()
    per_turn = max_history_chars // max_history_turns
    at_limit = [{"role": "user" if i % 2 == 0 else "assistant", "content": (CLAUSE * 20)[:per_turn]}
                for i in range(max_history_turns)]
    big = CLAUSE * 2_000  # one string, shared: the input is large, the benchmark's memory is not
    flood = [{"role": "user" if i % 2 == 0 else "assistant", "content": big} for i in range(5_000)]
    parts = [{"role": "user", "content": [{"type": "text", "text": CLAUSE}] * 20_000}] * max_history_turns
    clauses = long_query.count(";") + 1
    follow_ups = (FOLLOW_UP * (max_query_chars // len(FOLLOW_UP) + 1))[:max_query_chars].strip()
    retried = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": ((FOLLOW_UP + CLAUSE) * 20)[:per_turn] if i % 2 == 0 else "Error 503, it failed."}
               for i in range(max_history_turns)]
    return {
        f"utterance at the limit ({len(long_query):,} chars, {clauses} requests)": (long_query, []),
        f"history at the limits ({max_history_turns} turns, {per_turn * max_history_turns:,} chars)":
            ("and turn it off", at_limit),
        "both at the limits": (long_query, at_limit),
        f"raw history far past them ({len(flood):,} turns x {len(big):,} chars)": ("and turn it off", flood),
        f"history of {max_history_turns} messages x 20,000 content parts": ("and turn it off", parts),
        "retries and status checks at the limits, every user turn too": (follow_ups, retried),
    }


def _vm_kb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def measure_mode(bundle: str | None, decompose: str, history: str, runs: int, threads: int) -> dict[str, Any]:
    """In this process: one mode's times and memory (what the subprocess of ``run`` executes)."""
    from magicselector.config import SelectorConfig
    from magicselector.selector import Selector

    config = SelectorConfig(decompose=decompose, history=history, threads=threads)
    t0 = time.perf_counter()
    selector = Selector.from_bundle(bundle, config=config)
    selector.select("turn on bluetooth and play some jazz", [{"role": "user", "content": "hi"}])  # warm-up
    warm_s = time.perf_counter() - t0
    rss_warm = _vm_kb("VmRSS")
    out: dict[str, Any] = {"decompose": decompose, "history": history, "threads": threads,
                           "load_and_warmup_s": round(warm_s, 2),
                           "rss_after_warmup_mb": round(rss_warm / 1024, 1) if rss_warm else None, "inputs": {}}
    for name, (query, hist) in inputs(config.limits.max_query_chars, config.limits.max_history_turns,
                                      config.limits.max_history_chars).items():
        times, subtasks = [], 0
        for _ in range(runs):
            t = time.perf_counter()
            sel = selector.select(query, hist)
            times.append((time.perf_counter() - t) * 1e3)
            subtasks = len(sel.subtasks)
        out["inputs"][name] = {"max_ms": round(max(times), 1), "median_ms": round(statistics.median(times), 1),
                               "subtasks": subtasks, "stages_ms": {k: round(v, 1) for k, v in sel.timings_ms.items()}}
    hwm = _vm_kb("VmHWM")
    out["peak_rss_mb"] = round(hwm / 1024, 1) if hwm else None
    return out


def host() -> dict[str, Any]:
    """CPU model, INT8-relevant ISA flags, cores and Python: bench.latency.machine_description's."""
    from .latency import machine_description

    d = machine_description()
    return {"cpu": d["cpu_model"], "isa": d["isa"], "cores": d["cores"], "python": d["python"]}


def run(bundle: str | None = None, modes=("none", "rules"), histories=("none", "all"), runs: int = 3,
        threads: int = 1, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every (decomposer, history mode) in its own process; the report."""
    say = progress or (lambda line: None)
    results = []
    for decompose in modes:
        for history in histories:
            say(f"[worst-case] decompose={decompose} history={history}")
            cmd = [sys.executable, "-m", "magicselector.bench.worst_case", "--one", "--decompose", decompose,
                   "--history-mode", history, "--runs", str(runs), "--threads", str(threads)]
            if bundle:
                cmd += ["--bundle", str(bundle)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                results.append({"decompose": decompose, "history": history,
                                "error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]})
                continue
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"host": host(), "runs": runs, "threads": threads, "results": results}


def format_markdown(report: dict[str, Any]) -> str:
    h = report["host"]
    lines = [f"Host: {h['cpu']} ({', '.join(h['isa'])}), {h['cores']} cores; embedder threads "
             f"{report['threads']}, LLM threads 2; slowest of {report['runs']} selects after a warm-up turn.", "",
             "| decompose | history | input | slowest ms | median ms | sub-tasks | peak RSS MB (after warm-up) |",
             "|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        if "error" in r:
            lines.append(f"| {r['decompose']} | {r['history']} | (failed: {r['error']}) | | | | |")
            continue
        for name, m in r["inputs"].items():
            lines.append(f"| {r['decompose']} | {r['history']} | {name} | {m['max_ms']} | {m['median_ms']} | "
                         f"{m['subtasks']} | {r['peak_rss_mb']} ({r['rss_after_warmup_mb']}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="magicselector bench worst-case", description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle")
    p.add_argument("--decompose", nargs="+", default=["none", "rules"], choices=MODES)
    p.add_argument("--history-mode", nargs="+", default=["none", "questions", "all"], choices=["none", "user", "questions", "all"])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one mode, in this process
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure_mode(args.bundle, args.decompose[0], args.history_mode[0], args.runs, args.threads)))
        return 0
    report = run(args.bundle, args.decompose, args.history_mode, args.runs, args.threads,
                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_markdown(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all("error" not in r for r in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())

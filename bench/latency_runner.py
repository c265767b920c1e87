"""The latency runner: ``measure_latency`` in a fresh process, written as JSON (also run on phones).

    python -m magicselector.bench.latency_runner --bundle DIR --runs N --warmup N --threads T \
        --out FILE.json [--cool-down-s S] [--history-mode none|user|questions|all] [--no-verify]

Needs only numpy, onnxruntime, usearch and tokenizers (the lean runtime). One progress line per
pass goes to stderr; the results (schema ``magicselector-latency/1``, see
``magicselector.bench.latency``) go to ``--out`` (``-`` for stdout). Exit code 0 on success, 2 on a
clear error.
"""
from __future__ import annotations

import time

_T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Sequence  # noqa: E402

HEAVY = ("torch", "transformers", "sentence_transformers", "optimum", "executorch", "matplotlib", "rank_bm25")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m magicselector.bench.latency_runner",
                                description="Measure magicselector latency in this process and write JSON.")
    p.add_argument("--bundle", required=True, help="bundle folder")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="output JSON file ('-' for stdout)")
    p.add_argument("--cool-down-s", type=float, default=0.0, help="sleep between passes (thermal headroom)")
    p.add_argument("--history-mode", choices=["none", "user", "questions", "all"], default=None,
                   help="default: the shipped SelectorConfig's")
    p.add_argument("--decompose", choices=["none", "rules", "llm", "auto"], default=None,
                   help="the decomposer to run (llm/auto load the GGUF model: its memory counts in the peak RSS)")
    p.add_argument("--no-verify", action="store_true", help="skip hashing the bundle files on load")
    p.add_argument("--turns", metavar="FILE", help="time these dialogue turns: a benchmark queries.jsonl "
                                                   "({query, history} per line; default: the fixed phone workload)")
    p.add_argument("--turns-limit", type=int, default=None, metavar="N",
                   help="with --turns: N rows drawn with seed 0 (file order kept)")
    return p


def runner_argv(bundle: str, out: str, *, runs: int, warmup: int, threads: int, cool_down_s: float | None = None,
                history_mode: str | None = None, decompose: str | None = None,
                turns: str | None = None, turns_limit: int | None = None,
                verify: bool = True, module: str = "magicselector.bench.latency_runner") -> list[str]:
    """The runner's command line after the Python executable (``-m module --bundle ...``): the one
    place its flags are spelled, for the local run (``bench latency``) and the phone's
    (``bench.adb``). A None setting is left out, so the runner takes its default (the shipped
    configuration); ``turns_limit`` goes with ``turns`` only."""
    argv = ["-m", module, "--bundle", str(bundle), "--runs", str(runs), "--warmup", str(warmup),
            "--threads", str(threads), "--out", str(out)]
    optional = (("--cool-down-s", cool_down_s), ("--history-mode", history_mode), ("--decompose", decompose),
                ("--turns", turns),
                ("--turns-limit", turns_limit if turns is not None else None))
    for flag, value in optional:
        if value is not None:
            argv += [flag, str(value)]
    if not verify:
        argv.append("--no-verify")
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.threads < 1:
        print("latency_runner: error: need --runs >= 1, --warmup >= 0, --threads >= 1", file=sys.stderr)
        return 2
    if not os.path.isdir(args.bundle):
        print(f"latency_runner: error: {args.bundle}: no such bundle folder", file=sys.stderr)
        return 2
    t = time.perf_counter()
    import magicselector.selector  # noqa: F401  - the runtime's imports, timed for the cold start
    import numpy  # noqa: F401
    import onnxruntime  # noqa: F401
    import usearch.index  # noqa: F401

    from magicselector.bench.latency import measure_latency
    from magicselector.errors import MagicSelectorError

    import_ms = (time.perf_counter() - t) * 1e3

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        extra = {}
        if args.turns:
            from magicselector.bench.latency import load_turns
            from magicselector.files import sha256_file

            extra = {"workload": load_turns(args.turns, args.turns_limit),
                     "workload_name": args.turns + (f" ({args.turns_limit} rows, seed 0)" if args.turns_limit else ""),
                     "workload_sha256": sha256_file(args.turns)}
        elif args.turns_limit is not None:
            print("latency_runner: error: --turns-limit needs --turns", file=sys.stderr)
            return 2
        results = measure_latency(args.bundle, runs=args.runs, warmup=args.warmup, threads=args.threads, **extra,
                                  cool_down_s=args.cool_down_s, history_mode=args.history_mode, decompose=args.decompose,
                                  verify=not args.no_verify, progress=progress, import_ms=import_ms,
                                  fresh_process=True)
    except MagicSelectorError as e:
        print(f"latency_runner: error: {e}", file=sys.stderr)
        return 2
    results["config"]["runner_wall_s"] = round(time.perf_counter() - _T_START, 3)
    results["config"]["heavy_modules_loaded"] = sorted(
        m for m in sys.modules if m.split(".")[0] in HEAVY)
    text = json.dumps(results, indent=2) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        out_dir = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(out_dir, exist_ok=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, args.out)
        st = results["stages"].get("total", {})
        print(f"[latency] wrote {args.out}: total p50 {st.get('p50', 0):.2f} ms, cold start "
              f"{results['cold_start_ms']:.0f} ms, peak RSS {results['peak_rss_mb']:.0f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

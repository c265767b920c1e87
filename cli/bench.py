"""``magicselector bench ...``: the benchmark subcommands, registered by ``magicselector.cli``.

The CLI imports this module on every invocation, so only the standard library and the shared
option vocabulary (``magicselector.cli.options``) are imported at module level; the benchmarks,
torch and matplotlib are imported inside the commands.

``bench latency`` runs the latency runner in a fresh process (locally) or on a phone over ADB
(``--device adb[:SERIAL]``, through ``magicselector.bench.adb``), optionally the side-by-side
compare on this machine, and writes ``results.json`` (the ``magicselector-latency/1`` dict, plus
``compare`` when run and ``llm``, the GGUF decomposer's llama-bench figures, with ``--decompose
llm|auto``), ``results.csv`` (one row per stage), ``summary.md`` and PNG plots.
``bench scaling`` writes ``scaling.json``, ``scaling.csv``, ``scaling.md`` and PNG plots.
``bench llm`` measures the GGUF decomposer as llama-bench does (load, pp and tg tokens/s, time to
first token; ``magicselector.bench.llm_bench``).
``bench lexical`` times the runtime's BM25 index on synthetic catalogs, on one core
(``magicselector.bench.lexical_bench``), prints a markdown table and optionally writes ``--json``.
``bench quality`` measures every development set's evaluation part per pipeline configuration
(``magicselector.bench.quality``) and writes ``docs/bench/quality.md`` and its JSON.
``bench selections`` writes each sampled turn's selection (ids, K, scores) as JSON lines and, with
``--against``, lists the turns that differ from an earlier file (``magicselector.bench.selections``).
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from magicselector.cli.options import (HISTORY_MODES, PROMPT_STYLES, add_bundle_option, add_decompose_options,
                                      add_threads_option)

DEFAULT_OUT = "bench-out"

# The latency targets of the on-device runtime, checked in summary.md / scaling.md.
TARGETS = {
    "embed_p50_ms": 4.0,          # embed one query (<= 32 tokens), 1 thread
    "embed_vs_pytorch_x": 3.0,    # >= 3x faster than FP32 PyTorch
    "search_10k_p50_ms": 0.3,
    "search_1m_p50_ms": 3.0,
    "search_1m_recall": 0.99,     # recall@50 against exact search
    "cut_100_us": 20.0,           # adaptive Top-K over 100 candidates
    "total_p50_ms": 150.0,        # end to end without decomposer
    "cold_start_ms": 1500.0,
    "peak_rss_mb": 200.0,
}


def _err(msg: str) -> int:
    print(f"magicselector: error: {msg}", file=sys.stderr)
    return 2


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("pass" if ok else "**miss**")


# -- latency --------------------------------------------------------------------------------------
def _run_local(bundle: str, args: argparse.Namespace) -> dict[str, Any]:
    if args.pin_big_cores:
        print("bench latency: --pin-big-cores applies to phones (--device adb); ignored locally",
              file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ms-latency-") as tmp:
        out = Path(tmp) / "latency.json"
        from magicselector.bench.latency_runner import runner_argv

        cmd = [sys.executable] + runner_argv(
            bundle, str(out), runs=args.runs, warmup=args.warmup, threads=args.threads, cool_down_s=args.cool_down_s,
            decompose=args.decompose,
            turns=None if args.turns is None else str(args.turns), turns_limit=args.turns_limit)
        proc = subprocess.run(cmd)  # progress lines stream straight to our stderr
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"the latency runner failed (exit {proc.returncode}): {' '.join(cmd)}")
        return json.loads(out.read_text(encoding="utf-8"))


def _run_adb(bundle: str, serial: str | None, out_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    try:
        from magicselector.bench.adb import DeviceLatencyOptions, run_latency_on_device
    except ImportError as e:
        raise LookupError(f"the ADB harness is not installed (magicselector.bench.adb could not be imported: {e})")
    return run_latency_on_device(bundle, DeviceLatencyOptions(
        serial=serial, runs=args.runs, warmup=args.warmup, threads=args.threads, out_dir=out_dir,
        cool_down_s=args.cool_down_s, pin_big_cores=args.pin_big_cores, decompose=args.decompose,
        turns=args.turns, turns_limit=args.turns_limit))


def write_stage_csv(results: Mapping[str, Any], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["stage", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms", "n"])
        for stage, st in results["stages"].items():
            w.writerow([stage] + [f"{st.get(k, 0):.4f}" for k in ("p50", "p90", "p99", "mean", "min", "max")]
                       + [st.get("n", 0)])


def latency_targets(results: Mapping[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(target, measured, threshold, ok) rows for the targets the results can answer."""
    rows: list[tuple[str, str, str, bool | None]] = []
    stages = results.get("stages", {})
    cmp_ = results.get("compare")
    if cmp_ and "ours_embed" in cmp_.get("variants", {}):
        e = cmp_["variants"]["ours_embed"]["p50"]
        toks = cmp_["config"]["tokens"]
        rows.append((f"embed one query p50, 1 thread (tokens mean {toks['mean']:.1f}, max {toks['max']})",
                     f"{e:.2f} ms", f"<= {TARGETS['embed_p50_ms']} ms", e <= TARGETS["embed_p50_ms"]))
        r = cmp_.get("ratios", {}).get("pytorch_fp32_embed / ours_embed")
        if r is not None:
            rows.append(("embed vs FP32 PyTorch (p50 ratio)", f"{r:.2f}x", f">= {TARGETS['embed_vs_pytorch_x']}x",
                         r >= TARGETS["embed_vs_pytorch_x"]))
    elif "embed" in stages:
        e = stages["embed"]["p50"] + stages.get("tokenize", {}).get("p50", 0.0)
        rows.append(("embed stage p50 (tokenize + model, per turn)", f"{e:.2f} ms", f"<= {TARGETS['embed_p50_ms']} ms",
                     e <= TARGETS["embed_p50_ms"]))
    if "total" in stages:
        t = stages["total"]["p50"]
        rows.append((f"end to end p50 (decomposer: {results.get('config', {}).get('decomposer')})", f"{t:.2f} ms",
                     f"<= {TARGETS['total_p50_ms']:.0f} ms", t <= TARGETS["total_p50_ms"]))
    c = results.get("cold_start_ms")
    if c is not None:
        rows.append(("cold start (from_bundle -> first selection)", f"{c:.0f} ms",
                     f"<= {TARGETS['cold_start_ms']:.0f} ms", c <= TARGETS["cold_start_ms"]))
    m = results.get("peak_rss_mb")
    if m is not None:
        rows.append(("peak RSS (VmHWM)", f"{m:.1f} MB", f"<= {TARGETS['peak_rss_mb']:.0f} MB",
                     m <= TARGETS["peak_rss_mb"]))
    return rows


def latency_summary(results: Mapping[str, Any]) -> str:
    from magicselector.bench.latency import isa_summary

    dev, cfg = results.get("device", {}), results.get("config", {})
    lines = ["# magicselector latency", ""]
    lines.append(f"Device: {isa_summary(dev)}, {dev.get('machine')}, INT8 target {dev.get('int8_target')}, "
                 f"load avg {dev.get('loadavg')}, {dev.get('platform')}; python {dev.get('python')}, "
                 f"onnxruntime {dev.get('onnxruntime')} ({dev.get('onnxruntime_build')}), usearch {dev.get('usearch')}.")
    work = cfg.get("workload") or {}
    lines.append(f"Config: {cfg.get('runs')} runs x {cfg.get('turns')} turns"
                 + (f" of {work['name']}" if work.get("name") and work["name"] != "phone" else "")
                 + f" after {cfg.get('warmup')} warm-up "
                 f"passes, {cfg.get('threads')} thread(s), history={cfg.get('history_mode')}, "
                 f"candidates={cfg.get('candidates')}, cut={cfg.get('cut')}, decomposer={cfg.get('decomposer')}, "
                 f"tokens per text mean {((cfg.get('tokens') or {}).get('mean') or 0):.1f} "
                 f"(max {(cfg.get('tokens') or {}).get('max')}), fresh process: {cfg.get('fresh_process')}.")
    lines += ["", "| stage | p50 ms | p90 ms | p99 ms | mean ms | n |", "|---|---:|---:|---:|---:|---:|"]
    for stage, st in results["stages"].items():
        lines.append(f"| {stage} | {st['p50']:.3f} | {st['p90']:.3f} | {st['p99']:.3f} | {st['mean']:.3f} | {st['n']} |")
    cb = results.get("cold_start_breakdown") or {}
    imp = cb.get("import_ms")
    lines += ["", f"Cold start: {results['cold_start_ms']:.0f} ms (load {cb.get('load_ms', 0):.0f} ms + first "
              f"selection {cb.get('first_select_ms', 0):.0f} ms"
              + (f"; runtime imports before it: {imp:.0f} ms" if imp is not None else "") + "; warm file cache). "
              f"Peak RSS: {results['peak_rss_mb']:.1f} MB."]
    a = results.get("artifacts") or {}

    def mb(x: Any) -> str:
        return f"{x / 2**20:.2f} MB" if isinstance(x, (int, float)) else "-"

    lines.append(f"Artifacts: embedder {mb(a.get('embedder_bytes'))} ({a.get('embedder_quantization')}), "
                 f"tokenizer {mb(a.get('tokenizer_bytes'))}, index {mb(a.get('index_bytes'))} "
                 f"({a.get('index_dtype')}, {a.get('tools')} tools), catalog {mb(a.get('catalog_bytes'))}; "
                 f"bundle total {mb(a.get('total_bytes'))}.")
    cmp_ = results.get("compare")
    if cmp_:
        cc = cmp_["config"]
        lines += ["", "## Side by side (one query at a time, 1 thread, same process, interleaved)", "",
                  f"{cc['queries']} texts x {cc['runs']} runs, tokens mean {cc['tokens']['mean']:.1f} "
                  f"(max {cc['tokens']['max']}), {cc['tools']} tools, index {cc['index_dtype']}, "
                  f"{cc['candidates']} candidates. Ran on: {cmp_.get('host', 'this machine')}.", "",
                  "| variant | p50 ms | p90 ms | mean ms | n |", "|---|---:|---:|---:|---:|"]
        for name, st in sorted(cmp_["variants"].items()):
            lines.append(f"| {name} | {st['p50']:.3f} | {st['p90']:.3f} | {st['mean']:.3f} | {st['n']} |")
        lines += ["", "Ratios (p50; > 1 means ours is faster; means in brackets):", ""]
        for k, v in cmp_["ratios"].items():
            lines.append(f"- {k} = {v:.2f}x ({cmp_['ratios_mean'].get(k, float('nan')):.2f}x)")
        ag = cmp_.get("agreement") or {}
        if ag:
            lines.append("- agreement: " + ", ".join(f"{k} {v:.3f}" for k, v in ag.items() if v is not None))
    llm = results.get("llm")
    if llm:
        if llm.get("skipped"):
            lines += ["", "## GGUF decomposer (llama-bench figures)", "", f"Not measured: {llm['skipped']}"]
        else:
            from magicselector.bench.llm_bench import format_llm_bench

            lines += ["", format_llm_bench(llm, heading="##").rstrip("\n")]
    from magicselector.bench.handed_tokens import format_handed

    lines += format_handed(results)
    lines += ["", "## Targets", "", "| target | measured | threshold | result |", "|---|---:|---:|---|"]
    for name, meas, thr, ok in latency_targets(results):
        lines.append(f"| {name} | {meas} | {thr} | {_mark(ok)} |")
    return "\n".join(lines) + "\n"


def _llm_figures(bundle: str, device: str) -> dict[str, Any]:
    """llama-bench's figures for the bundle's GGUF decomposer on this machine (a few prompts, one run),
    or why they are missing."""
    if device != "local":
        return {"skipped": "measured on the machine that runs the bench only (`magicselector bench llm` there); "
                           f"this run's selections ran on {device}"}
    from magicselector.cli.options import SHIPPED
    from magicselector.errors import MagicSelectorError

    from magicselector.bench.llm_bench import measure_llm

    try:
        return measure_llm(bundle=bundle, threads=SHIPPED.llm.threads, n_ctx=SHIPPED.llm.ctx, prompts=3, runs=1,
                           progress=_progress)
    except MagicSelectorError as e:
        print(f"bench latency: no GGUF figures: {e}", file=sys.stderr)
        return {"skipped": str(e)}


def _prefill_figures(bundle: str, device: str, results: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``--prefill``: the GGUF's prefill time for each level's mean handed tokens (on this machine only)."""
    handed = results.get("handed_tokens")
    if device != "local":
        return {"skipped": f"the selections ran on {device}; prefill is timed on the machine that runs the bench only"}
    if not handed:
        return {"skipped": "the runner reported no handed tokens"}
    from magicselector.selector import Selector

    from magicselector.bench.handed_tokens import LEVELS, measure_prefill

    catalog = Selector.from_bundle(bundle).catalog
    return measure_prefill(catalog, {level: handed[level]["mean"] for level in LEVELS}, threads=args.threads,
                           reps=args.prefill_reps, max_tokens=args.prefill_max_tokens)


def _latency_args_problem(bundle: str, args: argparse.Namespace) -> str | None:
    """Why ``bench latency`` cannot run with this bundle and these arguments (before anything runs), or None."""
    if not Path(bundle, "manifest.json").is_file():
        return f"{bundle}: not a bundle folder (no manifest.json)"
    if args.turns_limit is not None and args.turns is None:
        return "--turns-limit needs --turns"
    return None


def _run_on_device(bundle: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The runner's results from ``--device``: this machine, or a phone over ADB. Raises LookupError
    for a device it cannot use, RuntimeError when the local runner failed."""
    device = args.device
    if device == "local":
        return _run_local(bundle, args)
    if device == "adb" or device.startswith("adb:"):
        serial = device.split(":", 1)[1] or None if ":" in device else None
        return _run_adb(bundle, serial, out, args)
    raise LookupError(f"--device must be local or adb[:SERIAL], got {device!r}")


def _compare_on_host(bundle: str, results: Mapping[str, Any], workload: list | None,
                     args: argparse.Namespace) -> dict[str, Any]:
    """``--compare``: the side-by-side variants, always timed on this machine (they need torch)."""
    from magicselector.bench.compare import compare_latency

    cmp_ = compare_latency(bundle, runs=args.runs, warmup=args.warmup,
                           **({"workload": workload} if workload is not None else {}),
                           history_mode=results.get("config", {}).get("history_mode", "user"), progress=_progress)
    cmp_["host"] = "this machine" if args.device == "local" else "the host (not the phone): compare needs torch"
    return cmp_


def _write_latency_report(results: Mapping[str, Any], out: Path, compare: bool) -> tuple[str, list[str]]:
    """results.json, results.csv, summary.md and (with matplotlib) the plots; (the summary, the files written)."""
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    write_stage_csv(results, out / "results.csv")
    summary = latency_summary(results)
    (out / "summary.md").write_text(summary, encoding="utf-8")
    written = ["results.json", "results.csv", "summary.md"]
    try:
        from magicselector.bench.plots import plot_compare, plot_stage_latency

        plot_stage_latency(results, out / "stages.png")
        written.append("stages.png")
        if compare:
            plot_compare(results["compare"], out / "compare.png")
            written.append("compare.png")
    except ImportError as e:
        print(f"bench latency: no plots (matplotlib missing: {e}); pip install 'magicselector[bench]'",
              file=sys.stderr)
    return summary, written


def cmd_latency(args: argparse.Namespace) -> int:
    from magicselector.default_bundle import ensure_default_bundle
    from magicselector.cli.options import SHIPPED
    from magicselector.errors import InputError

    args.threads = args.threads or SHIPPED.threads
    args.decompose = args.decompose or SHIPPED.decompose
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = str(args.bundle) if args.bundle else str(ensure_default_bundle(progress=True))
    problem = _latency_args_problem(bundle, args)
    if problem:
        return _err(problem)
    workload = None
    if args.turns is not None:  # checked here too, so a bad file fails before a phone is touched
        from magicselector.bench.latency import load_turns

        try:
            workload = load_turns(args.turns, args.turns_limit)
        except InputError as e:
            return _err(str(e))
    if getattr(args, "prefill", False):  # before the run: a missing llm extra is a MagicSelectorError naming it
        from magicselector.backends.llama import require_llama_cpp

        require_llama_cpp()
    try:
        results = _run_on_device(bundle, out, args)
    except (LookupError, RuntimeError) as e:
        return _err(str(e))

    from magicselector.bench.latency import validate_results

    problems = validate_results(results)
    if problems:
        print("bench latency: warning: results do not follow the schema: " + "; ".join(problems), file=sys.stderr)
    results = dict(results)
    if args.compare:
        try:
            results["compare"] = _compare_on_host(bundle, results, workload, args)
        except InputError as e:
            return _err(str(e))
    if args.decompose in ("llm", "auto"):
        results["llm"] = _llm_figures(bundle, args.device)
    if getattr(args, "prefill", False):
        results["prefill"] = _prefill_figures(bundle, args.device, results, args)
    summary, written = _write_latency_report(results, out, args.compare)
    print(summary)
    print(f"wrote {', '.join(written)} to {out}")
    return 0


# -- scaling --------------------------------------------------------------------------------------
def scaling_summary(res: Mapping[str, Any]) -> str:
    from magicselector.bench.latency import isa_summary

    cfg, dev = res["config"], res["device"]
    lines = ["# magicselector scaling", "",
             f"Device: {isa_summary(dev)} (load avg at end {dev.get('loadavg')}). "
             f"Synthetic {cfg['data']} unit vectors, dim {cfg['dim']}; usearch cos, connectivity "
             f"{cfg['connectivity']}, expansion_add {cfg['expansion_add']}, built with {cfg['build_threads']} "
             f"threads; search one query at a time, 1 thread, k={cfg['k']}; recall@{cfg['k']} against exact "
             f"numpy search. Wall time {cfg['wall_s']} s.", "",
             "## Search", "",
             "| n | dtype | build s | file MB | RSS delta MB | expansion_search | p50 ms | p90 ms | recall@50 | queries |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["search"]:
        if r.get("aborted"):
            lines.append(f"| {r['n']:,} | {r['dtype']} | stopped at {r['built']:,} after {r['build_s']:.0f} s | - | "
                         f"{r['rss_delta_mb']:.0f} | - | - | - | - | - |")
        for s in r["settings"]:
            star = " (chosen)" if s["expansion_search"] == r["chosen"]["expansion_search"] else ""
            lines.append(f"| {r['n']:,} | {r['dtype']} | {r['build_s']:.1f} | {r['file_bytes'] / 2**20:.1f} | "
                         f"{r['rss_delta_mb']:.0f} | {s['expansion_search']}{star} | {s['p50_ms']:.3f} | "
                         f"{s['p90_ms']:.3f} | {s['recall@50']:.4f} | {r['queries']} |")
    cut = res["cut"]
    lines += ["", f"## Adaptive Top-K (paper_cut, dim {cut['dim']})", "",
              "| n | median us | min us | scores only us |", "|---:|---:|---:|---:|"]
    for p in cut["points"]:
        lines.append(f"| {p['n']:,} | {p['us']:.1f} | {p['us_min']:.1f} | {p['us_scores_only']:.1f} |")
    for label, f in (("median", cut.get("fit")), ("min", cut.get("fit_min"))):
        if f:
            ll_big = f.get("loglog_slope_n_ge_1000")
            lines.append(f"\nFit over the {label}s: time = {f['slope_us_per_item']:.4g} us/item x n + "
                         f"{f['intercept_us']:.4g} us, R^2 = {f['r2']:.4f} (linear space); log-log slope "
                         f"{f['loglog_slope']:.3f}" + (f", over n >= 1000: {ll_big:.3f}" if ll_big is not None else "")
                         + ".")
    lines += ["", "## Targets", "", "| target | measured | threshold | result |", "|---|---:|---:|---|"]
    for r in res["search"]:
        c = r["chosen"]
        if c is None:
            lines.append(f"| search {r['n']:,} tools ({r['dtype']}) | not measured: build stopped at "
                         f"{r['built']:,} vectors after {r['build_s']:.0f} s | - | n/a |")
            continue
        if r["n"] == 10_000:
            lines.append(f"| search 10k tools p50 ({r['dtype']}, es={c['expansion_search']}, recall "
                         f"{c['recall@50']:.3f}) | {c['p50_ms']:.3f} ms | <= {TARGETS['search_10k_p50_ms']} ms | "
                         f"{_mark(c['p50_ms'] <= TARGETS['search_10k_p50_ms'])} |")
        if r["n"] == 1_000_000:
            ok = c["p50_ms"] <= TARGETS["search_1m_p50_ms"] and c["recall@50"] >= TARGETS["search_1m_recall"]
            lines.append(f"| search 1M tools p50 + recall@50 ({r['dtype']}, es={c['expansion_search']}) | "
                         f"{c['p50_ms']:.3f} ms, {c['recall@50']:.4f} | <= {TARGETS['search_1m_p50_ms']} ms, "
                         f">= {TARGETS['search_1m_recall']} | {_mark(ok)} |")
    p100 = next((p for p in cut["points"] if p["n"] == 100), None)
    if p100:
        lines.append(f"| adaptive Top-K, 100 candidates (median; min {p100['us_min']:.1f} us) | {p100['us']:.1f} us | "
                     f"<= {TARGETS['cut_100_us']:.0f} us | {_mark(p100['us'] <= TARGETS['cut_100_us'])} |")
    return "\n".join(lines) + "\n"


def write_scaling_csv(res: Mapping[str, Any], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["kind", "n", "dtype", "expansion_search", "p50_ms", "p90_ms", "mean_ms", "recall@50",
                    "build_s", "file_bytes", "rss_delta_mb", "chosen"])
        for r in res["search"]:
            for s in r["settings"]:
                w.writerow(["search", r["n"], r["dtype"], s["expansion_search"], f"{s['p50_ms']:.5f}",
                            f"{s['p90_ms']:.5f}", f"{s['mean_ms']:.5f}", f"{s['recall@50']:.5f}",
                            f"{r['build_s']:.3f}", r["file_bytes"], f"{r['rss_delta_mb']:.1f}",
                            int(s["expansion_search"] == r["chosen"]["expansion_search"])])
        for p in res["cut"]["points"]:
            w.writerow(["cut", p["n"], "", "", f"{p['us'] / 1e3:.6f}", "", "", "", "", "", "", ""])


def cmd_scaling(args: argparse.Namespace) -> int:
    from magicselector.bench.scaling import DEFAULT_CUT_NS, DEFAULT_NS, mcp_scaling_summary, run_mcp_scaling, run_scaling

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.mcp:  # MCP catalogs only: parse, validate, index (issue 27.7)
        res = run_mcp_scaling([int(x) for x in args.mcp.split(",")], args.bundle, embed_stride=args.embed_stride,
                              progress=_progress)
        (out / "scaling_mcp.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
        summary = mcp_scaling_summary(res)
        (out / "scaling_mcp.md").write_text(summary, encoding="utf-8")
        print(summary)
        print(f"wrote scaling_mcp.json, scaling_mcp.md to {out}")
        return 0
    ns = [int(x) for x in args.ns.split(",")] if args.ns else list(DEFAULT_NS)
    cut_ns = [int(x) for x in args.cut_ns.split(",")] if args.cut_ns else list(DEFAULT_CUT_NS)
    es = [int(x) for x in args.expansion_search.split(",")]
    res = run_scaling(ns, cut_ns, max_n=args.max_n, dtypes=args.dtypes.split(","), kind=args.data,
                      queries=args.queries, expansion_search=es, connectivity=args.connectivity,
                      expansion_add=args.expansion_add, threads=args.build_threads,
                      build_budget_s=args.build_budget_s, progress=_progress)
    (out / "scaling.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    write_scaling_csv(res, out / "scaling.csv")
    summary = scaling_summary(res)
    (out / "scaling.md").write_text(summary, encoding="utf-8")
    written = ["scaling.json", "scaling.csv", "scaling.md"]
    try:
        from magicselector.bench.plots import plot_cut_fit, plot_search_scaling

        if res["search"]:
            plot_search_scaling(res, out / "search_scaling.png")
            written.append("search_scaling.png")
        plot_cut_fit(res, out / "cut_fit.png")
        written.append("cut_fit.png")
    except ImportError as e:
        print(f"bench scaling: no plots (matplotlib missing: {e})", file=sys.stderr)
    print(summary)
    print(f"wrote {', '.join(written)} to {out}")
    return 0


# -- lexical --------------------------------------------------------------------------------------
def cmd_lexical(args: argparse.Namespace) -> int:
    from magicselector.bench.lexical_bench import DEFAULT_NS, format_lexical_bench, run_lexical_bench

    ns = [int(x) for x in args.ns.split(",")] if args.ns else list(DEFAULT_NS)
    if args.queries < 1 or args.updates < 1 or any(n < 1 for n in ns):
        return _err("--ns, --queries and --updates must be >= 1")
    res = run_lexical_bench(ns, queries=args.queries, updates=args.updates, progress=_progress)
    table = format_lexical_bench(res)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(table)
    return 0


# -- llm ------------------------------------------------------------------------------------------
def cmd_llm(args: argparse.Namespace) -> int:
    from magicselector.cli.options import SHIPPED
    from magicselector.errors import MagicSelectorError

    from magicselector.bench.llm_bench import format_llm_bench, measure_llm

    if args.model is not None and not Path(args.model).is_file():
        return _err(f"--model {args.model}: no such GGUF file")
    try:
        res = measure_llm(args.model, bundle=args.bundle, threads=args.threads or SHIPPED.llm.threads,
                          n_ctx=args.ctx or SHIPPED.llm.ctx, prompt_style=args.prompt, prompts=args.prompts,
                          runs=args.runs, gen_tokens=args.gen_tokens, progress=_progress)
    except MagicSelectorError as e:
        return _err(str(e))
    table = format_llm_bench(res)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(table)
    if args.json:
        print(f"wrote {args.json}")
    return 0


def cmd_soak(args: argparse.Namespace) -> int:
    from magicselector.bench.soak import SoakConfig, format_soak, run_soak, write_soak

    if args.selects < 1 or args.threads < 1 or args.churn_ms <= 0:
        return _err("need --selects >= 1, --threads >= 1 and --churn-ms > 0")
    config = SoakConfig(selects=args.selects, threads=args.threads, churn_interval_ms=args.churn_ms, seed=args.seed,
                        decompose=args.decompose)
    report = run_soak(args.bundle, config, progress=_progress)
    print(format_soak(report))
    if args.out:
        print(f"wrote {write_soak(report, args.out)}", file=sys.stderr)
    return 0 if report["ok"] else 1


def cmd_worst_case(args: argparse.Namespace) -> int:
    from magicselector.bench.worst_case import format_markdown, run

    report = run(args.bundle, args.decompose, args.history_mode, args.runs, args.threads or 1, progress=_progress)
    print(format_markdown(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if all("error" not in r for r in report["results"]) else 1


def cmd_quality(args: argparse.Namespace) -> int:
    from magicselector.bench.quality import QualityConfig, bench_quality, format_markdown

    rows = tuple(args.row) if args.row else None
    config = QualityConfig(at=args.at, limit=args.limit or None, seed=args.seed, threads=args.threads or 1,
                           reference=not args.no_reference, peers=not args.no_peers, rows=rows)
    command = "magicselector bench quality" + "".join(
        f" {flag} {value}" for flag, value in (("--bundle", args.bundle), ("--shared-data", args.shared_data),
                                               *(("--set", s) for s in args.set or ()),
                                               ("--limit", args.limit), ("--threads", args.threads),
                                               *(("--row", f"'{r}'") for r in args.row or ()))
        if value is not None) + (" --no-reference" if args.no_reference else "") + (" --no-peers" if args.no_peers else "")
    report = bench_quality(args.out, bundle=args.bundle, shared_data=args.shared_data, work=args.work,
                           config=config, command=command, progress=not args.quiet, note=_progress,
                           sets=args.set or ())
    print(format_markdown(report, command))
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.json')}", file=sys.stderr)
    return 0


def cmd_selections(args: argparse.Namespace) -> int:
    from magicselector.bench.selections import compare_selections, write_selections
    from magicselector.cli.options import selector_config

    count = write_selections(args.folders, args.out, bundle=args.bundle, config=selector_config(args),
                             limit=args.limit or None, seed=args.seed)
    print(f"wrote {count} selections to {args.out}", file=sys.stderr)
    if args.against is None:
        return 0
    diffs = compare_selections(args.against, args.out)
    print("\n".join(diffs) if diffs else f"every turn selected the same as {args.against}")
    return 1 if diffs else 0


def _add_prefill_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--prefill", action="store_true",
                    help="also time the shipped GGUF prefilling the mean schema tokens handed per turn (all tools, "
                         "fixed 10, the cut) at --threads, next to the selection's p50 (needs the llm extra; local)")
    sp.add_argument("--prefill-reps", type=int, default=2, metavar="N",
                    help="with --prefill: timed repetitions per level after one warm-up (default 2)")
    sp.add_argument("--prefill-max-tokens", type=int, default=4096, metavar="N",
                    help="with --prefill: a longer level is timed at N tokens and scaled linearly (default 4096)")


def _add_latency_parser(bsub: Any) -> None:
    """``bench latency``: cold start, stage percentiles and peak RSS, here or on a phone."""
    sp = bsub.add_parser("latency", help="cold start, per-stage latency percentiles and peak RSS on a fixed workload")
    add_bundle_option(sp)
    sp.add_argument("--device", default="local", help="local (default) or adb[:SERIAL] for a phone")
    sp.add_argument("--runs", type=int, default=20)
    sp.add_argument("--warmup", type=int, default=3)
    add_threads_option(sp)
    sp.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT}/)")
    sp.add_argument("--compare", action="store_true",
                    help="also time FP32 PyTorch, BM25 and exact numpy search side by side (on this machine)")
    sp.add_argument("--cool-down-s", type=float, default=0.0, help="sleep between passes (thermal headroom)")
    sp.add_argument("--pin-big-cores", action="store_true", help="pin the runner to the big cores (phones)")
    add_decompose_options(sp, mode_only=True)  # llm/auto: the GGUF model's memory is in the peak RSS
    sp.add_argument("--turns", metavar="FILE", default=None,
                    help="time these dialogue turns instead of the fixed phone workload: a benchmark queries.jsonl "
                         "({query, history} per line), e.g. your own assistant's logged turns")
    sp.add_argument("--turns-limit", type=int, default=None, metavar="N",
                    help="with --turns: time N rows drawn with seed 0 (file order kept)")
    _add_prefill_options(sp)
    sp.set_defaults(func=cmd_latency)


def _add_scaling_parser(bsub: Any) -> None:
    """``bench scaling``: search and the cut against the number of tools."""
    from magicselector.stages.index import GRAPH  # the runtime's graph settings: what the bench measures

    sp = bsub.add_parser("scaling", help="search latency / memory / recall vs n, and adaptive Top-K time vs n")
    sp.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT}/)")
    sp.add_argument("--max-n", type=int, help="skip index sizes above this (e.g. 100000 to skip 1M)")
    sp.add_argument("--ns", help="comma-separated index sizes (default: 1000,10000,100000,1000000)")
    sp.add_argument("--cut-ns", help="comma-separated candidate counts for the cut (default: 10,...,100000)")
    sp.add_argument("--dtypes", default="f16,i8")
    sp.add_argument("--data", choices=["clustered", "uniform"], default="clustered")
    sp.add_argument("--queries", type=int, default=100)
    sp.add_argument("--expansion-search", default="64,128,256", help="comma-separated values to try")
    sp.add_argument("--connectivity", type=int, default=GRAPH["connectivity"],
                    help=f"graph degree (default: the runtime's, {GRAPH['connectivity']})")
    sp.add_argument("--expansion-add", type=int, default=GRAPH["expansion_add"],
                    help=f"build-time search width (default: the runtime's, {GRAPH['expansion_add']})")
    sp.add_argument("--build-threads", type=int, default=2)
    sp.add_argument("--build-budget-s", type=float,
                    help="stop building an index (>200k vectors, checked every 100k) once it took this long")
    sp.add_argument("--mcp", metavar="N[,N]", help="instead: MCP catalogs of N tools parsed, validated and indexed "
                    "by with_catalog, next to the embed stage's batch throughput (e.g. 100000)")
    sp.add_argument("--embed-stride", type=int, default=10, help="with --mcp: time every Nth embed batch (default 10)")
    sp.add_argument("--bundle", help="with --mcp: the bundle whose embedder indexes (default: the default bundle)")
    sp.set_defaults(func=cmd_scaling)


def _add_llm_parser(bsub: Any) -> None:
    """``bench llm``: the GGUF decomposer in llama-bench's terms."""
    sp = bsub.add_parser("llm", help="the GGUF decomposer as llama-bench measures a model: load time, prompt "
                                     "processing and generation tokens/s, time to first token, on its own prompts")
    sp.add_argument("--model", metavar="GGUF", help="a GGUF file (default: the bundle's decomposer, else the pinned "
                                                    "Qwen2.5-Coder-0.5B Q4_K_M)")
    sp.add_argument("--bundle", metavar="DIR", help="take the decomposer (and its prompt) from this bundle")
    sp.add_argument("--threads", type=int, metavar="N", help="llama.cpp threads (default: the shipped llm.threads)")
    sp.add_argument("--ctx", type=int, metavar="N", help="context size (default: the shipped llm.ctx)")
    sp.add_argument("--prompt", choices=PROMPT_STYLES,
                    help="the decomposer prompt (default: the bundle decomposer's, else few_shot)")
    sp.add_argument("--prompts", type=int, default=3, help="decomposer prompts to time (default 3)")
    sp.add_argument("--runs", type=int, default=2, help="passes over the prompts (default 2)")
    sp.add_argument("--gen-tokens", type=int, default=32, help="single-token decodes per tg sample (default 32)")
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON")
    sp.set_defaults(func=cmd_llm)


def _add_lexical_parser(bsub: Any) -> None:
    """``bench lexical``: the runtime's BM25 index."""
    sp = bsub.add_parser("lexical", help="the runtime BM25 index on synthetic catalogs: build, size, load, "
                                         "search and add/remove time, on one core")
    sp.add_argument("--ns", help="comma-separated catalog sizes (default: 10000,100000)")
    sp.add_argument("--queries", type=int, default=500)
    sp.add_argument("--updates", type=int, default=20, help="tools added and removed at run time")
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON")
    sp.set_defaults(func=cmd_lexical)


def _add_serve_parser(bsub: Any) -> None:
    """``bench serve``: ``magicselector serve`` under concurrent callers."""
    from magicselector.bench.serve_bench import add_arguments as add_serve_arguments, cmd_bench_serve  # standard library only

    sp = bsub.add_parser("serve", help="throughput and p50/p90/p99 of `magicselector serve` (spawned; over stdio, "
                                       "or streamable HTTP with 1 and 2 processes on one port) at 1, 2 and 4 "
                                       "concurrent callers (or --callers)")
    add_serve_arguments(sp)
    sp.set_defaults(func=cmd_bench_serve)


def _add_soak_parser(bsub: Any) -> None:
    """``bench soak``: concurrent selects during catalog churn."""
    sp = bsub.add_parser("soak", help="selects from several threads while tools are added and removed: no error, "
                                      "flat RSS, every result equal to a single-threaded replay")
    add_bundle_option(sp)
    sp.add_argument("--selects", type=int, default=100_000)
    sp.add_argument("--threads", type=int, default=4, help="selecting threads (the churn thread comes on top)")
    sp.add_argument("--churn-ms", type=float, default=50.0, help="pause between catalog changes")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--decompose", choices=["none", "rules"], default="none")
    sp.add_argument("--out", help="folder for soak.json")
    sp.set_defaults(func=cmd_soak)


def _add_worst_case_parser(bsub: Any) -> None:
    """``bench worst-case``: one select at the input limits."""
    sp = bsub.add_parser("worst-case", help="time and peak RSS of one select for inputs at the limits SelectorConfig "
                                            "admits, per decomposer and history mode (each in a fresh process)")
    add_bundle_option(sp)
    sp.add_argument("--decompose", nargs="+", default=["none", "rules"], choices=["none", "rules", "llm", "auto"])
    sp.add_argument("--history-mode", nargs="+", default=["none", "questions", "all"], choices=HISTORY_MODES)
    sp.add_argument("--runs", type=int, default=3, help="selects per input (the slowest is reported)")
    add_threads_option(sp)
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON")
    sp.set_defaults(func=cmd_worst_case)


def _add_quality_parser(bsub: Any) -> None:
    """``bench quality``: every development set's evaluation part per pipeline configuration."""
    sp = bsub.add_parser("quality", help="NDCG, completeness and the cut's K on every development set's evaluation "
                                         "part: BM25, dense, hybrid, shipped, FP32 reference, the PyPI peers")
    add_bundle_option(sp)
    sp.add_argument("--shared-data", metavar="DIR",
                    help="folder of the public sets (bfcl/, metatool/, nestful/, restbench/, toolalpaca/, gorilla_apibench/, "
                         "sgd/); default: shared/data beside the checkout")
    sp.add_argument("--set", action="append", metavar="DIR",
                    help="measure this benchmark folder (tools.jsonl + queries.jsonl; repeatable) instead of the "
                         "development parts: your own catalog and queries, the shipped configuration and the peers "
                         "side by side; the multi-tool group pools the given sets' turns with two or more gold tools")
    sp.add_argument("--row", action="append", metavar="NAME",
                    help="only this row (repeatable; e.g. --row shipped --row graph-tool-call; default: every row)")
    sp.add_argument("--limit", type=int, default=500, help="seeded sample of queries per set (0: all; default 500)")
    sp.add_argument("--seed", type=int, default=0, help="seeds the sample (default 0)")
    sp.add_argument("--at", type=int, default=10, help="cutoff of NDCG and Completeness (default 10)")
    add_threads_option(sp)
    sp.add_argument("--no-reference", action="store_true", help="skip the FP32 sentence-transformers row")
    sp.add_argument("--no-peers", action="store_true", help="skip the PyPI peers' rows (graph-tool-call, ratel-ai, "
                                                           "toolpicker; the peers extra)")
    sp.add_argument("--work", metavar="DIR", help="keep the generated sets and splits here (default: a temporary folder)")
    sp.add_argument("--out", default="docs/bench/quality.md", help="markdown file; the JSON goes beside it "
                                                                  "(default docs/bench/quality.md)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.set_defaults(func=cmd_quality)


def _add_selections_parser(bsub: Any) -> None:
    """``bench selections``: every turn's selection, to compare two runtimes."""
    from magicselector.cli.options import add_selector_options

    sp = bsub.add_parser("selections", help="each sampled turn's selection (ids, K, scores) on benchmark folders as "
                                            "JSON lines; --against a former file: exit 1 and list the turns that differ")
    sp.add_argument("folders", nargs="+", metavar="DIR", help="benchmark folders (tools.jsonl, queries.jsonl)")
    sp.add_argument("--out", required=True, metavar="FILE", help="the JSON lines file to write")
    sp.add_argument("--against", metavar="FILE", help="a selections file to compare with")
    sp.add_argument("--limit", type=int, default=500, help="seeded sample of queries per folder, as eval --limit "
                                                           "samples them (0: all; default 500)")
    sp.add_argument("--seed", type=int, default=0, help="seeds the sample (default 0)")
    add_selector_options(sp)
    sp.set_defaults(func=cmd_selections)


def register(subparsers: Any) -> None:
    """Add ``bench latency``, ``scaling``, ``llm``, ``lexical``, ``serve``, ``soak``, ``worst-case`` and
    ``quality`` to the ``magicselector`` command."""
    bp = subparsers.add_parser("bench", help="latency and scaling benchmarks (local or on a phone over ADB)")
    bsub = bp.add_subparsers(dest="bench_command", required=True)
    _add_latency_parser(bsub)
    _add_scaling_parser(bsub)
    _add_llm_parser(bsub)
    _add_lexical_parser(bsub)
    _add_serve_parser(bsub)
    _add_soak_parser(bsub)
    _add_worst_case_parser(bsub)
    _add_quality_parser(bsub)
    _add_selections_parser(bsub)
    from magicselector.bench.agent import add_parser as add_agent_parser  # stdlib-only at import, like this module

    add_agent_parser(bsub)

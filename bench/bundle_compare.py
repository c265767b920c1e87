"""``magicselector bundle compare A B``: one report of two bundles in one run: quality of the shipped configuration on every development part, host latency and RSS, and a verdict per metric.

Quality is ``bench quality``'s ``shipped`` row (``SelectorConfig()`` exactly, the same seeded sample
and metrics: ``magicselector.bench.quality``) computed per bundle on each development set's
evaluation part (``development_sets``), per part and as the mean over the parts. Latency is the
``magicselector-latency/1`` runner (``bench latency``'s) in a fresh process per bundle, on the fixed
phone workload: p50 and p90 of a whole turn and the process's peak RSS. The bundles take turns
(A, B, A, B ...) so that load on a shared host falls on both alike.

Each metric gets a verdict line: B is ``better``, ``worse`` or ``same`` as A, where ``same`` means
within the metric's stated tolerance (``TOLERANCES``): quality rates within half a point (0.005; a
seeded sample gives the same number for the same bundle, so a smaller difference is real but too
small to act on), mean K within 0.1, tokens within 2 %, latency within 10 % (the host is shared
and loaded) and RSS within 5 %.

Beside the two bundles the report carries the peers' rows (``peer_rows``): the open-source tool
retrievers ``bench quality`` runs as reference rows (``magicselector.bench.peers``: graph-tool-call,
ratel-ai, toolpicker, each alone and with all-MiniLM-L6-v2), on the same parts and seeded queries.
They do not depend on the bundle, so they are computed once per report; a peer whose package is not
installed is skipped with a line naming the package. They get no verdict: ``peer_standing`` says,
per metric, where each bundle stands against the best peer (ahead, level or behind within the same
tolerances), on the mean and in how many parts.
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from magicselector.config import SelectorConfig
from magicselector.errors import InputError

SCHEMA = "magicselector-bundle-compare/1"
# (key in a quality row, label, True: higher is better / False: lower is better)
QUALITY_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("ndcg", "NDCG@10", True), ("completeness@5", "C@5", True), ("completeness@10", "C@10", True),
    ("mean_k", "mean K", False), ("completeness@K", "C@K", True), ("tokens", "tokens@K", False))
HOST_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("p50_ms", "latency p50 (ms)", False), ("p90_ms", "latency p90 (ms)", False),
    ("peak_rss_mb", "peak RSS (MB)", False))
# (absolute, relative) tolerance per metric: ``same`` when |B - A| is within either
TOLERANCES: dict[str, tuple[float, float]] = {
    "ndcg": (0.005, 0.0), "completeness@5": (0.005, 0.0), "completeness@10": (0.005, 0.0),
    "completeness@K": (0.005, 0.0), "mean_k": (0.1, 0.0), "tokens": (0.0, 0.02),
    "p50_ms": (0.0, 0.10), "p90_ms": (0.0, 0.10), "peak_rss_mb": (0.0, 0.05)}


@dataclass(frozen=True)
class CompareConfig:
    limit: int | None = 200    # seeded queries per development part, as ``bench quality --limit``
    seed: int = 0
    threads: int = 1           # inference threads, quality and latency alike
    runs: int = 10             # timed passes of the latency workload per bundle
    warmup: int = 2
    latency: bool = True       # False: quality only (a loaded host's timings say little)
    peers: bool = True         # False: no peer rows (``--no-peers``, for speed)

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise InputError(f"limit must be >= 1, got {self.limit!r}")
        if self.threads < 1:
            raise InputError(f"threads must be >= 1, got {self.threads!r}")
        if self.runs < 1 or self.warmup < 0:
            raise InputError(f"runs must be >= 1 and warmup >= 0, got runs={self.runs!r}, warmup={self.warmup!r}")


def verdict(key: str, a: float, b: float, higher_is_better: bool) -> str:
    """``better``, ``worse`` or ``same`` for B against A on metric ``key`` (``TOLERANCES``)."""
    absolute, relative = TOLERANCES[key]
    if abs(b - a) <= max(absolute, relative * abs(a)):
        return "same"
    return "better" if (b > a) == higher_is_better else "worse"


def _tolerance_text(key: str) -> str:
    absolute, relative = TOLERANCES[key]
    return f"±{absolute:g}" if absolute else f"±{relative:.0%}"


def quality_rows(bundle: Path, sets: Sequence[tuple[str, Path]], config: CompareConfig) -> dict[str, dict[str, Any]]:
    """``bench quality``'s ``shipped`` row of ``bundle`` on each set: {set name: row}."""
    from magicselector.data.datasets import load_benchmark
    from magicselector.selector import Selector

    from .evaluate import evaluate
    from .quality import QualityConfig, _row, eval_configs, token_cost

    qconfig = QualityConfig(limit=config.limit, seed=config.seed, threads=config.threads, reference=False,
                            peers=False)
    shipped = eval_configs(SelectorConfig(), qconfig)["shipped"]
    base = Selector.from_bundle(bundle, config=SelectorConfig(threads=config.threads))
    rows = {}
    for name, folder in sets:
        bench = load_benchmark(folder)
        report = evaluate(bench, shipped, progress=False, base=base)
        rows[name] = {k: v for k, v in _row(report, qconfig.at, token_cost(bench)).items() if k != "curve"}
    return rows


def peer_rows(sets: Sequence[tuple[str, Path]], config: CompareConfig,
              note: Callable[[str], None] = print) -> dict[str, Any]:
    """The peers' rows on each set, as ``bench quality`` computes them (``evaluate_peer``: the same
    seeded, screened sample as the bundles' rows): ``{"rows": {peer: {"package", "k", "embeds",
    "quality": {set: row (with its wall ``seconds``)}, "mean": {metric: value}}}, "skipped": [{"peer",
    "package", "why"}], "seconds"}``. A peer whose package is not installed, or that embeds where the FP32 MiniLM
    reference cannot load, is skipped with a note saying why."""
    from magicselector.data.datasets import load_benchmark

    from .peers import PEERS, installed
    from .quality import FP32Reference, QualityConfig, evaluate_peer, token_cost

    t0 = time.perf_counter()
    qconfig = QualityConfig(limit=config.limit, seed=config.seed, threads=config.threads, reference=False)
    skipped = [{"peer": p.name, "package": p.package,
                "why": f"the {p.package} package is not installed (pip install {p.package})"}
               for p in PEERS if not installed(p)]
    runnable = [p for p in PEERS if installed(p)]
    reference = None
    if any(p.embeds for p in runnable):
        try:
            reference = FP32Reference(config.threads)
        except InputError as e:  # the MiniLM rows embed with the reference model; the BM25 ones still run
            skipped += [{"peer": p.name, "package": p.package,
                         "why": f"it embeds with all-MiniLM-L6-v2 in FP32, which cannot load here ({e})"}
                        for p in runnable if p.embeds]
            runnable = [p for p in runnable if not p.embeds]
    for s in skipped:
        note(f"note: no {s['peer']!r} peer row: {s['why']}")
    embed = reference.cached() if reference is not None else None  # the MiniLM peers embed the same texts
    shipped = SelectorConfig()
    quality: dict[str, dict[str, Any]] = {p.name: {} for p in runnable}
    packages = {p.name: p.package for p in runnable}
    for name, folder in sets:
        bench = load_benchmark(folder)
        cost = token_cost(bench)
        for p in runnable:
            started = time.perf_counter()
            row = evaluate_peer(p, bench, shipped, qconfig, cost, reference, embed)
            packages[p.name] = row.pop("package")  # "<package> <version>"
            quality[p.name][name] = {**{k: v for k, v in row.items() if k != "curve"},
                                     "seconds": round(time.perf_counter() - started, 2)}  # which peer is slow
    rows = {p.name: {"package": packages[p.name], "k": p.k, "embeds": p.embeds, "quality": quality[p.name],
                     "mean": _means(quality[p.name])} for p in runnable}
    return {"rows": rows, "skipped": skipped, "seconds": round(time.perf_counter() - t0, 1)}


STANDING = {"better": "ahead", "same": "level", "worse": "behind"}  # a verdict, said of a bundle against a peer


def _best(values: dict[str, float], higher_is_better: bool) -> tuple[str, float]:
    """(name, value) of the best of ``values``; on a tie the first (``PEERS`` order)."""
    name = (max if higher_is_better else min)(values, key=values.__getitem__)
    return name, values[name]


def peer_standing(bundles: Sequence[tuple[dict[str, dict[str, Any]], dict[str, float]]],
                  peers: dict[str, Any]) -> list[dict[str, Any]]:
    """Per quality metric, where each bundle (its per-set rows and mean, A then B) stands against the
    best peer: on the mean (against the peer with the best mean) and per set (against that set's best
    peer), ``ahead``, ``level`` or ``behind`` within the metric's tolerance. Empty without peer rows."""
    rows = peers["rows"]
    if not rows:
        return []
    out = []
    for key, label, hi in QUALITY_METRICS:
        mean_peer, mean_value = _best({n: r["mean"][key] for n, r in rows.items()}, hi)
        parts = {part: _best({n: r["quality"][part][key] for n, r in rows.items()}, hi)
                 for part in next(iter(rows.values()))["quality"]}
        entry: dict[str, Any] = {"metric": label, "key": key, "best_peer": mean_peer, "best_peer_mean": mean_value,
                                 "best_peer_per_part": {part: {"peer": n, "value": v}
                                                        for part, (n, v) in parts.items()}}
        for tag, (quality, means) in zip(("a", "b"), bundles):
            per_part = {part: STANDING[verdict(key, v, quality[part][key], hi)] for part, (_, v) in parts.items()}
            entry[tag] = {"mean": means[key], "standing": STANDING[verdict(key, mean_value, means[key], hi)],
                          "per_part": per_part, "parts": len(per_part),
                          **{f"parts_{s}": sum(1 for x in per_part.values() if x == s) for s in STANDING.values()}}
        out.append(entry)
    return out


def host_latency(bundle: Path, config: CompareConfig, workdir: Path) -> dict[str, Any]:
    """The latency runner on ``bundle`` in a fresh process: p50 and p90 of a whole turn, peak RSS."""
    from .latency_runner import runner_argv

    out = workdir / f"latency-{time.perf_counter_ns()}.json"
    argv = runner_argv(str(bundle), str(out), runs=config.runs, warmup=config.warmup, threads=config.threads)
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise InputError(f"{bundle}: the latency runner failed (exit {proc.returncode}): "
                         f"{said[-1] if said else 'no message'}")
    res = json.loads(out.read_text(encoding="utf-8"))
    total = res["stages"]["total"]
    return {"p50_ms": total["p50"], "p90_ms": total["p90"], "peak_rss_mb": res["peak_rss_mb"],
            "cold_start_ms": res["cold_start_ms"]}


def _means(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {key: sum(r[key] for r in rows.values()) / len(rows) for key, _, _ in QUALITY_METRICS} if rows else {}


def _describe(bundle: Path) -> dict[str, Any]:
    from magicselector.bundle import Bundle

    b = Bundle.open(bundle, verify=True)
    m = b.manifest
    emb = m.get("embedder") or {}
    record = emb.get("record")
    source = emb.get("source") or {}
    return {"path": str(bundle), "target": m.get("target"), "release": b.release,
            "content_sha256": m.get("content_sha256"), "recipe": m.get("recipe"),
            "embedder_weights_sha256": emb.get("weights_sha256") or source.get("weights_sha256"),
            "embedder_record": "yes" if record else emb.get("record_reason") or ("shipped model card" if source
                                                                                 else "none"),
            "head": bool(m.get("head")), "tools": (m.get("catalog") or {}).get("tools")}


def compare_bundles(a: str | Path, b: str | Path, *, sets: Sequence[tuple[str, Path]] | None = None,
                    shared_data: str | Path | None = None, config: CompareConfig = CompareConfig(),
                    note: Callable[[str], None] = print) -> dict[str, Any]:
    """Both bundles on the same parts and workload in one run; the ``magicselector-bundle-compare/1`` report."""
    from .latency import machine_description
    from .quality import development_sets

    t0 = time.perf_counter()
    paths = (Path(a), Path(b))
    described = [_describe(p) for p in paths]  # a missing or damaged bundle fails before any work
    with tempfile.TemporaryDirectory(prefix="magicselector-compare-") as work:
        parts = list(sets) if sets is not None else development_sets(work, shared_data, note=note)
        if not parts:
            raise InputError("no development parts to compare on")
        quality = [quality_rows(p, parts, config) for p in paths]
        peers = peer_rows(parts, config, note) if config.peers else None  # once: they do not depend on the bundle
        host: list[dict[str, Any]] = [{}, {}]
        if config.latency:
            runs: list[list[dict[str, Any]]] = [[], []]
            for _ in range(2):  # A, B, A, B: load on a shared host falls on both
                for i, p in enumerate(paths):
                    runs[i].append(host_latency(p, config, Path(work)))
            host = [{k: min(r[k] for r in rs) for k in rs[0]} for rs in runs]  # the less disturbed of two
    means = [_means(q) for q in quality]
    verdicts = [{"metric": label, "key": key, "a": means[0][key], "b": means[1][key],
                 "tolerance": _tolerance_text(key), "verdict": verdict(key, means[0][key], means[1][key], hi)}
                for key, label, hi in QUALITY_METRICS]
    if config.latency:
        verdicts += [{"metric": label, "key": key, "a": host[0][key], "b": host[1][key],
                      "tolerance": _tolerance_text(key), "verdict": verdict(key, host[0][key], host[1][key], hi)}
                     for key, label, hi in HOST_METRICS]
    return {"schema": SCHEMA,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "device": machine_description(), "config": asdict(config),
            "a": {**described[0], "quality": quality[0], "mean": means[0], "host": host[0]},
            "b": {**described[1], "quality": quality[1], "mean": means[1], "host": host[1]},
            "parts": [name for name, _ in parts], "verdicts": verdicts,
            "peers": None if peers is None else {**peers, "standing": peer_standing(list(zip(quality, means)), peers)},
            "seconds": round(time.perf_counter() - t0, 1)}


def _fmt(key: str, value: float) -> str:
    if key in ("tokens", "p50_ms", "p90_ms", "peak_rss_mb"):
        return f"{value:.1f}" if key != "tokens" else f"{value:.0f}"
    return f"{value:.2f}" if key == "mean_k" else f"{value:.3f}"


def format_markdown(report: dict[str, Any], command: str | None = None) -> str:
    """The report as Markdown: what was compared, the verdicts, then the quality per part."""
    from .latency import isa_summary

    a, b, cfg = report["a"], report["b"], report["config"]
    dev = report["device"]
    sample = f"{cfg['limit']} seeded queries per part (seed {cfg['seed']})" if cfg["limit"] else "every query"
    latency = (f"; latency: the fixed phone workload, {cfg['runs']} timed passes after {cfg['warmup']} per bundle, "
               "each bundle in a fresh process twice, A and B in turns, the lower of the two kept" if cfg["latency"]
               else "")
    lines = ["# Bundle comparison", "",
             f"{report['date']}, {isa_summary(dev)}, {cfg['threads']} inference thread(s); quality: the shipped "
             f"configuration (`SelectorConfig()`), {sample}{latency}. Mean K, tokens, latency and RSS: lower is "
             "better; the rest: higher is better.", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    for tag, d in (("A", a), ("B", b)):
        lines.append(f"- **{tag}**: `{d['path']}` (target {d['target']}, release {d['release']}, content "
                     f"`{str(d['content_sha256'])[:16]}`, embedder weights `{str(d['embedder_weights_sha256'])[:16]}`, "
                     f"record: {d['embedder_record']}, learned head: {'yes' if d['head'] else 'none'})")
    lines += ["", "| metric | A | B | tolerance | B against A |", "|---|---:|---:|---:|---|"]
    for v in report["verdicts"]:
        lines.append(f"| {v['metric']} | {_fmt(v['key'], v['a'])} | {_fmt(v['key'], v['b'])} | {v['tolerance']} "
                     f"| **{v['verdict']}** |")
    lines += ["", "Quality is the mean over the parts; per part:", "",
              "| part | " + " | ".join(f"{label} A / B" for _, label, _ in QUALITY_METRICS) + " |",
              "|---|" + "---:|" * len(QUALITY_METRICS)]
    for part in report["parts"]:
        qa, qb = a["quality"][part], b["quality"][part]
        lines.append(f"| {part} | " + " | ".join(f"{_fmt(k, qa[k])} / {_fmt(k, qb[k])}" for k, _, _ in QUALITY_METRICS)
                     + " |")
    lines += _peer_lines(report)
    if not cfg["latency"]:
        lines += ["", "Latency and RSS were not measured (--no-latency)."]
    lines += ["", f"Took {report['seconds']} s.", ""]
    return "\n".join(lines)


def _quality_cells(row: dict[str, Any]) -> str:
    return " | ".join(_fmt(k, row[k]) for k, _, _ in QUALITY_METRICS)


def _peer_lines(report: dict[str, Any]) -> list[str]:
    """The peers' section: what was skipped and why, where A and B stand against the best peer per
    metric, the mean table (A, B and each peer) and the peers' rows per part."""
    peers = report.get("peers")
    if peers is None:
        return ["", "Peer rows were left out (--no-peers)."]
    lines = ["", "## Peers (reference rows, no verdict)", "",
             "The open-source tool retrievers `bench quality` runs beside ours (`magicselector.bench.peers`), "
             "each through its own API over the part's tools, ranking the same seeded queries (history folded "
             "in as the shipped configuration does); K is the number of tools each hands over by default. They "
             f"do not depend on the bundle, so they ran once ({peers['seconds']} s)."]
    by_package: dict[str, list[str]] = {}
    for s in peers["skipped"]:
        by_package.setdefault(s["why"], []).append(f"`{s['peer']}`")
    lines += [f"- Skipped: {', '.join(names)}: {why}." for why, names in by_package.items()]
    rows = peers["rows"]
    if not rows:
        return lines + ["", "No peer rows: no peer could run here."]
    lines += ["", "Against the best peer per metric (on the mean: the peer with the best mean; per part: that "
                  "part's best peer; `level` is within the verdicts' tolerance):", "",
              "| metric | best peer (mean) | A | B |", "|---|---|---|---|"]
    for st in peers["standing"]:
        cells = [f"{d['standing']} ({_fmt(st['key'], d['mean'])}); ahead in {d['parts_ahead']}, level in "
                 f"{d['parts_level']}, behind in {d['parts_behind']} of {d['parts']} parts"
                 for d in (st["a"], st["b"])]
        lines.append(f"| {st['metric']} | {st['best_peer']} {_fmt(st['key'], st['best_peer_mean'])} | "
                     f"{cells[0]} | {cells[1]} |")
    header = "| " + " | ".join(label for _, label, _ in QUALITY_METRICS) + " |"
    rule = "---:|" * len(QUALITY_METRICS)
    lines += ["", "Mean over the parts (a peer's mean K is the K it hands over by default, as `bench quality` "
                  "counts it; its tokens are those of the tools it returned, fewer where a BM25 peer finds fewer):",
              "", "| row | package | K | " + header[2:], "|---|---|---:|" + rule,
              f"| A | | cut | {_quality_cells(report['a']['mean'])} |",
              f"| B | | cut | {_quality_cells(report['b']['mean'])} |"]
    lines += [f"| {name} | {r['package']} | {r['k']} | {_quality_cells(r['mean'])} |" for name, r in rows.items()]
    lines += ["", "Peers per part:", "", "| part | peer | n | " + header[2:], "|---|---|---:|" + rule]
    for part in report["parts"]:
        lines += [f"| {part} | {name} | {r['quality'][part]['queries']} | {_quality_cells(r['quality'][part])} |"
                  for name, r in rows.items()]
    return lines


def write_compare(report: dict[str, Any], out: str | Path, command: str | None = None) -> tuple[Path, Path]:
    """``OUT.md`` and ``OUT.json`` (``out`` without its suffix)."""
    out = Path(out)
    md, js = out.with_suffix(".md"), out.with_suffix(".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(format_markdown(report, command), encoding="utf-8")
    js.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return md, js

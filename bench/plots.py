"""PNG plots of the latency, compare, scaling and quality results (matplotlib, Agg backend; needs the bench extra)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: str | Path) -> Path:
    """Lay out, write the PNG and free the figure (pyplot keeps every open figure alive)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_stage_latency(results: Mapping[str, Any], path: str | Path) -> Path:
    """Bars of p50 per stage with p90 and p99 marks (ms, log scale: stages span 3 decades)."""
    plt = _plt()
    stages = {k: v for k, v in results["stages"].items() if v.get("n")}
    names = list(stages)
    p50 = [max(stages[s]["p50"], 1e-4) for s in names]
    p90 = [max(stages[s]["p90"], 1e-4) for s in names]
    p99 = [max(stages[s]["p99"], 1e-4) for s in names]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    x = range(len(names))
    bars = ax.bar(x, p50, color=["#888" if s == "total" else "#3b7dd8" for s in names], label="p50")
    ax.scatter(x, p90, marker="_", s=400, color="#d8893b", zorder=3, label="p90")
    ax.scatter(x, p99, marker="_", s=400, color="#c0392b", zorder=3, label="p99")
    for b, v in zip(bars, p50):
        ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), names)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    dev = results.get("device", {})
    cfg = results.get("config", {})
    ax.set_title(f"magicselector per-stage latency: {dev.get('cpu_model', '?')}, "
                 f"{cfg.get('threads', '?')} thread(s), n={stages.get('total', {}).get('n', '?')}", fontsize=9)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_compare(compare: Mapping[str, Any], path: str | Path) -> Path:
    """Left: p50 per variant (ms, log). Right: the ratios against our runtime (> 1: ours faster)."""
    plt = _plt()
    var = compare["variants"]
    names = sorted(var, key=lambda k: var[k]["p50"])
    ratios = compare.get("ratios", {})
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    a1.barh(names, [max(var[n]["p50"], 1e-4) for n in names],
            color=["#3b7dd8" if n.startswith("ours") else "#999" for n in names])
    a1.set_xscale("log")
    a1.set_xlabel("p50 ms (log)")
    a1.set_title("variants, one query, 1 thread", fontsize=9)
    for i, n in enumerate(names):
        a1.annotate(f" {var[n]['p50']:.3g}", (max(var[n]["p50"], 1e-4), i), va="center", fontsize=8)
    rn = list(ratios)
    a2.barh(rn, [ratios[r] for r in rn], color=["#2e8b57" if ratios[r] >= 1 else "#c0392b" for r in rn])
    a2.axvline(1.0, color="k", lw=0.8)
    a2.set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    lo = min([0.5] + [ratios[r] for r in rn]) / 1.6
    hi = max([2.0] + [ratios[r] for r in rn]) * 1.8
    a2.set_xlim(lo, hi)
    ticks = [t for t in (0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100) if lo <= t <= hi]
    a2.xaxis.set_major_locator(FixedLocator(ticks))
    a2.set_xticklabels([f"{t:g}x" for t in ticks])
    a2.xaxis.set_minor_locator(NullLocator())
    a2.xaxis.set_minor_formatter(NullFormatter())
    a2.set_xlabel("ratio of p50s (log; > 1: ours faster)")
    a2.set_title("side-by-side ratios", fontsize=9)
    for i, r in enumerate(rn):
        a2.annotate(f" {ratios[r]:.2f}x", (ratios[r], i), va="center", fontsize=8)
    return _save(plt, fig, path)


def plot_search_scaling(scaling: Mapping[str, Any], path: str | Path) -> Path:
    """Search p50/p90 (chosen expansion_search) against n, log-log, one line per dtype."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for dtype in sorted({r["dtype"] for r in scaling["search"]}):
        rows = sorted((r for r in scaling["search"] if r["dtype"] == dtype and r.get("chosen")),
                      key=lambda r: r["n"])
        if not rows:
            continue
        ns = [r["n"] for r in rows]
        recalls = [next(v for k, v in r["chosen"].items() if k.startswith("recall@")) for r in rows]
        ess = sorted({r["chosen"]["expansion_search"] for r in rows})
        line, = ax.plot(ns, [r["chosen"]["p50_ms"] for r in rows], "o-",
                        label=f"{dtype} p50 (recall@50 {min(recalls):.3f}-{max(recalls):.3f}, es {ess})")
        ax.plot(ns, [r["chosen"]["p90_ms"] for r in rows], "x--", color=line.get_color(), alpha=0.6,
                label=f"{dtype} p90")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tools in the index (n)")
    ax.set_ylabel("search latency, ms (1 query, 1 thread)")
    ax.set_title("usearch search vs n (synthetic 384-d, k=50, chosen expansion_search es)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_cut_fit(scaling: Mapping[str, Any], path: str | Path) -> Path:
    """Adaptive Top-K time against n with the least-squares line (log-log axes)."""
    import numpy as np

    plt = _plt()
    cut = scaling["cut"]
    ns = np.array([p["n"] for p in cut["points"]], dtype=float)
    us = np.array([p["us"] for p in cut["points"]], dtype=float)
    only = np.array([p["us_scores_only"] for p in cut["points"]], dtype=float)
    fit = cut.get("fit") or {}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(ns, us, "o", label="paper_cut (scores + embeddings), median")
    ax.plot(ns, only, "s", alpha=0.7, label="scores only (K_score)")
    if fit:
        xs = np.logspace(np.log10(ns.min()), np.log10(ns.max()), 100)
        if fit.get("loglog_intercept") is not None:
            ax.plot(xs, np.exp(fit["loglog_intercept"]) * xs ** fit["loglog_slope"], "--", color="#555",
                    label=f"log-log fit: slope {fit['loglog_slope']:.2f}"
                          + (f" (n>=1000: {fit['loglog_slope_n_ge_1000']:.2f})"
                             if fit.get("loglog_slope_n_ge_1000") is not None else ""))
        ys = fit["slope_us_per_item"] * xs + fit["intercept_us"]
        keep = ys > 0
        ax.plot(xs[keep], ys[keep], "-", color="#c0392b",
                label=f"linear fit: {fit['slope_us_per_item']:.3g} us/item {fit['intercept_us']:+.3g} us, "
                      f"R2={fit['r2']:.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("candidates (n)")
    ax.set_ylabel("time per call, us")
    ax.set_title(f"adaptive Top-K time vs n (dim {cut.get('dim')})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return _save(plt, fig, path)


def plot_completeness_tokens(quality: Mapping[str, Any], path: str | Path) -> Path:
    """Per set of a ``bench quality`` report: Completeness against the schema tokens handed per turn,
    one line per configuration (fixed k = 1, 2, ...), and a marker at its cut (its mean K)."""
    plt = _plt()
    sets = quality["sets"]
    fig, axes = plt.subplots(1, max(1, len(sets)), figsize=(4.6 * max(1, len(sets)), 4.2), squeeze=False)
    names = quality["configurations"]
    colors = plt.get_cmap("tab20")
    for ax, (set_name, res) in zip(axes[0], sets.items()):
        for i, name in enumerate(names):
            r = res["rows"][name]
            ours = name not in (quality.get("peers") or {})
            curve = r.get("curve") or []
            style = dict(color=colors(i % 20), lw=2.0 if name == "shipped" else 1.0,
                         ls="-" if ours else "--")
            ax.plot([c[2] for c in curve], [c[1] for c in curve], label=name, **style)
            ax.scatter([r["tokens"]], [r["completeness@K"]], color=style["color"], marker="o" if ours else "x",
                       s=40 if name == "shipped" else 18, zorder=3)
        ax.set_title(f"{set_name} ({res['tools']:,} tools)", fontsize=9)
        ax.set_xlabel("schema tokens per turn (MCP)")
        ax.set_ylabel("Completeness")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6, loc="lower right")
    fig.suptitle("Completeness against the tokens handed over: lines fixed k = 1.., markers each row's cut",
                 fontsize=9)
    return _save(plt, fig, path)

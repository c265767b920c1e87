"""Completeness against mean K for the top-K cuts: fixed k, the paper's rule, rmargin and the experiments (``cut_rules``).

A cut only reads the ranked lists, so the lists are computed once per query
(``collect_rankings``: ``Selector.rank``, the turn before its cut) and every cut
configuration is then re-applied offline (``cut_curve``, ``sweep``), exactly as ``Selector.select``
would apply it for either ``cut_scope``. The comparison that matters is at equal mean K: a rule
beats fixed truncation only if its Completeness@K is above the fixed-k curve interpolated at
the rule's mean K (interpolating between k and k + 1 is what a mix of the two fixed cuts gives).

    python3 -m magicselector.bench.cut_curve DEV --held-out SET1 SET2 --held-out-limit 500 --plot-dir out/
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from magicselector.selector import Selector
from magicselector.stages.cut import CutConfig, CutRule, cut_turn
from magicselector.stages.head import HeadModel, head_cut, head_features

from magicselector.data.datasets import Benchmark, load_benchmark

from .cut_rules import ExperimentCut, FixedCut, PaperCut

CUT_SCOPES = ("subtask", "fused")
AnyCut = CutRule  # the shipped CutConfig or one of the experiments that lost to it (cut_rules)
# rmargin as first tried: the range over the whole list, no per-list margin, anchor cap or head floor
PLAIN_RMARGIN = CutConfig(k_max=20, range_margin=0.5, range_depth=0, list_range_margin=None, anchor_k_max=None,
                          min_probability=0.0)


@dataclass(frozen=True)
class Ranking:
    """What the cut sees for one query, stored so that any cut can be re-applied offline."""

    query_id: str
    category: str
    gold: list[str]
    ids: list[str]                                   # the fused ranked list, before any cut
    scores: np.ndarray                               # its scores (float64 of the stored floats)
    vectors: np.ndarray                              # index.vectors(ids): unit embeddings
    lists: list[tuple[str, list[str], np.ndarray]]   # per retrieval list, after the fusion
    history_list: int | None = None                  # which list is the history-folded utterance

    def vectors_of(self, ids: Sequence[str]) -> np.ndarray:
        """Embeddings of some of the listed tools (every list's tools are in the fused list)."""
        pos = {t: i for i, t in enumerate(self.ids)}
        return self.vectors[[pos[t] for t in ids]]


def _sample(queries: list, limit: int | None, seed: int) -> list:
    """The same seeded sample as bench/evaluate.py, so limited runs are comparable."""
    if limit is not None and limit < len(queries):
        rng = np.random.default_rng(seed)
        queries = [queries[i] for i in sorted(rng.choice(len(queries), limit, replace=False))]
    return queries


def collect_rankings(selector: Selector, benchmark: Benchmark | str | Path, limit: int | None = None,
                     seed: int = 0) -> list[Ranking]:
    """Run ``selector.rank`` once per query (the turn before its cut); store the rankings.

    ``selector`` must be over the benchmark's catalog (``evaluate.selector_for_catalog``); its
    config (decomposition, fusion, candidates) is kept; the cut is re-applied later.
    """
    bench = benchmark if isinstance(benchmark, Benchmark) else load_benchmark(benchmark)
    rows = []
    for q in _sample(bench.queries, limit, seed):
        r = selector.rank(q.query, q.history)
        rows.append(Ranking(
            query_id=q.id, category=q.category, gold=list(q.gold), ids=list(r.ids),
            scores=np.asarray(r.scores.tolist(), dtype=np.float64), vectors=selector.index.vectors(r.ids),
            lists=[(text, list(lst.ids), np.asarray([float(x) for x in lst.scores], dtype=np.float64))
                   for text, lst in zip(r.texts, r.lists)],
            history_list=r.history_list))
    return rows


def reapply(row: Ranking, config: AnyCut, cut_scope: str = "subtask", head: HeadModel | None = None
            ) -> tuple[list[str], int]:
    """The ranked list and K that ``Selector.select`` gives for this cut (``Selection.ranked_ids``,
    ``k``); with ``head`` (the Selector's learned head, where its config has it on) as the head
    orders and cuts them (``stages/head.py``)."""
    if cut_scope not in CUT_SCOPES:
        raise ValueError(f"cut_scope must be one of {CUT_SCOPES}, got {cut_scope!r}")
    order, cut = cut_turn(config, [(ids, scores) for _, ids, scores in row.lists], row.ids, row.scores,
                          row.vectors_of, per_list=cut_scope == "subtask")
    k = cut.k
    if head is not None:
        probs = head.probabilities(head_features([(ids, scores) for _, ids, scores in row.lists], row.history_list,
                                                 row.ids, row.scores, head.depth))
        order, k = head_cut(probs, order, cut, config)
    return [row.ids[i] for i in order], k


def _complete(ranked: Sequence[str], gold: Sequence[str], k: int) -> bool:
    g = set(gold)
    return bool(g) and g <= set(ranked[:k])


def fixed_curve(rows: Sequence[Ranking], max_k: int = 20) -> np.ndarray:
    """Completeness@k of plain truncation for k = 0..max_k (index k; k = 0 is 0)."""
    if not rows:
        return np.zeros(max_k + 1)
    # The smallest k that holds every gold tool (inf when one is missing); one pass per query.
    need = []
    for r in rows:
        pos = {t: i for i, t in enumerate(r.ids)}
        need.append(max((pos.get(g, np.inf) for g in r.gold), default=np.inf) + 1 if r.gold else np.inf)
    need_arr = np.asarray(need)
    return np.array([(need_arr <= k).mean() for k in range(max_k + 1)])


def interpolate(curve: np.ndarray, mean_k: float) -> float:
    """Fixed-k Completeness at a fractional mean K (linear between k and k + 1)."""
    return float(np.interp(mean_k, np.arange(len(curve)), curve))


def cut_curve(rows: Sequence[Ranking], rules: Mapping[str, AnyCut], cut_scope: str = "subtask",
              max_k: int = 20) -> dict[str, Any]:
    """Each rule re-applied to the stored rankings: mean K, Completeness@K and the fixed-k
    Completeness interpolated at that mean K (``fixed_at_mean_k``; ``gain`` = the difference);
    with the fixed-k curve for k = 1..max_k for comparison."""
    curve_k = max(max_k, *(c.k_max for c in rules.values())) if rules else max_k
    curve = fixed_curve(rows, curve_k)
    out: dict[str, Any] = {"queries": len(rows), "cut_scope": cut_scope,
                           "fixed": {"k": list(range(1, max_k + 1)), "completeness": curve[1:max_k + 1].tolist()},
                           "rules": {}}
    for name, config in rules.items():
        ks, done = [], []
        for r in rows:
            ranked, k = reapply(r, config, cut_scope)
            ks.append(k)
            done.append(_complete(ranked, r.gold, k))
        mean_k = float(np.mean(ks)) if ks else 0.0
        comp = float(np.mean(done)) if done else 0.0
        ref = interpolate(curve, mean_k)
        out["rules"][name] = {"config": asdict(config), "mean_k": mean_k, "completeness": comp,
                              "fixed_at_mean_k": ref, "gain": comp - ref,
                              "k_p90": float(np.percentile(ks, 90)) if ks else 0.0}
    return out


# A grid: the base config, the field that varies, and its values. The defaults suit retrieval
# cosines (about 0.2-0.9); other scores (z-scored mixes, logits) need wider margins/temperatures.
Grid = tuple[AnyCut, str, Sequence[float]]
DEFAULT_GRIDS: dict[str, Grid] = {
    "paper": (PaperCut(), "k_min", [1]),  # the paper's rule as published: one point
    "margin": (ExperimentCut(rule="margin"), "margin", [0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3]),
    "zmargin": (ExperimentCut(rule="zmargin"), "z_margin", [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5]),
    "rmargin": (PLAIN_RMARGIN, "range_margin", [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]),
    # the shipped form: the range over the list's head of 15 (CutConfig)
    "rmargin15": (replace(PLAIN_RMARGIN, range_depth=15), "range_margin",
                  [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.825, 0.85, 0.875, 0.9, 0.95, 1.0]),
    "mass": (ExperimentCut(rule="mass", temperature=0.03), "mass", [0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]),
}


def sweep(rows: Sequence[Ranking], grids: Mapping[str, Grid] | None = None, cut_scope: str = "subtask",
          max_k: int = 20) -> dict[str, Any]:
    """Every grid point through ``cut_curve``: {"fixed": curve, "rules": {name: [point, ...]}},
    each point with "param" and "value" added."""
    grids = DEFAULT_GRIDS if grids is None else grids
    configs = {f"{name}@{v}": replace(base, **{param: v}) for name, (base, param, values) in grids.items()
               for v in values}
    res = cut_curve(rows, configs, cut_scope, max_k)
    points: dict[str, list[dict[str, Any]]] = {}
    for name, (base, param, values) in grids.items():
        points[name] = [{**res["rules"][f"{name}@{v}"], "param": param, "value": v} for v in values]
    return {"queries": res["queries"], "cut_scope": cut_scope, "fixed": res["fixed"], "rules": points}


def best_at_budget(points: Sequence[Mapping[str, Any]], max_mean_k: float) -> Mapping[str, Any] | None:
    """The grid point with the highest Completeness@K among those with mean K <= max_mean_k
    (ties: the smaller mean K); None when no point fits the budget."""
    fit = [p for p in points if p["mean_k"] <= max_mean_k]
    return max(fit, key=lambda p: (p["completeness"], -p["mean_k"])) if fit else None


def choose_on_dev(dev_sweep: Mapping[str, Any], grids: Mapping[str, Grid] | None = None,
                  max_mean_k: float = 8.0) -> dict[str, AnyCut]:
    """Per grid, the config ``best_at_budget`` picks on a dev ``sweep`` (grids with no point
    within the budget are left out), named ``rule(param=value)``; plus fixed k = 10 for reference.
    The chosen configs are then evaluated unchanged on held-out sets (``cut_curve``)."""
    grids = DEFAULT_GRIDS if grids is None else grids
    chosen: dict[str, AnyCut] = {}
    for name, (base, param, values) in grids.items():
        best = best_at_budget(dev_sweep["rules"][name], max_mean_k) if len(values) > 1 else dev_sweep["rules"][name][0]
        if best is not None:
            label = name if len(values) == 1 else f"{name}({param}={best['value']:g})"
            chosen[label] = replace(base, **{param: best["value"]})
    chosen["fixed(k=10)"] = FixedCut(10)
    return chosen


def plot_cut_curve(result: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    """Completeness vs mean K: fixed k (line), each rule as a point (one config) or a curve over
    its parameter. ``result`` is a ``sweep`` or ``cut_curve`` result. Needs matplotlib."""
    from .plots import _plt, _save

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.6))
    fx = result["fixed"]
    ax.plot(fx["k"], fx["completeness"], "-", color="#555", marker=".", label="fixed k")
    for name, pts in result["rules"].items():
        pts = pts if isinstance(pts, list) else [pts]
        xs, ys = [p["mean_k"] for p in pts], [p["completeness"] for p in pts]
        if len(pts) == 1:
            ax.scatter(xs, ys, s=60, zorder=3, label=name)
        else:
            ax.plot(xs, ys, marker="o", ms=3, label=f"{name} (over {pts[0]['param']})")
    ax.set_xlabel("mean K (tools kept)")
    ax.set_ylabel("Completeness@K")
    ax.set_xlim(0, max(fx["k"]) + 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(plt, fig, path)


def format_sweep(result: Mapping[str, Any]) -> str:
    """A plain-text table of a ``sweep`` result."""
    fx = result["fixed"]
    lines = [f"queries={result['queries']} cut_scope={result['cut_scope']}",
             "fixed k: " + " ".join(f"{k}:{c:.3f}" for k, c in zip(fx["k"], fx["completeness"])),
             f"{'rule':<10} {'param':<12} {'value':>7} {'mean_K':>7} {'C@K':>6} {'fixed@K':>8} {'gain':>7} {'K_p90':>6}"]
    for name, pts in result["rules"].items():
        for p in pts:
            lines.append(f"{name:<10} {p['param']:<12} {p['value']:>7g} {p['mean_k']:>7.2f} {p['completeness']:>6.3f} "
                         f"{p['fixed_at_mean_k']:>8.3f} {p['gain']:>+7.3f} {p['k_p90']:>6.1f}")
    return "\n".join(lines)


def format_compare(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A plain-text table of ``cut_curve`` results per set (the chosen configs on each set)."""
    lines = [f"{'set':<12} {'rule':<28} {'mean_K':>7} {'C@K':>6} {'fixed@K':>8} {'gain':>7}"]
    for set_name, res in results.items():
        for name, r in res["rules"].items():
            lines.append(f"{set_name[:12]:<12} {name:<28} {r['mean_k']:>7.2f} {r['completeness']:>6.3f} "
                         f"{r['fixed_at_mean_k']:>8.3f} {r['gain']:>+7.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m magicselector.bench.cut_curve", description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="the tuning (dev) benchmark folder (tools.jsonl, queries.jsonl)")
    ap.add_argument("--held-out", nargs="*", default=[], help="benchmark folders to report at the dev-chosen parameters")
    ap.add_argument("--bundle", default=None, help="bundle folder (default: the default bundle)")
    ap.add_argument("--limit", type=int, default=None, help="sample this many dev queries")
    ap.add_argument("--held-out-limit", type=int, default=None, help="sample this many queries of each held-out set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=8.0, help="mean K budget for choosing each rule's parameter on dev")
    ap.add_argument("--decompose", default="none", choices=["none", "rules", "llm", "auto"])
    ap.add_argument("--cut-scope", default="subtask", choices=CUT_SCOPES)
    ap.add_argument("--candidates", type=int, default=30)
    ap.add_argument("--plot-dir", default=None, help="write cut_curve_<set>.png (the sweep of each set) here")
    ap.add_argument("--json", default=None, help="write the sweeps and the comparison as JSON here")
    args = ap.parse_args(argv)

    from magicselector.config import SelectorConfig

    from .evaluate import selector_for_catalog

    base = Selector.from_bundle(args.bundle)
    config = SelectorConfig(candidates=args.candidates, decompose=args.decompose)
    sets = [(args.data, args.limit), *((path, args.held_out_limit) for path in args.held_out)]
    sweeps: dict[str, Any] = {}
    compare: dict[str, Any] = {}
    chosen: dict[str, AnyCut] = {}
    for i, (path, limit) in enumerate(sets):
        bench = load_benchmark(path)
        rows = collect_rankings(selector_for_catalog(base, bench.catalog, config), bench, limit, args.seed)
        sweeps[bench.name] = sweep(rows, cut_scope=args.cut_scope)
        if i == 0:
            print(format_sweep(sweeps[bench.name]))
            chosen = choose_on_dev(sweeps[bench.name], max_mean_k=args.budget)
        compare[bench.name] = cut_curve(rows, chosen, args.cut_scope)
        if args.plot_dir:
            Path(args.plot_dir).mkdir(parents=True, exist_ok=True)
            plot_cut_curve(sweeps[bench.name], Path(args.plot_dir) / f"cut_curve_{bench.name}.png",
                           title=f"{bench.name} ({len(rows)} queries, decompose={args.decompose})")
    print(f"\nparameters chosen on {Path(args.data).name} (best Completeness@K with mean K <= {args.budget:g}):")
    print(format_compare(compare))
    if args.json:
        Path(args.json).write_text(json.dumps({"sweeps": sweeps, "compare": compare}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

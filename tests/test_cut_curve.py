"""bench/cut_curve.py: the offline re-application of a cut must be what Selector.select does."""
from __future__ import annotations

import numpy as np
import pytest

from magicselector.bench.cut_curve import (
    best_at_budget, choose_on_dev, collect_rankings, cut_curve, fixed_curve, format_compare, format_sweep, interpolate,
    plot_cut_curve, reapply, sweep,
)
from magicselector.data.datasets import load_benchmark
from magicselector.bench.cut_rules import ExperimentCut, FixedCut, PaperCut
from magicselector.bench.evaluate import selector_for_catalog
from magicselector.config import SelectorConfig
from magicselector.stages.cut import CutConfig, cut_per_list

CONFIGS = [
    PaperCut(),
    PaperCut(k_min=2, k_max=4),
    FixedCut(3),
    CutConfig(),  # the shipped cut
    CutConfig(range_margin=0.4, k_max=3, range_depth=0, list_range_margin=None, anchor_k_max=None,
              min_probability=0.0),
    CutConfig(range_margin=0.9, k_max=2, range_depth=0, list_range_margin=None, anchor_k_max=None,
              min_probability=0.01),  # the union past k_max
]
# the rules that left the runtime: re-applied by the same per-list cut, compared with it directly
EXPERIMENTS = [
    ExperimentCut(rule="margin", margin=0.05),
    ExperimentCut(rule="zmargin", z_margin=1.0),
    ExperimentCut(rule="mass", mass=0.8, temperature=0.03),
]


@pytest.mark.slow
@pytest.mark.parametrize("decompose", ["none", "rules"])
def test_offline_reapplication_matches_select(selector, tiny_benchmark, decompose):
    bench = load_benchmark(tiny_benchmark)
    base = selector_for_catalog(selector, bench.catalog, SelectorConfig(candidates=6, decompose=decompose))
    rows = collect_rankings(base, bench)
    assert [r.query_id for r in rows] == [q.id for q in bench.queries]
    if decompose == "rules":
        assert any(len(r.lists) > 1 for r in rows)  # the per-list path is exercised
        # and the head's pick among more kept tools than k_max (Cut.pool)
        wide = CONFIGS[-1]
        assert any(cut_per_list(wide, [(ids, sc) for _, ids, sc in r.lists], r.ids, r.vectors_of)[1].pool > wide.k_max
                   for r in rows if len(r.lists) > 1)
    assert base.head is not None  # the default bundle's learned head, re-applied offline too
    for config in CONFIGS:
        sel, plain = base.with_config(cut=config), base.with_config(cut=config, head=False)
        for q, row in zip(bench.queries, rows):
            s = sel.select(q.query, q.history)
            ranked, k = reapply(row, config, head=base.head)
            assert (ranked, k) == (s.ranked_ids, s.k), (decompose, config, q.id)
            s = plain.select(q.query, q.history)
            ranked, k = reapply(row, config)
            assert (ranked, k) == (s.ranked_ids, s.k), (decompose, config, q.id)
            # the fused-list experiment (no longer a runtime setting): the cut on the fused list itself
            ranked, k = reapply(row, config, "fused")
            emb = row.vectors if config.uses_embeddings else None
            assert ranked == row.ids and k == config.apply(row.scores, emb, normalized=True).k
    for config in EXPERIMENTS:
        for row in rows:
            ranked, k = reapply(row, config)
            if len(row.lists) > 1:
                order, cut = cut_per_list(config, [(ids, scores) for _, ids, scores in row.lists], row.ids,
                                          row.vectors_of)
                assert (ranked, k) == ([row.ids[i] for i in order], cut.k)
            else:
                assert (ranked, k) == (row.ids, config.apply(row.scores, None).k)


@pytest.mark.slow
def test_curve_sweep_and_plot(selector, tiny_benchmark, tmp_path):
    bench = load_benchmark(tiny_benchmark)
    base = selector_for_catalog(selector, bench.catalog, SelectorConfig(candidates=6))
    rows = collect_rankings(base, bench, limit=3, seed=0)
    assert len(rows) == 3
    res = cut_curve(rows, {"fixed2": FixedCut(2), "paper": PaperCut()})
    fixed = res["fixed"]["completeness"]
    assert res["fixed"]["k"] == list(range(1, 21)) and len(fixed) == 20
    assert all(a <= b for a, b in zip(fixed, fixed[1:]))
    f2 = res["rules"]["fixed2"]
    assert f2["mean_k"] == 2 and f2["completeness"] == pytest.approx(fixed[1]) and f2["gain"] == pytest.approx(0)
    swept = sweep(rows)
    assert {"paper", "margin", "zmargin", "rmargin", "mass"} <= set(swept["rules"])
    assert "rule" in format_sweep(swept)
    best = best_at_budget(swept["rules"]["rmargin"], 6.0)
    assert best is not None and best["mean_k"] <= 6.0
    assert best_at_budget(swept["rules"]["rmargin"], 0.0) is None
    chosen = choose_on_dev(swept, max_mean_k=6.0)
    assert "paper" in chosen and "fixed(k=10)" in chosen
    assert any(name.startswith("rmargin(range_margin=") for name in chosen)
    assert "rmargin" in format_compare({"tiny": cut_curve(rows, chosen)})
    pytest.importorskip("matplotlib", reason="needs the bench extra: pip install -e .[bench]")
    assert plot_cut_curve(swept, tmp_path / "curve.png").stat().st_size > 0


def test_fixed_curve_and_interpolation():
    from magicselector.bench.cut_curve import Ranking

    def row(ids, gold):
        return Ranking("q", "c", gold, ids, np.zeros(len(ids)), np.zeros((len(ids), 2)), [("q", ids, np.zeros(len(ids)))])

    rows = [row(["a", "b", "c"], ["a"]), row(["a", "b", "c"], ["a", "c"]), row(["a", "b"], ["z"]), row(["a"], [])]
    curve = fixed_curve(rows, 4)
    assert curve.tolist() == [0.0, 0.25, 0.25, 0.5, 0.5]
    assert interpolate(curve, 2.5) == pytest.approx(0.375)
    assert interpolate(curve, 10) == pytest.approx(0.5)

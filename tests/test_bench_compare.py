"""``bench latency --compare``: the runtime's variants side by side with exact numpy search and BM25 on
the real default bundle (no cross-encoder rows: the runtime has none). No timing thresholds."""
from __future__ import annotations

import pytest

from magicselector.bench.compare import RATIO_PAIRS, SCHEMA, compare_latency
from magicselector.bench.latency import WORKLOAD

pytestmark = pytest.mark.slow


def test_compare_times_ours_against_exact_search_and_bm25(bundle_dir):
    pytest.importorskip("rank_bm25", reason="needs the bench extra: pip install -e .[bench]")
    lines: list[str] = []
    out = compare_latency(bundle_dir, runs=2, warmup=1, workload=WORKLOAD[:3], include_pytorch=False,
                          progress=lines.append)
    assert out["schema"] == SCHEMA and len(lines) == 3  # one line per pass
    queries = out["config"]["queries"]
    assert queries >= 3 and out["config"]["tools"] > 0
    for name in ("ours_embed", "ours_search", "ours_cut", "ours_total", "numpy_exact_search", "bm25_total"):
        assert out["variants"][name]["n"] == 2 * queries and out["variants"][name]["p50"] > 0
    assert not any("rerank" in name for name in out["variants"]) and "rerank" not in out
    assert set(out["ratios"]) == {f"{a} / {b}" for a, b in RATIO_PAIRS if a in out["variants"]}
    assert 0.5 <= out["agreement"]["numpy_exact_top30_overlap"] <= 1.0  # usearch against exact search

"""``magicselector bench quality``: every configuration on every set, numbers equal to ``evaluate``'s."""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace

import pytest

from magicselector.config import SelectorConfig
from magicselector.data.splits import ToolSplitConfig, split_tools

from magicselector.bench.evaluate import evaluate
from magicselector.bench.quality import (CONFIGURATIONS, FP32, QualityConfig, development_sets, eval_configs,
                                         format_markdown, run_quality, write_report)


@pytest.mark.extra("bench", "export")
def test_every_configuration_on_every_set_and_rows_match_evaluate(bundle_dir, tiny_benchmark, tmp_path):
    config = QualityConfig(limit=5)
    notes: list[str] = []
    report = run_quality([("tiny", tiny_benchmark)], bundle=bundle_dir, config=config, progress=False,
                         note=notes.append)
    assert not notes, notes  # the FP32 reference loaded
    assert report["configurations"] == list(CONFIGURATIONS)
    rows = report["sets"]["tiny"]["rows"]
    assert set(rows) == set(CONFIGURATIONS)
    # NDCG@10 a random order of the 6 tools would score: each rank holds a gold tool with p = gold / 6
    gains = [1 / math.log2(r + 2) for r in range(6)]
    golds = [len(json.loads(line)["gold"]) for line in (tiny_benchmark / "queries.jsonl").read_text().splitlines()]
    random_ndcg = sum(g / 6 * sum(gains) / sum(gains[:g]) for g in golds) / len(golds)  # ~0.58
    for name, row in rows.items():
        assert row["queries"] == 4, name
        # (BM25 finds nothing for a turn with no word of any tool, so its K can be 0)
        assert random_ndcg + 0.2 < row["ndcg"] <= 1.0, (name, row["ndcg"], random_ndcg)
        assert 0 <= row["mean_k"] <= SelectorConfig().cut.k_max
        assert row["fixed_k"] == max(1, round(row["mean_k"]))

    # a runtime row is exactly what `evaluate` reports for the same EvalConfig
    direct = evaluate(tiny_benchmark, eval_configs(SelectorConfig(), config)["hybrid + reranker"],
                      bundle=bundle_dir, progress=False)["overall"]
    row = rows["hybrid + reranker"]
    assert row["ndcg"] == pytest.approx(direct["ndcg@10"])
    assert row["completeness"] == pytest.approx(direct["completeness@10"])
    assert row["mean_k"] == pytest.approx(direct["mean_k"])
    assert row["completeness@K"] == pytest.approx(direct["completeness@K"])
    assert row["completeness@fixed_k"] == pytest.approx(direct["completeness@fixed_k_at_mean_k"])
    assert rows["hybrid + reranker"]["reranker"] == "bundle" and rows["hybrid"]["reranker"] is None
    # the INT8 runtime embedder ranks these few tools as its FP32 checkpoint does
    assert rows["dense"]["ndcg"] == pytest.approx(rows[FP32]["ndcg"], abs=0.15)

    md, js = write_report(report, tmp_path / "quality.md", command="magicselector bench quality --limit 5")
    text = md.read_text()
    for name in CONFIGURATIONS:
        assert f"| tiny (6 tools) | {name} |" in text
        assert f"| {name} | {report['mean'][name]['ndcg']:.3f} |" in text  # the mean-over-sets table
    assert "magicselector bench quality --limit 5" in text and "Bundle:" in text and "CPU:" in text
    assert json.loads(js.read_text())["sets"]["tiny"]["rows"]["dense"]["ndcg"] == rows["dense"]["ndcg"]


def test_rows_follow_the_shipped_configuration_when_it_changes():
    shipped = replace(SelectorConfig(), lexical=True, rerank=False, decompose="rules", history="user",
                      lexical_weight=0.3)
    configs = eval_configs(shipped, QualityConfig())
    assert configs["shipped"].retriever == "hybrid" and not configs["shipped"].rerank
    assert configs["shipped"].decompose == "rules"
    assert all(c.history == "user" and c.lexical_weight == 0.3 and c.cut == shipped.cut for c in configs.values())
    assert configs["dense"].retriever == "dense" and not configs["dense"].rerank
    assert configs["hybrid + reranker + rules"].decompose == "rules" and configs["hybrid + reranker"].rerank


def test_development_sets_skip_an_absent_public_set(tiny_benchmark, tmp_path):
    shared = tmp_path / "shared"
    shutil.copytree(tiny_benchmark, shared / "bfcl")  # metatool is absent
    notes: list[str] = []
    sets = dict(development_sets(tmp_path / "work", shared, note=notes.append))
    assert list(sets) == ["mobile test", "mobile test_ood", "bfcl eval"]
    assert len(notes) == 1 and "metatool" in notes[0]
    eval_tools = {json.loads(line)["id"] for line in (sets["bfcl eval"] / "tools.jsonl").read_text().splitlines()}
    ids = [json.loads(line)["id"] for line in (tiny_benchmark / "tools.jsonl").read_text().splitlines()]
    assert eval_tools == split_tools(ids, ToolSplitConfig())[1]
    assert (sets["mobile test_ood"] / "queries.jsonl").stat().st_size > 0

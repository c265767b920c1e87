"""``magicselector bench quality``: every configuration on every set, numbers equal to ``evaluate``'s."""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace

import numpy as np
import pytest

from magicselector.config import SelectorConfig
from magicselector.data.datasets import load_benchmark
from magicselector.data.splits import SHARED_SETS, ToolSplitConfig, split_tools
from magicselector.formats import tool_definitions
from magicselector.tokens import schema_tokens

from magicselector.bench.evaluate import evaluate
from magicselector.bench.quality import (CONFIGURATIONS, FP32, QualityConfig, development_sets, eval_configs,
                                         format_markdown, run_quality, write_report)


@pytest.mark.extra("bench", "export")
def test_every_configuration_on_every_set_and_rows_match_evaluate(bundle_dir, tiny_benchmark, tmp_path):
    config = QualityConfig(limit=5, peers=False)  # the peers' rows: test_peer_rows_* below
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
        # fixed cuts: a longer list holds at least as many gold tools and costs at least as many tokens
        assert 0 <= row["completeness@5"] <= row["completeness@10"] <= 1.0, name
        assert 0 < row["tokens@5"] <= row["tokens@10"], name
        assert row["completeness@10"] == pytest.approx(row["completeness"]), name  # at = 10
        assert 0 <= row["p90_k"] <= SelectorConfig().cut.k_max
        # tokens at the cut: zero only when the cut kept nothing; never more than all 6 tools cost
        assert (row["tokens"] > 0) == (row["mean_k"] > 0), name
        assert row["tokens"] <= row["tokens@10"] + 1e-9, name  # 10 >= the 6 tools

    # a runtime row is exactly what `evaluate` reports for the same EvalConfig
    direct_report = evaluate(tiny_benchmark, eval_configs(SelectorConfig(), config)["hybrid"],
                             bundle=bundle_dir, progress=False)
    direct = direct_report["overall"]
    row = rows["hybrid"]
    assert row["ndcg"] == pytest.approx(direct["ndcg@10"])
    assert row["completeness"] == pytest.approx(direct["completeness@10"])
    assert row["mean_k"] == pytest.approx(direct["mean_k"])
    assert row["completeness@K"] == pytest.approx(direct["completeness@K"])
    assert row["completeness@fixed_k"] == pytest.approx(direct["completeness@fixed_k_at_mean_k"])
    # ... and the per-turn columns are computed from its per-query rows
    turns = direct_report["per_query"]
    assert row["completeness@5"] == pytest.approx(
        sum(set(q["gold"]) <= set(q["ranked_ids"][:5]) for q in turns) / len(turns))
    costs = {t.id: schema_tokens(tool_definitions([t], "mcp")[0]) for t in load_benchmark(tiny_benchmark).catalog}
    assert row["tokens"] == pytest.approx(sum(costs[i] for q in turns for i in q["ids"]) / len(turns))
    assert row["tokens@5"] == pytest.approx(sum(costs[i] for q in turns for i in q["ranked_ids"][:5]) / len(turns))
    assert row["p90_k"] == pytest.approx(float(np.percentile([q["k"] for q in turns], 90)))
    # the INT8 runtime embedder ranks these few tools as its FP32 checkpoint does
    assert rows["dense"]["ndcg"] == pytest.approx(rows[FP32]["ndcg"], abs=0.15)

    md, js = write_report(report, tmp_path / "quality.md", command="magicselector bench quality --limit 5")
    text = md.read_text()
    for name in CONFIGURATIONS:
        assert f"| tiny (6 tools) | {name} |" in text
        assert f"| {name} | {report['mean'][name]['ndcg']:.3f} |" in text  # the mean-over-sets table
    assert "| C@5 | C@10 |" in text and "| tokens@5 | tokens@10 |" in text and "p90 K" in text
    assert f"| {report['mean']['dense']['tokens@5']:.0f} | {report['mean']['dense']['tokens@10']:.0f} |" in text
    assert "magicselector bench quality --limit 5" in text and "Bundle:" in text and "CPU:" in text
    assert json.loads(js.read_text())["sets"]["tiny"]["rows"]["dense"]["ndcg"] == rows["dense"]["ndcg"]


def test_rows_follow_the_shipped_configuration_when_it_changes():
    shipped = replace(SelectorConfig(), lexical=True, decompose="rules", history="user",
                      lexical_weight=0.3)
    configs = eval_configs(shipped, QualityConfig())
    assert configs["shipped"].retriever == "hybrid"
    assert configs["shipped"].decomposition == "rules"
    assert configs["shipped"].selector.head and not configs["shipped, no head"].selector.head
    assert configs["shipped, no head"].selector == replace(configs["shipped"].selector, head=False)
    assert all(c.selector.history == "user" and c.selector.lexical_weight == 0.3 and c.cut == shipped.cut
               for c in configs.values())
    assert configs["dense"].retriever == "dense"
    assert configs["hybrid"].retriever == "hybrid" and configs["hybrid"].decomposition == "none"


def test_development_sets_skip_an_absent_public_set(tiny_benchmark, tmp_path):
    shared = tmp_path / "shared"
    shutil.copytree(tiny_benchmark, shared / "bfcl")  # the other public sets are absent
    notes: list[str] = []
    sets = dict(development_sets(tmp_path / "work", shared, note=notes.append))
    assert list(sets) == ["mobile test", "mobile test_ood", "bfcl eval"]
    assert len(notes) == len(SHARED_SETS) - 1 and all(f"the {name} set is skipped" in note
                                                      for name, note in zip(SHARED_SETS[1:], notes))
    eval_tools = {json.loads(line)["id"] for line in (sets["bfcl eval"] / "tools.jsonl").read_text().splitlines()}
    ids = [json.loads(line)["id"] for line in (tiny_benchmark / "tools.jsonl").read_text().splitlines()]
    assert eval_tools == split_tools(ids, ToolSplitConfig())[1]
    assert (sets["mobile test_ood"] / "queries.jsonl").stat().st_size > 0


def test_turn_columns_cut_the_same_ranked_lists_at_5_and_10():
    from magicselector.bench.quality import turn_columns

    ranked = [f"t{i}" for i in range(12)]
    cost = lambda ids: sum(int(i[1:]) + 1 for i in ids)  # noqa: E731  (t0 costs 1, t1 costs 2, ...)
    # gold within the top 5 / only within the top 10 / beyond 10; kept 3, 1 and 7 tools
    turns = [(ranked, ["t0", "t4"], ranked[:3]), (ranked, ["t7"], ranked[:1]), (ranked, ["t11"], ranked[:7])]
    cols = turn_columns(turns, cost)
    assert cols["completeness@5"] == pytest.approx(1 / 3) and cols["completeness@10"] == pytest.approx(2 / 3)
    assert cols["tokens@5"] == 15 and cols["tokens@10"] == 55
    assert cols["tokens"] == pytest.approx((6 + 1 + 28) / 3)
    assert cols["p90_k"] == pytest.approx(float(np.percentile([3, 1, 7], 90)))


@pytest.mark.extra("peers")
def test_peer_names_are_unique_and_map_back_to_catalog_ids():
    from magicselector.bench.peers import PEERS, PeerRanker, peer_names
    from magicselector.catalog import Tool

    tools = [Tool("a:send:1", "send_message", "Send a text message to a contact.", {"type": "dict", "properties": {
                 "to": {"type": "string"}}}),
             Tool("b:send:2", "send_message", "Send an email message to an address.", {}),
             Tool("c:alarm", "set_alarm", "Set an alarm clock for a time.", {})]
    assert peer_names(tools) == ["send_message", "send_message_2", "set_alarm"]
    for peer in (p for p in PEERS if not p.embeds):
        ranked = PeerRanker(peer, tools).rank("send an email to bob", 3)
        assert ranked and set(ranked) <= {t.id for t in tools} and len(set(ranked)) == len(ranked), peer.name
        assert ranked[0] == "b:send:2", (peer.name, ranked)  # the duplicate name's tool, found under its own id


@pytest.mark.extra("peers")
@pytest.mark.extra("bench", "export")
def test_peer_rows_rank_the_set_through_their_own_apis(bundle_dir, tiny_benchmark, tmp_path):
    from magicselector.bench.peers import PEERS

    notes: list[str] = []
    report = run_quality([("tiny", tiny_benchmark)], bundle=bundle_dir, config=QualityConfig(limit=5, reference=False),
                         progress=False, note=notes.append)
    assert not notes, notes
    names = [p.name for p in PEERS]
    assert report["configurations"][-len(names):] == names and FP32 not in report["configurations"]
    rows = report["sets"]["tiny"]["rows"]
    for peer in PEERS:
        row = rows[peer.name]
        assert row["queries"] == rows["shipped"]["queries"] == 4, peer.name  # the same screened sample
        assert row["mean_k"] == peer.k and row["package"].startswith(peer.package + " "), peer.name
        # a peer that embeds ranks all 6 tools; a BM25 one returns only tools sharing a word with the turn
        assert row["ndcg"] > 0.6 and row["completeness@10"] >= (1.0 if peer.embeds else 0.75), (peer.name, row)
        ks = [c[0] for c in row["curve"]]
        tokens = [c[2] for c in row["curve"]]
        assert ks == list(range(1, len(ks) + 1)) and tokens == sorted(tokens), peer.name
        assert row["curve"][4][1] == pytest.approx(row["completeness@5"]), peer.name
    assert report["peers"]["toolpicker"] == {"package": "toolpicker", "k": 5, "embeds": False}
    md, _ = write_report(report, tmp_path / "quality.md")
    text = md.read_text()
    assert "| tiny (6 tools) | ratel-ai hybrid (MiniLM) |" in text and "`toolpicker` (toolpicker 1.0.0, K = 5)" in text
    assert (tmp_path / "quality-tokens.png").stat().st_size > 10_000


def test_cli_flags_choose_the_reference_and_peer_rows(monkeypatch, tmp_path):
    from magicselector.bench import quality
    from magicselector.cli.main import build_parser

    seen = {}

    def fake_bench(out, config, command, **kw):  # the CLI's wiring only; the rows are tested above
        seen.update(config=config, command=command)
        return {"config": {}, "sets": {}}

    monkeypatch.setattr(quality, "bench_quality", fake_bench)
    monkeypatch.setattr(quality, "format_markdown", lambda report, command=None: "")
    args = build_parser().parse_args(["bench", "quality", "--no-peers", "--limit", "3", "--out", str(tmp_path / "q.md")])
    assert args.func(args) == 0
    assert seen["config"].peers is False and seen["config"].reference is True and seen["config"].limit == 3
    assert seen["command"].endswith("--limit 3 --no-peers")

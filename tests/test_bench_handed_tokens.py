"""``bench latency``'s schema tokens handed per turn (all tools, fixed 10, the cut) and ``--prefill``'s GGUF
prefill times of them. No timing thresholds."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from magicselector.bench.handed_tokens import LEVELS, HandedTokens, format_handed, measure_prefill
from magicselector.bench.latency import WORKLOAD, measure_latency
from magicselector.catalog import Catalog, Tool
from magicselector.config import SelectorConfig
from magicselector.formats import tool_definition
from magicselector.tokens import schema_tokens


def _tokens(catalog, ids) -> int:
    return sum(schema_tokens(tool_definition(catalog.get(i), "mcp")) for i in ids)


@pytest.mark.slow
def test_latency_reports_the_tokens_each_selection_hands(bundle_dir):
    from magicselector.selector import Selector

    work = WORKLOAD[:4]
    res = measure_latency(bundle_dir, runs=2, warmup=1, workload=work, decompose="rules")
    handed = res["handed_tokens"]
    assert handed["format"] == "mcp" and handed["fixed_k"] == 10 and handed["turns"] == len(work)
    # recomputed from the same turns with the same settings (selection is deterministic)
    sel = Selector.from_bundle(bundle_dir, config=SelectorConfig(threads=1, decompose="rules"))
    every = _tokens(sel.catalog, sel.catalog.ids)
    per_turn = {"all": [], "fixed_10": [], "cut": []}
    for turn in work:
        s = sel.select(turn["utterance"], turn["history"])
        per_turn["all"].append(every)
        per_turn["fixed_10"].append(_tokens(sel.catalog, s.ranked_ids[:10]))
        per_turn["cut"].append(_tokens(sel.catalog, s.ids))
    for level in LEVELS:
        assert handed[level]["mean"] == pytest.approx(sum(per_turn[level]) / len(work))
        assert handed[level]["min"] == min(per_turn[level]) and handed[level]["max"] == max(per_turn[level])
        assert handed[level]["min"] <= handed[level]["p90"] <= handed[level]["max"]
    assert handed["all"]["mean"] >= handed["fixed_10"]["mean"] >= 0 and handed["cut"]["min"] > 0
    assert handed["all"]["mean"] > handed["fixed_10"]["max"]  # 243 tools are far more than 10
    assert "| all catalog tools | " in "\n".join(format_handed(res))


def _catalog() -> Catalog:
    return Catalog([Tool(id=f"t{i}", name=f"tool_{i}", description="Does thing number " + "x" * (7 * i),
                         parameters={"type": "object", "properties": {"arg": {"type": "string"}}})
                    for i in range(12)])


def test_handed_tokens_by_hand():
    cat = _catalog()
    ids = cat.ids
    h = HandedTokens(cat)
    h.add(SimpleNamespace(ranked_ids=ids, ids=ids[:2]))
    h.add(SimpleNamespace(ranked_ids=ids[::-1], ids=ids[-1:]))
    s = h.summary()
    assert s["turns"] == 2 and s["all"]["mean"] == _tokens(cat, ids)
    assert s["fixed_10"]["min"] == min(_tokens(cat, ids[:10]), _tokens(cat, ids[::-1][:10]))
    assert s["cut"]["mean"] == pytest.approx((_tokens(cat, ids[:2]) + _tokens(cat, ids[-1:])) / 2)
    assert s["all"]["mean"] > s["fixed_10"]["max"] > s["cut"]["max"] > 0
    assert HandedTokens(cat).summary() is None
    lines = format_handed({"handed_tokens": s, "stages": {"total": {"p50": 2.0}},
                           "prefill": {"model": "/m/x.gguf", "threads": 1, "reps": 1,
                                       "levels": {"cut": {"tokens": 9, "timed_tokens": 9, "ms": 10.0,
                                                          "extrapolated": False}}}})
    assert any(line.startswith("| shipped cut |") and line.endswith("| 10.0 | 5.0x |") for line in lines)
    assert format_handed({"stages": {}}) == []


def test_prefill_without_the_llm_extra_names_it(monkeypatch, tmp_path):
    from magicselector.errors import MagicSelectorError

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # find_spec -> None, import -> ImportError
    with pytest.raises(MagicSelectorError, match=r"magicselector\[llm\]"):
        measure_prefill(_catalog(), {"cut": 8})
    from magicselector.cli import build_parser

    (tmp_path / "manifest.json").write_text("{}")
    args = build_parser().parse_args(["bench", "latency", "--bundle", str(tmp_path), "--prefill",
                                      "--out", str(tmp_path / "out")])
    with pytest.raises(MagicSelectorError, match=r"magicselector\[llm\]"):  # before any run starts
        args.func(args)


@pytest.mark.extra("llm")
def test_prefill_on_the_shipped_gguf():
    from magicselector.decompose.model import ensure_default_model
    from magicselector.errors import ModelError

    try:
        ensure_default_model()
    except ModelError as e:
        pytest.skip(f"the shipped GGUF cannot be assembled: {e}")
    res = measure_prefill(_catalog(), {"all": 48, "fixed_10": 32, "cut": 16.4}, threads=1, reps=1, max_tokens=32)
    assert res["threads"] == 1 and res["reps"] == 1 and res["warmup"] == 1
    rows = res["levels"]
    assert set(rows) == {"all", "fixed_10", "cut"}
    assert rows["cut"] == {**rows["cut"], "tokens": 16, "timed_tokens": 16, "extrapolated": False}
    assert rows["all"]["timed_tokens"] == 32 and rows["all"]["extrapolated"] and rows["all"]["tokens"] == 48
    assert all(r["ms"] > 0 for r in rows.values())


def test_the_adb_merge_keeps_the_phone_runs_handed_tokens():
    from magicselector.bench.adb import merge_runs
    from magicselector.cli.bench import latency_summary

    handed = {"format": "mcp", "fixed_k": 10, "turns": 2, "all": {"mean": 900.0, "p90": 900.0, "min": 900, "max": 900},
              "fixed_10": {"mean": 300.0, "p90": 310.0, "min": 290, "max": 311},
              "cut": {"mean": 120.0, "p90": 150.0, "min": 90, "max": 151}}
    run = {"config": {"runs": 1}, "cold_start_ms": 5.0, "stages": {"total": {"p50": 3.0, "p90": 4.0, "p99": 4.0,
                                                                           "mean": 3.2, "n": 2}},
           "cold_start_breakdown": {"load_ms": 2.0, "first_select_ms": 3.0}, "handed_tokens": handed}
    merged = merge_runs([run, {**run, "handed_tokens": None}], [{}, {}], {}, {})
    assert merged["handed_tokens"] == handed
    summary = latency_summary({**merged, "peak_rss_mb": 1.0, "device": {}})
    assert "| shipped cut | 120 | 150 | - | - |" in summary and "| fixed 10 | 300 | 310 |" in summary
    old = merge_runs([{**run, "handed_tokens": None}], [{}], {}, {})  # a phone runtime without the field
    assert "Schema tokens handed" not in latency_summary({**old, "peak_rss_mb": 1.0, "device": {}})

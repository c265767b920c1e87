"""The latency / scaling benches: schemas, the lean runner, the CLI outputs. No timing thresholds."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from magicselector.bench.latency import SCHEMA, STAGE_ORDER, WORKLOAD, measure_latency, validate_results
from magicselector.config import SelectorConfig

HEAVY = ("torch", "transformers", "sentence_transformers", "optimum", "executorch")


def _check_stats(st: dict, n: int | None = None) -> None:
    for f in ("p50", "p90", "p99", "mean", "min", "max", "n"):
        assert f in st
    # order statistics of one sample: each lies within its range, and a stage that ran took time
    assert st["min"] <= st["p50"] <= st["p90"] <= st["p99"] <= st["max"]
    assert st["min"] <= st["mean"] <= st["max"] and st["max"] > 0
    if n is not None:
        assert st["n"] == n


def test_percentiles_by_hand():
    from magicselector.bench.latency import percentiles

    # numpy's linear interpolation: p90 of 1..5 sits 0.6 of the way from 4 to 5
    assert percentiles([4.0, 1.0, 3.0, 2.0, 5.0]) == pytest.approx(
        {"p50": 3.0, "p90": 4.6, "p99": 4.96, "mean": 3.0, "min": 1.0, "max": 5.0, "n": 5})
    assert percentiles([])["n"] == 0


def test_workload_is_fixed_and_phone_shaped():
    assert 20 <= len(WORKLOAD) <= 30
    assert all(t["utterance"].strip() for t in WORKLOAD)
    assert any(t["history"] for t in WORKLOAD)  # follow-ups
    assert any(" and " in t["utterance"] for t in WORKLOAD)  # multi-intent


@pytest.mark.slow
def test_measure_latency_schema(bundle_dir):
    work = WORKLOAD[:6]
    lines = []
    res = measure_latency(bundle_dir, runs=2, warmup=1, workload=work, progress=lines.append)
    assert res["schema"] == SCHEMA and validate_results(res) == []
    assert len(lines) == 3  # one per pass
    for stage in ("decompose", "tokenize", "embed", "search", "fuse", "cut", "total"):
        _check_stats(res["stages"][stage], n=2 * len(work))
    shipped = SelectorConfig()
    # the shipped configuration is measured (its lexical channel where shipped on); no stage is a cross-encoder
    assert ("lexical" in res["stages"]) == shipped.lexical and "rerank" not in res["stages"]
    assert list(res["stages"]) == [s for s in STAGE_ORDER if s in res["stages"]]  # every stage known, total last
    assert res["cold_start_ms"] > 0 and res["peak_rss_mb"] > 0
    assert res["cold_start_ms"] == pytest.approx(res["cold_start_breakdown"]["load_ms"]
                                                 + res["cold_start_breakdown"]["first_select_ms"])
    a = res["artifacts"]
    assert a["embedder_bytes"] > 0 and a["index_bytes"] > 0 and a["total_bytes"] >= a["embedder_bytes"]
    for key in ("platform", "cpu_model", "cores", "python", "onnxruntime", "usearch"):
        assert res["device"][key]
    assert res["config"]["runs"] == 2 and res["config"]["turns"] == len(work)
    assert res["config"]["decomposer"] == shipped.decompose
    json.dumps(res)  # serialisable
    # the decomposer is part of the measured pipeline when asked for
    ruled = measure_latency(bundle_dir, runs=1, warmup=0, workload=work, decompose="rules")
    assert ruled["config"]["decomposer"] == "rules" and validate_results(ruled) == []
    assert ruled["stages"]["embed"]["n"] == len(work)


@pytest.mark.slow
def test_runner_writes_json_and_imports_no_torch(bundle_dir, tmp_path):
    out = tmp_path / "lat.json"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "magicselector.bench.latency_runner",
                           "--bundle", str(bundle_dir), "--runs", "2", "--warmup", "1", "--threads", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")]
    assert "magicselector.bench.latency" in imported  # -X importtime saw the runner's imports
    assert [m for m in imported if m.split(".")[0] in HEAVY] == []
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[latency] ")]
    assert sum(" run " in line for line in progress) == 2
    res = json.loads(out.read_text())
    assert validate_results(res) == [] and res["config"]["fresh_process"] is True
    assert res["config"]["heavy_modules_loaded"] == []
    assert res["cold_start_breakdown"]["import_ms"] > 0  # the fresh process timed its imports


def test_runner_reports_a_missing_bundle(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "magicselector.bench.latency_runner", "--bundle",
                           str(tmp_path / "nope"), "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no such bundle" in proc.stderr


@pytest.mark.slow
@pytest.mark.extra("bench", modules=("matplotlib",))
def test_bench_latency_cli_writes_outputs(bundle_dir, tmp_path, capsys):
    from magicselector.cli import main

    out = tmp_path / "bench"
    assert main(["bench", "latency", "--bundle", str(bundle_dir), "--runs", "1", "--warmup", "0",
                 "--out", str(out)]) == 0
    for name in ("results.json", "results.csv", "summary.md", "stages.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    res = json.loads((out / "results.json").read_text())
    assert validate_results(res) == []
    rows = (out / "results.csv").read_text().strip().splitlines()
    assert rows[0].startswith("stage,p50_ms") and {r.split(",")[0] for r in rows[1:]} == set(res["stages"])
    summary = (out / "summary.md").read_text()
    assert "| stage |" in summary and "## Targets" in summary
    assert (out / "stages.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_latency_adb_without_harness_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import builtins

    from magicselector.cli import main

    real_import = builtins.__import__

    def no_adb(name, *a, **k):
        if name == "magicselector.bench.adb":
            raise ImportError("no adb module")
        return real_import(name, *a, **k)

    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    monkeypatch.setattr(builtins, "__import__", no_adb)
    assert main(["bench", "latency", "--bundle", str(bundle), "--device", "adb:emulator-5554",
                 "--out", str(tmp_path / "o")]) == 2
    assert "ADB harness is not installed" in capsys.readouterr().err


def test_bench_parser_is_registered_and_lean():
    code = ("import sys; from magicselector.cli import build_parser; p = build_parser(); "
            "a = p.parse_args(['bench', 'latency', '--bundle', 'x', '--device', 'adb:SER', '--compare', "
            "'--pin-big-cores', '--cool-down-s', '2']); "
            "b = p.parse_args(['bench', 'scaling', '--max-n', '10000']); "
            "print(a.device, a.compare, a.pin_big_cores, a.cool_down_s, b.max_n); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'sentence_transformers', 'matplotlib', 'rank_bm25', 'onnxruntime') "
            "or m.startswith(('magicselector.bench.latency', 'magicselector.bench.compare', "
            "'magicselector.bench.scaling', 'magicselector.bench.plots', 'magicselector.bench.evaluate'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    first, mods = out.stdout.strip().splitlines()
    assert first == "adb:SER True True 2.0 10000"
    assert mods == "[]"


def test_scaling_small_n_recall_and_fit():
    from magicselector.bench.scaling import run_scaling

    res = run_scaling(ns=(1_000, 10_000), cut_ns=(10, 100, 1_000), dtypes=("f16", "i8"), queries=20,
                      expansion_search=(64, 128), cut_repeats=3)
    assert [(r["n"], r["dtype"]) for r in res["search"]] == [(1000, "f16"), (1000, "i8"), (10000, "f16"),
                                                              (10000, "i8")]
    for r in res["search"]:
        assert r["build_s"] >= 0 and r["file_bytes"] > 0
        for s in r["settings"]:
            # f16 keeps (nearly) the exact top 50 at these sizes; i8 loses a few percent, not more
            assert s["recall@50"] >= (0.98 if r["dtype"] == "f16" else 0.9), (r["n"], r["dtype"], s)
            assert 0 <= s["p50_ms"] <= s["p90_ms"]
        assert r["chosen"] in r["settings"]
    for key in ("slope_us_per_item", "intercept_us", "r2", "loglog_slope", "loglog_slope_n_ge_1000"):
        assert key in res["cut"]["fit"]
    # the fit's quality is a timing and follows the machine's load: bench reports it, a test does not
    # judge it (r2 fell to 0.22 on a loaded 2-core host); only that it is a coefficient of determination
    assert res["cut"]["fit"]["r2"] <= 1.0
    json.dumps(res)


def test_scaling_max_n_skips_large_indexes():
    from magicselector.bench.scaling import run_scaling

    res = run_scaling(ns=(1_000, 1_000_000), cut_ns=(10, 100), dtypes=("i8",), queries=5, max_n=1_000,
                      expansion_search=(64,), cut_repeats=1)
    assert [r["n"] for r in res["search"]] == [1000]


def test_exact_topk_matches_a_full_sort():
    import numpy as np

    from magicselector.bench.scaling import exact_topk, synthetic_vectors

    db = synthetic_vectors(3_000, 32, seed=1)
    q = synthetic_vectors(7, 32, seed=2)
    idx, scores = exact_topk(db, q, 10, chunk=700)
    full = np.argsort(-(q @ db.T), axis=1, kind="stable")[:, :10]
    assert (idx == full).all()
    assert np.allclose(np.linalg.norm(db, axis=1), 1.0, atol=1e-5)


def test_cut_time_grows_linearly():
    """Shape, not speed: the log-log slope of paper_cut time against n is ~1 (linear).

    Medians of interleaved repeats, over a 32x range of n where per-call overhead is small; the
    minima's fit is the fallback when background load skews the medians."""
    from magicselector.bench.scaling import cut_scaling

    res = cut_scaling((1_000, 4_000, 16_000, 32_000), dim=64, repeats=7)
    slopes = [res["fit"]["loglog_slope"], res["fit_min"]["loglog_slope"]]
    assert any(0.7 <= s <= 1.3 for s in slopes), (slopes, res["points"])
    assert res["fit"]["slope_us_per_item"] > 0


def _write_turns(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


TURN_ROWS = [
    {"id": "a", "query": "set an alarm for 7", "history": [], "gold": ["set_alarm"]},
    {"id": "b", "query": "and one for 8", "history": [
        {"role": "user", "content": "set an alarm for 7"}, {"role": "assistant", "content": "Alarm set."}]},
    {"id": "c", "query": "what is on my calendar tomorrow", "history": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "content": "09:00"}]},
]


def test_load_turns_reads_queries_jsonl_and_names_bad_fields(tmp_path):
    from magicselector.bench.latency import load_turns
    from magicselector.errors import InputError

    good = tmp_path / "queries.jsonl"
    _write_turns(good, TURN_ROWS)
    turns = load_turns(good)
    assert [t["utterance"] for t in turns] == [r["query"] for r in TURN_ROWS]
    assert turns[1]["history"] == TURN_ROWS[1]["history"]
    picked = load_turns(good, limit=2)
    assert len(picked) == 2 and picked == load_turns(good, limit=2)  # seeded, file order kept
    assert [turns.index(t) for t in picked] == sorted(turns.index(t) for t in picked)
    bad = tmp_path / "bad.jsonl"
    for rows, needle in [(['{"query": "x"}', "{not json"], "line 2: not JSON"),
                         (['{"query": ""}'], "line 1: field 'query'"),
                         (['{"query": "x", "history": {"role": "user"}}'], "field 'history' must be a list"),
                         (['{"query": "x", "history": [{"role": "wizard", "content": "hi"}]}'], "line 1: field 'history'"),
                         (["[1, 2]"], "a row must be a JSON object"), ([""], "holds no rows")]:
        bad.write_text("\n".join(rows) + "\n", encoding="utf-8")
        with pytest.raises(InputError, match=needle):
            load_turns(bad)
    with pytest.raises(InputError, match="no such file"):
        load_turns(tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match="--turns-limit must be >= 1"):
        load_turns(good, limit=0)


@pytest.mark.slow
def test_bench_latency_times_a_turns_file(bundle_dir, tmp_path, capsys):
    from magicselector.cli import main
    from magicselector.files import sha256_file

    turns = tmp_path / "queries.jsonl"
    _write_turns(turns, TURN_ROWS)
    out = tmp_path / "bench"
    assert main(["bench", "latency", "--bundle", str(bundle_dir), "--runs", "2", "--warmup", "0",
                 "--turns", str(turns), "--turns-limit", "2", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert validate_results(res) == []
    assert res["config"]["turns"] == 2 and res["stages"]["total"]["n"] == 4
    assert res["config"]["workload"] == {"name": f"{turns} (2 rows, seed 0)", "sha256": sha256_file(turns)}
    assert f"turns of {turns} (2 rows, seed 0)" in (out / "summary.md").read_text()
    (tmp_path / "bad.jsonl").write_text('{"query": 3}\n', encoding="utf-8")
    assert main(["bench", "latency", "--bundle", str(bundle_dir), "--turns", str(tmp_path / "bad.jsonl"),
                 "--out", str(out)]) == 2
    assert "bad.jsonl line 1: field 'query'" in capsys.readouterr().err
    assert main(["bench", "latency", "--bundle", str(bundle_dir), "--turns-limit", "3", "--out", str(out)]) == 2
    assert "--turns-limit needs --turns" in capsys.readouterr().err

import json
import os
import subprocess
import sys
from dataclasses import asdict

import pytest

from magicselector.cli import main
from magicselector.config import SelectorConfig

pytestmark = pytest.mark.slow


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "magicselector", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_select_json(bundle_dir, tmp_path, capsys):
    history = tmp_path / "h.json"
    history.write_text(json.dumps([{"role": "user", "content": "turn on bluetooth"},
                                   {"role": "assistant", "content": "Bluetooth is on."}]))
    assert main(["select", "connect my headphones", "--bundle", str(bundle_dir), "--history-file", str(history),
                 "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["k"] == len(out["tools"]) == len(out["schemas"]) >= 1
    assert {"embed", "search", "cut", "total"} <= set(out["timings_ms"])
    assert out["schemas"][0]["inputSchema"]["type"] == "object"
    # the history file is used: the shipped history mode, or "user" (with a note) when that is "none"
    mode = SelectorConfig().history
    assert "turn on bluetooth" in " ".join(out["retrieved_texts"])
    assert ("using --history-mode user" in captured.err) == (mode == "none")


def test_demo_runs_the_scripted_dialogue(bundle_dir, capsys):
    assert main(["demo", "--bundle", str(bundle_dir)]) == 0
    out = capsys.readouterr().out
    assert out.count("user:") == 8 and "K=" in out and "ms:" in out
    # the dialogue's elliptical follow-ups need the history: the demo runs with a history mode and says which
    mode = SelectorConfig().history
    assert f"history mode: {'user' if mode == 'none' else mode}" in out
    turns = out.split("\n[")
    saturday = next(t for t in turns if "user: and on Saturday?" in t)
    assert "get_current_weather" in saturday.split("tools (")[1].split("\n")[0]


def test_eval_writes_the_json_contract(bundle_dir, tiny_benchmark, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--cut", "paper", "--json", str(out),
                 "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert {"ndcg@10", "recall@10", "completeness@10", "completeness@K", "mean_k", "schema_tokens"} <= set(report["overall"])
    assert set(report["by_category"]) == {"single", "multi", "followup"}
    shipped = "hybrid" if SelectorConfig().lexical else "dense"
    assert report["config"]["retriever"] == shipped and report["config"]["adaptive"] is True
    assert report["config"]["cut"]["rule"] == "paper"
    assert report["overall"]["completeness@10"] == 1.0  # 6 tools: every gold tool is in the top 10
    table = capsys.readouterr().out
    assert "overall" in table and "completeness@K" in table
    assert main(["eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--at", "3", "--retriever", "bm25",
                 "--json", str(out), "--quiet"]) == 0
    assert "ndcg@3" in json.loads(out.read_text())["overall"]


def test_eval_without_flags_measures_the_shipped_product(bundle_dir, tiny_benchmark, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--json", str(out), "--quiet"]) == 0
    config = json.loads(out.read_text())["config"]
    shipped = SelectorConfig()
    # the settings as SelectorConfig nests them, the decomposer's model and prompt None (the bundle's)
    assert config["cut"] == {"rule": "rmargin", **asdict(shipped.cut)} and config["limits"] == asdict(shipped.limits)
    assert config["llm"] == {**asdict(shipped.llm), "model": None, "prompt": None}
    assert config["adaptive"] is True and config["k"] == 10
    assert (config["history"], config["decompose"]) == (shipped.history, shipped.decompose)
    assert not any(key.startswith("rerank") for key in config)  # the runtime has no cross-encoder
    assert capsys.readouterr().err == ""


def test_eval_k_is_the_fixed_cuts_k_and_at_the_metric_cutoff(bundle_dir, tiny_benchmark, tmp_path, capsys):
    """``eval --k N`` no longer sets the metric cutoff (that is ``--at N``): it is the fixed cut's k."""
    out = tmp_path / "r.json"
    assert main(["eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--k", "5", "--json", str(out),
                 "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert "ndcg@10" in report["overall"] and "ndcg@5" not in report["overall"]
    assert report["config"]["cut"] == {"rule": "fixed", "k": 5}
    assert "deprecated" not in capsys.readouterr().err


def test_eval_counterfactual_report(bundle_dir, tiny_benchmark, tmp_path):
    """eq. 4 both ways on every turn: the atom side is the report's own ranking, the shares add up,
    and the two-or-more-gold-tools turns (the issue's aim) are reported apart."""
    out = tmp_path / "cf.json"
    assert main(["eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--at", "2", "--cut", "fixed", "--k", "2",
                 "--decompose", "rules", "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    cf = report["counterfactual"]
    assert cf["queries"] == 4 and cf["ndcg_atom@2"] == pytest.approx(report["overall"]["ndcg@2"])
    assert cf["mean_gain"] == pytest.approx(cf["ndcg_atom@2"] - cf["ndcg_raw@2"])
    assert cf["helps"] + cf["hurts"] + cf["same"] == pytest.approx(1.0)
    assert cf["llm_share"] == cf["gate_skipped"] == cf["deadline_missed"] == 0.0  # no gate without auto
    assert set(cf["by_category"]) == {"single", "multi", "followup"}
    multi = cf["multi_gold"]
    assert multi["queries"] == 1 and multi == cf["by_category"]["multi"]
    # "turn on bluetooth and play some jazz": both tools in the top 2 once split
    assert multi["completeness_atom@2"] == 1.0


def test_errors_exit_2_with_a_message(bundle_dir, tmp_path):
    r = run_cli("select", "   ", "--bundle", str(bundle_dir))
    assert r.returncode == 2 and "empty" in r.stderr
    r = run_cli("select", "hi", "--bundle", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such bundle" in r.stderr
    bad = tmp_path / "h.json"
    bad.write_text("{broken")
    r = run_cli("select", "hi", "--bundle", str(bundle_dir), "--history-file", str(bad))
    assert r.returncode == 2 and "not valid JSON" in r.stderr
    r = run_cli("eval", str(tmp_path), "--bundle", str(bundle_dir))
    assert r.returncode == 2 and "tools.jsonl" in r.stderr


def test_bundle_verify_cli(bundle_dir):
    r = run_cli("bundle", "verify", str(bundle_dir))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True

import json

import pytest

from magicselector.data.datasets import load_benchmark
from magicselector.bench.evaluate import EvalConfig, evaluate
from magicselector.errors import InputError


def test_benchmark_validation(tiny_benchmark):
    bench = load_benchmark(tiny_benchmark)
    assert len(bench.catalog) == 6 and len(bench.queries) == 4
    q = tiny_benchmark / "queries.jsonl"
    rows = [json.loads(line) for line in q.read_text().splitlines()]
    rows[0]["gold"] = ["no_such_tool"]
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match="no_such_tool"):
        load_benchmark(tiny_benchmark)
    rows[0]["gold"] = []
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match="non-empty list"):
        load_benchmark(tiny_benchmark)


@pytest.mark.slow
def test_hybrid_and_history(bundle_dir, tiny_benchmark):
    none = evaluate(tiny_benchmark, EvalConfig(k=1, retriever="dense"), bundle=bundle_dir, progress=False)
    user = evaluate(tiny_benchmark, EvalConfig(k=1, retriever="dense", history="user"), bundle=bundle_dir, progress=False)
    # "and tomorrow?" finds the weather tool first with the user turns carried along (user) and with
    # the whole dialogue (EvalConfig's default, the shipped history "all").
    assert user["by_category"]["followup"]["ndcg@1"] == 1.0
    assert none["config"]["history"] == "all" and none["by_category"]["followup"]["ndcg@1"] == 1.0
    hybrid = evaluate(tiny_benchmark, EvalConfig(k=5, retriever="hybrid", adaptive=True), bundle=bundle_dir,
                      progress=False)
    # every turn's gold tools are ranked ahead of every other tool, and the adaptive cut keeps them all
    assert hybrid["overall"]["ndcg@5"] == pytest.approx(1.0) and hybrid["overall"]["completeness@K"] == 1.0
    # mean K is the mean over the turns (by category, weighted by its turns), and the cut cuts: on a
    # 6-tool catalog it keeps fewer than all 6
    cats = hybrid["by_category"].values()
    assert hybrid["overall"]["mean_k"] == pytest.approx(sum(c["mean_k"] * c["queries"] for c in cats) / 4)
    assert 1 <= hybrid["overall"]["mean_k"] < 6


def test_duplicate_line_rate_reads_the_raw_llm_text():
    from magicselector.bench.evaluate import _duplicate_line_rate

    assert _duplicate_line_rate("turn on wifi\nplay jazz") == 0.0
    assert _duplicate_line_rate("turn on wifi\n Turn  on WiFi \nturn on wifi\n\nplay jazz") == pytest.approx(0.5)
    assert _duplicate_line_rate("") == 0.0


def test_eval_json_to_an_unwritable_path_is_a_clear_error(tmp_path, capsys):
    from magicselector.cli.main import main

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    # the --json folder cannot be made (a file stands where it would go): exit 2 before the evaluation
    assert main(["eval", str(tmp_path / "no-such-set"), "--json", str(blocker / "out.json")]) == 2
    err = capsys.readouterr().err
    assert "--json" in err and "Traceback" not in err

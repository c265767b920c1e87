import json

import pytest

from magicselector.data.datasets import load_benchmark
from magicselector.bench.evaluate import EvalConfig, evaluate
from magicselector.config import SelectorConfig
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
    user = evaluate(tiny_benchmark, EvalConfig(SelectorConfig(history="user"), k=1, retriever="dense"), bundle=bundle_dir, progress=False)
    # "and tomorrow?" finds the weather tool first with the user turns carried along (user) and with
    # them and the assistant's questions (EvalConfig's default, the shipped history "questions").
    assert user["by_category"]["followup"]["ndcg@1"] == 1.0
    assert none["config"]["history"] == "questions" and none["by_category"]["followup"]["ndcg@1"] == 1.0
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


@pytest.mark.parametrize("retriever", ["hybrid", "bm25"])
def test_eval_json_carries_one_row_per_query_matching_its_selection(bundle_dir, tiny_benchmark, tmp_path, capsys,
                                                                     retriever):
    from magicselector.cli.main import main

    out = tmp_path / "eval.json"
    assert main(["eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--retriever", retriever,
                 "--json", str(out), "--quiet"]) == 0
    capsys.readouterr()
    report = json.loads(out.read_text())
    # the existing keys stay (a contract); the rows are beside them
    assert {"dataset", "overall", "by_category", "config", "bad_queries"} <= set(report)
    rows = report["per_query"]
    queries = [json.loads(line) for line in (tiny_benchmark / "queries.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [q["id"] for q in queries]
    assert [r["gold"] for r in rows] == [q["gold"] for q in queries]
    for r in rows:
        assert set(r) == {"id", "ranked_ids", "k", "ids", "gold"}
        assert r["k"] == len(r["ids"]) and len(r["ranked_ids"]) <= 50
        assert retriever == "bm25" or len(r["ranked_ids"]) == 6  # dense and hybrid rank every tool of 6
        assert set(r["ids"]) <= set(r["ranked_ids"]) and len(set(r["ranked_ids"])) == len(r["ranked_ids"])
        if retriever == "bm25":
            assert r["ids"] == r["ranked_ids"][:r["k"]]
    # the rows are what the summary was computed from
    assert sum(r["k"] for r in rows) / len(rows) == pytest.approx(report["overall"]["mean_k"])
    complete_k = [float(set(r["gold"]) <= set(r["ranked_ids"][:r["k"]])) for r in rows]
    assert sum(complete_k) / len(rows) == pytest.approx(report["overall"]["completeness@K"])

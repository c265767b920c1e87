"""``bench agent``: the first call's parsing and scoring on hand-made calls (a wrong name, an
unparsable call, a gold not handed over, bfcl's argument rules), and the command end to end on a
three-turn part with the shipped Qwen GGUF. No timing thresholds."""
from __future__ import annotations

import json
import sys

import pytest

from magicselector.bench.agent import (AgentConfig, bfcl_args_match, better_than_shipped, parse_first_call,
                                       score_call, summarise)
from magicselector.catalog import Tool
from magicselector.errors import InputError, ModelError

ALARM = Tool(id="set_alarm", name="set_alarm", description="Set an alarm at a time of day.",
             parameters={"type": "object", "properties": {"time": {"type": "string"}}, "required": ["time"]})
TIMER = Tool(id="start_timer", name="start_timer", description="Start a countdown timer for a duration.",
             parameters={"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]})
WEATHER = Tool(id="get_weather", name="get_weather", description="The weather forecast for a city.",
               parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
DOTTED = Tool(id="bfcl:math.hypot:1", name="math.hypot", description="Hypotenuse.",
              parameters={"type": "dict", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"},
                                                          "z": {"type": "float"}, "unit": {"type": "string"}},
                          "required": ["x", "y"]})


def test_the_first_call_parses_in_each_trained_format_and_untagged():
    assert parse_first_call('<tool_call>\n{"name": "set_alarm", "arguments": {"time": "7:00"}}\n</tool_call>') == \
        ("set_alarm", {"time": "7:00"}, True)
    # SmolLM2's list, arguments as a JSON string, the model going on after the first call
    assert parse_first_call('<tool_call>[{"name": "a", "arguments": "{\\"k\\": 1}"}, {"name": "b"') == \
        ("a", {"k": 1}, True)
    assert parse_first_call('```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```') == \
        ("get_weather", {"city": "Oslo"}, False)
    assert parse_first_call('<tool_call>\n{"name": "set_alarm", "argum') is None  # cut by the token cap
    assert parse_first_call("Sure, I set it.") is None
    assert parse_first_call('<tool_call>{"arguments": {}}</tool_call>') is None  # no name


def test_scoring_a_right_call_a_wrong_name_an_unparsable_call_and_a_gold_not_handed_over():
    handed = [ALARM, TIMER]
    right = score_call('<tool_call>{"name": "set_alarm", "arguments": {"time": "7"}}</tool_call>', handed,
                       ["set_alarm"])
    assert right["parsed"] and right["tagged"] and right["correct"] and right["called"] == "set_alarm"
    wrong = score_call('<tool_call>{"name": "start_timer", "arguments": {}}</tool_call>', handed, ["set_alarm"])
    assert wrong["parsed"] and not wrong["correct"] and wrong["called"] == "start_timer" and wrong["gold_handed"]
    unknown = score_call('<tool_call>{"name": "set_alarm_2", "arguments": {}}</tool_call>', handed, ["set_alarm"])
    assert unknown["parsed"] and unknown["called"] is None and not unknown["correct"]
    unparsable = score_call("<tool_call>{name: set_alarm}</tool_call>", handed, ["set_alarm"])
    assert not unparsable["parsed"] and not unparsable["correct"]
    # the gold tool was not handed over: the model names it anyway, and the turn is still a miss
    not_handed = score_call('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
                            handed, ["get_weather"])
    assert not not_handed["gold_handed"] and not not_handed["correct"] and not_handed["called"] is None


def test_a_name_the_wire_changed_maps_back_to_its_tool():
    from magicselector.names import wire_name

    called = wire_name("math.hypot", "openai")
    assert called != "math.hypot"
    row = score_call(f'<tool_call>{{"name": "{called}", "arguments": {{}}}}</tool_call>', [DOTTED, ALARM],
                     ["bfcl:math.hypot:1"])
    assert row["correct"] and row["called"] == "math.hypot"


def test_bfcl_argument_rules():
    truth = [{"math.hypot": {"x": [4], "y": [5], "z": [0.0, ""], "unit": ["units", ""]}}]
    assert bfcl_args_match(DOTTED, {"x": 4, "y": 5}, truth)                    # optional ones left out
    assert bfcl_args_match(DOTTED, {"x": 4, "y": 5, "z": 0, "unit": "Units."}, truth)  # int for float; standardized
    assert not bfcl_args_match(DOTTED, {"x": 4}, truth)                        # a required one missing
    assert not bfcl_args_match(DOTTED, {"x": 4, "y": 6}, truth)                # a wrong value
    assert not bfcl_args_match(DOTTED, {"x": "4", "y": 5}, truth)              # a string for an integer
    assert not bfcl_args_match(DOTTED, {"x": 4, "y": 5, "w": 1}, truth)        # outside the schema
    assert not bfcl_args_match(DOTTED, "x=4, y=5", truth)                      # not an object
    parallel = [{"math.hypot": {"x": [1], "y": [1]}}, {"math.hypot": {"x": [4], "y": [5]}}]
    assert bfcl_args_match(DOTTED, {"x": 4, "y": 5}, parallel)                 # any of a parallel task's calls
    assert not bfcl_args_match(DOTTED, {"x": 4, "y": 5}, [{"other": {"x": [4], "y": [5]}}])


def test_summary_rates_and_the_comparison_with_the_shipped_cut():
    rows = [{"correct": True, "parsed": True, "tagged": True, "gold_handed": True, "args": None, "tools": 2,
             "schema_tokens": 10, "prompt_tokens": 100, "prefilled_tokens": 90, "generated_tokens": 5,
             "selection_ms": 1.0, "prefill_ms": 10.0, "decode_ms": 5.0, "turn_ms": 16.0, "fits": True},
            {"correct": False, "parsed": False, "tagged": False, "gold_handed": False, "args": False, "tools": 4,
             "schema_tokens": 30, "prompt_tokens": 300, "prefilled_tokens": 0, "generated_tokens": 0,
             "selection_ms": 0.0, "prefill_ms": 0.0, "decode_ms": 0.0, "turn_ms": 0.0, "fits": False}]
    s = summarise(rows)
    assert (s["accuracy"], s["parse_rate"], s["args"], s["args_turns"], s["tools"]) == (0.5, 0.5, 0.0, 1, 3.0)
    assert s["turn_ms"] == 16.0 and s["fit"] == 1  # times over the turns that fit the context
    assert s["turn_cpu_ms"] is None and s["cpu_turns"] == 0  # rows without llm_cpu_ms (runs before it)
    s = summarise([{**rows[0], "llm_cpu_ms": 12.0}, rows[0], rows[1]])
    assert s["turn_cpu_ms"] == 13.0 and s["cpu_turns"] == 1  # selection + the LLM's CPU, over the rows with it
    mean = {"shipped": {"accuracy": 0.5, "turn_ms": 100.0}, "fixed-5": {"accuracy": 0.6, "turn_ms": 90.0},
            "fixed-10": {"accuracy": 0.7, "turn_ms": 150.0}, "gold": {"accuracy": 0.9, "turn_ms": 50.0}}
    assert better_than_shipped(mean) == ["fixed-5"]
    tie = {"shipped": {"accuracy": (0.7 + 0.3 + 0.2) / 3, "turn_ms": 100.0},
           "fixed-5": {"accuracy": (0.7 + 0.4 + 0.1) / 3, "turn_ms": 90.0}}
    assert tie["fixed-5"]["accuracy"] != tie["shipped"]["accuracy"] and better_than_shipped(tie) == []


def test_bad_settings_name_the_field():
    with pytest.raises(InputError, match="configs"):
        AgentConfig(configs=("fixed-7",))
    with pytest.raises(InputError, match="threads"):
        AgentConfig(threads=0)
    with pytest.raises(InputError, match="limit"):
        AgentConfig(limit=0)


def _tiny_part(folder):
    folder.mkdir()
    with open(folder / "tools.jsonl", "w", encoding="utf-8") as f:
        for t in (ALARM, TIMER, WEATHER):
            f.write(json.dumps({"id": t.id, "name": t.name, "description": t.description,
                                "parameters": dict(t.parameters)}) + "\n")
    queries = [("q1", "Wake me up at 7 am tomorrow with an alarm.", ["set_alarm"], []),
               ("q2", "What's the weather going to be in Paris?", ["get_weather"], []),
               ("q3", "Start a timer for ten minutes.", ["start_timer"],
                [{"role": "user", "content": "I'm boiling eggs."}, {"role": "assistant", "content": "Nice!"}])]
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for qid, text, gold, history in queries:
            f.write(json.dumps({"id": qid, "query": text, "gold": gold, "history": history}) + "\n")
    return folder


def _need_shipped_gguf() -> None:
    """Skip, naming the llm extra, where llama-cpp-python or the shipped Qwen GGUF is not here."""
    pytest.importorskip("llama_cpp", reason="the llm extra (llama-cpp-python) is not installed: "
                                            "pip install 'magicselector[llm]'")
    from magicselector.decompose.model import ensure_default_model

    try:
        ensure_default_model()
    except ModelError as e:
        pytest.skip(f"the shipped GGUF cannot be assembled (the llm extra): {e}")


@pytest.mark.slow
def test_the_command_end_to_end_on_three_turns_with_the_shipped_gguf(tmp_path, monkeypatch, capsys):
    _need_shipped_gguf()
    from magicselector.cli import main

    part = _tiny_part(tmp_path / "tiny")
    out = tmp_path / "agent.json"
    monkeypatch.setattr(sys, "argv", ["magicselector", "bench", "agent", str(part), "--configs", "all", "shipped",
                                      "gold", "--max-new-tokens", "48", "--threads", "2", "--json", str(out)])
    assert main() == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    rows = report["rows"]
    assert len(rows) == 9 and {r["config"] for r in rows} == {"all", "shipped", "gold"}
    for r in rows:
        assert r["prompt_tokens"] > 0 and r["fits"]
        assert r["turn_ms"] == pytest.approx(r["selection_ms"] + r["prefill_ms"] + r["decode_ms"])
        assert not r["correct"] or (r["parsed"] and r["gold_handed"] and r["called"] in {t for t in r["gold"]})
        assert set(r["handed"]) <= {"set_alarm", "start_timer", "get_weather"}
    by = {(r["config"], r["id"]): r for r in rows}
    assert all(by[("gold", q)]["handed"] == by[("gold", q)]["gold"] for q in ("q1", "q2", "q3"))
    assert all(len(by[("all", q)]["handed"]) == 3 and by[("all", q)]["selection_ms"] == 0 for q in ("q1", "q2", "q3"))
    # the shipped model calls set_alarm for an alarm when that is the one tool it is handed
    assert by[("gold", "q1")]["correct"]
    part_summary = report["parts"]["tiny"]["configs"]["gold"]
    assert part_summary["turns"] == 3 and part_summary["accuracy"] == pytest.approx(
        sum(by[("gold", q)]["correct"] for q in ("q1", "q2", "q3")) / 3)
    from magicselector.bundle import Bundle
    from magicselector.default_bundle import ensure_default_bundle

    shipped = Bundle.open(ensure_default_bundle(progress=False)).manifest
    assert report["bundle"]["content_sha256"] == shipped["content_sha256"]  # whose cut the shipped rows are
    assert report["bundle"]["head_sha256"] == shipped["files"][shipped["head"]["file"]]["sha256"]
    printed = capsys.readouterr().out
    assert "| gold |" in printed and f"content sha256 `{shipped['content_sha256'][:16]}`" in printed

    # --resume: every row is in the file, so nothing is generated again and the rows stand as they were
    import magicselector.bench.agent as agent

    def no_generation(*_a, **_k):
        raise AssertionError("a turn already in the --json file was run again")

    monkeypatch.setattr(agent, "generate_call", no_generation)
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--resume"])
    assert main() == 0
    again = json.loads(out.read_text(encoding="utf-8"))
    def calls(rs):
        return [(r["config"], r["id"], r["text"]) for r in rs]

    assert calls(again["rows"]) == calls(rows)
    assert again["seconds"] >= report["seconds"]  # the earlier run's seconds carried over


def test_merging_runs_keeps_each_models_parts_and_recomputes_the_means():
    from magicselector.bench.agent import SCHEMA, merge_reports

    def report(label, part, acc):
        configs = {c: {"accuracy": acc, "parse_rate": 1.0, "tools": 3.0, "prompt_tokens": 100.0, "turn_ms": 10.0}
                   for c in ("shipped", "fixed-5")}
        return {"schema": SCHEMA, "model": {"label": label}, "host": {"loadavg": [1.0]}, "seconds": 5.0,
                "parts": {part: {"configs": configs}}, "rows": [{"part": part}]}

    other = report("qwen", "a", 0.5)
    other["parts"]["a"]["configs"] = {"gold": dict(other["parts"]["a"]["configs"]["shipped"])}
    merged = merge_reports([report("qwen", "a", 0.2), report("qwen", "b", 0.4), report("smol", "a", 0.0), other])
    assert [m["model"]["label"] for m in merged] == ["qwen", "smol"]
    qwen = merged[0]
    assert list(qwen["parts"]) == ["a", "b"] and len(qwen["rows"]) == 3 and qwen["seconds"] == 15.0
    assert list(qwen["parts"]["a"]["configs"]) == ["shipped", "fixed-5", "gold"]  # a part's runs side by side
    assert qwen["mean"]["shipped"]["accuracy"] == pytest.approx(0.3) and len(qwen["hosts"]) == 3
    assert "gold" not in qwen["mean"]  # measured on one part only
    with pytest.raises(InputError, match="schema"):
        merge_reports([{"schema": "other"}])


def test_the_sample_is_a_seeded_permutations_head_and_an_earlier_runs_turns_come_first(tmp_path):
    from magicselector.bench.agent import sampled_turns
    from magicselector.data.datasets import load_benchmark

    bench = load_benchmark(_tiny_part(tmp_path / "tiny"))
    every = [q.id for q in sampled_turns(bench, AgentConfig(limit=None))]
    assert sorted(every) == ["q1", "q2", "q3"]
    assert [q.id for q in sampled_turns(bench, AgentConfig(limit=2))] == every[:2]  # a smaller limit: the head
    last = every[-1]
    assert [q.id for q in sampled_turns(bench, AgentConfig(limit=2), first=[last, "gone"])] == [last, every[0]]
    assert len({tuple(q.id for q in sampled_turns(bench, AgentConfig(limit=None, seed=s))) for s in range(8)}) > 1


def test_resuming_refuses_another_model_or_token_cap_naming_the_field():
    from magicselector.bench.agent import SCHEMA, check_resumable

    earlier = {"schema": SCHEMA, "model": {"label": "qwen"}, "config": {"max_new_tokens": 128, "threads": 1},
               "rows": []}
    check_resumable(earlier, "qwen", AgentConfig(max_new_tokens=128, threads=1))
    with pytest.raises(InputError, match="resume: model"):
        check_resumable(earlier, "smol", AgentConfig(max_new_tokens=128, threads=1))
    with pytest.raises(InputError, match="resume: max_new_tokens"):
        check_resumable(earlier, "qwen", AgentConfig(max_new_tokens=64, threads=1))
    with pytest.raises(InputError, match="resume: threads"):
        check_resumable(earlier, "qwen", AgentConfig(max_new_tokens=128, threads=2))
    with pytest.raises(InputError, match="schema"):
        check_resumable({"schema": SCHEMA, "models": []}, "qwen", AgentConfig())  # a --merge output


def test_bfcls_own_checker_is_loaded_from_the_answers_package_with_its_model_table_stubbed(tmp_path, monkeypatch):
    """A stand-in bfcl_eval package laid out as the real one (its checker imports the model table,
    which the real one fills by importing every hosted model's SDK): the checker is found from the
    answers folder, gets the catalog's own name, and the stub does not outlive the load."""
    from magicselector.bench.agent import BfclAnswers, load_bfcl_checker

    package = tmp_path / "site" / "bfcl_eval"
    (package / "data" / "possible_answer").mkdir(parents=True)
    (package / "constants").mkdir()
    (package / "eval_checker" / "ast_eval").mkdir(parents=True)
    for sub in ("", "constants", "eval_checker", "eval_checker/ast_eval"):
        (package / sub / "__init__.py").write_text("", encoding="utf-8")
    (package / "constants" / "model_config.py").write_text("import some_hosted_model_sdk\n", encoding="utf-8")
    (package / "constants" / "enums.py").write_text(
        "from enum import Enum\nclass Language(Enum):\n    PYTHON = 'python'\n", encoding="utf-8")
    (package / "eval_checker" / "ast_eval" / "ast_checker.py").write_text(
        "from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING\n"
        "def simple_function_checker(description, output, answer, language, model_name):\n"
        "    assert not MODEL_CONFIG_MAPPING[model_name].underscore_to_dot\n"
        "    name = description['name']\n"
        "    ok = output[name] == {k: v[0] for k, v in answer[name].items()}\n"
        "    return {'valid': ok, 'error_type': None if ok else 'value_error:others'}\n", encoding="utf-8")
    for name in [m for m in sys.modules if m == "bfcl_eval" or m.startswith("bfcl_eval.")]:
        monkeypatch.delitem(sys.modules, name)
    checker = load_bfcl_checker(package / "data" / "possible_answer")
    assert checker is not None and "bfcl_eval.constants.model_config" not in sys.modules
    assert str(tmp_path / "site") not in sys.path
    answers = BfclAnswers({"bfcl:1": [{"math.hypot": {"x": [4], "y": [5]}}]}, checker)
    assert answers.checker_name == "bfcl-eval simple_function_checker"
    assert answers.score(DOTTED, {"x": 4, "y": 5}, "bfcl:1") == (True, None)
    assert answers.score(DOTTED, {"x": 4, "y": 6}, "bfcl:1") == (False, "value_error:others")
    assert answers.score(DOTTED, "x=4", "bfcl:1") == (False, "arguments:not_an_object")
    for name in [m for m in sys.modules if m == "bfcl_eval" or m.startswith("bfcl_eval.")]:
        del sys.modules[name]  # the stand-in's modules, loaded by this test
    # a bare answers folder (not inside a bfcl_eval package): the documented subset scores
    bare = tmp_path / "answers"
    bare.mkdir()
    assert load_bfcl_checker(bare) is None
    subset = BfclAnswers({"bfcl:1": [{"math.hypot": {"x": [4], "y": [5]}}]})
    assert subset.checker_name == "bfcl_args_match (its subset)" and subset.score(DOTTED, {"x": 4, "y": 5}, "bfcl:1")[0]


def test_the_cut_is_beaten_only_at_the_same_or_lower_cpu_time_and_paired_turns_say_by_how_much():
    from magicselector.bench.agent import paired_with_shipped

    mean = {"shipped": {"accuracy": 0.5, "turn_ms": 100.0, "turn_cpu_ms": 40.0},
            "fixed-5": {"accuracy": 0.6, "turn_ms": 200.0, "turn_cpu_ms": 39.0},   # slower wall (load), less CPU
            "fixed-10": {"accuracy": 0.7, "turn_ms": 90.0, "turn_cpu_ms": 80.0}}   # faster wall, more CPU
    assert better_than_shipped(mean) == ["fixed-5"]
    rows = [{"part": "p", "config": c, "id": i, "correct": ok} for c, i, ok in
            [("shipped", "a", True), ("shipped", "b", False), ("shipped", "c", False),
             ("fixed-5", "a", False), ("fixed-5", "b", True), ("fixed-5", "c", True), ("fixed-5", "d", True),
             ("shipped", "x", True), ("fixed-5", "x", True)]]
    assert paired_with_shipped(rows, "p", "fixed-5") == (2, 1)  # d: the cut did not run it
    assert paired_with_shipped(rows, "p", "shipped") is None and paired_with_shipped(rows, "q", "fixed-5") is None


def _prompt(qid, ids, tokens):
    from magicselector.bench.agent import _Prompt
    from magicselector.data.datasets import Query

    return _Prompt(Query(id=qid, query="q", gold=("a",)), list(ids), 1.0, list(tokens), 10)


def test_identical_prompts_of_a_turn_share_one_call_and_an_earlier_row_is_taken_before_a_new_call():
    from types import SimpleNamespace

    from magicselector.bench.agent import _plan_turn, same_prompt_groups

    # the cut at K=5 hands fixed-5's tools in its order; max-tools-3 hands the cut's first three in another order
    turn = {"shipped": _prompt("t", "abcde", [1, 2, 3, 4, 5]), "fixed-5": _prompt("t", "abcde", [1, 2, 3, 4, 5]),
            "fixed-10": _prompt("t", "abcdefghij", [1, 2, 3, 4, 5, 6]), "max-tools-3": _prompt("t", "bac", [1, 3, 2]),
            "gold": _prompt("t", "a", [1, 9])}
    assert same_prompt_groups(turn) == [["fixed-10"], ["fixed-5", "shipped"], ["max-tools-3"], ["gold"]]
    model, config = SimpleNamespace(context=100), AgentConfig(max_new_tokens=10)
    plan, calls = _plan_turn("p", turn, {}, model, config, lambda _m: None)
    assert plan["shipped"] == ("fixed-5", None) and plan["fixed-5"] == ("fixed-5", None)
    assert [c for c, _t in calls] == ["fixed-10", "fixed-5", "max-tools-3", "gold"]  # four calls for five rows
    # an earlier run's row of the cut (same tools): the cut keeps it and fixed-5 takes it; no call for the two
    earlier = {"handed": list("abcde"), "text": "x"}
    plan, calls = _plan_turn("p", turn, {("shipped", "t"): earlier}, model, config, lambda _m: None)
    assert plan["shipped"] == ("shipped", earlier) and plan["fixed-5"] == ("shipped", earlier)
    assert [c for c, _t in calls] == ["fixed-10", "max-tools-3", "gold"]
    # an earlier row for other tools (the Selector changed since) is run again
    plan, calls = _plan_turn("p", turn, {("gold", "t"): {"handed": ["z"]}}, model, config, lambda _m: None)
    assert plan["gold"] == ("gold", None) and ("gold", [1, 9]) in calls
    # a prompt over the context: no call (the row says so), its copies none either
    plan, calls = _plan_turn("p", turn, {}, SimpleNamespace(context=14), config, lambda _m: None)
    assert [c for c, _t in calls] == ["max-tools-3", "gold"]


def test_resuming_from_a_merged_report_takes_the_models_entry():
    from magicselector.bench.agent import SCHEMA, model_run

    qwen = {"schema": SCHEMA, "model": {"label": "qwen"}, "config": {}, "rows": [{"id": "1"}]}
    merged = {"schema": SCHEMA, "models": [{**qwen, "model": {"label": "smol"}}, qwen]}
    assert model_run(merged, "qwen") == qwen and model_run(qwen, "qwen") is qwen
    with pytest.raises(InputError, match="resume: model: the merged report has no run of 'other'"):
        model_run(merged, "other")


@pytest.mark.slow
def test_two_worker_processes_give_the_rows_of_one_apart_from_the_times(tmp_path, monkeypatch):
    """Two turns, the real Qwen GGUF, --jobs 1 and --jobs 2 (a turn each): the same rows but for the
    times; fixed-5 hands fixed-10's tools on a three-tool catalog, so it takes that call."""
    _need_shipped_gguf()
    from magicselector.bench.agent import TIMING_KEYS
    from magicselector.cli import main

    part = _tiny_part(tmp_path / "tiny")
    reports = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}.json"
        monkeypatch.setattr(sys, "argv", ["magicselector", "bench", "agent", str(part), "--configs", "fixed-10",
                                          "fixed-5", "gold", "--limit", "2", "--max-new-tokens", "32", "--threads",
                                          "1", "--jobs", str(jobs), "--json", str(out)])
        assert main() == 0
        reports[jobs] = json.loads(out.read_text(encoding="utf-8"))

    def untimed(report):
        return sorted((json.dumps({k: v for k, v in r.items() if k not in TIMING_KEYS}, sort_keys=True)
                       for r in report["rows"]))

    assert len(reports[2]["rows"]) == 6 and untimed(reports[2]) == untimed(reports[1])
    by = {(r["config"], r["id"]): r for r in reports[2]["rows"]}
    for (c, qid), r in by.items():
        if c == "fixed-5":  # the three tools in the same ranked order: fixed-10's call, its text and LLM times
            source = by[("fixed-10", qid)]
            assert r["same_prompt_as"] == "fixed-10" and r["handed"] == source["handed"]
            assert (r["text"], r["prefill_ms"], r["llm_cpu_ms"]) == (source["text"], source["prefill_ms"],
                                                                     source["llm_cpu_ms"])
        else:
            assert "same_prompt_as" not in r
    part_report = reports[2]["parts"]["tiny"]
    assert part_report["llm_calls"] == 4 and part_report["jobs"] == 2
    assert [(w["worker"], w["turns"], w["llm_calls"]) for w in part_report["workers"]] == [(0, 1, 2), (1, 1, 2)]
    assert all(w["cpu_s"] > 0 and len(w["loadavg_end"]) == 3 for w in part_report["workers"])
    assert len(part_report["configs"]["gold"]["warmup_prefill_ms_workers"]) == 2


def test_the_plan_counts_each_workers_calls_and_the_tokens_its_contexts_prefill():
    from magicselector.bench.agent import _ContextPlan, plan_calls

    contexts = {"all": _ContextPlan(64, (1, 2, 3, 4)), "gold": _ContextPlan(64, (1,))}
    work = {0: [("all", [1, 2, 3, 4, 5]), ("gold", [1, 7, 8])], 1: [("all", [1, 2, 3, 4, 6, 6])],
            2: [("all", [1, 2, 3, 4, 5, 9])]}
    one = plan_calls(work, contexts, 1)
    # all: 1 token after its warm-up, then 2 and 2 (each shares [1..4] with the previous prompt); gold: 2
    assert one["llm_calls"] == 4 and one["workers"] == [
        {"worker": 0, "turns": 3, "llm_calls": 4, "prefill_tokens": 1 + 2 + 2 + 2, "warmup_tokens": 4 + 1}]
    two = plan_calls(work, contexts, 2)  # turns 0 and 2 in worker 0 (turn 2 shares [1..5] with turn 0), 1 in worker 1
    assert [(w["turns"], w["llm_calls"], w["prefill_tokens"], w["warmup_tokens"]) for w in two["workers"]] == [
        (2, 3, 1 + 2 + 1, 5), (1, 1, 2, 4)]


def test_a_worker_whose_parent_is_gone_exits_while_it_waits_for_a_turn():
    """A killed `bench agent` parent leaves no worker behind: the worker's watch ends it even while it
    blocks on its queue (or sits in minutes of prefill)."""
    import subprocess

    code = ("import os, queue, magicselector.bench.agent as a\n"
            "class Idle:\n"
            "    def __init__(self, *setup): pass\n"
            "    def close(self): pass\n"
            "a._Generator = Idle\n"
            "tasks = queue.Queue()  # never fed: tasks.get() blocks for ever\n"
            "a._worker_main(0, (), tasks, queue.Queue(), parent=os.getppid() + 1)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr

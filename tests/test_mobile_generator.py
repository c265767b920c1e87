"""Tests for the mobile multi-turn dialogue generator (magicselector.data.mobile)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from magicselector.data.mobile import (
    CATEGORIES,
    FIRST_TURN_CATEGORIES,
    MULTI_TURN_CATEGORIES,
    P_TASK,
    P_TODO,
    STATES,
    GeneratorConfig,
    build_dialogues,
    generate_benchmark,
    load_bank,
    p_switch,
    partition,
)
from magicselector.data.mobile import generator as G
from magicselector.data.mobile.__main__ import main as cli_main

from conftest import held_out_chunks

FIXTURES = Path(__file__).parent / "fixtures" / "mobile"
SPLITS = ("train", "dev", "test", "test_ood")
QUERY_KEYS = ["id", "history", "query", "gold", "category", "tasks", "domains", "dialogue_id"]
TOOL_KEYS = ["id", "name", "description", "parameters", "domain"]


def fixture_config(**kw) -> GeneratorConfig:
    base = dict(dialogues=150, catalog_dir=str(FIXTURES / "catalog"),
                templates_dir=str(FIXTURES / "templates"), ood_domains=("weather",))
    base.update(kw)
    return GeneratorConfig(**base)


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def load_out(out: Path) -> dict[str, dict[str, list[dict]]]:
    return {s: {"tools": read_jsonl(out / s / "tools.jsonl"),
                "queries": read_jsonl(out / s / "queries.jsonl")} for s in SPLITS}


@pytest.fixture(scope="module")
def fixture_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("mobile_fx")
    summary = generate_benchmark(out, fixture_config())
    return out, summary, load_out(out)


def check_invariants(data, ood_domains, catalog_names):
    ids = set()
    for split in SPLITS:
        names = [t["name"] for t in data[split]["tools"]]
        assert names == catalog_names, f"{split}: tools.jsonl must list the whole catalog"
        for t in data[split]["tools"]:
            assert list(t) == TOOL_KEYS and t["id"] == t["name"]
        prev_by_dialogue: dict[str, dict] = {}
        ood_touch: dict[str, bool] = {}
        for q in data[split]["queries"]:
            assert list(q) == QUERY_KEYS
            assert q["id"] not in ids
            ids.add(q["id"])
            assert q["id"].startswith(q["dialogue_id"] + "-")
            assert q["dialogue_id"].startswith(split + "-")
            assert q["category"] in CATEGORIES
            assert q["query"].strip()
            assert q["gold"], q
            assert q["gold"] == list(dict.fromkeys(t["tool"] for t in q["tasks"]))
            assert all(set(t) == {"text", "tool"} and t["text"].strip() for t in q["tasks"])
            assert all("{" not in t["text"] for t in q["tasks"]) and "{" not in q["query"]
            # history: alternating roles, user first, earlier turns of the same dialogue only
            h = q["history"]
            assert len(h) % 2 == 0
            for i, msg in enumerate(h):
                assert set(msg) == {"role", "content"}
                assert msg["role"] == ("user" if i % 2 == 0 else "assistant")
                assert msg["content"].strip()
            prev = prev_by_dialogue.get(q["dialogue_id"])
            if prev is None:
                assert int(q["id"].rsplit("-", 1)[1]) * 2 == len(h)
            else:
                assert h[: len(prev["history"])] == prev["history"]
                assert h[len(prev["history"])] == {"role": "user", "content": prev["query"]}
                assert len(h) > len(prev["history"]) + 1
            prev_by_dialogue[q["dialogue_id"]] = q
            touches = bool(set(q["domains"]) & set(ood_domains))
            ood_touch[q["dialogue_id"]] = ood_touch.get(q["dialogue_id"], False) or touches
            if split != "test_ood":
                assert not touches, f"OOD gold tool in {split}: {q['id']}"
        if split == "test_ood":
            assert all(ood_touch.values()), "every test_ood dialogue touches an OOD domain"


# ---------------------------------------------------------------------------------------------
# state machine pieces
# ---------------------------------------------------------------------------------------------

def test_p_switch_formula():
    assert p_switch(1) == pytest.approx(0.10)
    assert p_switch(2) == pytest.approx(0.085)
    assert p_switch(3) == pytest.approx(0.10 * 0.85 ** 2)
    assert p_switch(10) == pytest.approx(0.10 * 0.85 ** 9)
    assert p_switch(30) == pytest.approx(0.01)
    assert p_switch(5, p0=0.5, alpha=0.5, p_min=0.05) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        p_switch(0)


def test_transition_tables_are_distributions():
    assert len(STATES) == 11
    for table in (P_TODO, P_TASK):
        for dist in table.values():
            assert sum(dist.values()) == pytest.approx(1.0)
    for state in STATES:
        assert state in P_TODO
    outcomes = {s for d in P_TASK.values() for s in d if s}
    assert outcomes <= set(STATES)


def test_partition_is_hash_based_and_deterministic():
    values = [f"value number {i}" for i in range(20)]
    train, held = partition(values)
    assert set(train).isdisjoint(held) and set(train) | set(held) == set(values)
    assert 2 <= len(held) <= 10
    rev_train, rev_held = partition(list(reversed(values)))
    assert set(rev_held) == set(held)          # membership does not depend on position
    small = ["a", "b"]
    assert partition(small) == (small, small)  # short lists are shared by all splits
    t3, h3 = partition(["x", "y", "z"])
    assert len(h3) == 1 and len(t3) == 2


def test_resolve_task_strips_missing_slots():
    assert G.resolve_task("set an alarm for {time}", {}) == "set an alarm"
    assert G.resolve_task("set an alarm for {time}", {"time": "7 am"}) == "set an alarm for 7 am"
    assert G.resolve_task("set the {room} thermostat to {temperature}",
                          {"temperature": "21 degrees"}) == "set the thermostat to 21 degrees"
    assert G.resolve_task("turn Wi-Fi on", {}) == "turn Wi-Fi on"


# ---------------------------------------------------------------------------------------------
# fixture benchmark
# ---------------------------------------------------------------------------------------------

def test_deterministic(tmp_path):
    cfg = fixture_config(dialogues=60, seed=3)
    a, b = tmp_path / "a", tmp_path / "b"
    sa = generate_benchmark(a, cfg)
    sb = generate_benchmark(b, cfg)
    assert sa == sb
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert len(files) == 9
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    c = tmp_path / "c"
    generate_benchmark(c, fixture_config(dialogues=60, seed=4))
    assert (c / "train" / "queries.jsonl").read_bytes() != (a / "train" / "queries.jsonl").read_bytes()


def test_fixture_invariants(fixture_out):
    out, summary, data = fixture_out
    bank = load_bank(fixture_config())
    catalog_names = [t["name"] for tools in bank.catalog.values() for t in tools]
    check_invariants(data, ("weather",), catalog_names)
    assert summary["total_dialogues"] == 150
    assert summary["total_turns"] == sum(len(data[s]["queries"]) for s in SPLITS)
    for s in SPLITS:
        assert summary["splits"][s]["turns"] == len(data[s]["queries"])
        assert sum(summary["splits"][s]["categories"].values()) == len(data[s]["queries"])
    assert summary["splits"]["test_ood"]["turns"] > 0
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == summary


def test_fixture_categories_and_phenomena(fixture_out):
    _, summary, data = fixture_out
    cats = {c for c, n in summary["categories"].items() if n}
    assert set(FIRST_TURN_CATEGORIES) <= cats
    assert {"ask_detail_answer", "new_task", "topic_switch", "failure_retry",
            "continuation", "mixed"} <= cats
    queries = [q for s in SPLITS for q in data[s]["queries"]]
    # an ask-detail answer resolves the missing slot from context: the task is complete
    answers = [q for q in queries if q["category"] == "ask_detail_answer"]
    assert any(len(q["query"].split()) <= 4 for q in answers)
    # multi-intent utterances are joined with natural connectors, never delimiters
    for q in queries:
        assert not re.search(r"[|;]|\s/\s|\n", q["query"]), q["query"]
    # assistant turns never leak tool names
    names = {t["name"] for t in data["train"]["tools"]}
    for q in queries:
        for msg in q["history"]:
            if msg["role"] == "assistant":
                assert not any(n in msg["content"] for n in names), msg


def test_select_and_followups_resolve_references(fixture_out):
    _, _, data = fixture_out
    queries = [q for s in SPLITS for q in data[s]["queries"]]
    cancels = [q for q in queries if q["category"] == "cancel"]
    for q in cancels:
        for t in q["tasks"]:
            if t["tool"] == "delete_alarm":
                assert re.search(r"\d|noon|midnight|half|quarter|four", t["text"]), t
    exec_checks = [q for q in queries if q["category"] == "executing_check"]
    for q in exec_checks:   # the gold of "is it done yet?" is the tool still running
        assert q["gold"]


def test_heldout_phrasings_never_in_train(fixture_out):
    cfg = fixture_config()
    bank, dialogues = build_dialogues(cfg)
    # 1. every list entry a train dialogue used comes from a train part (or an unsplit list)
    for split, _, turns in dialogues:
        allowed = {"train", "all"} if split == "train" else {"heldout", "all"}
        for turn in turns:
            for text, tag in turn["phrasings"]:
                assert tag in allowed, (split, text, tag)
    # 2. on the surface: literal chunks of held-out say phrasings never occur in train queries
    _, _, data = fixture_out
    train_queries = [q["query"].lower() for q in data["train"]["queries"]]
    train_entries = []
    lists = []
    for t in bank.templates.values():
        lists.append(t.say)
        if t.missing:
            lists.append(t.missing["say"])
        for fu in t.followups:
            lists.append(fu["say"])
    for lst in lists:
        train_entries += [x.lower() for x in partition(lst)[0]]
    for lst in (G.ANSWER_SAY, G.RETRY_SAY, G.CHECK_SAY, G.PICK_ORDINAL_SAY, G.PICK_VALUE_SAY,
                G.RETRY_VALUE_SAY, G.INLINE_CONNECTORS, G.SENTENCE_CONNECTORS):
        train_entries += [x.lower() for x in partition(lst)[0]]
    checked = 0
    for phrase, chunk in held_out_chunks(lists, train_entries, 10):
        checked += 1
        assert not any(chunk in q for q in train_queries), (phrase, chunk)
    assert checked >= 5


def test_cli(tmp_path, capsys):
    rc = cli_main(["--out", str(tmp_path / "cli"), "--seed", "1", "--dialogues", "30",
                   "--catalog-dir", str(FIXTURES / "catalog"),
                   "--templates-dir", str(FIXTURES / "templates"), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["total_dialogues"] == 30
    assert (tmp_path / "cli" / "test" / "queries.jsonl").exists()


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------

def _copy_fixtures(tmp_path) -> tuple[Path, Path]:
    cat, tpl = tmp_path / "catalog", tmp_path / "templates"
    shutil.copytree(FIXTURES / "catalog", cat)
    shutil.copytree(FIXTURES / "templates", tpl)
    return cat, tpl


def _cfg(cat, tpl):
    return fixture_config(dialogues=5, catalog_dir=str(cat), templates_dir=str(tpl))


def test_unknown_tool_raises_with_file_name(tmp_path):
    cat, tpl = _copy_fixtures(tmp_path)
    data = json.loads((tpl / "alarms.json").read_text())
    data["tools"]["snooze_everything"] = {"task": "snooze", "say": ["snooze it"]}
    (tpl / "alarms.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"alarms\.json.*snooze_everything"):
        generate_benchmark(tmp_path / "out", _cfg(cat, tpl))


def test_unknown_slot_raises_with_file_name(tmp_path):
    cat, tpl = _copy_fixtures(tmp_path)
    data = json.loads((tpl / "messaging.json").read_text())
    data["tools"]["read_messages"]["say"].append("read texts from {pen_pal}")
    (tpl / "messaging.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"messaging\.json.*read_messages.*pen_pal"):
        generate_benchmark(tmp_path / "out", _cfg(cat, tpl))


def test_bad_followup_and_scene_raise(tmp_path):
    cat, tpl = _copy_fixtures(tmp_path)
    data = json.loads((tpl / "alarms.json").read_text())
    data["tools"]["set_alarm"]["followups"][0]["kind"] = "undo"
    (tpl / "alarms.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"alarms\.json.*set_alarm.*followups\[0\]"):
        load_bank(_cfg(cat, tpl))
    data["tools"]["set_alarm"]["followups"][0]["kind"] = "modify"
    data["scenes"].append(["set_alarm", "make_coffee"])
    (tpl / "alarms.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"alarms\.json.*make_coffee"):
        load_bank(_cfg(cat, tpl))


def test_malformed_files_raise(tmp_path):
    cat, tpl = _copy_fixtures(tmp_path)
    (tpl / "weather.json").write_text('{"domain": "weather", "tools": ')
    with pytest.raises(ValueError, match=r"weather\.json"):
        load_bank(_cfg(cat, tpl))
    cat, tpl = _copy_fixtures(tmp_path / "2")
    data = json.loads((tpl / "weather.json").read_text())
    data["tools"]["get_air_quality"]["say"] = "how's the air"
    (tpl / "weather.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"weather\.json.*get_air_quality"):
        load_bank(_cfg(cat, tpl))
    cat, tpl = _copy_fixtures(tmp_path / "3")
    data = json.loads((cat / "alarms.json").read_text())
    del data["tools"][0]["inputSchema"]
    (cat / "alarms.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"alarms\.json.*set_alarm"):
        load_bank(_cfg(cat, tpl))


# ---------------------------------------------------------------------------------------------
# the shipped templates and catalog
# ---------------------------------------------------------------------------------------------

def _shipped_available() -> bool:
    try:
        tpl = G.default_templates_dir()
        cat = G.default_catalog_dir()
    except Exception:  # noqa: BLE001
        return False
    return any(tpl.glob("*.json")) and any(cat.glob("*.json"))


@pytest.mark.skipif(not _shipped_available(), reason="shipped domain files not present")
def test_shipped_data(tmp_path):
    config = GeneratorConfig()
    summary = generate_benchmark(tmp_path, config)
    data = load_out(tmp_path)
    bank = load_bank(config)
    catalog_names = [t["name"] for tools in bank.catalog.values() for t in tools]
    check_invariants(data, config.ood_domains, catalog_names)
    assert summary["total_turns"] >= 3000
    assert summary["total_dialogues"] == config.dialogues
    present = {c for c, n in summary["categories"].items() if n}
    assert set(FIRST_TURN_CATEGORIES) | set(MULTI_TURN_CATEGORIES) <= present, \
        set(CATEGORIES) - present
    for split in ("train", "test", "test_ood"):
        assert summary["splits"][split]["turns"] > 0
    assert summary["splits"]["test_ood"]["dialogues"] >= 0.1 * config.dialogues
    # every shipped template tool is a catalog tool, and every catalog domain has templates
    assert set(bank.templates) <= set(catalog_names)

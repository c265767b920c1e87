"""The generator's ``assistant_turns`` option (issue 29): ``realistic`` rewrites only the assistant
turns (tool results with IDs, times and values, short confirmations; the assistant's clarifying
questions kept), ``echo`` (the default) stays byte-identical to the splits generated before."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from magicselector.data.mobile import (GeneratorConfig, build_dialogues, generate_benchmark, load_bank,
                                       partition)
from magicselector.data.mobile import generator as G
from magicselector.data.mobile.__main__ import main as cli_main

from conftest import held_out_chunks

FIXTURES = Path(__file__).parent / "fixtures" / "mobile"
SPLITS = ("train", "dev", "test", "test_ood")
R_LISTS = (G.R_DONE, G.R_LOOKUP, G.R_FAILURE, G.R_EXECUTING, G.R_STILL, G.R_CHECK_DONE,
           G.R_CANCEL, G.R_JOIN, G.R_LIST_ITEM)
#: sha256 over the four queries.jsonl (train, dev, test, test_ood) of the fixture benchmark, seed 3,
#: 60 dialogues, as the generator wrote them before the option existed (commit cc7d360)
FIXTURE_ECHO_SHA = "17f90ebfa85e1cc8e68b9192ae747f265df646f17da8dcdfa58838076bb30f82"
#: sha256 of train/queries.jsonl of `magicselector generate --seed 0` (the shipped templates)
SHIPPED_TRAIN_SHA = "581425c59a864171e899f52631659e074d8f2cf53e6fac278cd0a0b09448fbf7"


def fixture_config(**kw) -> GeneratorConfig:
    base = dict(dialogues=150, catalog_dir=str(FIXTURES / "catalog"),
                templates_dir=str(FIXTURES / "templates"), ood_domains=("weather",))
    base.update(kw)
    return GeneratorConfig(**base)


def read_queries(out: Path) -> dict[str, list[dict]]:
    return {s: [json.loads(line) for line in open(out / s / "queries.jsonl", encoding="utf-8")]
            for s in SPLITS}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("assistant_turns")
    generate_benchmark(root / "echo", fixture_config())
    generate_benchmark(root / "real", fixture_config(assistant_turns="realistic"))
    return root, read_queries(root / "echo"), read_queries(root / "real")


def test_echo_is_byte_identical_to_before(tmp_path):
    generate_benchmark(tmp_path / "a", fixture_config(dialogues=60, seed=3))
    generate_benchmark(tmp_path / "b", fixture_config(dialogues=60, seed=3, assistant_turns="echo"))
    h = hashlib.sha256()
    for s in SPLITS:
        data = (tmp_path / "a" / s / "queries.jsonl").read_bytes()
        assert data == (tmp_path / "b" / s / "queries.jsonl").read_bytes()
        h.update(data)
    assert h.hexdigest() == FIXTURE_ECHO_SHA
    summary = json.loads((tmp_path / "a" / "summary.json").read_text(encoding="utf-8"))
    assert "assistant_turns" not in summary["config"]    # summary.json unchanged too


def test_shipped_seed0_echo_train_unchanged(tmp_path):
    generate_benchmark(tmp_path, GeneratorConfig(seed=0))
    data = (tmp_path / "train" / "queries.jsonl").read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHIPPED_TRAIN_SHA


def test_realistic_changes_only_assistant_turns(both):
    root, echo, real = both
    changed = kept = 0
    for s in SPLITS:
        assert len(echo[s]) == len(real[s]) > 0
        for e, r in zip(echo[s], real[s]):
            assert {k: v for k, v in e.items() if k != "history"} == \
                {k: v for k, v in r.items() if k != "history"}
            assert [m["role"] for m in e["history"]] == [m["role"] for m in r["history"]]
            for me, mr in zip(e["history"], r["history"]):
                if me["role"] == "user":
                    assert me == mr
                else:
                    changed += me != mr
                    kept += me == mr
    assert changed > 3 * kept        # most assistant turns are rewritten
    summary = json.loads((root / "real" / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["assistant_turns"] == "realistic"


def test_realistic_turns_look_like_tool_results(both):
    _, echo, real = both
    assistant = [m["content"] for s in SPLITS for q in real[s] for m in q["history"]
                 if m["role"] == "assistant"]
    echoed = [m["content"] for s in SPLITS for q in echo[s] for m in q["history"]
              if m["role"] == "assistant"]
    with_numbers = sum(bool(re.search(r"\d", a)) for a in assistant)
    assert with_numbers > 0.4 * len(assistant)                 # IDs, times, codes, progress
    assert sum(bool(re.search(r"\d", a)) for a in echoed) < with_numbers
    assert not any("I took care of the request to" in a for a in assistant)
    # the assistant's clarifying questions are kept: an answer or a pick follows a question
    for s in SPLITS:
        for q in real[s]:
            if q["category"] in ("ask_detail_answer", "select") and q["history"]:
                assert "?" in q["history"][-1]["content"], q


def test_no_tool_names_in_realistic_turns(both):
    _, _, real = both
    bank = load_bank(fixture_config())
    names = {t["name"] for tools in bank.catalog.values() for t in tools}
    for s in SPLITS:
        for q in real[s]:
            for m in q["history"]:
                if m["role"] == "assistant":
                    assert not any(n in m["content"] for n in names), m


def test_realistic_phrasings_keep_the_partition(both):
    _, _, real = both
    _, dialogues = build_dialogues(fixture_config(assistant_turns="realistic"))
    for split, _, turns in dialogues:
        allowed = {"train", "all"} if split == "train" else {"heldout", "all"}
        for turn in turns:
            for text, tag in turn["phrasings"]:
                assert tag in allowed, (split, text, tag)
    # on the surface: a held-out-only result phrasing never occurs in a train assistant turn
    train_turns = [m["content"].lower() for q in real["train"] for m in q["history"]
                   if m["role"] == "assistant"]
    train_entries = [x.lower() for lst in R_LISTS for x in partition(lst)[0]]
    checked = 0
    for phrase, chunk in held_out_chunks(R_LISTS, train_entries, 8):
        checked += 1
        assert not any(chunk in t for t in train_turns), (phrase, chunk)
    assert checked >= 5


def test_unknown_mode_and_cli(tmp_path):
    with pytest.raises(ValueError, match="assistant_turns"):
        build_dialogues(fixture_config(dialogues=5, assistant_turns="verbose"))
    rc = cli_main(["--out", str(tmp_path / "cli"), "--seed", "1", "--dialogues", "30",
                   "--catalog-dir", str(FIXTURES / "catalog"),
                   "--templates-dir", str(FIXTURES / "templates"), "--assistant-turns", "realistic",
                   "--json"])
    assert rc == 0
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["assistant_turns"] == "realistic"

"""Clause training queries (bench/experiments/clause_queries.py): each rules clause paired with the gold task it shares words with, written as a benchmark folder from train folders only, the same bytes every time."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from magicselector.bench.experiments.clause_queries import main, pair_clauses, write_clause_folder
from magicselector.data.datasets import load_benchmark
from magicselector.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "mobile"


def test_each_clause_goes_to_the_task_it_shares_words_with_one_to_one():
    tasks = [("set an alarm for 7 am", "set_alarm"), ("turn off the living room lights", "turn_off_lights")]
    # said in the other order than the tasks, and in the user's words
    pairs = pair_clauses(["kill the living room lights", "wake me with an alarm at 7"], tasks)
    assert pairs == [("kill the living room lights", "turn_off_lights"), ("wake me with an alarm at 7", "set_alarm")]
    # the tool id's words count too ("favorite" in add_contact_to_favorites)
    assert pair_clauses(["favorite Emily"], [("star Emily", "add_contact_to_favorites"),
                                             ("resume playback", "resume_music")]) == \
        [("favorite Emily", "add_contact_to_favorites")]


def test_a_clause_that_shares_no_word_is_left_out_and_no_task_is_used_twice():
    tasks = [("book a ride to work", "request_ride")]
    assert pair_clauses(["call me a car", "book the ride home"], tasks) == [("book the ride home", "request_ride")]
    assert pair_clauses(["hmm, okay"], tasks) == []
    assert pair_clauses([], tasks) == [] and pair_clauses(["book a ride"], []) == []


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    from magicselector.data.mobile import GeneratorConfig, generate_benchmark

    out = tmp_path_factory.mktemp("mobile")
    generate_benchmark(out, GeneratorConfig(dialogues=60, seed=2, catalog_dir=str(FIXTURES / "catalog"),
                                            templates_dir=str(FIXTURES / "templates"), ood_domains=("weather",)))
    return out


def test_the_folder_holds_the_rules_clauses_of_split_turns_and_is_remade_bit_for_bit(generated, tmp_path):
    from magicselector.decompose import build_decomposer
    from magicselector.dialogue import validate_history

    n = write_clause_folder(generated / "train", tmp_path / "a")
    write_clause_folder(generated / "train", tmp_path / "b")
    assert n > 0
    assert (tmp_path / "a" / "queries.jsonl").read_bytes() == (tmp_path / "b" / "queries.jsonl").read_bytes()
    clauses = load_benchmark(tmp_path / "a")  # a benchmark folder train embedder takes
    source = load_benchmark(generated / "train")
    assert clauses.catalog.ids == source.catalog.ids and len(clauses.queries) == n
    turns = {q.id: q for q in source.queries}
    rules = build_decomposer("rules")
    for q in clauses.queries:
        turn = turns[q.id.split("#clause")[0]]
        assert q.history == () and q.category == "clause" and len(q.gold) == 1
        assert q.gold[0] in {t["tool"] for t in turn.extra["tasks"]}
        # the text the runtime retrieves with for that turn
        assert q.query in rules.decompose(turn.query, validate_history(turn.history)).tasks


def test_evaluation_parts_are_refused(generated, tmp_path, capsys):
    for part in ("test", "test_ood"):
        with pytest.raises(InputError, match="evaluation part"):
            write_clause_folder(generated / part, tmp_path / part)
        assert not (tmp_path / part).exists()
    with pytest.raises(SystemExit, match="evaluation part"):
        main(["--data", str(generated / "test"), "--out", str(tmp_path / "cli")])
    main(["--data", str(generated / "train"), "--out", str(tmp_path / "cli")])
    assert "clause queries written" in capsys.readouterr().out
    assert json.loads((tmp_path / "cli" / "queries.jsonl").read_text().splitlines()[0])["category"] == "clause"

"""Companions through the catalog's structure (an experiment, export/companions.py): the pair features read off names and parameters, the pair model's fit, the companion table and the lift at select time, and the experiment that measures them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from magicselector.catalog import Catalog, Tool
from magicselector.errors import BundleError, InputError
from magicselector.export.companions import (FEATURES, CompanionConfig, CompanionTable, PairModel, catalog_facts,
                                             companion_table, feature_block, fit_pair_model, gold_pairs,
                                             lift_companions, tool_group, tool_verb)


def tool(name: str, description: str, **params: str) -> Tool:
    return Tool(name, name, description, {"type": "object", "properties": {p: {"type": "string", "description": d}
                                                                             for p, d in params.items()}})


@pytest.fixture
def rest() -> Catalog:
    return Catalog([
        tool("GET_search-person", "TMDB API, GET /search/person: Search for people.", query="a name"),
        tool("GET_person-person_id-movie_credits", "TMDB API, GET /person/{person_id}/movie_credits: Movie credits.",
             person_id="the person"),
        tool("Hotels_1.SearchHotel", "Find a hotel in a city", city="where"),
        tool("Hotels_1.ReserveHotel", "Book a room at a hotel", hotel_name="the hotel", city="where"),
        tool("set_alarm", "Set an alarm that rings at a clock time", time="clock time"),
    ])


def col(name: str) -> int:
    return FEATURES.index(name)


def test_features_read_groups_links_and_verbs_off_the_catalog(rest):
    assert tool_group(rest[2]) == "hotels_1" and tool_group(rest[0]) == "tmdb" and tool_group(rest[4]) == ""
    assert [tool_verb(t) for t in rest] == ["search", "get", "search", "reserve", "update"]
    block = feature_block(catalog_facts(rest), [0, 2])
    assert block.shape == (2, 5, len(FEATURES))
    assert block[0, 1, col("id_link")] == 1.0  # person_id beside the person search
    assert block[0, 4, col("id_link")] == 0.0
    assert block[1, 3, col("same_group")] > 0.5 and block[1, 4, col("same_group")] == 0.0
    assert block[1, 3, col("paired_verbs")] == 1.0 and block[1, 4, col("paired_verbs")] == 0.0
    assert block[1, 3, col("shared_params")] > 0 and block[1, 4, col("shared_params")] == 0
    assert block[0, 0].sum() == 0 and block[1, 2].sum() == 0  # a tool is not its own companion
    full = feature_block(catalog_facts(rest), range(5))
    assert np.allclose(full, full.transpose(1, 0, 2))  # symmetric in the two tools
    assert full.min() >= 0 and full.max() <= 1
    vectors = np.eye(5, 8, dtype=np.float32)
    vectors[1, 0] = 1.0
    assert feature_block(catalog_facts(rest, vectors), [0])[0, 1, col("embedding_cosine")] == pytest.approx(2 ** -0.5)


def test_bad_catalogs_and_vectors_are_input_errors(rest):
    with pytest.raises(InputError, match="no tools"):
        catalog_facts(Catalog([]))
    with pytest.raises(InputError, match="vectors has 2 rows for 5 tools"):
        catalog_facts(rest, np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(InputError, match="both classes"):
        fit_pair_model(np.zeros((3, len(FEATURES))), np.zeros(3))


def test_the_pair_model_learns_which_feature_marks_companions():
    rng = np.random.default_rng(0)
    x = rng.random((400, len(FEATURES))).astype(np.float32)
    y = (x[:, col("id_link")] + 0.1 * rng.standard_normal(400) > 0.7).astype(np.float32)
    model = fit_pair_model(x, y, l2=0.1)
    weights = dict(zip(FEATURES, model.weights))
    assert weights["id_link"] == max(weights.values()) and weights["id_link"] > 5
    p = model.probabilities(x)
    assert p[y == 1].mean() > 0.8 > 0.2 > p[y == 0].mean()
    assert PairModel.from_json(json.loads(json.dumps(model.to_json()))).probabilities(x) == pytest.approx(p, abs=1e-4)
    with pytest.raises(InputError, match="features"):
        PairModel.from_json({**model.to_json(), "features": ["x"]})


def test_gold_pairs_set_gold_against_gold_and_the_other_ranked_tools(rest):
    facts = catalog_facts(rest)
    x, y = gold_pairs(facts, [(["GET_search-person", "GET_person-person_id-movie_credits"],
                               ["GET_search-person", "set_alarm", "GET_person-person_id-movie_credits"]),
                              (["set_alarm"], ["set_alarm", "Hotels_1.SearchHotel"]), (["unknown"], ["set_alarm"])])
    assert y.tolist().count(1.0) == 2 and y.tolist().count(0.0) == 3  # 2 companions, 3 not
    assert x.shape == (5, len(FEATURES))


def test_the_table_keeps_each_tools_likeliest_companions(rest):
    model = PairModel(tuple(4.0 if f in ("id_link", "same_group") else 0.0 for f in FEATURES), -2.0)
    table = companion_table(catalog_facts(rest), model, per_tool=2, floor=0.6, block=2)
    assert table.of("GET_search-person")[0][0] == "GET_person-person_id-movie_credits"
    assert table.of("Hotels_1.SearchHotel") == [("Hotels_1.ReserveHotel", pytest.approx(0.9933, abs=1e-3))]  # group, hotel_name
    assert table.of("set_alarm") == [] and table.of("not in the table") == []
    again = CompanionTable.from_json(json.loads(json.dumps(table.to_json())))
    for t in table.ids:
        assert [c for c, _ in again.of(t)] == [c for c, _ in table.of(t)]
        assert [s for _, s in again.of(t)] == pytest.approx([s for _, s in table.of(t)], abs=1e-4)
    with pytest.raises(BundleError, match="not a companion table"):
        CompanionTable.from_json({"schema": "other"})
    with pytest.raises(BundleError, match="outside"):
        CompanionTable(["a"], np.array([[3]], dtype=np.int32), np.array([[0.9]], dtype=np.float32))


def table_of(pairs: dict[str, list[tuple[str, float]]], ids: list[str]) -> CompanionTable:
    at = {t: i for i, t in enumerate(ids)}
    companions = np.full((len(ids), 2), -1, dtype=np.int32)
    scores = np.zeros((len(ids), 2), dtype=np.float32)
    for t, row in pairs.items():
        for j, (c, s) in enumerate(row):
            companions[at[t], j], scores[at[t], j] = at[c], s
    return CompanionTable(ids, companions, scores)


def test_the_lift_moves_a_hits_companions_into_the_cut():
    ids = list("abcdefgh")
    table = table_of({"a": [("f", 0.9), ("c", 0.8)], "b": [("g", 0.55)]}, ids)
    lift = lift_companions(table, CompanionConfig(hits=2, min_score=0.6, max_lifted=2), ids, k=3)
    assert [ids[i] for i in lift.order] == list("abcfdegh")  # f after the hits; c was already there
    assert lift.k == 4  # f came from below the cut
    assert lift.lifted == {"f": ("a", pytest.approx(0.9)), "c": ("a", pytest.approx(0.8))}
    low = lift_companions(table, CompanionConfig(hits=2, min_score=0.5, max_lifted=1), ids, k=2)
    assert [ids[i] for i in low.order][:3] == list("abf") and low.k == 3
    one = lift_companions(table, CompanionConfig(hits=1, min_score=0.95), ids, k=3)
    assert one.order == list(range(8)) and one.k == 3 and not one.lifted
    shallow = lift_companions(table, CompanionConfig(hits=1, min_score=0.85, depth=4), ids, k=3)
    assert not shallow.lifted  # f ranked 6th, outside depth 4
    capped = lift_companions(table, CompanionConfig(hits=2, min_score=0.5, max_lifted=3, k_max=3), ids, k=3)
    assert capped.k == 3 and {ids[i] for i in capped.order[:4]} == set("abcf")


@pytest.mark.parametrize("field,value", [("hits", 0), ("max_lifted", -1), ("k_max", True), ("depth", -2),
                                         ("min_score", 1.5), ("min_score", "high")])
def test_a_bad_setting_is_an_input_error_naming_it(field, value):
    with pytest.raises(InputError, match=f"companions.{field}"):
        CompanionConfig(**{field: value})


def test_the_experiments_bad_setting_is_a_usage_error_naming_it(tiny_benchmark, capsys):
    from magicselector.bench.experiments import companions

    for config, named in (('{"hits": 0}', "companions.hits"), ('{"speed": 1}', "speed")):
        with pytest.raises(SystemExit):
            companions.main(["--train", str(tiny_benchmark), "--eval", str(tiny_benchmark), "--config", config])
        assert named in capsys.readouterr().err


@pytest.mark.slow
def test_the_experiment_measures_the_shipped_selections_before_and_after(tmp_path, tiny_benchmark, bundle_dir):
    from magicselector import Selector
    from magicselector.data.datasets import load_benchmark
    from magicselector.data.metrics import completeness_at_k

    from magicselector.bench.experiments import companions

    out = tmp_path / "companions.json"
    report = companions.main(["--train", f"a={tiny_benchmark}", "--eval", f"b={tiny_benchmark}", "--bundle",
                              str(bundle_dir), "--n", "4", "--out", str(out)])
    assert json.loads(out.read_text())["parts"].keys() == {"a", "b"}
    bench = load_benchmark(tiny_benchmark)
    selector = Selector.from_bundle(bundle_dir).with_catalog(bench.catalog)
    c5 = np.mean([completeness_at_k(selector.select(q.query, history=list(q.history)).ranked_ids, q.gold, 5)
                  for q in bench.queries])
    assert report["parts"]["b"]["sample"]["before"]["C@5"] == pytest.approx(c5)
    assert report["parts"]["b"]["multi"]["n"] == 1 and report["pairs"]["companions"] == 2
    assert report["parts"]["b"]["role"] == "eval" and "pair_ap" in report["parts"]["b"]

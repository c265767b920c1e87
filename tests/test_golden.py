"""The golden file's pipeline probes: every stage of the shipped selection, written at build and re-checked by bundle verify."""
from __future__ import annotations

import copy
import json

import pytest

from magicselector.errors import BundleError
from magicselector.formats import FORMATS
from magicselector.golden import PIPELINE_FORMAT, check_pipeline, schema_token_table


@pytest.fixture(scope="module")
def golden(bundle_dir):
    return json.loads((bundle_dir / "golden.json").read_text())


def test_pipeline_probes_cover_histories_multi_intent_and_budgets(golden):
    block = golden["pipeline"]
    assert block["format"] == PIPELINE_FORMAT and len(block["turns"]) >= 30
    turns = block["turns"]
    assert sum(len(t["subtasks"]) > 1 for t in turns) >= 5  # the rules decomposer split them
    assert sum(t["history_list"] is not None for t in turns) >= 5  # a history-folded list was retrieved
    assert {t["input"]["format"] for t in turns if t["input"]["max_schema_tokens"]} == set(FORMATS)
    assert any(t["input"]["max_tools"] and t["selection"]["k"] == t["input"]["max_tools"] < t["head"]["k"]
               for t in turns)  # a budget that binds
    for t in turns:  # every stage is there, and the stages agree with each other
        assert len(t["texts"]) == len(t["token_ids"]) == len(t["vectors"]) == len(t["search"]) == len(t["lists"])
        assert t["texts"][0] == t["input"]["query"].strip() or t["texts"][0] == t["input"]["query"]
        assert all(len(v) == 384 for v in t["vectors"])
        assert t["fused"]["ids"][t["cut"]["order"][0]] in {lst["ids"][0] for lst in t["lists"]} | set(t["fused"]["ids"][:1])
        assert len(t["head"]["probabilities"]) == min(20, len(t["fused"]["ids"]))
        assert t["selection"]["ids"] == [t["fused"]["ids"][t["head"]["order"][i]] for i in t["budget"]["kept"]]


def test_verify_checks_every_stage(bundle_dir, selector, golden):
    from magicselector.bundle_check import verify_bundle

    checks = verify_bundle(bundle_dir)
    assert checks["golden_pipeline_turns"] == len(golden["pipeline"]["turns"])
    assert checks["golden_pipeline_min_cosine"] > 0.999
    assert checks["schema_tokens"] == len(selector.catalog)


@pytest.mark.parametrize("stage, edit", [
    ("search[0].ids", lambda t: t["search"][0]["ids"].reverse()),
    ("lists[0].scores", lambda t: t["lists"][0]["scores"].__setitem__(0, t["lists"][0]["scores"][0] + 1e-3)),
    ("fused.source", lambda t: t["fused"]["source"].__setitem__(0, 7)),
    ("cut", lambda t: t["cut"].__setitem__("k", t["cut"]["k"] + 1)),
    ("head.probabilities", lambda t: t["head"]["probabilities"].__setitem__(0, 0.5)),
    ("budget", lambda t: t["budget"]["kept"].append(99)),
    ("token_ids", lambda t: t["token_ids"][0].insert(1, 100)),
    ("subtasks", lambda t: t["subtasks"].append("one more")),
])
def test_a_changed_stage_is_named(selector, golden, stage, edit):
    block = copy.deepcopy(golden["pipeline"])
    turn = next(n for n, t in enumerate(block["turns"]) if len(t["texts"]) > 1)
    edit(block["turns"][turn])
    with pytest.raises(BundleError, match=rf"turn {turn} .*{stage.split('[')[0]}"):
        check_pipeline(selector, block)


def test_schema_tokens_file_is_the_catalogs_definition_sizes(bundle_dir, selector):
    table = json.loads((bundle_dir / "schema_tokens.json").read_text())
    assert table == schema_token_table(selector.catalog)
    assert table["formats"] == list(FORMATS) and all(min(v) > 0 for v in table["tools"].values())


def test_a_rewritten_catalog_skips_the_probes_and_rewrites_the_sizes(bundle_dir, selector, tmp_path):
    from magicselector import Selector
    from magicselector.bundle_check import verify_bundle

    s = Selector.from_bundle(bundle_dir)
    s.remove_tool(s.catalog.ids[0])
    s.save(tmp_path / "b")
    checks = verify_bundle(tmp_path / "b")
    assert checks["golden_pipeline"].startswith("skipped: the catalog changed")
    assert checks["schema_tokens"] == len(selector.catalog) - 1

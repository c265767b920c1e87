"""SelectorConfig's groups (``limits``: InputLimits, ``llm``: LLMDecomposerConfig): validated by
field name, and the flat spellings they replaced still work for one release, deprecated."""
from __future__ import annotations

import dataclasses
import warnings

import pytest

from magicselector import InputError, InputLimits, LLMDecomposerConfig, SelectorConfig
from magicselector.config import MOVED_SETTINGS, flat_config

OLD_VALUES = {"max_query_chars": 900, "max_history_turns": 3, "max_history_chars": 700, "max_subtasks": 2,
              "decomposer_model": "/x/m.gguf", "decomposer_prompt": "zero_shot", "decompose_deadline_ms": 90.0,
              "llm_threads": 3, "llm_ctx": 1024}


def test_at_most_18_fields_and_the_groups_ship_their_defaults():
    assert len(dataclasses.fields(SelectorConfig)) <= 18
    shipped = SelectorConfig()
    assert shipped.limits == InputLimits(16_000, 32, 16_000, 8)
    assert shipped.llm == LLMDecomposerConfig(None, "few_shot", 1500.0, 2, 2048)
    assert set(OLD_VALUES) == set(MOVED_SETTINGS)


@pytest.mark.parametrize("old", sorted(OLD_VALUES))
def test_an_old_keyword_still_builds_the_config_with_a_deprecation_naming_the_new_spelling(old):
    group, name = MOVED_SETTINGS[old]
    with pytest.warns(DeprecationWarning, match=rf"{old}= is deprecated.*{group}=.*\({name}=") as caught:
        config = SelectorConfig(history="user", **{old: OLD_VALUES[old]})
    assert caught[0].filename == __file__  # attributed to the caller's line
    assert getattr(getattr(config, group), name) == OLD_VALUES[old] and config.history == "user"
    assert config == SelectorConfig(history="user", **{group: dataclasses.replace(getattr(SelectorConfig(), group),
                                                                                   **{name: OLD_VALUES[old]})})
    # through dataclasses.replace (what Selector.with_config does): the other settings of the group stay
    base = SelectorConfig(limits=InputLimits(max_subtasks=5), llm=LLMDecomposerConfig(threads=4))
    with pytest.warns(DeprecationWarning, match=f"{old}=") as caught:
        changed = dataclasses.replace(base, **{old: OLD_VALUES[old]})
    assert caught[0].filename == __file__
    kept = {"limits": ("max_subtasks", 5), "llm": ("threads", 4)}[group]
    assert getattr(getattr(changed, group), name) == OLD_VALUES[old]
    if kept[0] != name:
        assert getattr(getattr(changed, group), kept[0]) == kept[1]
    # the old attribute reads the group's field
    with pytest.warns(DeprecationWarning, match=rf"SelectorConfig.{old} is deprecated.*SelectorConfig.{group}.{name}"):
        assert getattr(changed, old) == OLD_VALUES[old]


def test_the_old_spellings_are_not_class_attributes_and_nothing_else_is_looked_up():
    for old in MOVED_SETTINGS:
        assert not hasattr(SelectorConfig, old)  # else it would hide the deprecated reading
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        SelectorConfig().nope
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = SelectorConfig(limits=InputLimits(max_subtasks=2), llm=LLMDecomposerConfig(ctx=512))
        dataclasses.replace(config, history="none")  # the new spellings warn nothing
        import copy
        import pickle

        assert pickle.loads(pickle.dumps(config)) == config == copy.deepcopy(config)


@pytest.mark.parametrize("bad, match", [
    (dict(max_query_chars=0), "InputLimits.max_query_chars"), (dict(max_subtasks="8"), "InputLimits.max_subtasks"),
    (dict(max_history_turns=0), "InputLimits.max_history_turns"),
    (dict(max_history_chars=-1), "InputLimits.max_history_chars"),
])
def test_limits_are_validated_by_name(bad, match):
    with pytest.raises(InputError, match=match):
        InputLimits(**bad)


@pytest.mark.parametrize("bad, match", [
    (dict(prompt="chatty"), "LLMDecomposerConfig.prompt"), (dict(deadline_ms=0), "LLMDecomposerConfig.deadline_ms"),
    (dict(threads=0), "LLMDecomposerConfig.threads"), (dict(ctx=128), "LLMDecomposerConfig.ctx"),
])
def test_llm_settings_are_validated_by_name(bad, match):
    with pytest.raises(InputError, match=match):
        LLMDecomposerConfig(**bad)
    assert LLMDecomposerConfig(deadline_ms=None).deadline_ms is None  # no deadline


def test_a_group_must_be_its_class():
    with pytest.raises(InputError, match="llm must be an LLMDecomposerConfig, got dict"):
        SelectorConfig(llm={"threads": 2})


def test_flat_config_is_the_old_flat_shape_in_the_old_order():
    old_order = ["history", "history_turns", "candidates", "cut", "rerank", "rerank_candidates", "rerank_weight",
                 "rerank_skip_margin", "threads", "max_query_chars", "max_history_turns", "max_history_chars",
                 "max_subtasks", "decompose", "decomposer_model", "decomposer_prompt", "decompose_deadline_ms",
                 "llm_threads", "llm_ctx", "lexical", "lexical_weight", "lexical_candidates", "max_tools",
                 "max_schema_tokens"]
    flat = flat_config(SelectorConfig(llm=LLMDecomposerConfig(ctx=1024)))
    assert list(flat) == old_order + ["head"]  # settings added since keep the old keys' order
    assert flat["llm_ctx"] == 1024 and flat["max_query_chars"] == 16_000 and flat["cut"]["rule"] == "rmargin"

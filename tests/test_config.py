"""SelectorConfig's groups (``limits``: InputLimits, ``llm``: LLMDecomposerConfig): validated by
field name."""
from __future__ import annotations

import dataclasses

import pytest

from magicselector import InputError, InputLimits, LLMDecomposerConfig, SelectorConfig


def test_at_most_18_fields_and_the_groups_ship_their_defaults():
    assert len(dataclasses.fields(SelectorConfig)) <= 18
    shipped = SelectorConfig()
    assert shipped.limits == InputLimits(16_000, 32, 16_000, 8)
    assert shipped.llm == LLMDecomposerConfig(None, "few_shot", 1500.0, 2, 2048)


def test_a_config_copies_pickles_and_replaces_by_its_fields():
    import copy
    import pickle

    config = SelectorConfig(limits=InputLimits(max_subtasks=2), llm=LLMDecomposerConfig(ctx=512))
    assert pickle.loads(pickle.dumps(config)) == config == copy.deepcopy(config)
    assert dataclasses.replace(config, history="none").limits.max_subtasks == 2


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

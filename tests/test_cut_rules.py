"""bench/cut_rules.py: the cut rules that lost to rmargin (margin, zmargin, mass) cut as they did in
the runtime, stay in bounds, and go through the runtime's per-list cut as a ``CutRule``."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magicselector.bench.cut_rules import EXPERIMENT_RULES, ExperimentCut, margin_cut, mass_cut, zmargin_cut
from magicselector.errors import InputError
from magicselector.stages.cut import cut_per_list, cut_turn


def test_margin_rules_on_known_lists():
    s = np.array([4.0, 3.5, 3.0, 1.0])
    assert margin_cut(s, margin=1.0).k == 3  # 3.0 sits exactly on the threshold: kept
    assert margin_cut(s, margin=0.4).k == 1
    assert margin_cut(s, margin=10.0, k_max=20).k == 4
    # A fused list need not be sorted: the prefix stops at the first tool below the threshold.
    assert margin_cut(np.array([3.0, 1.0, 2.9]), margin=0.5).k == 1
    # mean 1, sd 1: margin 0.5 sd -> threshold 1.5; margin 2 sd -> threshold 0 keeps all.
    z = np.array([2.0, 2.0, 0.0, 0.0])
    assert zmargin_cut(z, margin=0.5).k == 2
    assert zmargin_cut(z, margin=2.0).k == 4
    # The same list in another scale (logits vs cosines) cuts at the same place.
    r = np.array([10.0, 8.0, 6.0, 4.0, 2.0, 0.0])
    assert zmargin_cut(r * 0.01 + 0.3, margin=1.0).k == zmargin_cut(r * 7 - 2, margin=1.0).k


def test_mass_on_known_lists():
    s = np.log(np.array([0.5, 0.3, 0.2]))
    assert mass_cut(s, mass=0.49).k == 1
    assert mass_cut(s, mass=0.51).k == 2
    assert mass_cut(s, mass=0.79).k == 2
    assert mass_cut(s, mass=0.81).k == 3
    assert mass_cut(s, mass=1.0).k == 3
    # Halving the temperature sharpens the distribution: fewer tools hold the same mass.
    assert mass_cut(s, mass=0.81, temperature=0.5).k == 2
    # A huge score gap underflows exp() to 0 and stays finite.
    assert mass_cut(np.array([1e4, 0.0, -1e4]), mass=0.99, temperature=1e-3).k == 1


@pytest.mark.parametrize("rule", EXPERIMENT_RULES)
def test_edge_cases_of_every_rule(rule):
    cfg = ExperimentCut(rule=rule)
    assert cfg.apply(np.array([]), None).k == 0
    one = cfg.apply(np.array([0.3], dtype=np.float32), np.ones((1, 4)))
    assert one.k == 1 and one.rule == rule
    assert ExperimentCut(rule=rule, k_min=3).apply(np.array([0.9, 0.1]), np.eye(2, 4)).k == 2  # never more than n


def test_constant_scores():
    const = np.full(30, 0.5, dtype=np.float32)
    for rule in ("margin", "zmargin"):
        cfg = ExperimentCut(rule=rule, margin=0.0, z_margin=0.0, k_max=20)
        assert cfg.apply(const, None).k == 20  # nothing separates them
    assert mass_cut(np.full(4, 0.5), mass=0.5).k == 2  # uniform: ceil(mass * n)


def test_bounds():
    s = np.array([0.9, 0.1, 0.05, 0.04])
    assert ExperimentCut(rule="margin", margin=0.01, k_min=3).apply(s, None).k == 3
    assert ExperimentCut(rule="mass", mass=1.0, temperature=100.0, k_max=3).apply(s, None).k == 3


@pytest.mark.parametrize("bad", [dict(margin=-0.1), dict(margin=float("nan")), dict(margin=float("inf")),
                                 dict(z_margin=-1.0), dict(z_margin=float("nan")), dict(mass=0.0), dict(mass=1.5),
                                 dict(temperature=0.0), dict(temperature=float("nan")), dict(k_min=5, k_max=2)])
def test_fields_are_validated(bad):
    with pytest.raises(InputError):
        ExperimentCut(rule="margin", **bad)


def test_only_the_experiment_rules():
    with pytest.raises(InputError, match="experiment cut rule 'rmargin'"):
        ExperimentCut(rule="rmargin")


_scores = st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=0, max_size=40)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_scores, st.sampled_from(EXPERIMENT_RULES), st.integers(0, 5), st.integers(5, 30), st.booleans())
def test_every_rule_stays_in_bounds(scores, rule, k_min, k_max, sort):
    s = np.asarray(sorted(scores, reverse=True) if sort else scores, dtype=np.float32)
    k = ExperimentCut(rule=rule, k_min=k_min, k_max=k_max, margin=0.7, mass=0.8).apply(s, None).k
    n = len(s)
    assert min(n, k_min) <= k <= min(n, k_max)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_scores, st.sampled_from([("margin", "margin"), ("zmargin", "z_margin")]),
       st.floats(0, 1, allow_nan=False), st.floats(0, 1, allow_nan=False), st.floats(0.1, 5))
def test_margin_rules_are_monotone_in_the_margin(scores, rule_field, a, b, scale):
    rule, field = rule_field
    lo, hi = sorted((a, b))
    s = np.asarray(scores, dtype=np.float32)  # unsorted too: the kept prefix only grows
    k = [ExperimentCut(rule=rule, k_max=40, **{field: m * scale}).apply(s, None).k for m in (lo, hi)]
    assert k[0] <= k[1]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_scores, st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(0.05, 5.0))
def test_mass_is_monotone_in_the_mass(scores, a, b, temperature):
    lo, hi = sorted((a, b))
    s = np.asarray(scores, dtype=np.float32)
    k = [mass_cut(s, mass=m, temperature=temperature, k_max=40).k for m in (lo, hi)]
    assert k[0] <= k[1]


def test_the_runtime_per_list_cut_applies_an_experiment():
    lists = [(["a", "b", "c"], [1.0, 0.95, 0.1]), (["d", "a", "e"], [0.9, 0.2, 0.1]), ([], [])]
    fused = ["a", "d", "e", "b", "c"]

    def vectors(ids):
        raise AssertionError("no experiment rule reads embeddings")

    order, cut = cut_per_list(ExperimentCut(rule="margin", margin=0.1), lists, fused, vectors)
    assert [fused[i] for i in order] == ["a", "d", "b", "e", "c"] and (cut.k, cut.rule) == (3, "margin/subtask")
    order, cut = cut_turn(ExperimentCut(rule="margin", margin=0.1), lists[:1], ["a", "b", "c"],
                          np.array([1.0, 0.95, 0.1]), vectors)
    assert order == [0, 1, 2] and cut.k == 2

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magicselector.bench.cut_rules import FixedCut, PaperCut, paper_cut
from magicselector.errors import InputError
from magicselector.stages.cut import CutConfig


def rule_config(rule="rmargin", **changes):
    """A cut with the bounds every rule had before the shipped one's defaults: rmargin over the whole
    list (no per-list margin, anchor cap or head floor), or the paper's rule (bench/cut_rules.py)."""
    if rule == "paper":
        return PaperCut(**{k: v for k, v in changes.items() if k in ("k_min", "k_max", "anchor_k_max")})
    base = dict(k_max=20, range_margin=0.5, range_depth=0, list_range_margin=None, anchor_k_max=None,
                min_probability=0.0)
    return CutConfig(**{**base, **changes})


def apply_cut(rule, scores, embeddings, normalized=False):
    return rule.apply(scores, embeddings if rule.uses_embeddings else None, normalized)


def reference_cut(scores, embeddings, k_min, k_max, tol=1e-5):
    """Algorithm 2 written out with loops, straight from the paper.

    Returns every K the rule can give when gaps within ``tol`` of the largest are counted as ties
    (the rule runs in float32, and sums in another order can flip such near-ties); the exact first-index tie rule
    is tested separately on exact values.
    """
    n = len(scores)
    if n == 0:
        return {0}

    def firsts(gaps):
        best = max(gaps)
        return [i + 1 for i, g in enumerate(gaps) if g >= best - tol]  # 1-based: keep i + 1 tools

    k_scores = firsts([scores[i] - scores[i + 1] for i in range(n - 1)]) if n > 1 else [1]
    k_sims = [0]
    if embeddings is not None and n >= 3:
        def cos(a, b):
            return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
        sims = [cos(embeddings[i], embeddings[i + 1]) for i in range(n - 1)]
        k_sims = firsts([sims[i] - sims[i + 1] for i in range(n - 2)])
    return {min(n, max(k_min, min(k_max, max(a, b)))) for a in k_scores for b in k_sims}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(0, 40).flatmap(lambda n: st.tuples(
    st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=n, max_size=n),
    st.lists(st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=4, max_size=4), min_size=n, max_size=n),
)), st.integers(0, 5), st.integers(5, 30))
def test_paper_cut_matches_reference(data, k_min, k_max):
    scores, emb = data
    scores = sorted(scores, reverse=True)
    emb = np.asarray(emb, dtype=np.float64).reshape(len(scores), 4) + 1e-3  # no zero vectors
    got = paper_cut(np.asarray(scores), emb, k_min, k_max)
    assert got.k in reference_cut(np.asarray(scores, dtype=np.float64), emb, k_min, k_max)
    assert 0 <= got.k <= len(scores)


def test_edge_cases():
    assert paper_cut(np.array([]), None).k == 0
    assert paper_cut(np.array([0.3]), np.ones((1, 4))).k == 1
    two = paper_cut(np.array([0.9, 0.1]), np.eye(2, 4))
    assert (two.k, two.k_score, two.k_sim) == (1, 1, 0)
    # Constant scores: every gap is 0 and the first wins, so K_score = 1.
    const = paper_cut(np.full(5, 0.5), None)
    assert const.k_score == 1 and const.k == 1


def test_ties_take_the_first_gap():
    # Equal gaps after positions 1 and 3: the first one is taken.
    c = paper_cut(np.array([1.0, 0.5, 0.5, 0.0]), None, k_min=1, k_max=10)
    assert c.k_score == 1


def test_clear_cliff_and_semantic_shift():
    scores = np.array([0.9, 0.88, 0.86, 0.3, 0.29, 0.28])
    assert paper_cut(scores, None).k == 3
    # Tools 1-4 are near-identical, 5-6 point elsewhere: the similarity drop sits after tool 3
    # (sim_3 = cos(e3, e4) is high, sim_4 = cos(e4, e5) is low), so K_sim = 3 by the paper's reading.
    e = np.array([[1, 0], [1, 0.01], [1, 0.02], [1, 0.03], [0, 1], [0, 1]], dtype=float)
    c = paper_cut(np.linspace(1, 0, 6), e)
    assert c.k_sim == 3


def test_bounds_and_fixed():
    scores = np.array([0.9, 0.1, 0.05, 0.04])
    assert paper_cut(scores, None, k_min=3, k_max=10).k == 3
    assert paper_cut(np.linspace(1, 0, 30) ** 3, None, k_min=1, k_max=4).k <= 4
    assert apply_cut(FixedCut(2), scores, None).k == 2
    with pytest.raises(InputError):
        CutConfig(k_min=5, k_max=2)


# -- rmargin (the shipped rule), the bounds of every rule, and the per-list cut ----------------------
from magicselector.stages.cut import cut_per_list, rmargin_cut  # noqa: E402

ADAPTIVE = ("paper", "rmargin")


def test_rmargin_on_known_lists():
    # range 10: half the range below the top is 5.
    r = np.array([10.0, 8.0, 6.0, 4.0, 2.0, 0.0])
    assert rmargin_cut(r, margin=0.5).k == 3
    assert rmargin_cut(r, margin=1.0).k == 6
    assert rmargin_cut(np.array([0.3, 0.2999, 0.17, 0.1]), margin=1.0, k_max=20).k == 4
    assert rmargin_cut(np.array([1.0, 1.0, 0.0]), margin=0.0).k == 2  # ties with the top stay
    # A fused list need not be sorted: the prefix stops at the first tool below the threshold.
    assert rmargin_cut(np.array([3.0, 1.0, 2.9]), margin=0.5).k == 1
    # The same list in another scale (logits vs cosines) cuts at the same place.
    assert rmargin_cut(r * 0.01 + 0.3, margin=0.3).k == rmargin_cut(r * 7 - 2, margin=0.3).k


@pytest.mark.parametrize("rule", ADAPTIVE)
def test_edge_cases_of_every_rule(rule):
    cfg = rule_config(rule)
    assert apply_cut(cfg, np.array([]), None).k == 0
    one = apply_cut(cfg, np.array([0.3], dtype=np.float32), np.ones((1, 4)))
    assert one.k == 1 and one.rule == rule
    assert apply_cut(rule_config(rule, k_min=3), np.array([0.9, 0.1]), np.eye(2, 4)).k == 2  # never more than n
    assert cfg.apply(np.array([0.9, 0.1]), np.eye(2, 4)) == apply_cut(cfg, np.array([0.9, 0.1]), np.eye(2, 4))


def test_constant_scores():
    const = np.full(30, 0.5, dtype=np.float32)
    # nothing separates them
    assert apply_cut(rule_config(range_margin=0.0, k_max=20), const, None).k == 20


def test_bounds_of_rmargin():
    s = np.array([0.9, 0.1, 0.05, 0.04])
    assert apply_cut(rule_config(range_margin=0.01, k_min=3), s, None).k == 3
    assert apply_cut(rule_config(range_margin=1.0, k_max=2), s, None).k == 2


@pytest.mark.parametrize("bad", [dict(range_margin=1.5), dict(range_margin=-0.1), dict(range_margin=float("nan")),
                                 dict(range_depth=-1), dict(range_depth=1), dict(min_probability=1.5),
                                 dict(list_range_margin=1.2), dict(list_range_margin=-0.5), dict(anchor_k_max=-1),
                                 dict(anchor_k_max=2.5), dict(anchor_k_max=True)])
def test_fields_are_validated(bad):
    with pytest.raises(InputError):
        rule_config(**bad)


_scores = st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=0, max_size=40)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_scores, st.sampled_from(ADAPTIVE), st.integers(0, 5), st.integers(5, 30), st.booleans())
def test_every_rule_stays_in_bounds(scores, rule, k_min, k_max, sort):
    s = np.asarray(sorted(scores, reverse=True) if sort else scores, dtype=np.float32)
    emb = np.random.default_rng(len(s)).normal(size=(len(s), 4)) + 1e-3
    k = apply_cut(rule_config(rule, k_min=k_min, k_max=k_max, range_margin=0.7), s, emb).k
    n = len(s)
    assert min(n, k_min) <= k <= min(n, k_max)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_scores, st.floats(0, 1, allow_nan=False), st.floats(0, 1, allow_nan=False))
def test_rmargin_is_monotone_in_the_margin(scores, a, b):
    lo, hi = sorted((a, b))
    s = np.asarray(scores, dtype=np.float32)  # unsorted too: the kept prefix only grows
    k = [apply_cut(rule_config(k_max=40, range_margin=m), s, None).k for m in (lo, hi)]
    assert k[0] <= k[1]


def test_cut_per_list_unites_the_kept_tools_in_fused_order():
    lists = [(["a", "b", "c"], [1.0, 0.95, 0.1]),      # keeps a, b
             (["d", "a", "e"], [0.9, 0.2, 0.1]),       # keeps d
             ([], [])]                                 # an empty list is skipped
    fused = ["a", "d", "e", "b", "c"]
    calls = []

    def vectors(ids):
        calls.append(ids)
        return np.eye(len(ids), 4)

    order, cut = cut_per_list(rule_config(range_margin=0.5), lists, fused, vectors)
    assert [fused[i] for i in order] == ["a", "d", "b", "e", "c"]
    assert (cut.k, cut.rule) == (3, "rmargin/subtask")
    assert calls == []  # the margin rules never read embeddings
    order, cut = cut_per_list(rule_config(range_margin=0.5, k_max=2), lists, fused, vectors)
    assert cut.k == 2
    cut_per_list(PaperCut(), lists, fused, vectors)
    assert calls == [["a", "b", "c"], ["d", "a", "e"]]


def test_rmargin_range_over_the_head():
    s = np.array([5.0, 4.5, 4.0, 1.0, 0.9, 0.8, -10.0], dtype=np.float32)
    assert rmargin_cut(s, margin=0.5).k == 6          # range 15 over the whole list: threshold -2.5
    assert rmargin_cut(s, margin=0.5, depth=4).k == 3  # range 4 over the first 4: threshold 3
    assert rmargin_cut(s, margin=1.0, depth=4).k == 4  # a margin of 1 over the head still cuts the tail
    assert rmargin_cut(s, margin=0.5, depth=50).k == 6  # a head longer than the list is the list
    assert apply_cut(rule_config(range_margin=0.5, range_depth=4), s, None).k == 3
    with pytest.raises(InputError):
        CutConfig(range_depth=1)


def test_a_decomposed_turn_cuts_its_lists_with_their_own_margin_and_caps_the_anchor():
    # scores of the head fall evenly: rmargin keeps 1 + floor(margin * 10) of them (range over the head)
    head = np.linspace(1.0, 0.0, 11)
    ids = [[f"{p}{i}" for i in range(11)] for p in "abc"]
    lists = [(ids[0], head), (ids[1], head), (ids[2], head)]  # the anchor first, then two sub-tasks
    fused = [t for trio in zip(*ids) for t in trio]
    lone = rule_config(range_margin=0.3)
    assert apply_cut(lone, head, None).k == 4
    # no list settings: every list is cut as a lone one, the union of 3 x 4
    assert cut_per_list(lone, lists, fused, lambda i: None)[1].k == 12
    # each list at list_range_margin 0.1 keeps 2; the lone list still keeps 4 at range_margin
    per_list = rule_config(range_margin=0.3, list_range_margin=0.1)
    assert per_list.apply(head, None).k == 4 and per_list.apply_list(head, None, anchor=False).k == 2
    order, cut = cut_per_list(per_list, lists, fused, lambda i: None)
    assert cut.k == 6 and {fused[i] for i in order[:6]} == {"a0", "a1", "b0", "b1", "c0", "c1"}
    # the anchor adds at most anchor_k_max; the sub-task lists are not capped by it
    capped = rule_config(range_margin=0.3, anchor_k_max=1)
    order, cut = cut_per_list(capped, lists, fused, lambda i: None)
    assert cut.k == 1 + 4 + 4 and "a0" in {fused[i] for i in order[:9]} and "a1" not in {fused[i] for i in order[:9]}
    assert capped.apply_list(head, None, anchor=True).k == 1 and capped.apply(head, None).k == 4
    # anchor_k_max 0: the anchor adds nothing
    assert cut_per_list(rule_config(range_margin=0.3, anchor_k_max=0), lists, fused,
                        lambda i: None)[1].k == 8


def test_the_shipped_cut_is_cut_config_and_reads_no_embeddings():
    shipped = __import__("magicselector").SelectorConfig().cut
    assert shipped == CutConfig() and shipped.rule == "rmargin" and shipped.per_list
    assert not shipped.uses_embeddings  # so a shipped turn reads no tool vectors (Selector._retrieve)

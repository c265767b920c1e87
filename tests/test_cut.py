import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magicselector.errors import InputError
from magicselector.stages.cut import CutConfig, apply_cut, paper_cut


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
    assert apply_cut(CutConfig(rule="fixed", fixed_k=2), scores, None).k == 2
    with pytest.raises(InputError):
        CutConfig(rule="nope")
    with pytest.raises(InputError):
        CutConfig(k_min=5, k_max=2)

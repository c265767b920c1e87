import math

from magicselector.data.metrics import completeness_at_k, ndcg_at_k, recall_at_k


def test_ndcg_hand_computed():
    # Gold {a, c}; ranking a, b, c: DCG = 1 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3).
    assert math.isclose(ndcg_at_k(["a", "b", "c"], ["a", "c"], 10), 1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["a", "c"], ["a", "c"], 10) == 1.0
    assert ndcg_at_k(["b", "d"], ["a"], 10) == 0.0
    # Only the top k counts.
    assert ndcg_at_k(["b", "a"], ["a"], 1) == 0.0
    assert math.isclose(ndcg_at_k(["b", "a"], ["a"], 2), 1 / math.log2(3))


def test_recall_and_completeness():
    assert recall_at_k(["a", "b", "c"], ["a", "z"], 3) == 0.5
    assert completeness_at_k(["a", "b", "c"], ["a", "z"], 3) == 0.0
    assert completeness_at_k(["a", "b", "c"], ["c", "a"], 3) == 1.0
    assert completeness_at_k(["a", "b", "c"], ["c", "a"], 2) == 0.0
    assert recall_at_k([], ["a"], 10) == 0.0

"""Retrieval metrics, in one place (the training rewards call these too). Binary relevance."""
from __future__ import annotations

import math
from typing import Iterable, Sequence


def dcg_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    g = set(gold)
    return sum(1.0 / math.log2(i + 2) for i, t in enumerate(ranked[:k]) if t in g)


def ndcg_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """NDCG@k with binary gains: DCG of the ranking over the DCG of a perfect ranking."""
    g = set(gold)
    if not g or k <= 0:
        return 0.0
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(g), k)))
    return dcg_at_k(ranked, g, k) / ideal


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    g = set(gold)
    if not g:
        return 0.0
    return len(g & set(ranked[:k])) / len(g)


def completeness_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """1 when every gold tool is within the top k, else 0."""
    g = set(gold)
    return float(bool(g) and g <= set(ranked[:k]))


def mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0

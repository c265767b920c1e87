"""Top-K cuts over a ranked candidate list, each one pass over the list (O(n)).

``paper_cut`` is the MagicSelector paper's Algorithm 2, read literally:
  K_score = argmax_i (s_i - s_{i+1})              i = 1..n-1
  sim_i   = cos(e_i, e_{i+1})                      i = 1..n-1
  K_sim   = argmax_i (sim_i - sim_{i+1})           i = 1..n-2
  K       = clamp(max(K_score, K_sim), k_min, k_max), never more than n
with 1-based i, so that K is the number of tools kept. Ties go to the first (smallest) i.
Edge cases: n = 0 keeps nothing; n = 1 keeps the one tool; n = 2 has no K_sim (it is 0);
constant scores give K_score = 1. The rule does not care where the scores come from.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class Cut:
    """Where a ranked list was cut: ``k`` tools kept, with the parts of the rule that chose it."""

    k: int
    k_score: int = 0
    k_sim: int = 0
    rule: str = "paper"


@dataclass(frozen=True)
class CutConfig:
    """Which cut to apply and its bounds. ``rule``: 'paper' (Algorithm 2) or 'fixed' (plain top-k)."""

    rule: str = "paper"
    k_min: int = 1
    k_max: int = 20
    fixed_k: int = 10

    def __post_init__(self) -> None:
        if self.rule not in CUT_RULES:
            raise InputError(f"unknown cut rule {self.rule!r}; choose one of {sorted(CUT_RULES)}")
        if not (0 <= self.k_min <= self.k_max):
            raise InputError(f"need 0 <= k_min <= k_max, got k_min={self.k_min}, k_max={self.k_max}")
        if self.fixed_k < 0:
            raise InputError("fixed_k must be >= 0")


def _clamp(k: int, n: int, k_min: int, k_max: int) -> int:
    return int(min(n, max(k_min, min(k_max, k))))


def paper_cut(scores: np.ndarray, embeddings: np.ndarray | None, k_min: int = 1, k_max: int = 20,
              normalized: bool = False) -> Cut:
    """Algorithm 2 of the MagicSelector paper (see the module docstring for the exact reading).

    Computed in float32 (as a phone port would). ``normalized=True`` skips re-normalising
    embeddings that are already unit vectors (the index returns them so).
    """
    s = np.asarray(scores, dtype=np.float32).reshape(-1)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "paper")
    if n == 1:
        return Cut(_clamp(1, 1, k_min, k_max), 1, 0, "paper")
    k_score = int((s[:-1] - s[1:]).argmax()) + 1
    k_sim = 0
    if embeddings is not None and n >= 3:
        e = np.asarray(embeddings, dtype=np.float32)
        if e.shape[0] != n:
            raise InputError(f"paper_cut: {n} scores but {e.shape[0]} embeddings")
        sim = np.einsum("ij,ij->i", e[:-1], e[1:])  # sim_i = cos(e_i, e_{i+1}), one pass
        if not normalized:
            norms = np.sqrt(np.einsum("ij,ij->i", e, e))
            sim = sim / np.maximum(norms[:-1] * norms[1:], 1e-12)
        k_sim = int((sim[:-1] - sim[1:]).argmax()) + 1
    return Cut(_clamp(max(k_score, k_sim), n, k_min, k_max), k_score, k_sim, "paper")


def fixed_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, k: int = 10) -> Cut:
    n = len(np.asarray(scores).reshape(-1))
    return Cut(min(n, k), 0, 0, "fixed")


def apply_cut(config: CutConfig, scores: np.ndarray, embeddings: np.ndarray | None,
              normalized: bool = False) -> Cut:
    if config.rule == "fixed":
        return fixed_cut(scores, embeddings, config.fixed_k)
    return paper_cut(scores, embeddings, config.k_min, config.k_max, normalized)


CUT_RULES = {"paper": paper_cut, "fixed": fixed_cut}

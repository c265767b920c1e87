"""The cut rules that lost to the shipped rmargin: the paper's Algorithm 2, fixed k, margin, zmargin, mass; named experiments for ``eval --cut`` and bench/cut_curve.py.

Each is one pass over a ranked list, its K clamped to [k_min, k_max] and never over n, the scores
read as float32, the kept part a prefix (a fused list need not be sorted by score), exactly as
they ran in the runtime before they left it:
  paper   the MagicSelector paper's Algorithm 2, read literally:
            K_score = argmax_i (s_i - s_{i+1})              i = 1..n-1
            sim_i   = cos(e_i, e_{i+1})                      i = 1..n-1
            K_sim   = argmax_i (sim_i - sim_{i+1})           i = 1..n-2
            K       = clamp(max(K_score, K_sim), k_min, k_max), never more than n
          with 1-based i, so that K is the number of tools kept; ties go to the first (smallest) i.
          n = 0 keeps nothing; n = 1 keeps the one tool; n = 2 has no K_sim (it is 0); constant
          scores give K_score = 1. The only rule that reads the tools' embeddings.
  fixed   K = k, on the fused list (never per sub-task list; the learned head reorders, K stays k).
  margin  K = the longest prefix with s_i >= max(s) - margin. On z-scored mixes or logits one
          margin means the same thing on every list; on retrieval cosines it does not.
  zmargin the margin in units of the list's own standard deviation: s_i >= max(s) - z_margin * sd(s),
          i.e. a margin on per-list z-scores, so it carries over between score scales.
  mass    p = softmax(s / temperature); K = the shortest prefix with sum p >= mass (nucleus).
Constant scores keep k_max under the margin rules (nothing separates the tools) and ceil(mass * n)
under mass. ``PaperCut``, ``FixedCut`` and ``ExperimentCut`` are ``stages.cut.CutRule``s: a
``SelectorConfig(cut=...)`` runs them in ``Selector.select``, and ``cut_per_list`` / ``cut_turn``
apply them offline as they apply the shipped ``CutConfig``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from magicselector.errors import InputError
# the runtime rule's own helpers, so that these cut exactly as they did next to rmargin
from magicselector.stages.cut import (Cut, anchor_bound, check_anchor_k_max, check_min_probability, clamp_k,
                                      prefix_at_least, scores32)

BENCH_RULES = ("paper", "fixed")  # ``eval --cut`` besides the shipped rmargin
EXPERIMENT_RULES = ("margin", "zmargin", "mass")


def paper_cut(scores: np.ndarray, embeddings: np.ndarray | None, k_min: int = 1, k_max: int = 20,
              normalized: bool = False) -> Cut:
    """Algorithm 2 of the MagicSelector paper (see the module docstring for the exact reading).

    Computed in float32 (as a phone port would). ``normalized=True`` skips re-normalising
    embeddings that are already unit vectors (the index returns them so).
    """
    s = scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "paper")
    if n == 1:
        return Cut(clamp_k(1, 1, k_min, k_max), 1, 0, "paper")
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
    return Cut(clamp_k(max(k_score, k_sim), n, k_min, k_max), k_score, k_sim, "paper")


def fixed_cut(scores: np.ndarray, k: int = 10) -> Cut:
    """The first ``k`` tools (all of them when fewer)."""
    return Cut(min(len(scores32(scores)), k), 0, 0, "fixed")


def _check_bounds(k_min: int, k_max: int) -> None:
    if not (0 <= k_min <= k_max):
        raise InputError(f"need 0 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")


@dataclass(frozen=True)
class PaperCut:
    """The paper's Algorithm 2 (``paper_cut``) as a ``CutRule``: per sub-task list in a decomposed
    turn like the shipped cut, the anchor list bounded by ``anchor_k_max``, the learned head's
    floor ``min_probability``."""

    rule: ClassVar[str] = "paper"
    uses_embeddings: ClassVar[bool] = True
    per_list: ClassVar[bool] = True

    k_min: int = 1
    k_max: int = 20
    anchor_k_max: int | None = None
    min_probability: float = 0.0

    def __post_init__(self) -> None:
        _check_bounds(self.k_min, self.k_max)
        check_anchor_k_max(self.anchor_k_max)
        check_min_probability(self.min_probability)

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None = None, normalized: bool = False) -> Cut:
        return paper_cut(scores, embeddings, self.k_min, self.k_max, normalized)

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut:
        return anchor_bound(self.apply(scores, embeddings, normalized=True), self.anchor_k_max if anchor else None)


@dataclass(frozen=True)
class FixedCut:
    """The first ``k`` tools of the fused list (``fixed_cut``) as a ``CutRule``: never per list; the
    learned head orders the k by probability and drops none."""

    rule: ClassVar[str] = "fixed"
    uses_embeddings: ClassVar[bool] = False
    per_list: ClassVar[bool] = False
    min_probability: ClassVar[float] = 0.0

    k: int = 10

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise InputError(f"the fixed cut's k must be an int >= 0, got {self.k!r}")

    @property
    def k_max(self) -> int:
        return self.k

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None = None, normalized: bool = False) -> Cut:
        return fixed_cut(scores, self.k)

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut:
        return self.apply(scores)


def margin_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, margin: float = 1.0,
               k_min: int = 1, k_max: int = 20) -> Cut:
    """Keep the prefix within ``margin`` of the top score (the top tool itself always qualifies)."""
    s = scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "margin")
    k = prefix_at_least(s, s.max() - np.float32(margin))
    return Cut(clamp_k(k, n, k_min, k_max), k, 0, "margin")


def zmargin_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, margin: float = 2.0,
                k_min: int = 1, k_max: int = 20) -> Cut:
    """``margin_cut`` with the margin in units of the list's standard deviation (scale-free).

    A list whose scores are all equal has sd 0: nothing separates its tools, so all are kept."""
    s = scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "zmargin")
    sd = s.std(dtype=np.float32)
    k = prefix_at_least(s, s.max() - np.float32(margin) * sd) if sd > 0 else n
    return Cut(clamp_k(k, n, k_min, k_max), k, 0, "zmargin")


def mass_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, mass: float = 0.9,
             temperature: float = 1.0, k_min: int = 1, k_max: int = 20) -> Cut:
    """Nucleus cut: the shortest prefix whose softmax(scores / temperature) probability reaches ``mass``."""
    s = scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "mass")
    z = (s - s.max()) / np.float32(temperature)  # <= 0, so exp never overflows
    p = np.exp(z)
    cum = np.cumsum(p, dtype=np.float32)
    # cum is non-decreasing, so the first index reaching the mass is a binary search; comparing
    # against mass * total rather than dividing keeps the last entry exactly the total.
    k = int(np.searchsorted(cum, np.float32(mass) * cum[-1], side="left")) + 1
    return Cut(clamp_k(min(k, n), n, k_min, k_max), min(k, n), 0, "mass")


@dataclass(frozen=True)
class ExperimentCut:
    """One of the experiment rules with its bounds; each rule has its own parameter field, so that
    switching ``rule`` never reads a value meant for another. ``margin``, ``mass`` and
    ``temperature`` are in score units and need choosing for the scores at hand; ``z_margin``'s
    default is what the generated dev split chose on retrieval cosines."""

    uses_embeddings: ClassVar[bool] = False  # none of these rules reads the tools' embeddings
    per_list: ClassVar[bool] = True
    min_probability: ClassVar[float] = 0.0

    rule: str
    k_min: int = 1
    k_max: int = 20
    margin: float = 1.0       # margin: score distance below the top that is still kept
    z_margin: float = 2.0     # zmargin: the same in list standard deviations
    mass: float = 0.9         # mass: probability the kept prefix must hold, in (0, 1]
    temperature: float = 1.0  # mass: softmax temperature, in score units

    def __post_init__(self) -> None:
        if self.rule not in EXPERIMENT_RULES:
            raise InputError(f"unknown experiment cut rule {self.rule!r}; choose one of {list(EXPERIMENT_RULES)} "
                             "(the runtime's rules are CutConfig's)")
        _check_bounds(self.k_min, self.k_max)
        for name in ("margin", "z_margin"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"{name} must be a finite number >= 0, got {value}")
        if not (0 < self.mass <= 1):
            raise InputError(f"mass must be within (0, 1], got {self.mass}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise InputError(f"temperature must be a finite number > 0, got {self.temperature}")

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut:
        """The same cut on every list of a decomposed turn, the anchor included."""
        return self.apply(scores, embeddings, normalized=True)

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None = None, normalized: bool = False) -> Cut:
        """This rule's cut of one ranked list."""
        if self.rule == "margin":
            return margin_cut(scores, embeddings, self.margin, self.k_min, self.k_max)
        if self.rule == "zmargin":
            return zmargin_cut(scores, embeddings, self.z_margin, self.k_min, self.k_max)
        return mass_cut(scores, embeddings, self.mass, self.temperature, self.k_min, self.k_max)

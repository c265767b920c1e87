"""Top-K cuts over a ranked candidate list, each one pass over the list (O(n)).

``paper_cut`` is the MagicSelector paper's Algorithm 2, read literally:
  K_score = argmax_i (s_i - s_{i+1})              i = 1..n-1
  sim_i   = cos(e_i, e_{i+1})                      i = 1..n-1
  K_sim   = argmax_i (sim_i - sim_{i+1})           i = 1..n-2
  K       = clamp(max(K_score, K_sim), k_min, k_max), never more than n
with 1-based i, so that K is the number of tools kept. Ties go to the first (smallest) i.
Edge cases: n = 0 keeps nothing; n = 1 keeps the one tool; n = 2 has no K_sim (it is 0);
constant scores give K_score = 1. The rule does not care where the scores come from.

The other rules (``apply_cut`` dispatches on ``CutConfig.rule``; every K is clamped to
[k_min, k_max] and never exceeds n, and scores are read as float32):
  fixed   K = fixed_k
  margin  K = the longest prefix with s_i >= max(s) - margin. Rerank scores are z-scored mixes
          or logits, so one margin means the same thing on every list; retrieval cosines are not.
  zmargin the margin in units of the list's own standard deviation: s_i >= max(s) - z_margin * sd(s),
          i.e. a margin on per-list z-scores, so it carries over between score scales.
  rmargin the margin as a fraction of the score range of the list's head (its first range_depth
          scores, the whole list when 0): s_i >= max(h) - range_margin * (max(h) - min(h)), h = the
          head, i.e. a margin on min-max normalised
          scores (also scale-free). The best rule on retrieval cosines (bench/cut_curve.py).
  mass    p = softmax(s / temperature); K = the shortest prefix with sum p >= mass (nucleus).
The ranked list need not be sorted by score (a fused list is ordered by peak rank), which is why
the rules keep a prefix rather than counting the tools over a threshold. Constant scores keep
k_max under the margin rules (nothing separates the tools) and ceil(mass * n) under mass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

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
    """Which cut to apply and its bounds (see the module docstring for each rule).

    rule: 'paper' (Algorithm 2), 'fixed' (plain top ``fixed_k``), 'margin' (within ``margin``
      of the top score), 'zmargin' (within ``z_margin`` list standard deviations of it), 'rmargin'
      (within ``range_margin`` of the list's score range of it) or 'mass' (softmax of the scores
      over ``temperature``, the shortest prefix holding ``mass`` of the probability).
    k_min, k_max: bounds on K for every adaptive rule.
    Each rule has its own parameter field, so that switching ``rule`` never reads a value meant
    for another rule. z_margin and range_margin default to what the generated dev split chose on
    retrieval cosines (bench/cut_curve.py); margin, mass and temperature are in score units and
    need choosing for the scores at hand.
    """

    rule: str = "paper"
    k_min: int = 1
    k_max: int = 20
    fixed_k: int = 10
    margin: float = 1.0       # margin: score distance below the top that is still kept
    z_margin: float = 2.0     # zmargin: the same in list standard deviations
    range_margin: float = 0.5  # rmargin: the same as a fraction of max - min of the head, in [0, 1]
    range_depth: int = 0       # rmargin: the head the range is taken over (0: the whole list)
    mass: float = 0.9         # mass: probability the kept prefix must hold, in (0, 1]
    temperature: float = 1.0  # mass: softmax temperature, in score units

    def __post_init__(self) -> None:
        if self.rule not in CUT_RULES:
            raise InputError(f"unknown cut rule {self.rule!r}; choose one of {sorted(CUT_RULES)}")
        if not (0 <= self.k_min <= self.k_max):
            raise InputError(f"need 0 <= k_min <= k_max, got k_min={self.k_min}, k_max={self.k_max}")
        if self.fixed_k < 0:
            raise InputError("fixed_k must be >= 0")
        for name in ("margin", "z_margin"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"{name} must be a finite number >= 0, got {value}")
        if not (0 <= self.range_margin <= 1):
            raise InputError(f"range_margin must be within [0, 1], got {self.range_margin}")
        if self.range_depth < 0 or self.range_depth == 1:
            raise InputError(f"range_depth must be 0 (whole list) or >= 2, got {self.range_depth}")
        if not (0 < self.mass <= 1):
            raise InputError(f"mass must be within (0, 1], got {self.mass}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise InputError(f"temperature must be a finite number > 0, got {self.temperature}")

    @property
    def uses_embeddings(self) -> bool:
        """Whether the rule reads the tools' embeddings (only the paper's K_sim does)."""
        return self.rule == "paper"


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


def _scores32(scores: np.ndarray) -> np.ndarray:
    return np.asarray(scores, dtype=np.float32).reshape(-1)


def _prefix_at_least(s: np.ndarray, threshold: np.float32) -> int:
    """Length of the longest prefix of ``s`` with every value >= threshold."""
    below = np.flatnonzero(s < threshold)
    return int(below[0]) if below.size else int(s.shape[0])


def margin_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, margin: float = 1.0,
               k_min: int = 1, k_max: int = 20) -> Cut:
    """Keep the prefix within ``margin`` of the top score (the top tool itself always qualifies)."""
    s = _scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "margin")
    k = _prefix_at_least(s, s.max() - np.float32(margin))
    return Cut(_clamp(k, n, k_min, k_max), k, 0, "margin")


def zmargin_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, margin: float = 2.0,
                k_min: int = 1, k_max: int = 20) -> Cut:
    """``margin_cut`` with the margin in units of the list's standard deviation (scale-free).

    A list whose scores are all equal has sd 0: nothing separates its tools, so all are kept."""
    s = _scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "zmargin")
    sd = s.std(dtype=np.float32)
    k = _prefix_at_least(s, s.max() - np.float32(margin) * sd) if sd > 0 else n
    return Cut(_clamp(k, n, k_min, k_max), k, 0, "zmargin")


def rmargin_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, margin: float = 0.5,
                k_min: int = 1, k_max: int = 20, depth: int = 0) -> Cut:
    """``margin_cut`` with the margin as a fraction of the score range (max - min) of the list's
    first ``depth`` scores (the whole list when 0), so it is scale-free. With the whole list,
    ``margin`` = 1 keeps every tool; a constant head has range 0 and keeps every tool too.

    A head shorter than the list makes the range ignore the tail's long flat stretch of
    irrelevant tools, whose floor otherwise stretches the range on long lists."""
    s = _scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "rmargin")
    head = s[:depth] if 2 <= depth < n else s
    top, span = s.max(), head.max() - head.min()
    # margin >= 1 over the whole list is decided exactly: top - span can round an ulp above the minimum.
    if span <= 0 or (margin >= 1 and head.shape[0] == n):
        k = n
    else:
        k = _prefix_at_least(s, top - np.float32(margin) * span)
    return Cut(_clamp(k, n, k_min, k_max), k, 0, "rmargin")


def mass_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, mass: float = 0.9,
             temperature: float = 1.0, k_min: int = 1, k_max: int = 20) -> Cut:
    """Nucleus cut: the shortest prefix whose softmax(scores / temperature) probability reaches ``mass``."""
    s = _scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "mass")
    z = (s - s.max()) / np.float32(temperature)  # <= 0, so exp never overflows
    p = np.exp(z)
    cum = np.cumsum(p, dtype=np.float32)
    # cum is non-decreasing, so the first index reaching the mass is a binary search; comparing
    # against mass * total rather than dividing keeps the last entry exactly the total.
    k = int(np.searchsorted(cum, np.float32(mass) * cum[-1], side="left")) + 1
    return Cut(_clamp(min(k, n), n, k_min, k_max), min(k, n), 0, "mass")


def apply_cut(config: CutConfig, scores: np.ndarray, embeddings: np.ndarray | None,
              normalized: bool = False) -> Cut:
    """The cut ``config`` asks for on one ranked list (``embeddings`` are read by 'paper' only)."""
    if config.rule == "fixed":
        return fixed_cut(scores, embeddings, config.fixed_k)
    if config.rule == "margin":
        return margin_cut(scores, embeddings, config.margin, config.k_min, config.k_max)
    if config.rule == "zmargin":
        return zmargin_cut(scores, embeddings, config.z_margin, config.k_min, config.k_max)
    if config.rule == "rmargin":
        return rmargin_cut(scores, embeddings, config.range_margin, config.k_min, config.k_max, config.range_depth)
    if config.rule == "mass":
        return mass_cut(scores, embeddings, config.mass, config.temperature, config.k_min, config.k_max)
    return paper_cut(scores, embeddings, config.k_min, config.k_max, normalized)


def cut_per_list(config: CutConfig, lists: Sequence[tuple[Sequence[str], Sequence[float] | np.ndarray]],
                 fused_ids: Sequence[str], vectors: Callable[[list[str]], np.ndarray]) -> tuple[list[int], Cut]:
    """The cut on each retrieval list (``(ids, scores)``, one per sub-task and the anchor), then the
    union of the kept tools, in fused order, moves to the head of the fused list.

    Returns the new order (positions in ``fused_ids``) and the Cut, whose K is the size of the union
    (at most k_max). ``vectors(ids)`` gives unit embeddings and is called only when the rule reads
    them. Shared by ``Selector.select`` and the offline re-application in bench/cut_curve.py.
    """
    keep: set[str] = set()
    parts = []
    for ids, scores in lists:
        lid = list(ids)
        if not lid:
            continue
        c = apply_cut(config, np.asarray(scores), vectors(lid) if config.uses_embeddings else None, normalized=True)
        keep.update(lid[:c.k])
        parts.append(c)
    order = [i for i, t in enumerate(fused_ids) if t in keep] + [i for i, t in enumerate(fused_ids) if t not in keep]
    k = min(len(keep), config.k_max)
    cut = Cut(k, max((c.k_score for c in parts), default=0), max((c.k_sim for c in parts), default=0),
              f"{config.rule}/subtask")
    return order, cut


def cut_turn(config: CutConfig, lists: Sequence[tuple[Sequence[str], Sequence[float] | np.ndarray]],
             fused_ids: Sequence[str],
             fused_scores: np.ndarray, vectors: Callable[[list[str]], np.ndarray], per_list: bool = True
             ) -> tuple[list[int], Cut]:
    """The cut of one turn: on each retrieval list with their union kept (``cut_per_list``) where
    the turn has several lists, ``per_list`` holds and the rule is adaptive; else on the fused list
    itself. Returns the new order of the fused list (positions) and the Cut."""
    if per_list and len(lists) > 1 and config.rule != "fixed":
        return cut_per_list(config, lists, fused_ids, vectors)
    embeddings = vectors(list(fused_ids)) if config.uses_embeddings else None
    return list(range(len(fused_ids))), apply_cut(config, fused_scores, embeddings, normalized=True)


CUT_RULES = ("paper", "fixed", "margin", "zmargin", "rmargin", "mass")  # the rules apply_cut dispatches on

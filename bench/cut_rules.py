"""The cut rules that lost to the shipped rmargin (margin, zmargin, mass): named experiments for bench/cut_curve.py.

Each is one pass over a ranked list, its K clamped to [k_min, k_max] and never over n, the scores
read as float32, the kept part a prefix (a fused list need not be sorted by score), exactly as
they ran in the runtime before they left it:
  margin  K = the longest prefix with s_i >= max(s) - margin. Rerank scores are z-scored mixes
          or logits, so one margin means the same thing on every list; retrieval cosines are not.
  zmargin the margin in units of the list's own standard deviation: s_i >= max(s) - z_margin * sd(s),
          i.e. a margin on per-list z-scores, so it carries over between score scales.
  mass    p = softmax(s / temperature); K = the shortest prefix with sum p >= mass (nucleus).
Constant scores keep k_max under the margin rules (nothing separates the tools) and ceil(mass * n)
under mass. ``ExperimentCut`` is a ``stages.cut.CutRule``, so ``cut_per_list`` and ``cut_turn``
apply it as they apply a ``CutConfig``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from magicselector.errors import InputError
# the runtime rules' own helpers, so that these cut exactly as they did next to rmargin
from magicselector.stages.cut import Cut, _clamp, _prefix_at_least, _scores32

EXPERIMENT_RULES = ("margin", "zmargin", "mass")


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


@dataclass(frozen=True)
class ExperimentCut:
    """One of the experiment rules with its bounds; each rule has its own parameter field, so that
    switching ``rule`` never reads a value meant for another. ``margin``, ``mass`` and
    ``temperature`` are in score units and need choosing for the scores at hand; ``z_margin``'s
    default is what the generated dev split chose on retrieval cosines."""

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
        if not (0 <= self.k_min <= self.k_max):
            raise InputError(f"need 0 <= k_min <= k_max, got k_min={self.k_min}, k_max={self.k_max}")
        for name in ("margin", "z_margin"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"{name} must be a finite number >= 0, got {value}")
        if not (0 < self.mass <= 1):
            raise InputError(f"mass must be within (0, 1], got {self.mass}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise InputError(f"temperature must be a finite number > 0, got {self.temperature}")

    @property
    def uses_embeddings(self) -> bool:
        """None of these rules reads the tools' embeddings."""
        return False

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut:
        """The same cut on every list of a decomposed turn, the anchor included."""
        return self.apply(scores, embeddings, normalized=True)

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None, normalized: bool = False) -> Cut:
        """This rule's cut of one ranked list."""
        if self.rule == "margin":
            return margin_cut(scores, embeddings, self.margin, self.k_min, self.k_max)
        if self.rule == "zmargin":
            return zmargin_cut(scores, embeddings, self.z_margin, self.k_min, self.k_max)
        return mass_cut(scores, embeddings, self.mass, self.temperature, self.k_min, self.k_max)

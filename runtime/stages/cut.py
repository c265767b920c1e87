"""Top-K cuts over a ranked list, each one pass (O(n)): the shipped rmargin, the paper's Algorithm 2, fixed k.

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
  rmargin (shipped) a margin below the top score as a fraction of the score range of the list's
          head (its first range_depth scores, the whole list when 0):
          s_i >= max(s) - range_margin * (max(h) - min(h)), h = the head, i.e. a margin on min-max
          normalised scores, so one margin means the same on retrieval cosines and rerank scores.
The ranked list need not be sorted by score (a fused list is ordered by peak rank), which is why
the rules keep a prefix rather than counting the tools over a threshold. Constant scores keep
k_max under rmargin (nothing separates the tools).

The rules that lost to rmargin (margin, zmargin, mass) are experiments in bench/cut_rules.py: ``cut_per_list`` and ``cut_turn`` take any ``CutRule``, so the bench re-applies
them exactly as ``Selector.select`` applies a ``CutConfig``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class Cut:
    """Where a ranked list was cut: ``k`` tools kept, with the parts of the rule that chose it.
    ``pool``: in a decomposed turn, how many tools the per-list cuts kept together (their union,
    which leads the new order) before ``k_max`` bounded K; the learned head picks its K among them
    (None: K is all the rule kept)."""

    k: int
    k_score: int = 0
    k_sim: int = 0
    rule: str = "paper"
    pool: int | None = None


@dataclass(frozen=True)
class CutConfig:
    """Which cut to apply and its bounds (see the module docstring for each rule).

    rule: 'paper' (Algorithm 2), 'fixed' (plain top ``fixed_k``) or 'rmargin' (within
      ``range_margin`` of the score range of the list's first ``range_depth`` scores, 0: the whole
      list, below the top score); the shipped cut is ``config.DEFAULT_CUT``.
    k_min, k_max: bounds on K for every adaptive rule.
    list_range_margin: rmargin's margin on each list of a decomposed turn (None: ``range_margin``);
      the lists' cuts add up in their union, so each may need to keep more than a lone list does.
    anchor_k_max: in a decomposed turn, the most tools the anchor list (the whole utterance) adds
      (None: ``k_max``): the sub-task lists name each request, the anchor only backs them up.
    min_probability: where the bundle has a learned head (``stages/head.py``), a kept tool whose
      relevance probability is lower is dropped (the surest one stays); adaptive rules only.
    range_margin defaults to what the generated dev split chose on retrieval cosines over the whole
    list (bench/cut_curve.py).
    """

    rule: str = "paper"
    k_min: int = 1
    k_max: int = 20
    fixed_k: int = 10
    range_margin: float = 0.5  # rmargin: the margin as a fraction of max - min of the head, in [0, 1]
    range_depth: int = 0       # rmargin: the head the range is taken over (0: the whole list)
    list_range_margin: float | None = None  # rmargin on each list of a decomposed turn
    anchor_k_max: int | None = None          # the anchor list's K in a decomposed turn
    min_probability: float = 0.0             # the learned head's floor on a kept tool's probability

    def __post_init__(self) -> None:
        if self.rule not in CUT_RULES:
            raise InputError(f"unknown cut rule {self.rule!r}; choose one of {sorted(CUT_RULES)}")
        if not (0 <= self.k_min <= self.k_max):
            raise InputError(f"need 0 <= k_min <= k_max, got k_min={self.k_min}, k_max={self.k_max}")
        if self.fixed_k < 0:
            raise InputError("fixed_k must be >= 0")
        if not (0 <= self.range_margin <= 1):
            raise InputError(f"range_margin must be within [0, 1], got {self.range_margin}")
        if self.range_depth < 0 or self.range_depth == 1:
            raise InputError(f"range_depth must be 0 (whole list) or >= 2, got {self.range_depth}")
        if self.list_range_margin is not None and not (0 <= self.list_range_margin <= 1):
            raise InputError(f"list_range_margin must be within [0, 1] or None, got {self.list_range_margin}")
        if self.anchor_k_max is not None and (isinstance(self.anchor_k_max, bool) or not isinstance(
                self.anchor_k_max, int) or self.anchor_k_max < 0):
            raise InputError(f"anchor_k_max must be an int >= 0 or None, got {self.anchor_k_max!r}")
        if isinstance(self.min_probability, bool) or not isinstance(self.min_probability, (int, float)) or not (
                0 <= self.min_probability <= 1):
            raise InputError(f"min_probability must be a number within [0, 1], got {self.min_probability!r}")

    @property
    def uses_embeddings(self) -> bool:
        """Whether the rule reads the tools' embeddings (only the paper's K_sim does)."""
        return self.rule == "paper"

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None, normalized: bool = False) -> Cut:
        """``apply_cut(self, ...)``: the ``CutRule`` method ``cut_turn`` calls on a lone list."""
        return apply_cut(self, scores, embeddings, normalized)

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut:
        """The cut of one list of a decomposed turn (``cut_per_list``): ``list_range_margin`` for
        ``range_margin``, and at most ``anchor_k_max`` tools from the anchor list."""
        rule = self if self.list_range_margin is None else replace(self, range_margin=self.list_range_margin)
        cut = apply_cut(rule, scores, embeddings, normalized=True)
        if anchor and self.anchor_k_max is not None and cut.k > self.anchor_k_max:
            cut = Cut(self.anchor_k_max, cut.k_score, cut.k_sim, cut.rule)
        return cut


class CutRule(Protocol):
    """What ``cut_per_list`` and ``cut_turn`` read of a cut: a ``CutConfig``, or a bench experiment."""

    @property
    def rule(self) -> str: ...

    @property
    def k_max(self) -> int: ...

    @property
    def uses_embeddings(self) -> bool: ...

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None, normalized: bool = False) -> Cut: ...

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut: ...


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


def rmargin_cut(scores: np.ndarray, embeddings: np.ndarray | None = None, margin: float = 0.5,
                k_min: int = 1, k_max: int = 20, depth: int = 0) -> Cut:
    """Keep the prefix within ``margin`` of the top score, the margin a fraction of the score range
    (max - min) of the list's first ``depth`` scores (the whole list when 0), so it is scale-free.
    With the whole list, ``margin`` = 1 keeps every tool; a constant head has range 0 and keeps
    every tool too.

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


def apply_cut(config: CutConfig, scores: np.ndarray, embeddings: np.ndarray | None,
              normalized: bool = False) -> Cut:
    """The cut ``config`` asks for on one ranked list (``embeddings`` are read by 'paper' only)."""
    if config.rule == "fixed":
        return fixed_cut(scores, embeddings, config.fixed_k)
    if config.rule == "rmargin":
        return rmargin_cut(scores, embeddings, config.range_margin, config.k_min, config.k_max, config.range_depth)
    return paper_cut(scores, embeddings, config.k_min, config.k_max, normalized)


def cut_per_list(config: CutRule, lists: Sequence[tuple[Sequence[str], Sequence[float] | np.ndarray]],
                 fused_ids: Sequence[str], vectors: Callable[[list[str]], np.ndarray]) -> tuple[list[int], Cut]:
    """The cut on each retrieval list (``(ids, scores)``: the anchor first, then one per sub-task;
    ``CutRule.apply_list``), then the union of the kept tools, in fused order, moves to the head of
    the fused list.

    Returns the new order (positions in ``fused_ids``) and the Cut, whose K is the size of the union
    (at most k_max). ``vectors(ids)`` gives unit embeddings and is called only when the rule reads
    them. Shared by ``Selector.select`` and the offline re-application in bench/cut_curve.py.
    """
    keep: set[str] = set()
    parts = []
    for j, (ids, scores) in enumerate(lists):
        lid = list(ids)
        if not lid:
            continue
        c = config.apply_list(np.asarray(scores), vectors(lid) if config.uses_embeddings else None, anchor=j == 0)
        keep.update(lid[:c.k])
        parts.append(c)
    order = [i for i, t in enumerate(fused_ids) if t in keep] + [i for i, t in enumerate(fused_ids) if t not in keep]
    k = min(len(keep), config.k_max)
    cut = Cut(k, max((c.k_score for c in parts), default=0), max((c.k_sim for c in parts), default=0),
              f"{config.rule}/subtask", pool=len(keep))
    return order, cut


def cut_turn(config: CutRule, lists: Sequence[tuple[Sequence[str], Sequence[float] | np.ndarray]],
             fused_ids: Sequence[str],
             fused_scores: np.ndarray, vectors: Callable[[list[str]], np.ndarray], per_list: bool = True
             ) -> tuple[list[int], Cut]:
    """The cut of one turn: on each retrieval list with their union kept (``cut_per_list``) where
    the turn has several lists, ``per_list`` holds and the rule is adaptive; else on the fused list
    itself. Returns the new order of the fused list (positions) and the Cut."""
    if per_list and len(lists) > 1 and config.rule != "fixed":
        return cut_per_list(config, lists, fused_ids, vectors)
    embeddings = vectors(list(fused_ids)) if config.uses_embeddings else None
    return list(range(len(fused_ids))), config.apply(fused_scores, embeddings, normalized=True)


CUT_RULES = ("paper", "fixed", "rmargin")  # the rules apply_cut dispatches on

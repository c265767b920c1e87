"""The shipped Top-K cut (rmargin) of a turn's ranked lists, one pass (O(n)) per list, and ``CutRule``, what any cut gives the Selector.

rmargin keeps the prefix of a ranked list within a margin below its top score, the margin a
fraction of the score range of the list's head (its first range_depth scores, the whole list
when 0):
    s_i >= max(s) - range_margin * (max(h) - min(h)),   h = the head,
i.e. a margin on min-max normalised scores, so one margin means the same on any score scale
(cosines, the lexical fusion's mixes). K is clamped to [k_min, k_max] and never exceeds n; scores are read as float32.
The ranked list need not be sorted by score (a fused list is ordered by peak rank), which is why
the rule keeps a prefix rather than counting the tools over a threshold. Constant scores keep
k_max (nothing separates the tools).

The rules that lost to rmargin (the paper's Algorithm 2, fixed k, margin, zmargin, mass) are
experiments in bench/cut_rules.py: ``cut_per_list`` and ``cut_turn`` take any ``CutRule`` (and
``SelectorConfig.cut`` holds one), so the bench applies them exactly as ``Selector.select`` applies
``CutConfig``; a rule that reads the tools' embeddings says so (``uses_embeddings``) and only then
does the Selector read them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Protocol, Sequence

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
    rule: str = "rmargin"
    pool: int | None = None


@dataclass(frozen=True)
class CutConfig:
    """The shipped cut, rmargin, and its bounds (``CutConfig()`` ships; see the module docstring).

    On one list, keep the tools within ``range_margin`` of the score range of the list's first
    ``range_depth`` scores (0: the whole list) below the top score, at least ``k_min`` and at most
    ``k_max``. In a decomposed turn each list is cut with ``list_range_margin`` (None:
    ``range_margin``; the lists' cuts add up in their union, so each may need to keep more than a
    lone list does) and the anchor list (the whole utterance) adds at most ``anchor_k_max`` tools
    (None: ``k_max``): the sub-task lists name each request, the anchor only backs them up.
    ``min_probability``: where the bundle has a learned head (``stages/head.py``), a kept tool
    whose relevance probability is lower is dropped (the surest one stays), and the head keeps at
    most the ``k_max`` likeliest.

    The defaults keep the fewest tools at the same completeness on every development part
    (docs/bench/defaults.md, docs/bench/budget.md, docs/bench/history.md).
    """

    rule: ClassVar[str] = "rmargin"
    uses_embeddings: ClassVar[bool] = False  # the margin reads scores only
    per_list: ClassVar[bool] = True          # a decomposed turn is cut list by list

    k_min: int = 1
    k_max: int = 10
    range_margin: float = 0.7  # the margin as a fraction of max - min of the head, in [0, 1]
    range_depth: int = 15      # the head the range is taken over (0: the whole list)
    list_range_margin: float | None = 0.8  # the margin on each list of a decomposed turn
    anchor_k_max: int | None = 5           # the anchor list's K in a decomposed turn
    min_probability: float = 0.012         # the learned head's floor on a kept tool's probability

    def __post_init__(self) -> None:
        if not (0 <= self.k_min <= self.k_max):
            raise InputError(f"need 0 <= k_min <= k_max, got k_min={self.k_min}, k_max={self.k_max}")
        if not (0 <= self.range_margin <= 1):
            raise InputError(f"range_margin must be within [0, 1], got {self.range_margin}")
        if self.range_depth < 0 or self.range_depth == 1:
            raise InputError(f"range_depth must be 0 (whole list) or >= 2, got {self.range_depth}")
        if self.list_range_margin is not None and not (0 <= self.list_range_margin <= 1):
            raise InputError(f"list_range_margin must be within [0, 1] or None, got {self.list_range_margin}")
        check_anchor_k_max(self.anchor_k_max)
        check_min_probability(self.min_probability)

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None = None, normalized: bool = False) -> Cut:
        """The cut of a lone ranked list (``CutRule.apply``)."""
        return rmargin_cut(scores, self.range_margin, self.k_min, self.k_max, self.range_depth)

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut:
        """The cut of one list of a decomposed turn (``cut_per_list``): ``list_range_margin`` for
        ``range_margin``, and at most ``anchor_k_max`` tools from the anchor list."""
        margin = self.range_margin if self.list_range_margin is None else self.list_range_margin
        cut = rmargin_cut(scores, margin, self.k_min, self.k_max, self.range_depth)
        return anchor_bound(cut, self.anchor_k_max if anchor else None)


class CutRule(Protocol):
    """What the Selector, ``cut_per_list``, ``cut_turn`` and the head read of a cut: ``CutConfig``,
    or a bench experiment (bench/cut_rules.py).

    rule: its name (``Cut.rule``). k_max: the most tools a turn keeps. min_probability: the learned
    head's floor. uses_embeddings: whether ``apply`` / ``apply_list`` read the tools' unit
    embeddings (else they get None). per_list: whether a decomposed turn is cut list by list, the
    union kept (else the fused list is cut as one)."""

    @property
    def rule(self) -> str: ...

    @property
    def k_max(self) -> int: ...

    @property
    def min_probability(self) -> float: ...

    @property
    def uses_embeddings(self) -> bool: ...

    @property
    def per_list(self) -> bool: ...

    def apply(self, scores: np.ndarray, embeddings: np.ndarray | None = None, normalized: bool = False) -> Cut: ...

    def apply_list(self, scores: np.ndarray, embeddings: np.ndarray | None, anchor: bool) -> Cut: ...


def check_anchor_k_max(value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InputError(f"anchor_k_max must be an int >= 0 or None, got {value!r}")


def check_min_probability(value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InputError(f"min_probability must be a number within [0, 1], got {value!r}")


def anchor_bound(cut: Cut, anchor_k_max: int | None) -> Cut:
    """``cut`` with at most ``anchor_k_max`` tools (None: as it is)."""
    if anchor_k_max is not None and cut.k > anchor_k_max:
        return Cut(anchor_k_max, cut.k_score, cut.k_sim, cut.rule)
    return cut


def clamp_k(k: int, n: int, k_min: int, k_max: int) -> int:
    """``k`` within [k_min, k_max] and never over ``n``."""
    return int(min(n, max(k_min, min(k_max, k))))


def scores32(scores: np.ndarray) -> np.ndarray:
    return np.asarray(scores, dtype=np.float32).reshape(-1)


def prefix_at_least(s: np.ndarray, threshold: np.float32) -> int:
    """Length of the longest prefix of ``s`` with every value >= threshold."""
    below = np.flatnonzero(s < threshold)
    return int(below[0]) if below.size else int(s.shape[0])


def rmargin_cut(scores: np.ndarray, margin: float = 0.5, k_min: int = 1, k_max: int = 20, depth: int = 0) -> Cut:
    """Keep the prefix within ``margin`` of the top score, the margin a fraction of the score range
    (max - min) of the list's first ``depth`` scores (the whole list when 0), so it is scale-free.
    With the whole list, ``margin`` = 1 keeps every tool; a constant head has range 0 and keeps
    every tool too.

    A head shorter than the list makes the range ignore the tail's long flat stretch of
    irrelevant tools, whose floor otherwise stretches the range on long lists."""
    s = scores32(scores)
    n = s.shape[0]
    if n == 0:
        return Cut(0, 0, 0, "rmargin")
    head = s[:depth] if 2 <= depth < n else s
    top, span = s.max(), head.max() - head.min()
    # margin >= 1 over the whole list is decided exactly: top - span can round an ulp above the minimum.
    if span <= 0 or (margin >= 1 and head.shape[0] == n):
        k = n
    else:
        k = prefix_at_least(s, top - np.float32(margin) * span)
    return Cut(clamp_k(k, n, k_min, k_max), k, 0, "rmargin")


Vectors = Callable[[list[str]], np.ndarray]  # tool ids -> their unit embeddings, read where a rule asks


def cut_per_list(rule: CutRule, lists: Sequence[tuple[Sequence[str], Sequence[float] | np.ndarray]],
                 fused_ids: Sequence[str], vectors: Vectors | None = None) -> tuple[list[int], Cut]:
    """The cut on each retrieval list (``(ids, scores)``: the anchor first, then one per sub-task;
    ``CutRule.apply_list``), then the union of the kept tools, in fused order, moves to the head of
    the fused list.

    Returns the new order (positions in ``fused_ids``) and the Cut, whose K is the size of the union
    (at most k_max). ``vectors(ids)`` gives unit embeddings, called only when the rule reads them.
    Shared by ``Selector.select`` and the offline re-application in bench/cut_curve.py.
    """
    keep, parts = _list_cuts(rule, lists, vectors)
    order = [i for i, t in enumerate(fused_ids) if t in keep] + [i for i, t in enumerate(fused_ids) if t not in keep]
    k = min(len(keep), rule.k_max)
    cut = Cut(k, max((c.k_score for c in parts), default=0), max((c.k_sim for c in parts), default=0),
              f"{rule.rule}/subtask", pool=len(keep))
    return order, cut


def _list_cuts(rule: CutRule, lists: Sequence[tuple[Sequence[str], Sequence[float] | np.ndarray]],
               vectors: Vectors | None) -> tuple[set[str], list[Cut]]:
    """The tools the rule keeps of each non-empty list (their union), and each list's Cut."""
    keep: set[str] = set()
    parts = []
    for j, (ids, scores) in enumerate(lists):
        lid = list(ids)
        if not lid:
            continue
        embeddings = vectors(lid) if rule.uses_embeddings and vectors is not None else None
        c = rule.apply_list(np.asarray(scores), embeddings, anchor=j == 0)
        keep.update(lid[:c.k])
        parts.append(c)
    return keep, parts


def cut_turn(rule: CutRule, lists: Sequence[tuple[Sequence[str], Sequence[float] | np.ndarray]],
             fused_ids: Sequence[str], fused_scores: np.ndarray, vectors: Vectors | None = None,
             per_list: bool = True) -> tuple[list[int], Cut]:
    """The cut of one turn: on each retrieval list with their union kept (``cut_per_list``) where
    the turn has several lists, ``per_list`` holds and the rule cuts list by list; else on the fused
    list itself. Returns the new order of the fused list (positions) and the Cut."""
    if per_list and len(lists) > 1 and rule.per_list:
        return cut_per_list(rule, lists, fused_ids, vectors)
    embeddings = vectors(list(fused_ids)) if rule.uses_embeddings and vectors is not None else None
    return list(range(len(fused_ids))), rule.apply(fused_scores, embeddings, normalized=True)

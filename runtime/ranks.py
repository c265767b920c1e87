"""Rank statistics: average ranks and Spearman's rank correlation (INT8 parity checks and the benches)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .errors import InputError


def rankdata(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as ``scipy.stats.rankdata``)."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(x) == 0:
        return np.zeros(0, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sx = x[order]
    first = np.r_[True, sx[1:] != sx[:-1]]  # where each run of equal values starts (in sorted order)
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(x)] - 1
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = ((starts + ends) / 2.0 + 1.0)[np.cumsum(first) - 1]
    return ranks


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation (ties averaged); 1.0 when both sides are constant, 0.0 when only one is."""
    ra, rb = rankdata(a), rankdata(b)
    if len(ra) != len(rb):
        raise InputError(f"spearman needs two sequences of one length, got {len(ra)} and {len(rb)}")
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return 1.0 if sa == sb else 0.0
    return float(((ra - ra.mean()) * (rb - rb.mean())).mean() / (sa * sb))

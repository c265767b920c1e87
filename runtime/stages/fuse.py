"""Fusing several ranked candidate lists (one per sub-task, plus the original utterance as anchor).

``peak_rank_fusion`` is ToolQP's aggregation: a tool's fused rank is the best rank it reached in
any single list, so a sub-task that produced many lists does not outvote the others. Ties (the
same best rank in several lists) go to the higher score, then to the earlier list. Why peak rank
and not reciprocal-rank fusion: docs/bench/defaults.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

# scores as a list or a 1-D array (what the retrieval stages hand over)
Scores = Union[Sequence[float], np.ndarray]


@dataclass(frozen=True)
class RankedList:
    """One retrieval result: ids best first, with their scores; ``dense`` (cosine) and ``lexical``
    (BM25) are the parts of each score where the list was fused from both channels."""

    ids: Sequence[str]
    scores: Scores
    dense: Scores | None = None
    lexical: Scores | None = None

    def evidence(self, tool_id: str) -> tuple[int, float | None, float | None] | None:
        """(rank, cosine, BM25) of a tool in this list, None where it is not in it."""
        for rank, t in enumerate(self.ids):
            if t == tool_id:
                def part(xs: Scores | None) -> float | None:
                    return None if xs is None else float(xs[rank])
                return rank, part(self.dense), part(self.lexical)
        return None


@dataclass(frozen=True)
class Fused:
    ids: list[str]
    scores: np.ndarray  # the score each tool had where it reached its peak
    source: list[int]   # index of the list where each tool reached its peak


def _peaks(lists: Sequence[RankedList]) -> dict[str, tuple[int, float, int]]:
    """Each tool's peak: (its best rank in any list, minus its score there, that list's index),
    the smallest such key over the lists that hold it (ties broken by score, then list order)."""
    best: dict[str, tuple[int, float, int]] = {}
    for li, lst in enumerate(lists):
        for rank, (tid, score) in enumerate(zip(lst.ids, lst.scores)):
            key = (rank, -float(score), li)
            if tid not in best or key < best[tid]:
                best[tid] = key
    return best


def peak_rank_fusion(lists: Sequence[RankedList]) -> Fused:
    order = sorted(_peaks(lists).items(), key=lambda kv: kv[1])
    return Fused([t for t, _ in order], np.array([-k[1] for _, k in order], dtype=np.float32),
                 [k[2] for _, k in order])

"""The learned head: a relevance probability for each of the fused list's first tools, read off how the retrieval lists rank them, and the order and cut it gives the kept tools.

A turn's retrieval lists (the utterance as anchor, each sub-task, the history-folded utterance)
say more together than the fused rank alone: a tool first in its sub-task's list and high in the
anchor's is surer than one that only the history list holds. ``head_features`` turns that into a
few numbers per candidate (ranks, agreement between lists, the score's gap below each list's top;
no absolute score, so they mean the same over another catalog), and ``HeadModel`` (a small MLP
fitted on the train parts, ``train/head.py``) maps them to P(the tool is needed). The Selector then
orders the cut's kept tools by that probability and drops those under ``CutConfig.min_probability``
(``head_order``). The model is a JSON file in the bundle, read from its verified bytes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import BundleError
from .cut import Cut, CutRule

HEAD_FORMAT = "magicselector-head"
HEAD_FILE = "head.json"
ABSENT = 99  # the rank of a tool a list does not hold
FEATURES = (
    "fused_rank", "log_fused_rank", "fused_gap", "lists", "decomposed", "best_rank",
    "log_subtask_rank", "log_anchor_rank", "log_history_rank", "in_anchor", "in_history", "in_subtask",
    "share_top1", "share_top3", "share_top5", "share_top10", "count_top1", "count_top3", "count_top5",
    "count_top10", "min_norm_gap", "mean_norm_gap", "reciprocal_ranks",
)
_TOPS = (1, 3, 5, 10)


def head_features(lists: Sequence[tuple[Sequence[str], Any]], history_list: int | None,
                  fused_ids: Sequence[str], fused_scores: Any, depth: int) -> np.ndarray:
    """One row of ``FEATURES`` per tool of the fused list's first ``depth``. ``lists``: each
    retrieval list's (ids, scores), the anchor first; ``history_list``: the position of the
    history-folded list among them (None: the turn has none); the others are sub-task lists."""
    head = list(fused_ids[:depth])
    m, n = len(head), len(lists)
    ranks, gaps = _list_ranks(lists, head)
    present = ranks != ABSENT
    anchor, hist, sub = _best_ranks(ranks, history_list)
    counts = np.stack([(ranks < c).sum(axis=1) for c in _TOPS], axis=1).astype(np.float64)
    held = present.sum(axis=1)
    gap_sum = np.where(present, gaps, 0.0).sum(axis=1)
    gap_min = np.where(present, gaps, np.inf).min(axis=1) if n else np.full(m, np.inf)
    fused = np.asarray(fused_scores[:m], dtype=np.float64)
    position = np.arange(m, dtype=np.float64)
    rows = np.column_stack([
        position, np.log1p(position), (fused[0] if m else 0.0) - fused, np.full(m, n), np.full(m, n > 1),
        ranks.min(axis=1) if n else np.full(m, float(ABSENT)),
        np.log1p(np.minimum(sub, 30)), np.log1p(np.minimum(anchor, 30)), np.log1p(np.minimum(hist, 30)),
        anchor != ABSENT, hist != ABSENT, sub != ABSENT, counts / max(n, 1), counts,
        np.where(held > 0, gap_min, 1.0), np.where(held > 0, gap_sum / np.maximum(held, 1), 1.0),
        np.where(present, 1.0 / (1.0 + ranks), 0.0).sum(axis=1),
    ]).astype(np.float64)
    return rows.reshape(m, len(FEATURES))


def _best_ranks(ranks: np.ndarray, history_list: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each tool's best rank in the anchor list, the history list and the sub-task lists
    (``ABSENT`` where the turn has no such list)."""
    m, n = ranks.shape
    sub_lists = [li for li in range(1, n) if li != history_list]

    def best(cols: list[int]) -> np.ndarray:
        return ranks[:, cols].min(axis=1) if cols else np.full(m, float(ABSENT))

    return (best([0] if n else []), best([history_list] if history_list is not None and history_list < n else []),
            best(sub_lists))


def _list_ranks(lists: Sequence[tuple[Sequence[str], Any]], head: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ranks, gaps), one row per tool of ``head`` and one column per list: the tool's rank in the
    list (``ABSENT`` where it holds none) and its score's gap below the list's top, on the spread
    of the list's first 10 (NaN where absent)."""
    column = {t: j for j, t in enumerate(head)}
    ranks = np.full((len(head), len(lists)), float(ABSENT))
    gaps = np.full((len(head), len(lists)), np.nan)
    for li, (ids, scores) in enumerate(lists):
        s = np.asarray(scores, dtype=np.float64)
        if not len(s):
            continue
        spread = max(1e-6, float(s[0] - s[min(9, len(s) - 1)]))
        for q, tid in enumerate(ids):
            j = column.get(tid)
            if j is not None:
                ranks[j, li], gaps[j, li] = q, (s[0] - s[q]) / spread
    return ranks, gaps


@dataclass(frozen=True)
class HeadModel:
    """A standardizing MLP over ``FEATURES`` (ReLU hidden layers, one logit out): ``probabilities``
    gives P(needed) per row. ``depth``: how many of the fused list's first tools it scores."""

    mean: np.ndarray
    scale: np.ndarray
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]  # (weight (in, out), bias (out,)) per layer
    depth: int = 20
    meta: Any = None  # provenance, as the file records it

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        x = (np.asarray(rows, dtype=np.float64) - self.mean) / self.scale
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(x[:, 0], -50, 50))), dtype=np.float64)

    def to_json(self) -> dict[str, Any]:
        return {"format": HEAD_FORMAT, "version": 1, "features": list(FEATURES), "depth": self.depth,
                "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "layers": [{"weight": w.tolist(), "bias": b.tolist()} for w, b in self.layers],
                "meta": self.meta if self.meta is not None else {}}

    @classmethod
    def from_bytes(cls, data: bytes, name: str = HEAD_FILE) -> "HeadModel":
        """The model in a head file's bytes; anything malformed is a BundleError naming ``name``."""
        raw = _head_json(data, name)
        depth = raw.get("depth")
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 1000:
            raise BundleError(f"{name}: field 'depth' must be an integer in [1, 1000]")
        mean, scale = _array(raw, "mean", name, (len(FEATURES),)), _array(raw, "scale", name, (len(FEATURES),))
        if not np.all(scale > 0):
            raise BundleError(f"{name}: field 'scale' must be positive")
        return cls(mean, scale, _layers(raw.get("layers"), name), depth, raw.get("meta"))


def _head_json(data: bytes, name: str) -> dict[str, Any]:
    """A head file's JSON object, checked to be this format and version over this runtime's features."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BundleError(f"{name}: not a JSON head model ({e})") from None
    if not isinstance(raw, dict) or raw.get("format") != HEAD_FORMAT or raw.get("version") != 1:
        raise BundleError(f"{name}: not a {HEAD_FORMAT} file of version 1")
    if raw.get("features") != list(FEATURES):
        raise BundleError(f"{name}: field 'features' does not name this runtime's head features")
    return raw


def _layers(layers_raw: Any, name: str) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The MLP's (weight, bias) layers, each taking the previous one's width, the last giving one logit."""
    if not isinstance(layers_raw, list) or not 1 <= len(layers_raw) <= 8:
        raise BundleError(f"{name}: field 'layers' must be a list of 1 to 8 layers")
    layers, width = [], len(FEATURES)
    for i, layer in enumerate(layers_raw):
        w, b = _layer(layer, width, f"{name}: layers[{i}]")
        layers.append((w, b))
        width = w.shape[1]
    if width != 1:
        raise BundleError(f"{name}: the last layer must give one logit")
    return tuple(layers)


def _layer(layer: Any, width: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(layer, dict):
        raise BundleError(f"{where} must be an object with weight and bias")
    w = _array(layer, "weight", where, None)
    if w.ndim != 2 or w.shape[0] != width or not 1 <= w.shape[1] <= 4096:
        raise BundleError(f"{where}.weight must be a {width} x N matrix")
    return w, _array(layer, "bias", where, (w.shape[1],))


def _array(raw: dict[str, Any], key: str, where: str, shape: tuple[int, ...] | None) -> np.ndarray:
    try:
        a = np.asarray(raw.get(key), dtype=np.float64)
    except (TypeError, ValueError):
        raise BundleError(f"{where}: field {key!r} must be an array of numbers") from None
    if a.dtype != np.float64 or (shape is not None and a.shape != shape) or not np.all(np.isfinite(a)):
        raise BundleError(f"{where}: field {key!r} must be a finite array of shape {shape or '(in, out)'}")
    return a


def head_cut(probabilities: np.ndarray, order: Sequence[int], cut: Cut, rule: CutRule) -> tuple[list[int], int]:
    """``head_order`` as ``Selector.select`` applies it to a cut (``stages/cut.py`` ``Cut``) made by
    ``rule`` (``CutConfig``, or a bench rule): the tools the cut kept (all the per-list cuts kept,
    ``Cut.pool``) by probability, those under ``rule.min_probability`` dropped, at most ``rule.k_max``."""
    pool = cut.pool if cut.pool is not None else cut.k
    return head_order(probabilities, order, pool, rule.min_probability, rule.k_max)


def _surest(kept: list[int], probs: list[float], min_probability: float, k_max: int | None) -> list[int]:
    """Of the kept tools (most likely first), those at ``min_probability`` or more (the surest one
    where none is), at most ``k_max``."""
    return ([i for i, p in zip(kept, probs) if p >= min_probability] or kept[:1])[:k_max]


def head_order(probabilities: np.ndarray, order: Sequence[int], k: int, min_probability: float,
               k_max: int | None = None) -> tuple[list[int], int]:
    """The kept tools by probability, best first, without those under ``min_probability`` (the
    surest one stays) and past the ``k_max`` likeliest, then the rest. ``probabilities``: for the
    fused list's first tools (a tool past them counts 0); ``order``, ``k``: the cut's order of the
    fused positions and how many of them it kept (``Cut.pool`` where the per-list cuts kept more
    than ``k_max``: the bound then drops the least likely, not the last in fused order)."""
    def p(i: int) -> float:
        return float(probabilities[i]) if i < len(probabilities) else 0.0

    kept = sorted(order[:k], key=lambda i: (-p(i), i))
    surest = _surest(kept, [p(i) for i in kept], min_probability, k_max)
    chosen = set(surest)
    rest = [i for i in order if i not in chosen]
    scored = sorted((i for i in rest if i < len(probabilities)), key=lambda i: (-p(i), i))
    return surest + scored + [i for i in rest if i >= len(probabilities)], len(surest)

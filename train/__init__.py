"""``magicselector.train``: training code (the cross-encoder reranker; decomposer and embedder later).

Exports are resolved lazily so that ``import magicselector.train.cli`` (done by the ``magicselector``
command on every call) does not import torch.
"""
from __future__ import annotations

from typing import Any

_RERANKER_EXPORTS = (
    "RerankerTrainConfig", "PairEncoder", "TrainQuery", "build_training_queries", "dense_retriever",
    "listwise_ce", "load_cross_encoder", "mine_hard_negatives", "pointwise_bce", "rerank_quality",
    "score_pairs", "train_reranker",
)

__all__ = list(_RERANKER_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _RERANKER_EXPORTS:
        from . import reranker

        return getattr(reranker, name)
    raise AttributeError(f"module 'magicselector.train' has no attribute {name!r}")

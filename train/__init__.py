"""``magicselector.train``: training code: the cross-encoder reranker, the dense embedder, the LLM
decomposer (SFT, GRPO and its rewards), on one process or many; ``toolkit`` holds what they share.

Exports are resolved lazily so that ``import magicselector.cli.train`` (done by the ``magicselector``
command on every call) does not import torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "reranker": (
        "RerankerTrainConfig", "PairEncoder", "dense_retriever", "listwise_ce", "load_cross_encoder",
        "pointwise_bce", "rerank_quality", "retrain_shipped", "score_pairs", "train_reranker", "SHIPPED_RECIPE",
        "SHIPPED_DATA",
    ),
    "queries": ("TrainQuery", "build_training_queries", "mine_hard_negatives"),
    # numpy only
    "rewards": (
        "CounterfactualOutcome", "CounterfactualReward", "PreferenceScorer", "SimilarityScorer", "char_ngram_embed",
        "counterfactual_reward", "duplicate_task_rate", "empty_task_rate", "grouped_advantages", "grpo_advantages",
        "joint_reward", "ndcg_reward", "normalize_task", "preference_reward",
    ),
    "embedder_losses": ("info_nce", "mine_embedder_negatives"),
    "decomposer": ("DecomposerSFTConfig", "GRPOConfig", "decomposition_pairs", "train_decomposer_sft",
                   "train_decomposer_grpo", "hf_checkpoint_from_gguf"),
    "embedder": ("EmbedderTrainConfig", "train_embedder", "load_embedder"),
    "head": ("HeadTrainConfig", "fit_head", "head_rows", "train_head"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'magicselector.train' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

"""Rerankers: score (sub-task, tool text) pairs with a cross-encoder.

The cost of a cross-encoder grows with candidates x tokens x layers and nothing can be cached per
tool, so the stage bounds all three: at most ``candidates`` pairs per list, ``max_length`` tokens a
pair (the pair is truncated longest-first, so a long query cannot crowd the tool out entirely).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..errors import BundleError, InputError
from .embed import TextTokenizer, make_session


class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


def check_rerank_input(query: str, texts: Sequence[str]) -> bool:
    """Raise InputError for an unusable (query, texts) pair set; False when there is nothing to score."""
    if not isinstance(query, str) or not query.strip():
        raise InputError("rerank: the query is empty")
    if isinstance(texts, str):
        raise InputError("rerank: texts must be a list of tool texts, not one string")
    return len(texts) > 0


class OnnxCrossEncoder:
    """A cross-encoder exported to ONNX whose output 0 is one relevance logit per pair."""

    name = "onnx-cross-encoder"

    def __init__(self, model_path: str | Path, tokenizer: TextTokenizer, threads: int = 1, batch_size: int = 32) -> None:
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise BundleError(f"reranker model not found: {self.model_path}")
        self.tokenizer = tokenizer
        self.threads = threads
        self.batch_size = batch_size
        self._session = None
        self._names: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_path(cls, model_path: str | Path, tokenizer_file: str | Path, *, max_length: int = 96,
                  threads: int = 1) -> "OnnxCrossEncoder":
        return cls(model_path, TextTokenizer(tokenizer_file, max_length), threads=threads)

    @property
    def session(self):
        if self._session is None:
            with self._lock:
                if self._session is None:
                    session = make_session(self.model_path, self.threads)
                    self._names = {i.name for i in session.get_inputs()}
                    self._session = session
        return self._session

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not check_rerank_input(query, texts):
            return np.zeros(0, dtype=np.float32)
        session = self.session
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer.encode_pairs([(query, t or " ") for t in texts[start:start + self.batch_size]])
            feeds = {k: v for k, v in batch.items() if k in self._names}
            out.append(np.asarray(session.run(None, feeds)[0], dtype=np.float32).reshape(-1))
        return np.concatenate(out)


def zscore(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if len(x) < 2:
        return np.zeros_like(x)
    sd = float(x.std())
    return (x - x.mean()) / sd if sd > 1e-6 else np.zeros_like(x)


def mix_scores(rerank: np.ndarray, retrieval: np.ndarray, weight: float) -> np.ndarray:
    """weight * z(cross-encoder) + (1 - weight) * z(retrieval similarity), over one candidate list.

    z-scoring puts the two on one scale per list; a weight below 1 keeps the retriever's view
    where the cross-encoder is unsure (e.g. out-of-domain tools)."""
    if weight >= 1.0:
        return np.asarray(rerank, dtype=np.float32)
    return (weight * zscore(rerank) + (1.0 - weight) * zscore(retrieval)).astype(np.float32)

"""Embedders: text -> L2-normalised vectors (mean pooling over the last hidden state).

The ONNX embedder is the default; loading (file checks, tokenizer) is separate from the inference
session, which is created on first use so that a Selector that never embeds costs no memory.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..errors import BundleError, InputError


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class TokenizerConfig:
    max_length: int = 128


class TextTokenizer:
    """A `tokenizers` tokenizer set up for BERT-style encoders: truncation, per-batch padding."""

    def __init__(self, tokenizer_file: str | Path, max_length: int = 128) -> None:
        from tokenizers import Tokenizer

        path = Path(tokenizer_file)
        if not path.is_file():
            raise BundleError(f"tokenizer file not found: {path}")
        self.path = path
        self.max_length = max_length
        self._tok = Tokenizer.from_file(str(path))
        self._tok.enable_truncation(max_length=max_length)
        self._tok.no_padding()

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        return pad_encodings(self._tok.encode_batch(list(texts)))

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        return pad_encodings(self._tok.encode_batch([tuple(p) for p in pairs]))


def pad_encodings(encodings) -> dict[str, np.ndarray]:
    """`tokenizers` encodings -> right-padded int64 input_ids / attention_mask / token_type_ids."""
    n = len(encodings)
    width = max((len(e.ids) for e in encodings), default=0)
    ids = np.zeros((n, width), dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    types = np.zeros((n, width), dtype=np.int64)
    for i, e in enumerate(encodings):
        m = len(e.ids)
        ids[i, :m] = e.ids
        mask[i, :m] = e.attention_mask
        types[i, :m] = e.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def mean_pool_normalize(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of token vectors where mask is 1, then L2 normalisation (all-MiniLM-L6-v2's recipe)."""
    m = mask[..., None].astype(np.float32)
    summed = (hidden.astype(np.float32) * m).sum(axis=1)
    counts = np.clip(m.sum(axis=1), 1e-9, None)
    pooled = summed / counts
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


def make_session(model_path: Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])


class OnnxEmbedder:
    """Sentence embedder over an ONNX encoder whose output 0 is the last hidden state."""

    def __init__(self, model_path: str | Path, tokenizer: TextTokenizer, dim: int, threads: int = 1,
                 batch_size: int = 32) -> None:
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise BundleError(f"embedder model not found: {self.model_path}")
        self.tokenizer = tokenizer
        self.dim = int(dim)
        self.threads = threads
        self.batch_size = batch_size
        self._session = None
        self._lock = threading.Lock()

    @classmethod
    def from_path(cls, model_path: str | Path, tokenizer_file: str | Path, *, dim: int = 384,
                  max_length: int = 128, threads: int = 1) -> "OnnxEmbedder":
        return cls(model_path, TextTokenizer(tokenizer_file, max_length), dim=dim, threads=threads)

    @property
    def session(self):
        if self._session is None:
            with self._lock:  # one session per embedder, created once even under concurrent first use
                if self._session is None:
                    self._session = make_session(self.model_path, self.threads)
                    self._input_names = {i.name for i in self._session.get_inputs()}
        return self._session

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InputError("embed() takes a list of texts, not one string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer.encode(texts[start:start + self.batch_size])
            feeds = {k: v for k, v in batch.items() if k in self._names()}
            hidden = self.session.run(None, feeds)[0]
            out.append(mean_pool_normalize(hidden, batch["attention_mask"]))
        return np.concatenate(out, axis=0)

    def _names(self) -> set[str]:
        self.session  # noqa: B018 - ensures the input names are known
        return self._input_names

"""The embed task: text -> L2-normalised vectors (tokenize, run the encoder, mean-pool, normalise).

Which runtime runs the encoder is the backend's business (``magicselector.backends``); this module
holds only the task.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..backends import EncoderModel, open_model
from ..errors import BundleError, InputError


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


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


class TextEmbedder:
    """Sentence embedder over an encoder whose output 0 is the last hidden state (any backend)."""

    def __init__(self, model: EncoderModel | str | Path, tokenizer: TextTokenizer, dim: int, threads: int = 1,
                 batch_size: int = 32) -> None:
        self.model = open_model(model, threads=threads) if isinstance(model, (str, Path)) else model
        self.tokenizer = tokenizer
        self.dim = int(dim)
        self.batch_size = batch_size

    @classmethod
    def from_path(cls, model_path: str | Path, tokenizer_file: str | Path, *, dim: int = 384,
                  max_length: int = 128, threads: int = 1) -> "TextEmbedder":
        return cls(open_model(model_path, threads=threads), TextTokenizer(tokenizer_file, max_length), dim=dim)

    @property
    def model_path(self) -> Path:
        return self.model.path

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InputError("embed() takes a list of texts, not one string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        step = batch_step(self.model, self.tokenizer.max_length, self.batch_size)
        out = []
        for start in range(0, len(texts), step):
            batch = self.tokenizer.encode(texts[start:start + step])
            hidden = self.model.run(batch)
            out.append(mean_pool_normalize(hidden, batch["attention_mask"]))
        return np.concatenate(out, axis=0)


def batch_step(model: EncoderModel, max_length: int, batch_size: int) -> int:
    """Rows per model call: ``batch_size``, capped by the model's own batch limit. A tokenizer
    that truncates later than the model reads is a bundle error, named before anything runs."""
    limit = model.max_seq_len
    if limit is not None and max_length > limit:
        raise BundleError(f"{model.path}: the tokenizer truncates at {max_length} tokens but the model "
                          f"takes at most {limit}")
    cap = model.max_batch
    return max(1, min(batch_size, cap) if cap is not None else batch_size)


OnnxEmbedder = TextEmbedder  # the name tests/test_train_embedder.py imports

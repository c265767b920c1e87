"""The embed task: text -> L2-normalised vectors (tokenize, run the encoder, mean-pool, normalise).

Which runtime runs the encoder is the backend's business (``magicselector.backends``); this module
holds only the task.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Protocol, Sequence, cast

import numpy as np

from ..backends import EncoderModel, open_model
from ..errors import BundleError, InputError

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class TextTokenizer:
    """A `tokenizers` tokenizer set up for BERT-style encoders: truncation, per-batch padding."""

    def __init__(self, tokenizer_file: str | Path, max_length: int = 128, data: bytes | None = None) -> None:
        from tokenizers import Tokenizer

        path = Path(tokenizer_file)
        if data is None and not path.is_file():
            raise BundleError(f"tokenizer file not found: {path}")
        self.path = path
        self.max_length = max_length
        self._tok = tokenizer_from(Tokenizer, path, data)
        self._tok.enable_truncation(max_length=max_length)
        self._tok.no_padding()

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        return pad_encodings(self._tok.encode_batch(list(texts)))

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        return pad_encodings(self._tok.encode_batch([tuple(p) for p in pairs]))


def tokenizer_from(tokenizer_class: type[Tokenizer], path: Path, data: bytes | None = None) -> Tokenizer:
    """A ``tokenizers`` tokenizer from ``data`` (the file's bytes, already checked against a bundle's
    manifest: the file is not opened again) or else from the file; a damaged one is a BundleError."""
    try:
        return tokenizer_class.from_buffer(data) if data is not None else tokenizer_class.from_file(str(path))
    except Exception:  # tokenizers raises a bare Exception with serde's text
        raise BundleError(f"{path}: not a readable tokenizer.json (truncated or damaged)") from None


def pad_encodings(encodings: Sequence[Encoding]) -> dict[str, np.ndarray]:
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
    unit: np.ndarray = pooled / np.clip(norms, 1e-12, None)  # numpy types this Any (dtype-generic arrays)
    return unit.astype(np.float32)


class TextEmbedder:
    """Sentence embedder over an encoder whose output 0 is the last hidden state (any backend)."""

    def __init__(self, model: EncoderModel | str | Path, tokenizer: TextTokenizer, dim: int, threads: int = 1,
                 batch_size: int = 32, max_padding: float = 0.25) -> None:
        self.model = open_model(model, threads=threads) if isinstance(model, (str, Path)) else model
        self.tokenizer = tokenizer
        self.dim = int(dim)
        self.batch_size = batch_size
        self.max_padding = float(max_padding)  # see length_groups

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
        out: np.ndarray | None = None  # sized by the model's output (a probe may not know the dimension yet)
        for start in range(0, len(texts), step):
            batch = self.tokenizer.encode(texts[start:start + step])
            for rows, feeds, hidden in grouped_runs(self.model, batch, self.max_padding):
                vectors = mean_pool_normalize(hidden, feeds["attention_mask"])
                if out is None:
                    out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
                out[start + rows] = vectors
        return cast(np.ndarray, out)  # texts is not empty, so a group ran and sized it


def grouped_runs(model: EncoderModel, batch: dict[str, np.ndarray],
                 max_padding: float) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]]:
    """Run a padded batch in length groups (``length_groups``), yielding ``(rows, feeds, output 0)``.

    A row's cost is its call's width: a 27-token history turn padded its 13-token sub-tasks to 27
    in one call. Rows of similar length share a call, each cut to its group's width; a backend with
    fixed shapes pads every call to the same size anyway, so it gets one call."""
    lengths = batch["attention_mask"].sum(axis=1)
    groups = ([np.arange(len(lengths))] if getattr(model, "fixed_shapes", False)
              else length_groups(lengths, max_padding))
    for rows in groups:
        width = int(lengths[rows].max())
        feeds = {k: np.ascontiguousarray(v[rows, :width]) for k, v in batch.items()}
        yield rows, feeds, model.run(feeds)


def length_groups(lengths: np.ndarray, max_padding: float = 0.25) -> list[np.ndarray]:
    """Row indices grouped so that no row is padded by more than ``max_padding`` of its group's
    width: longest first, a new group whenever the next row is shorter than ``(1 - max_padding)``
    of the current group's width."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    groups: list[list[int]] = []
    width = 0
    for i in order:
        n = int(lengths[i])
        if not groups or n < (1.0 - max_padding) * width:
            groups.append([])
            width = n
        groups[-1].append(int(i))
    return [np.asarray(g) for g in groups]


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

"""The embed task: text -> L2-normalised vectors (tokenize, run the encoder, mean-pool, normalise).

Which runtime runs the encoder is the backend's business (``magicselector.backends``); this module
holds only the task.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence, cast

import numpy as np

from ..backends import EncoderModel, open_model
from ..errors import BundleError, InputError

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str], release: bool = False) -> np.ndarray: ...


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
        self._boundaries = word_boundaries(self._tok)
        # a longer text is tokenized from its first clip_chars characters where that gives the
        # same tokens (``prefix_suffices``): tokenizers reads a whole text before it truncates
        self.clip_chars = CLIP_CHARS_PER_TOKEN * max_length

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        return pad_encodings(self.encodings(texts))

    def encodings(self, texts: Sequence[str]) -> list[Encoding]:
        """The truncated encodings of ``texts``, the same as ``encode_batch``'s, with a long text
        tokenized only as far as its kept tokens reach."""
        texts = list(texts)
        clip = self.clip_chars
        if self._boundaries is None or all(len(t) <= clip for t in texts):
            return self._tok.encode_batch(texts)
        heads = [t[:clip] for t in texts]
        encs = self._tok.encode_batch(heads)
        for i, (text, head) in enumerate(zip(texts, heads)):
            if len(text) > clip and not prefix_suffices(encs[i], head, self._boundaries):
                encs[i] = self._tok.encode(text)  # the prefix cannot prove it: the whole text
        return encs

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        return pad_encodings(self._tok.encode_batch([tuple(p) for p in pairs]))


# characters read per token kept before a long text falls back to being tokenized whole: several
# times what a token of ordinary text spans, so the prefix nearly always holds the kept tokens
CLIP_CHARS_PER_TOKEN = 8
_SPACES = frozenset(" \t\n\r")  # whitespace every BERT-style normalizer keeps as a space
_ASCII_PUNCT = frozenset(chr(c) for c in [*range(33, 48), *range(58, 65), *range(91, 97), *range(123, 127)])
# normalizers that never join characters across a word boundary, nor turn one into a letter
_CHAR_LOCAL_NORMALIZERS = ("BertNormalizer", "Lowercase", "StripAccents", "NFD", "NFKD")


def word_boundaries(tok: Tokenizer) -> frozenset[str] | None:
    """Characters at which ``tok``'s pre-tokenizer always ends a word, whatever follows (its
    words are then tokenized each on its own); None where its pipeline is not one known to
    (another normalizer or pre-tokenizer: its texts are always tokenized whole)."""
    normalizer, pre = _type_name(tok.normalizer), _type_name(tok.pre_tokenizer)
    if normalizer not in (None, *_CHAR_LOCAL_NORMALIZERS) or (tok.truncation or {}).get("direction") != "right":
        return None
    if pre == "BertPreTokenizer":  # splits at whitespace and isolates every punctuation character
        return _SPACES | _ASCII_PUNCT
    if pre in ("Whitespace", "WhitespaceSplit"):
        return _SPACES
    return None


def _type_name(part: Any) -> str | None:
    """The class name of a tokenizer's pipeline part (its normalizer, pre-tokenizer), None where it has none."""
    return type(part).__name__ if part is not None else None


def prefix_suffices(enc: Encoding, head: str, boundaries: frozenset[str]) -> bool:
    """Whether the truncated encoding ``enc`` of ``head`` (a text's prefix) is the whole text's:
    it was truncated, and a word boundary follows its last kept token inside ``head``, so every
    kept token comes from words that end before the cut and are tokenized as in the whole text."""
    if not enc.overflowing:
        return False
    ends = [end for (_, end), special in zip(enc.offsets, enc.special_tokens_mask) if not special]
    if not ends:
        return False
    return any(c in boundaries for c in head[ends[-1]:])


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
    """Sentence embedder over an encoder whose output 0 is the last hidden state (any backend).

    ``vectors_key``: what its vectors depend on (a bundle's model and tokenizer sha256 and the
    window), under which a catalog's tool vectors are cached on disk (``tool_vectors``); the bundle
    that opens it sets it. Empty (an embedder built by hand): its vectors are never cached."""

    def __init__(self, model: EncoderModel | str | Path, tokenizer: TextTokenizer, dim: int, threads: int = 1,
                 batch_size: int = 32, max_padding: float = 0.25, vectors_key: str = "") -> None:
        self.model = open_model(model, threads=threads) if isinstance(model, (str, Path)) else model
        self.tokenizer = tokenizer
        self.dim = int(dim)
        self.batch_size = batch_size
        self.max_padding = float(max_padding)  # see length_groups
        self.vectors_key = vectors_key

    @classmethod
    def from_path(cls, model_path: str | Path, tokenizer_file: str | Path, *, dim: int = 384,
                  max_length: int = 128, threads: int = 1) -> "TextEmbedder":
        return cls(open_model(model_path, threads=threads), TextTokenizer(tokenizer_file, max_length), dim=dim)

    @property
    def model_path(self) -> Path:
        return self.model.path

    def embed(self, texts: Sequence[str], release: bool = False) -> np.ndarray:
        """One unit vector per text. ``release``: bulk work (a catalog indexed in batches), whose
        runs give their activations back (``EncoderModel.run``): thousands of batches of ever new
        shapes otherwise grow ONNX Runtime's arena without bound. A turn keeps its arena (giving it
        back there costs about a third of the turn's embed time)."""
        if isinstance(texts, str):
            raise InputError("embed() takes a list of texts, not one string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        step = batch_step(self.model, self.tokenizer.max_length, self.batch_size)
        out: np.ndarray | None = None  # sized by the model's output (a probe may not know the dimension yet)
        for start in range(0, len(texts), step):
            batch, of = distinct_rows(self.tokenizer.encode(texts[start:start + step]))
            distinct = self._distinct_vectors(batch, release)
            if out is None:
                out = np.zeros((len(texts), distinct.shape[1]), dtype=np.float32)
            out[start:start + len(of)] = distinct[of]
        return cast(np.ndarray, out)  # texts is not empty, so a batch ran and sized it

    def _distinct_vectors(self, batch: dict[str, np.ndarray], release: bool) -> np.ndarray:
        """One unit vector per row of an encoded batch, run in groups of similar lengths."""
        distinct: np.ndarray | None = None
        for rows, feeds, hidden in grouped_runs(self.model, batch, self.max_padding, release):
            vectors = mean_pool_normalize(hidden, feeds["attention_mask"])
            if distinct is None:
                distinct = np.zeros((len(batch["input_ids"]), vectors.shape[1]), dtype=np.float32)
            distinct[rows] = vectors
        return cast(np.ndarray, distinct)  # the batch has a row, so a group ran and sized it


def distinct_rows(batch: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The batch with each distinct row once (first occurrences, in order), and for each row of
    ``batch`` its row there. Texts that truncate to the same tokens (a long utterance and the
    history-folded text that starts with it) run once: the same row gives the same vector, and
    a row's twin leaves the batch's value range, which dynamically quantized models scale by, as
    it was."""
    n = len(batch["input_ids"])
    seen: dict[bytes, int] = {}
    of = np.asarray([seen.setdefault(b"".join(v[i].tobytes() for v in batch.values()), len(seen))
                     for i in range(n)], dtype=np.int64)
    if len(seen) == n:
        return batch, of
    keep = np.unique(of, return_index=True)[1]  # first occurrences, in the order they appear
    return {k: v[keep] for k, v in batch.items()}, of


def grouped_runs(model: EncoderModel, batch: dict[str, np.ndarray], max_padding: float,
                 release: bool = False) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]]:
    """Run a padded batch in length groups (``length_groups``), yielding ``(rows, feeds, output 0)``.

    A row's cost is its call's width: a 27-token history turn padded its 13-token sub-tasks to 27
    in one call. Rows of similar length share a call, each cut to its group's width; a backend with
    fixed shapes pads every call to the same size anyway, so it gets one call. ``release``: each
    run gives its activations back (``EncoderModel.run``)."""
    lengths = batch["attention_mask"].sum(axis=1)
    groups = ([np.arange(len(lengths))] if getattr(model, "fixed_shapes", False)
              else length_groups(lengths, max_padding))
    for rows in groups:
        width = int(lengths[rows].max())
        feeds = {k: np.ascontiguousarray(v[rows, :width]) for k, v in batch.items()}
        yield rows, feeds, (model.run(feeds, release=True) if release else model.run(feeds))


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



"""The cross-encoder experiment's shared parts: the (query, tool text) pair tokenizer, the scorer over
an INT8 ``.onnx`` / ``.pte`` file, reranker folders and their probe lists. The runtime carries no
cross-encoder (it never earned its place: docs/bench/reranker.md); its training (``train/reranker.py``),
export (``export/shipped_reranker.py``) and bench (``bench/experiments/rerank.py``) all use these, so
they sit in the layer below the three.

The cost of a cross-encoder grows with candidates x tokens x layers and nothing can be cached per
tool, so a scorer bounds all three: at most ``candidates`` pairs per list, ``max_length`` tokens a
pair, and the model's own depth. How a pair is cut to ``max_length`` must match training; the
reranker's metadata (``reranker.json``) records it:

* ``query_capped`` (what ``magicselector train reranker`` uses): the query keeps at most
  ``max_length - specials - m`` tokens with ``m = min(min_tool_tokens, (max_length - specials) // 2)``;
  the tool text fills the rest and is cut at its end. A long query (or a long history) can then
  never push the tool side under ``m`` tokens, and the tool's name, which comes first, survives.
* ``longest_first``: the ``tokenizers`` default, for checkpoints trained that way.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from magicselector.backends import EncoderModel, open_model
from magicselector.catalog import Catalog, tool_text
from magicselector.errors import BundleError, InputError
from magicselector.stages.embed import batch_step, grouped_runs, pad_encodings, tokenizer_from
from magicselector.targets import resolve_target

TRUNCATIONS = ("query_capped", "longest_first")
RERANKER_META = "reranker.json"  # the metadata file of a reranker folder (model + tokenizer + this)
# the experiment's INT8 cross-encoder (per CPU target) and its model card: in a source checkout only,
# outside the wheel's package data (bench/experiments/reranker, beside this package's folder)
EXPERIMENT_RERANKER_DIR = Path(__file__).resolve().parent.parent / "bench" / "experiments" / "reranker"


class PairTokenizer:
    """(query, tool text) pairs -> padded int64 arrays, cut to ``max_length`` tokens by the
    ``truncation`` rule of the module docstring. ``tokenizers`` only, as on a phone."""

    def __init__(self, tokenizer_file: str | Path, max_length: int = 96, truncation: str = "query_capped",
                 min_tool_tokens: int = 32, data: bytes | None = None) -> None:
        from tokenizers import Tokenizer

        if truncation not in TRUNCATIONS:
            raise InputError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
        path = Path(tokenizer_file)
        if data is None and not path.is_file():
            raise BundleError(f"reranker tokenizer not found: {path}")
        self.max_length = int(max_length)
        self.truncation = truncation
        self._tok = tokenizer_from(Tokenizer, path, data)  # data: the checked bytes of a bundle's file
        self._tok.no_padding()
        self._tok.no_truncation()
        pp = self._tok.post_processor
        self.specials = pp.num_special_tokens_to_add(True) if pp is not None else 0
        room = self.max_length - self.specials
        if room < 2:
            raise InputError(f"max_length {max_length} leaves no room for a query and a tool")
        self.min_tool_tokens = max(1, min(int(min_tool_tokens), room // 2))
        self.query_cap = room - self.min_tool_tokens
        self._pair = tokenizer_from(Tokenizer, path, data)
        self._pair.no_padding()
        self._pair.enable_truncation(max_length=self.max_length, strategy="longest_first")

    def describe(self) -> dict[str, Any]:
        return {"truncation": self.truncation, "max_length": self.max_length, "special_tokens": self.specials,
                "min_tool_tokens": self.min_tool_tokens, "query_cap_tokens": self.query_cap}

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        pairs = [(q, t) for q, t in pairs]
        if self.truncation == "longest_first":
            return pad_encodings(self._pair.encode_batch(pairs))
        # a list's pairs share one query: tokenize each distinct query once (a long one costs a lot)
        queries: dict[str, Any] = dict.fromkeys(q for q, _ in pairs)
        for text, enc in zip(list(queries), self._tok.encode_batch(list(queries), add_special_tokens=False)):
            if len(enc.ids) > self.query_cap:
                enc.truncate(self.query_cap)
                # truncate keeps the cut tokens as overflow, which every pair would copy: take the
                # encoding of just the kept prefix instead, when it is the same tokens
                again = self._tok.encode(text[: enc.offsets[-1][1]], add_special_tokens=False)
                enc = again if again.ids == enc.ids else enc
            queries[text] = enc
        ts = self._tok.encode_batch([t for _, t in pairs], add_special_tokens=False)
        encs = []
        for (text, _), t in zip(pairs, ts):
            q = queries[text]
            room = self.max_length - self.specials - len(q.ids)
            if len(t.ids) > room:
                t.truncate(room)
            encs.append(self._tok.post_process(q, t, add_special_tokens=True))
        return pad_encodings(encs)


# the pair window of a reranker whose metadata does not record one
PAIR_WINDOW_DEFAULTS: dict[str, Any] = {"max_length": 96, "truncation": "longest_first", "min_tool_tokens": 32}


def pair_window(meta: dict[str, Any]) -> dict[str, Any]:
    """The pair-tokenization settings recorded in reranker metadata (``PAIR_WINDOW_DEFAULTS`` where unrecorded)."""
    d = PAIR_WINDOW_DEFAULTS
    return {"max_length": int(meta.get("max_length", d["max_length"])),
            "truncation": str(meta.get("truncation", d["truncation"])),
            "min_tool_tokens": int(meta.get("min_tool_tokens", d["min_tool_tokens"]))}


class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...

    # one call for pairs with different queries: the experiment reranks a turn's head in one call
    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray: ...


def check_rerank_input(query: str, texts: Sequence[str]) -> bool:
    """Raise InputError for an unusable (query, texts) pair set; False when there is nothing to score."""
    if not isinstance(query, str) or not query.strip():
        raise InputError("rerank: the query is empty")
    if isinstance(texts, str):
        raise InputError("rerank: texts must be a list of tool texts, not one string")
    return len(texts) > 0


class CrossEncoder:
    """A cross-encoder whose output 0 is one relevance logit per pair (any backend)."""

    def __init__(self, model: EncoderModel | str | Path, tokenizer: PairTokenizer, threads: int = 1,
                 batch_size: int = 32, max_padding: float = 0.25) -> None:
        self.model = open_model(model, threads=threads) if isinstance(model, (str, Path)) else model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_padding = float(max_padding)  # see embed.length_groups
        self.name = f"{self.model.kind}-cross-encoder"

    @classmethod
    def from_path(cls, model_path: str | Path, tokenizer_file: str | Path, *, max_length: int = 96,
                  truncation: str = "longest_first", min_tool_tokens: int = 32,
                  threads: int = 1) -> "CrossEncoder":
        return cls(open_model(model_path, threads=threads),
                   PairTokenizer(tokenizer_file, max_length, truncation, min_tool_tokens))

    @classmethod
    def from_dir(cls, folder: str | Path, *, threads: int = 1, target: str | None = None) -> "CrossEncoder":
        """A reranker folder: its INT8 model for ``target`` (``host`` or None: this CPU's;
        ``reranker_model_file``), ``tokenizer.json`` and ``reranker.json`` (its pair window)."""
        folder = Path(folder)
        meta = read_reranker_meta(folder)
        return cls.from_path(reranker_model_file(folder, meta, target), folder / "tokenizer.json", threads=threads,
                             **pair_window(meta))

    @property
    def model_path(self) -> Path:
        return self.model.path

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not check_rerank_input(query, texts):
            return np.zeros(0, dtype=np.float32)
        return self.score_pairs([(query, t) for t in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One logit per (query, tool text) pair; the pairs may have different queries (a decomposed
        turn's fused head, each tool with its sub-task)."""
        for query, _ in pairs:
            check_rerank_input(query, [])
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        step = batch_step(self.model, self.tokenizer.max_length, self.batch_size)
        out = np.zeros(len(pairs), dtype=np.float32)
        for start in range(0, len(pairs), step):
            batch = self.tokenizer.encode_pairs([(q, t or " ") for q, t in pairs[start:start + step]])
            for rows, _, logits in grouped_runs(self.model, batch, self.max_padding):
                out[start + rows] = np.asarray(logits, dtype=np.float32).reshape(-1)
        return out


def read_reranker_meta(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    path = folder / RERANKER_META
    if not path.is_file():
        raise BundleError(f"{folder}: not a reranker folder (no {RERANKER_META}; expected model.onnx, "
                          f"tokenizer.json and {RERANKER_META})")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BundleError(f"{path}: unreadable reranker metadata ({e})") from None
    if not isinstance(meta, dict):
        raise BundleError(f"{path}: reranker metadata must be a JSON object")
    return meta


def reranker_model_file(folder: str | Path, meta: dict[str, Any], target: str | None = None) -> Path:
    """The model file of a reranker folder for ``target`` (``host`` or None: this CPU's). A folder
    whose ``reranker.json`` has ``targets`` holds one INT8 file per distinct quantization and maps
    each CPU target to one; a folder without holds one ``model.onnx`` for every target."""
    folder = Path(folder)
    path = folder / RERANKER_META
    targets = meta.get("targets")
    if targets is None:
        resolve_target(target)  # an unknown name is an error here too
        name = "model.onnx"
    else:
        if not isinstance(targets, dict) or not targets:
            raise BundleError(f"{path}: field 'targets' must map CPU targets to model files")
        target = resolve_target(target)
        entry = targets.get(target)
        listed = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(listed, str) or not listed or Path(listed).name != listed:
            raise BundleError(f"{path}: no model file for target {target!r} (it has {', '.join(sorted(targets))})")
        name = listed
    model = folder / name
    if not model.is_file():
        raise BundleError(f"{model}: the reranker folder lacks its model file"
                          + (f" (listed for {target} in {RERANKER_META})" if targets is not None else ""))
    return model


def rerank_probe_groups(catalog: Catalog, queries: Sequence[str] | None = None, per_query: int = 10,
                        chars: int = 200) -> dict[str, list[str]]:
    """Query lists for reranker parity: each probe query (default: the first 8 of the bundle
    writer's ``PROBE_QUERIES``) against a rotating slice of catalog tools."""
    if queries is None:  # imported here: the scorer itself runs without usearch (tools/quantization_parity.py)
        from magicselector.bundle_writer import PROBE_QUERIES

        queries = PROBE_QUERIES[:8]
    tools = list(catalog)
    if not tools:
        return {}
    out = {}
    for i, q in enumerate(queries):
        start = (i * per_query) % len(tools)
        picked = [tools[(start + j) % len(tools)] for j in range(min(per_query, len(tools)))]
        out[q] = [tool_text(t, chars) for t in picked]
    return out

"""ExecuTorch (``.pte``) encoders behind the same stage interfaces as the ONNX ones.

``PteEmbedder.embed(texts)`` and ``PteCrossEncoder.score(query, texts)`` follow
``OnnxEmbedder`` / ``OnnxCrossEncoder``: same tokenizer (``TextTokenizer``), same mean pooling and
L2 normalisation, same batching. The program is loaded on first use; ``executorch`` is imported
only then, so a bundle with ONNX models never needs it.

Programs written by ``magicselector.export.executorch`` describe themselves through constant
methods: ``max_seq_len``, ``max_batch`` and ``fixed_shapes`` (1 when the graph was exported with
fixed shapes, in which case every batch is padded to ``max_batch`` x ``max_seq_len``; padding
rows carry an all-zero attention mask and are dropped from the output).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import BundleError, InputError
from .embed import TextTokenizer, mean_pool_normalize
from .rerank import PairTokenizer, check_rerank_input

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def _runtime():
    try:
        from executorch.runtime import Runtime
    except ImportError as e:
        raise BundleError("this bundle holds an ExecuTorch (.pte) model, which needs the executorch package: "
                          "bash tools/install_release_deps.sh (executorch==1.5.1 --no-deps plus its few "
                          f"dependencies), or rebuild the bundle with --format onnx ({e})") from None
    return Runtime.get()


class _PteProgram:
    """One loaded ``.pte``: the forward method plus the shape facts it carries."""

    def __init__(self, model_path: Path) -> None:
        import torch  # executorch's Python runtime takes and returns torch tensors

        self._torch = torch
        program = _runtime().load_program(str(model_path))
        names = set(program.method_names)
        if "forward" not in names:
            raise BundleError(f"{model_path}: the ExecuTorch program has no forward method")
        self.forward = program.load_method("forward")
        self.max_seq_len = int(self._constant(program, names, "max_seq_len", 512))
        self.max_batch = int(self._constant(program, names, "max_batch", 64))
        self.fixed = bool(self._constant(program, names, "fixed_shapes", 0))
        self.lock = threading.Lock()  # an ExecuTorch Method holds its own buffers: one call at a time

    @staticmethod
    def _constant(program: Any, names: set[str], name: str, default: int) -> int:
        if name not in names:
            return default
        out = program.load_method(name).execute([])
        return int(out[0])

    def run(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        n, width = batch["input_ids"].shape
        if width > self.max_seq_len:
            raise InputError(f"{width} tokens exceed the program's {self.max_seq_len}")
        if self.fixed:
            feeds = []
            for name in INPUT_NAMES:
                padded = np.zeros((self.max_batch, self.max_seq_len), dtype=np.int64)
                padded[:n, :width] = batch[name]
                feeds.append(padded)
        else:
            feeds = [np.ascontiguousarray(batch[name], dtype=np.int64) for name in INPUT_NAMES]
        with self.lock:
            out = self.forward.execute([self._torch.from_numpy(f) for f in feeds])[0]
        out = out.detach().numpy() if hasattr(out, "detach") else np.asarray(out)
        return out[:n, :width] if (self.fixed and out.ndim == 3) else out[:n]


class _PteBase:
    def __init__(self, model_path: str | Path, tokenizer: TextTokenizer, threads: int = 1,
                 batch_size: int = 32) -> None:
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise BundleError(f"{self._what} model not found: {self.model_path}")
        self.tokenizer = tokenizer
        self.threads = threads  # XNNPACK sizes its own thread pool; kept for interface parity
        self.batch_size = batch_size
        self._program: _PteProgram | None = None
        self._lock = threading.Lock()

    _what = "ExecuTorch"

    @property
    def program(self) -> _PteProgram:
        if self._program is None:
            with self._lock:
                if self._program is None:
                    program = _PteProgram(self.model_path)
                    if self.tokenizer.max_length > program.max_seq_len:
                        raise BundleError(f"{self.model_path}: the tokenizer truncates at {self.tokenizer.max_length} "
                                          f"tokens but the program takes at most {program.max_seq_len}")
                    self._program = program
        return self._program

    def _batches(self, n: int):
        step = max(1, min(self.batch_size, self.program.max_batch))
        return range(0, n, step), step


class PteEmbedder(_PteBase):
    """Sentence embedder over an ExecuTorch encoder whose output 0 is the last hidden state."""

    _what = "embedder"

    def __init__(self, model_path: str | Path, tokenizer: TextTokenizer, dim: int, threads: int = 1,
                 batch_size: int = 32) -> None:
        super().__init__(model_path, tokenizer, threads, batch_size)
        self.dim = int(dim)

    @classmethod
    def from_path(cls, model_path: str | Path, tokenizer_file: str | Path, *, dim: int = 384,
                  max_length: int = 128, threads: int = 1) -> "PteEmbedder":
        return cls(model_path, TextTokenizer(tokenizer_file, max_length), dim=dim, threads=threads)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InputError("embed() takes a list of texts, not one string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        starts, step = self._batches(len(texts))
        out = []
        for start in starts:
            batch = self.tokenizer.encode(texts[start:start + step])
            hidden = self.program.run(batch)
            out.append(mean_pool_normalize(hidden, batch["attention_mask"]))
        return np.concatenate(out, axis=0)


class PteCrossEncoder(_PteBase):
    """A cross-encoder exported to ExecuTorch whose output 0 is one relevance logit per pair."""

    name = "pte-cross-encoder"
    _what = "reranker"

    @classmethod
    def from_path(cls, model_path: str | Path, tokenizer_file: str | Path, *, max_length: int = 96,
                  truncation: str = "longest_first", min_tool_tokens: int = 32,
                  threads: int = 1) -> "PteCrossEncoder":
        return cls(model_path, PairTokenizer(tokenizer_file, max_length, truncation, min_tool_tokens), threads=threads)

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not check_rerank_input(query, texts):
            return np.zeros(0, dtype=np.float32)
        starts, step = self._batches(len(texts))
        out = []
        for start in starts:
            batch = self.tokenizer.encode_pairs([(query, t or " ") for t in texts[start:start + step]])
            out.append(np.asarray(self.program.run(batch), dtype=np.float32).reshape(-1))
        return np.concatenate(out)

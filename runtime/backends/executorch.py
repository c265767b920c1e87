"""The ExecuTorch backend: a ``.pte`` program loaded on first use, run one call at a time.

``executorch`` is imported only when a ``.pte`` model first runs, so a bundle with ONNX models
never needs it. Programs written by ``magicselector.export.executorch`` describe themselves through
constant methods: ``max_seq_len``, ``max_batch`` and ``fixed_shapes`` (1 when the graph was exported
with fixed shapes, in which case every batch is padded to ``max_batch`` x ``max_seq_len``; padding
rows carry an all-zero attention mask and are dropped from the output).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import BundleError, InputError

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # the exported forward's argument order


def _runtime() -> Any:
    try:
        from executorch.runtime import Runtime
    except ImportError as e:
        raise BundleError("this bundle holds an ExecuTorch (.pte) model, which needs the executorch package: "
                          "bash tools/install_release_deps.sh (executorch==1.5.1 --no-deps plus its few "
                          f"dependencies), or rebuild the bundle with --format onnx ({e})") from None
    return Runtime.get()


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(8)
    except OSError as e:
        raise BundleError(f"{path}: cannot be read ({e.strerror})") from None


class _Program:
    """One loaded ``.pte``: the forward method plus the shape facts it carries."""

    def __init__(self, model_path: Path, data: bytes | None = None, name: str | None = None) -> None:
        import torch  # executorch's Python runtime takes and returns torch tensors

        self._torch = torch
        name = name or str(model_path)
        runtime = _runtime()
        head = data[:8] if data is not None else _head(model_path)
        if len(head) < 8 or head[4:6] != b"ET":  # the flatbuffer's file identifier ("ET12"): executorch
            # aborts the whole process on some bytes that are not a program, so look before handing them over
            raise BundleError(f"{name}: not a loadable ExecuTorch program (no ExecuTorch header); rebuild the bundle")
        try:
            program = runtime.load_program(data if data is not None else str(model_path))
            names = set(program.method_names)
        except Exception:  # executorch's own errors name its internals
            raise BundleError(f"{name}: not a loadable ExecuTorch program (truncated, damaged or not .pte); "
                              "rebuild the bundle") from None
        if "forward" not in names:
            raise BundleError(f"{name}: the ExecuTorch program has no forward method")
        # executorch's loader reads the bytes in place without holding a reference to them: the
        # program, its methods and the bytes must live as long as this object, or execute reads
        # freed memory (the segfault of a bundle's verify step, which loads models from bytes)
        self._data, self._program = data, program
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

    def run(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        n, width = batch["input_ids"].shape
        if width > self.max_seq_len:
            raise InputError(f"{width} tokens exceed the program's {self.max_seq_len}")
        if n > self.max_batch:
            raise InputError(f"{n} rows exceed the program's batch of {self.max_batch}")
        feeds = self._feeds(batch, n, width)
        with self.lock:
            out = self.forward.execute([self._torch.from_numpy(f) for f in feeds])[0]
        out = out.detach().numpy() if hasattr(out, "detach") else np.asarray(out)
        return out[:n, :width] if (self.fixed and out.ndim == 3) else out[:n]

    def _feeds(self, batch: Mapping[str, np.ndarray], n: int, width: int) -> list[np.ndarray]:
        """The program's inputs: the batch as int64, padded to its fixed shape where it has one."""
        if not self.fixed:
            return [np.ascontiguousarray(batch[name], dtype=np.int64) for name in INPUT_NAMES]
        feeds = []
        for name in INPUT_NAMES:
            padded = np.zeros((self.max_batch, self.max_seq_len), dtype=np.int64)
            padded[:n, :width] = batch[name]
            feeds.append(padded)
        return feeds


class ExecuTorchModel:
    """A ``.pte`` encoder: from a path, loaded on first use (once under concurrent first use); from
    ``data`` (the file's bytes, already checked against a bundle's manifest), loaded at once from
    those bytes, so a damaged program fails here as a BundleError naming ``name`` (default: the path)."""

    kind = "pte"

    def __init__(self, path: str | Path, threads: int = 1, data: bytes | None = None, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or str(self.path)
        if data is None and not self.path.is_file():
            raise BundleError(f"{self.name}: model file not found")
        self.threads = int(threads)  # XNNPACK sizes its own thread pool; kept for interface parity
        self._program: _Program | None = None
        self._lock = threading.Lock()
        if data is not None:
            self._program = _Program(self.path, data, self.name)

    @property
    def loaded(self) -> bool:
        return self._program is not None

    @property
    def program(self) -> _Program:
        if self._program is None:
            with self._lock:
                if self._program is None:
                    self._program = _Program(self.path)
        return self._program

    @property
    def max_batch(self) -> int:
        return self.program.max_batch

    @property
    def max_seq_len(self) -> int:
        return self.program.max_seq_len

    @property
    def fixed_shapes(self) -> bool:
        """Every call runs at ``max_batch`` x ``max_seq_len`` (the program was exported so)."""
        return self.program.fixed

    def run(self, feeds: Mapping[str, np.ndarray], release: bool = False) -> np.ndarray:
        del release  # the program plans its memory once, at load: nothing grows to give back
        return self.program.run(feeds)

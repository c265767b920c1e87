"""Backends: ``open_model`` opens an encoder file by its kind; the one place a backend is chosen by suffix."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Protocol

import numpy as np

from ..errors import BundleError


class EncoderModel(Protocol):
    """An encoder file ready to run: int64 input arrays by name in, output 0 out.

    ``max_batch`` / ``max_seq_len`` are the rows / tokens one call takes (None: no limit); reading
    them may load the model. A backend whose every call runs at those fixed shapes says so with a
    true ``fixed_shapes`` (absent: the shapes follow the inputs)."""

    path: Path
    kind: str

    @property
    def max_batch(self) -> int | None: ...

    @property
    def max_seq_len(self) -> int | None: ...

    def run(self, feeds: Mapping[str, np.ndarray], release: bool = False) -> np.ndarray: ...


def open_model(path: str | Path, *, threads: int = 1, data: bytes | None = None,
               name: str | None = None) -> EncoderModel:
    """The backend model for an encoder file, chosen by its suffix; nothing is loaded until first use
    (and a backend's own package is imported only when a file of its kind is opened). With ``data``
    (the file's bytes, checked against a bundle's manifest) the model is loaded at once from those
    bytes and the file is not opened again. ``name`` is how errors name it."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        from .onnx import OnnxModel

        return OnnxModel(path, threads=threads, data=data, name=name)
    if suffix == ".pte":
        from .executorch import ExecuTorchModel

        return ExecuTorchModel(path, threads=threads, data=data, name=name)
    raise BundleError(f"{path}: no backend runs {suffix or 'suffix-less'!r} files; an encoder model is "
                      ".onnx (ONNX Runtime) or .pte (ExecuTorch)")

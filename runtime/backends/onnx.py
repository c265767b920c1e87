"""The ONNX Runtime backend: one lazily created CPU session per model file, its threads and input names."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import BundleError


def make_session(model_path: str | Path, threads: int) -> Any:
    """A CPU ``InferenceSession`` with ``threads`` intra-op threads, one inter-op thread (the runtime
    calls it from its own threads) and every graph optimisation."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])


class OnnxModel:
    """An ``.onnx`` encoder. The session is created on first use, once even when several threads
    use the model at the same time, so a stage that never runs costs no memory."""

    kind = "onnx"
    max_batch: int | None = None  # dynamic axes: any batch, any length
    max_seq_len: int | None = None

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise BundleError(f"{self.path}: model file not found")
        self.threads = int(threads)
        self._session: Any = None
        self._input_names: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._session is not None

    @property
    def session(self) -> Any:
        if self._session is None:
            with self._lock:
                if self._session is None:
                    session = make_session(self.path, self.threads)
                    self._input_names = frozenset(i.name for i in session.get_inputs())
                    self._session = session  # published last: a reader never sees it without its names
        return self._session

    @property
    def input_names(self) -> frozenset[str]:
        self.session  # noqa: B018 - the names are read when the session is created
        return self._input_names

    def run(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        """Output 0 for the feeds the graph takes (others, e.g. ``token_type_ids`` of a model
        without them, are left out). ONNX Runtime sessions are safe to run from many threads."""
        session = self.session
        return session.run(None, {k: v for k, v in feeds.items() if k in self._input_names})[0]

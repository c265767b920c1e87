"""The ONNX Runtime backend: one CPU session per model file (from a path, created lazily, or from
checked bytes, created at once), its threads and input names."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import BundleError

# A folder that cannot exist (/dev/null is no folder, so nothing can be made under it): made by no
# one, it needs no cleaning up, and no process, even one killed, leaves one behind in the temp folder.
NO_EXTERNAL_DATA_FOLDER = os.path.join(os.devnull, "magicselector-no-external-data")


def make_session(model: str | Path | bytes, threads: int) -> Any:
    """A CPU ``InferenceSession`` with ``threads`` intra-op threads, one inter-op thread (the runtime
    calls it from its own threads) and every graph optimisation; ``model`` is a path or the file's bytes."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    source = bytes(model) if isinstance(model, (bytes, bytearray, memoryview)) else str(model)
    if isinstance(source, bytes):
        # a model loaded from its checked bytes must hold its weights: external data would be read
        # from the working folder, outside every hash; a folder that cannot exist makes such a model
        # fail to load ("External data path does not exist"), whatever path its data names
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                      NO_EXTERNAL_DATA_FOLDER)
    session = ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])
    # The Python wrapper keeps the model's bytes only to re-create the session on a provider
    # change, which a CPU session never has; holding them costs the model's size (40 MB for the
    # default bundle's two models).
    if getattr(session, "_model_bytes", None) is not None:
        session._model_bytes = None
    return session


def release_run_options() -> Any:
    """RunOptions that shrink the CPU arena at the end of the run (``OnnxModel.run(release=True)``)."""
    import onnxruntime as ort

    opts = ort.RunOptions()
    opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return opts


class OnnxModel:
    """An ``.onnx`` encoder. From a path, the session is created on first use, once even when
    several threads use the model at the same time, so a stage that never runs costs no memory.
    From ``data`` (the file's bytes, already checked against a bundle's manifest) it is created
    at once from those bytes: the file is not opened again, and a damaged model fails here, as a
    BundleError naming ``path``, rather than at the first query. ``name`` is how errors name it
    (default: the path)."""

    kind = "onnx"
    max_batch: int | None = None  # dynamic axes: any batch, any length
    max_seq_len: int | None = None

    def __init__(self, path: str | Path, threads: int = 1, data: bytes | None = None,
                 name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or str(self.path)
        if data is None and not self.path.is_file():
            raise BundleError(f"{self.name}: model file not found")
        self.threads = int(threads)
        self._session: Any = None
        self._input_names: frozenset[str] = frozenset()
        self._release_options: Any = None
        self._lock = threading.Lock()
        if isinstance(data, (bytes, bytearray, memoryview)):
            self._open(bytes(data))

    def _open(self, source: str | Path | bytes) -> None:
        try:
            session = make_session(source, self.threads)
        except ImportError:
            raise
        except Exception as e:  # onnxruntime's own errors (InvalidProtobuf, Fail, ...): its text names internals
            if "external data" in str(e).lower():
                raise BundleError(f"{self.name}: the model keeps weights in external data files, which a bundle "
                                  "does not allow (they would be read from outside the bundle, unhashed); save the "
                                  "ONNX model with its weights inside it") from None
            raise BundleError(f"{self.name}: not a loadable ONNX model (truncated, damaged or not ONNX); "
                              "rebuild the bundle") from None
        self._input_names = frozenset(i.name for i in session.get_inputs())
        self._release_options = release_run_options()
        self._session = session  # published last: a reader never sees it without its names

    @property
    def loaded(self) -> bool:
        return self._session is not None

    @property
    def session(self) -> Any:
        if self._session is None:
            with self._lock:
                if self._session is None:
                    self._open(self.path)
        return self._session

    @property
    def input_names(self) -> frozenset[str]:
        self.session  # noqa: B018 - the names are read when the session is created
        return self._input_names

    def run(self, feeds: Mapping[str, np.ndarray], release: bool = False) -> np.ndarray:
        """Output 0 for the feeds the graph takes (others, e.g. ``token_type_ids`` of a model
        without them, are left out). ONNX Runtime sessions are safe to run from many threads.
        ``release``: give the run's activations back at its end (ONNX Runtime's arena shrinkage), for
        bulk work of ever new shapes, over which the arena would otherwise keep growing."""
        session = self.session
        feeds = {k: v for k, v in feeds.items() if k in self._input_names}
        outputs: list[np.ndarray] = session.run(None, feeds, self._release_options if release else None)
        return outputs[0]

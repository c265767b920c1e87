"""Cross-caller micro-batching of the rerank stage: concurrent ``score_pairs`` calls that arrive within
a window share one cross-encoder run, and each caller gets its own rows back.

There is no thread of its own and no global state: the first caller of a batch waits up to
``window_ms`` (or until the batch holds ``max_pairs`` pairs), then runs the merged pairs for every
caller in it, while later callers wait for their rows. One merged run is in flight at a time; a
batch keeps filling while the previous one runs, so under load batches grow without a longer window.

A merged run gives each caller exactly its unbatched scores only when the model scores every pair on
its own. A dynamically quantized INT8 model does not: its activations share one quantization scale
per tensor, taken over every row of the run, so a caller's scores would depend on who else called at
the same time. ``BatchingReranker`` therefore checks the wrapped reranker on a probe before it
batches anything, and refuses one whose merged scores differ from its unbatched scores, unless
``RerankBatching.exact`` is False (to measure what batching would buy such a model).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from .rerank import check_rerank_input

# merged scores may differ from unbatched ones by float rounding (other GEMM blocking), not more
SCORE_TOLERANCE = 1e-4

# the probe the wrapped reranker must score the same merged and unbatched: two short queries over
# tool texts of different lengths, so the merged run pads and mixes rows as a real batch does
PROBE_PAIRS = (
    (("turn on bluetooth", "bluetooth_toggle: Turn Bluetooth on or off."),
     ("turn on bluetooth", "set_alarm: Set an alarm that rings at a clock time, once or on repeating days.")),
    (("what's the weather in Lisbon this weekend and will it rain on Sunday?",
      "weather_forecast: The forecast for a place and a day: temperature, rain, wind."),
     ("what's the weather in Lisbon this weekend and will it rain on Sunday?", "call_contact: Call someone.")),
)


@dataclass(frozen=True)
class RerankBatching:
    """How concurrent rerank calls are merged.

    window_ms: how long the first caller of a batch waits for others before the batch runs.
    max_pairs: a batch runs as soon as it holds this many pairs (a caller whose pairs would not fit
      starts the next batch).
    exact: refuse a reranker whose merged scores differ from its unbatched ones (see the module
      docstring); False batches it anyway, so that what batching would buy can be measured.
    """

    window_ms: float = 2.0
    max_pairs: int = 128
    exact: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.window_ms, (int, float)) or isinstance(self.window_ms, bool) \
                or not 0.0 <= self.window_ms <= 1000.0:
            raise InputError(f"RerankBatching.window_ms must be a number of milliseconds in [0, 1000], "
                             f"got {self.window_ms!r}")
        if not isinstance(self.max_pairs, int) or isinstance(self.max_pairs, bool) or self.max_pairs < 1:
            raise InputError(f"RerankBatching.max_pairs must be an integer >= 1, got {self.max_pairs!r}")


class _Batch:
    """The pairs of the callers that joined one merged run, and its outcome."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []
        self.callers = 0
        self.closed = False
        self.done = threading.Event()
        self.scores: np.ndarray | None = None
        self.error: BaseException | None = None

    def add(self, pairs: list[tuple[str, str]]) -> int:
        start = len(self.pairs)
        self.pairs.extend(pairs)
        self.callers += 1
        return start


class BatchingReranker:
    """A reranker (with ``score_pairs``) whose concurrent calls are merged into shared runs; the
    ``Reranker`` surface (``name``, ``score``, ``score_pairs``). Thread-safe."""

    def __init__(self, inner: Any, config: RerankBatching = RerankBatching()) -> None:
        if not callable(getattr(inner, "score_pairs", None)):
            raise InputError(f"rerank batching needs a reranker with score_pairs; {type(inner).__name__} has none")
        self.inner = inner
        self.config = config
        self.name = inner.name
        self._cond = threading.Condition()
        self._open: _Batch | None = None
        self._run_lock = threading.Lock()
        self.runs = 0  # merged runs so far
        self.calls = 0  # calls answered by them
        if config.exact:
            check_batch_invariant(inner)

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not check_rerank_input(query, texts):
            return np.zeros(0, dtype=np.float32)
        return self.score_pairs([(query, t) for t in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        pairs = [(q, t) for q, t in pairs]
        for query, _ in pairs:  # one caller's bad input must not fail the others' batch
            check_rerank_input(query, [])
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        batch, start, leader = self._join(pairs)
        if leader:
            self._lead(batch)
        else:
            batch.done.wait()
        if batch.error is not None:
            raise batch.error
        assert batch.scores is not None
        return batch.scores[start:start + len(pairs)].copy()

    def _join(self, pairs: list[tuple[str, str]]) -> tuple[_Batch, int, bool]:
        with self._cond:
            batch = self._open
            leader = batch is None or batch.closed or (len(batch.pairs) + len(pairs) > self.config.max_pairs)
            if leader:
                batch = self._open = _Batch()
            assert batch is not None
            start = batch.add(pairs)
            if len(batch.pairs) >= self.config.max_pairs:
                self._cond.notify_all()
            return batch, start, leader

    def _lead(self, batch: _Batch) -> None:
        deadline = time.monotonic() + self.config.window_ms / 1e3
        with self._cond:
            while len(batch.pairs) < self.config.max_pairs:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        with self._run_lock:
            with self._cond:
                batch.closed = True
                if self._open is batch:
                    self._open = None
                work = list(batch.pairs)
            try:
                batch.scores = np.asarray(self.inner.score_pairs(work), dtype=np.float32).reshape(-1)
                if len(batch.scores) != len(work):
                    raise InputError(f"{self.name}: {len(batch.scores)} scores for {len(work)} pairs")
            except BaseException as e:  # every caller of the batch gets the failure, not a hang
                batch.error = e
            finally:
                with self._cond:
                    self.runs += 1
                    self.calls += batch.callers
                batch.done.set()


def check_batch_invariant(reranker: Any, tolerance: float = SCORE_TOLERANCE) -> float:
    """The largest difference between ``reranker``'s scores of the probe lists run together and run
    one by one; an InputError when it exceeds ``tolerance`` (the model's scores depend on its batch)."""
    alone = [np.asarray(reranker.score_pairs(list(p)), dtype=np.float32).reshape(-1) for p in PROBE_PAIRS]
    merged = np.asarray(reranker.score_pairs([pair for p in PROBE_PAIRS for pair in p]),
                        dtype=np.float32).reshape(-1)
    diff = float(np.abs(np.concatenate(alone) - merged).max())
    if diff > tolerance:
        raise InputError(f"rerank batching: the reranker {reranker.name!r} scores a pair differently when other "
                         f"callers' pairs share its run (up to {diff:.3g} apart; a dynamically quantized INT8 model "
                         "takes one activation scale over the whole batch), so merging callers would change their "
                         "results; serve it unbatched")
    return diff

"""Cross-caller rerank batching with the reranker the package ships: concurrent callers' pairs share
runs and each caller gets exactly its own scores back; a reranker whose scores depend on its batch
(the shipped dynamic-INT8 one) is refused unless asked for."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from magicselector.bundle import shipped_reranker_dir
from magicselector.errors import InputError
from magicselector.stages.rerank import CrossEncoder
from magicselector.stages.rerank_batch import BatchingReranker, RerankBatching, check_batch_invariant

CALLERS = [
    [("turn on bluetooth", "bluetooth_toggle: Turn Bluetooth on or off."),
     ("turn on bluetooth", "wifi_toggle: Turn Wi-Fi on or off."),
     ("turn on bluetooth", "set_alarm: Set an alarm that rings at a clock time.")],
    [("wake me up at 6:30 tomorrow", "set_alarm: Set an alarm that rings at a clock time."),
     ("wake me up at 6:30 tomorrow", "start_timer: Start a countdown timer for a duration."),
     ("wake me up at 6:30 tomorrow", "calendar_add_event: Add an event to the calendar at a date and time, "
                                     "with a title, a place and the people invited."),
     ("set a timer", "start_timer: Start a countdown timer for a duration.")],
    [("text Maria that I'm running ten minutes late", "send_sms: Send a text message to a contact."),
     ("text Maria that I'm running ten minutes late", "call_contact: Call someone.")],
]


class PairByPair:
    """The shipped cross-encoder run on one pair at a time: its scores cannot depend on the batch,
    so a correct batcher must hand every caller exactly these scores."""

    def __init__(self, inner: CrossEncoder) -> None:
        self.inner = inner
        self.name = inner.name

    def score_pairs(self, pairs):
        return np.concatenate([self.inner.score_pairs([p]) for p in pairs]) if pairs else np.zeros(0, np.float32)


@pytest.fixture(scope="module")
def shipped():
    folder = shipped_reranker_dir()
    assert folder is not None, "the package ships a reranker folder (magicselector/models/reranker)"
    return CrossEncoder.from_dir(folder, threads=1)


def call_together(reranker, requests):
    """Every request from its own thread, released at once; the results (or errors) in request order."""
    gate = threading.Barrier(len(requests))
    out: list = [None] * len(requests)

    def call(i: int) -> None:
        gate.wait(timeout=30)
        try:
            out[i] = reranker.score_pairs(requests[i])
        except Exception as e:  # noqa: BLE001 - the test looks at what each caller got
            out[i] = e

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_concurrent_callers_get_their_unbatched_scores(shipped):
    inner = PairByPair(shipped)
    unbatched = [inner.score_pairs(pairs) for pairs in CALLERS]
    total = sum(len(p) for p in CALLERS)
    # the batch runs as soon as all three callers' pairs are in; the long window only bounds a failure
    batched = BatchingReranker(inner, RerankBatching(window_ms=1000, max_pairs=total))
    got = call_together(batched, CALLERS)
    assert batched.runs == 1 and batched.calls == 3  # one shared run answered all three
    for want, have in zip(unbatched, got):
        assert isinstance(have, np.ndarray) and have.dtype == np.float32
        np.testing.assert_allclose(have, want, atol=1e-5, rtol=0)
    # and score() is score_pairs with one query
    one = batched.score(CALLERS[0][0][0], [t for _, t in CALLERS[0]])
    np.testing.assert_allclose(one, unbatched[0], atol=1e-5, rtol=0)


def test_a_caller_that_does_not_fit_starts_the_next_batch(shipped):
    inner = PairByPair(shipped)
    unbatched = [inner.score_pairs(pairs) for pairs in CALLERS]
    batched = BatchingReranker(inner, RerankBatching(window_ms=200, max_pairs=len(CALLERS[1])))
    got = call_together(batched, CALLERS)
    assert batched.calls == 3 and 2 <= batched.runs <= 3  # no run holds more than max_pairs pairs
    for want, have in zip(unbatched, got):
        np.testing.assert_allclose(have, want, atol=1e-5, rtol=0)


def test_one_callers_bad_input_fails_only_that_caller(shipped):
    inner = PairByPair(shipped)
    batched = BatchingReranker(inner, RerankBatching(window_ms=200))
    got = call_together(batched, [CALLERS[0], [("  ", "set_alarm: Set an alarm.")], CALLERS[2]])
    assert isinstance(got[1], InputError) and "query is empty" in str(got[1])
    np.testing.assert_allclose(got[0], inner.score_pairs(CALLERS[0]), atol=1e-5, rtol=0)
    np.testing.assert_allclose(got[2], inner.score_pairs(CALLERS[2]), atol=1e-5, rtol=0)
    assert batched.score_pairs([]).shape == (0,)


def test_the_shipped_int8_reranker_is_refused_unless_inexact_is_asked_for(shipped):
    # dynamic INT8 takes one activation scale over the whole run: other callers' rows move a caller's scores
    with pytest.raises(InputError, match="scores a pair differently"):
        BatchingReranker(shipped, RerankBatching(window_ms=1))
    assert check_batch_invariant(shipped, tolerance=10.0) > 1e-3
    assert check_batch_invariant(PairByPair(shipped)) <= 1e-5

    inexact = BatchingReranker(shipped, RerankBatching(window_ms=1000, max_pairs=sum(len(p) for p in CALLERS),
                                                       exact=False))
    got = call_together(inexact, CALLERS)
    assert inexact.runs == 1 and [len(g) for g in got] == [len(p) for p in CALLERS]
    merged = np.concatenate([shipped.score_pairs(p) for p in CALLERS])
    assert not np.allclose(np.concatenate(got), merged, atol=1e-4)  # what `exact` guards against


@pytest.mark.parametrize("bad, field", [({"window_ms": -1}, "window_ms"), ({"window_ms": "5"}, "window_ms"),
                                        ({"max_pairs": 0}, "max_pairs"), ({"max_pairs": 2.5}, "max_pairs")])
def test_bad_batching_settings_name_the_field(bad, field):
    with pytest.raises(InputError, match=field):
        RerankBatching(**bad)

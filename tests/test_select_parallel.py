"""The catalog lock covers only the reads of the catalog and the index (issue 28.2): two callers on
one Selector are inside the embedder at the same time. The model here waits at a two-party barrier; were its call under the lock, the second caller could not reach
it and the barrier would break (real default bundle, shared catalog state)."""
from __future__ import annotations

import threading

import pytest

from magicselector import Selector, SelectorConfig

pytestmark = pytest.mark.slow

WAIT_S = 20.0  # far above one select; only a serialized call waits this long
QUERIES = ["wake me up at 6:30 tomorrow", "text Maria that I'm running late"]


class Meeting:
    """Wraps a model so that each of ``method``'s calls first waits for the other caller's."""

    def __init__(self, inner, method: str) -> None:
        self.inner, self.method = inner, method
        self.barrier = threading.Barrier(len(QUERIES), timeout=WAIT_S)
        self.met = 0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name != self.method:
            return attr

        def call(*args, **kwargs):
            self.barrier.wait()  # BrokenBarrierError when the other caller never gets here
            self.met += 1
            return attr(*args, **kwargs)

        return call


def _select_at_once(selector: Selector) -> list:
    results: list = [None] * len(QUERIES)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = selector.select(QUERIES[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(QUERIES))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=3 * WAIT_S)
    assert errors == [] and all(r is not None for r in results), errors
    return results


@pytest.fixture(scope="module")
def base(bundle_dir) -> Selector:
    return Selector.from_bundle(bundle_dir, config=SelectorConfig(decompose="none"))


def test_two_callers_embed_at_once(base):
    selector = base.with_config()
    meeting = Meeting(selector.embedder, "embed")
    selector.embedder = meeting
    results = _select_at_once(selector)
    assert meeting.met == len(QUERIES) and [r.ids for r in results] == [base.select(q).ids for q in QUERIES]

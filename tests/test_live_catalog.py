"""LiveCatalog's run-time changes are all or nothing: a change refused or failing half-way leaves the
catalog, the dense index, the lexical index and the version as they were."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from magicselector.catalog import Catalog, Tool, tool_text
from magicselector.errors import InputError, UnknownToolError
from magicselector.live_catalog import LiveCatalog
from magicselector.stages.index import ToolIndex
from magicselector.stages.lexical import LexicalIndex

NDIM = 16
LEXICAL_PARAMS = {"k1": 0.9, "b": 0.5, "idf": "lucene", "stem": False}  # not the defaults: a rebuild must keep them


def embed(texts: list[str]) -> np.ndarray:
    """A fixed vector per text (the index's behaviour is under test here, not a model's)."""
    seeds = [int.from_bytes(hashlib.blake2b(t.encode(), digest_size=4).digest(), "little") for t in texts]
    return np.stack([np.random.default_rng(s).normal(size=NDIM) for s in seeds]).astype(np.float32)


def live_catalog() -> LiveCatalog:
    tools = [Tool(id=f"t{i}", name=name, description=f"{name.replace('_', ' ')} for the user")
             for i, name in enumerate(["set_alarm", "send_message", "get_weather", "play_music"])]
    catalog = Catalog(tools)
    index = ToolIndex(NDIM, "f32")
    index.add(catalog.ids, embed([tool_text(t) for t in catalog]))
    return LiveCatalog(catalog, index, LexicalIndex.from_catalog(catalog, **LEXICAL_PARAMS))


def state(live: LiveCatalog) -> tuple[object, ...]:
    query = embed(["wake me up at seven"])
    (dense, sims), = live.index.search(query, len(live.index))
    (words, scores), = live.lexical_index().search(["set an alarm and send a message"], len(live.catalog))
    return (live.catalog.ids, [live.catalog.get(i) for i in live.catalog.ids], live.version, sorted(live.index.ids),
            dense, np.round(sims, 5).tolist(), words, np.round(scores, 5).tolist(), live.lexical_index().params)


class LexicalFails:
    """Makes the lexical index's next add or remove raise after it has begun to change."""

    def __init__(self, live: LiveCatalog, method: str) -> None:
        lexical = live.lexical_index()
        real = getattr(lexical, method)

        def half_then_fail(tool_id: str, *args: object) -> None:
            if tool_id in lexical:
                lexical._drop(lexical._row[tool_id])  # half-changed, as a MemoryError part-way would leave it
            raise MemoryError("no memory for the postings")

        setattr(lexical, method, half_then_fail)
        self.real = real


def test_a_failed_add_of_a_new_tool_leaves_everything_as_it_was():
    live = live_catalog()
    before = state(live)
    LexicalFails(live, "add")
    with pytest.raises(MemoryError):
        live.add({"id": "t9", "name": "call_taxi", "description": "call a taxi"}, embed)
    assert "t9" not in live.index
    assert state(live) == before  # the lexical index is built again, with the same parameters


def test_a_failed_replace_puts_back_the_old_vector():
    live = live_catalog()
    before = state(live)
    LexicalFails(live, "add")
    with pytest.raises(MemoryError):
        live.add({"id": "t0", "name": "set_alarm", "description": "something else entirely"}, embed)
    assert state(live) == before


def test_a_failed_remove_leaves_everything_as_it_was():
    live = live_catalog()
    before = state(live)
    LexicalFails(live, "remove")
    with pytest.raises(MemoryError):
        live.remove("t1")
    assert state(live) == before


def test_refused_changes_leave_everything_as_it_was():
    live = live_catalog()
    before = state(live)
    with pytest.raises(UnknownToolError, match="'nope'"):
        live.remove("nope")
    with pytest.raises(InputError):
        live.add({"id": "t9", "name": "call_taxi", "description": "call a taxi"}, lambda texts: np.zeros((1, 3)))
    assert state(live) == before
    live.add({"id": "t9", "name": "call_taxi", "description": "call a taxi"}, embed)  # and a good one goes in
    assert "t9" in live.index and "t9" in live.catalog and "t9" in live.lexical_index() and live.version == 1

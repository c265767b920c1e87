import numpy as np
import pytest

from magicselector.errors import BundleError, InputError, UnknownToolError
from magicselector.stages.index import ToolIndex, tool_key


def unit(rng, n, d=16):
    v = rng.normal(size=(n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_add_search_remove_replace():
    rng = np.random.default_rng(0)
    vecs = unit(rng, 50)
    ids = [f"tool_{i}" for i in range(50)]
    index = ToolIndex(16, "f16")
    index.add(ids, vecs)
    (got, sims), = index.search(vecs[7], 3)
    assert got[0] == "tool_7" and sims[0] == pytest.approx(1.0, abs=1e-2)
    index.remove("tool_7")
    assert "tool_7" not in index and len(index) == 49
    (got, _), = index.search(vecs[7], 5)
    assert "tool_7" not in got
    # Replacing keeps one entry per id and moves it.
    index.add(["tool_3"], vecs[10:11])
    assert len(index) == 49
    (got, _), = index.search(vecs[10], 2)
    assert set(got) == {"tool_3", "tool_10"}
    with pytest.raises(UnknownToolError):
        index.remove("nope")
    with pytest.raises(InputError):
        index.add(["a", "a"], vecs[:2])
    with pytest.raises(InputError):
        index.add(["a"], vecs[:2])


def test_search_is_exact_on_a_phone_sized_catalog(tmp_path):
    """The top 30 are the true cosine top 30 (a graph search misses many of them on vectors like
    these), in memory and memory-mapped alike."""
    rng = np.random.default_rng(3)
    vecs, queries = unit(rng, 3000, 384), unit(rng, 8, 384)
    ids = [f"t{i}" for i in range(3000)]
    index = ToolIndex(384, "f32")
    index.add(ids, vecs)
    index.save(tmp_path / "i.usearch")
    truth = np.argsort(-(queries @ vecs.T), axis=1)[:, :30]
    for ix in (index, ToolIndex.view(tmp_path / "i.usearch", ids)):
        for (got, sims), want, q in zip(ix.search(queries, 30), truth, queries):
            assert got == [ids[i] for i in want]
            assert np.allclose(sims, vecs[want] @ q, atol=1e-4)


def test_persist_and_view_copy_on_write(tmp_path):
    rng = np.random.default_rng(1)
    vecs = unit(rng, 30)
    ids = [f"t{i}" for i in range(30)]
    index = ToolIndex(16, "f16")
    index.add(ids, vecs)
    path = tmp_path / "tools.usearch"
    index.save(path)
    viewed = ToolIndex.view(path, ids)
    assert len(viewed) == 30
    (got, _), = viewed.search(vecs[4], 1)
    assert got == ["t4"]
    np.testing.assert_allclose(viewed.vectors(["t4"])[0], vecs[4], atol=2e-3)
    # A memory-mapped index is immutable; the first change copies it into memory, the file stays.
    viewed.add(["new"], vecs[:1])
    viewed.remove("t0")
    assert "new" in viewed and "t0" not in viewed and len(viewed) == 30
    again = ToolIndex.view(path, ids)
    assert "t0" in again


def test_view_refuses_an_index_out_of_step_with_the_catalog(tmp_path):
    rng = np.random.default_rng(2)
    index = ToolIndex(16, "i8")
    index.add(["a", "b", "c"], unit(rng, 3))
    path = tmp_path / "i.usearch"
    index.save(path)
    with pytest.raises(BundleError, match="out of step"):
        ToolIndex.view(path, ["a", "b"])
    with pytest.raises(BundleError, match="lacks"):
        ToolIndex.view(path, ["a", "b", "zzz"])
    (tmp_path / "bad.usearch").write_bytes(b"not an index")
    with pytest.raises(BundleError):
        ToolIndex.view(tmp_path / "bad.usearch", ["a"])


def test_keys_are_stable():
    assert tool_key("set_alarm") == tool_key("set_alarm")
    assert tool_key("set_alarm") != tool_key("set_alarms")
    assert tool_key("x") < 2**63


def _state(index, probe):
    """What a caller can see of an index: its ids, its raw entry count, a search and every vector."""
    (got, sims), = index.search(probe, len(index))
    return sorted(index.ids), len(index._index), got, np.round(sims, 4).tolist(), index.vectors(sorted(index.ids))


def _assert_unchanged(index, before, probe):
    ids, raw_count, got, sims, vecs = _state(index, probe)
    assert (ids, raw_count, got, sims) == before[:4]
    np.testing.assert_array_equal(vecs, before[4])


def test_an_add_refused_for_a_key_collision_leaves_the_index_as_it_was(monkeypatch):
    """A later id in the batch colliding with a held tool's key is refused before the earlier,
    replaced tool is taken out (it used to be removed from usearch and kept in the id table)."""
    import magicselector.stages.index as index_module

    rng = np.random.default_rng(4)
    vecs = unit(rng, 6)
    index = ToolIndex(16, "f16")
    index.add([f"tool_{i}" for i in range(4)], vecs[:4])
    before = _state(index, vecs[0])
    real_key = index_module.tool_key
    monkeypatch.setattr(index_module, "tool_key", lambda i: real_key("tool_1") if i == "clash" else real_key(i))
    with pytest.raises(InputError, match="'clash' and 'tool_1' collide"):
        index.add(["tool_2", "clash"], vecs[4:6])
    _assert_unchanged(index, before, vecs[0])
    # two new ids colliding with each other in one batch are refused the same way
    monkeypatch.setattr(index_module, "tool_key", lambda i: real_key("fresh") if i == "clash" else real_key(i))
    with pytest.raises(InputError, match="'clash' and 'fresh' collide"):
        index.add(["fresh", "clash"], vecs[4:6])
    _assert_unchanged(index, before, vecs[0])


def test_an_add_that_fails_inside_usearch_puts_back_the_tools_it_replaced():
    rng = np.random.default_rng(5)
    vecs = unit(rng, 6)
    index = ToolIndex(16, "f16")
    index.add([f"tool_{i}" for i in range(4)], vecs[:4])
    before = _state(index, vecs[2])
    raw, real_add, calls = index._index, index._index.add, []

    def add_once_out_of_memory(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise MemoryError("usearch could not grow")
        return real_add(*args, **kwargs)

    raw.add = add_once_out_of_memory
    with pytest.raises(MemoryError):
        index.add(["tool_2", "new"], vecs[4:6])
    assert len(calls) == 2  # the refused add, then tool_2's old vector put back
    del raw.add
    _assert_unchanged(index, before, vecs[2])
    assert "new" not in index


def test_add_and_remove_refuse_bad_input_before_changing_anything():
    rng = np.random.default_rng(6)
    vecs = unit(rng, 3)
    index = ToolIndex(16, "f32")
    index.add(["a", "b"], vecs[:2])
    before = _state(index, vecs[0])
    bad = vecs[2:3].copy()
    bad[0, 3] = np.nan
    with pytest.raises(InputError, match="'c' is not finite"):
        index.add(["c"], bad)
    with pytest.raises(InputError, match="must be a string"):
        index.add([7], vecs[2:3])  # type: ignore[list-item]
    with pytest.raises(InputError, match="threads"):
        index.add(["c"], vecs[2:3], threads=-1)
    with pytest.raises(InputError, match="must be a string"):
        index.remove(None)  # type: ignore[arg-type]
    _assert_unchanged(index, before, vecs[0])

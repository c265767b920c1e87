"""Indexing a catalog in batches (tool_vectors.catalog_index, LexicalIndex.build over a stream) gives
exactly the index, the BM25 arrays and the selections of the one-shot path, with bounded batches."""
from __future__ import annotations

import numpy as np
import pytest

import magicselector.stages.lexical as lexical_mod
import magicselector.tool_vectors as tv
from magicselector.catalog import Catalog, Tool, load_phone_catalog, tool_text
from magicselector.errors import BundleError
from magicselector.stages.index import ToolIndex
from magicselector.stages.lexical import LexicalIndex

QUERIES = ["turn on bluetooth", "play some jazz", "text Sam I'm late", "set an alarm for 7",
           "what's the weather tomorrow", "navigate home", "toggle toggle", "send an email to my boss"]


def _catalog(twins: bool = True) -> Catalog:
    """The phone tools plus a tool with a long description (enough for several embed batches and
    index chunks), and with ``twins`` tools of the same text under another id (equal vectors tie)."""
    tools = list(load_phone_catalog())
    twins = [Tool(id=f"{t.id}-twin", name=t.name.replace("_", "-"), description=t.description,
                  parameters=t.parameters) for t in tools[:40:3]] if twins else []
    assert all(tool_text(a) == tool_text(b) for a, b in zip(tools[:40:3], twins))
    long_one = Tool(id="long_tool", name="long_tool", description="report " * 300)
    return Catalog(tools + twins + [long_one])


def _one_shot_index(embedder, catalog: Catalog, dtype: str) -> tuple[ToolIndex, np.ndarray]:
    """The index as with_catalog built it before streaming: every vector in memory, one add."""
    texts = [tool_text(t) for t in catalog]
    order = np.argsort([len(t) for t in texts])
    vecs = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for start in range(0, len(order), 64):
        idx = order[start:start + 64]
        vecs[idx] = embedder.embed([texts[i] for i in idx])
    index = ToolIndex(vecs.shape[1], dtype)
    index.add(catalog.ids, vecs)
    return index, vecs


def _one_shot_lexical_arrays(ids, texts, **params):
    """LexicalIndex.build's arrays as computed before streaming (one pass, all postings at once)."""
    index = LexicalIndex(**params)
    terms, docs, tfs, lengths = [], [], [], []
    for row, text in enumerate(texts):
        counts = index._counts(text)
        terms.extend(index._intern(t) for t in counts)
        docs.extend([row] * len(counts))
        tfs.extend(counts.values())
        lengths.append(sum(counts.values()))
    terms, docs, tfs = np.asarray(terms, np.int64), np.asarray(docs, np.int32), np.asarray(tfs, np.int64)
    order = np.lexsort((docs, terms))
    counts = np.bincount(terms, minlength=len(index._vocab))
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    docs, tf = docs[order], np.minimum(tfs[order], 65535).astype(np.uint16)
    doc_len = np.asarray(lengths, np.int32)
    n, df = len(ids), np.diff(indptr).astype(np.float64)
    if index.idf_mode == "lucene":
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
    else:
        idf = np.log(np.maximum(n - df + 0.5, 1e-12) / (df + 0.5))
        idf = np.where(idf < 0, 0.25 * idf[df > 0].mean(), idf)
    tf64 = tf.astype(np.float64)
    norm = index.k1 * (1.0 - index.b + index.b * doc_len[docs] / doc_len.mean())
    term_of = np.repeat(np.arange(len(index._vocab)), np.diff(indptr))
    weights = (idf[term_of] * tf64 * (index.k1 + 1.0) / (tf64 + norm)).astype(np.float32)
    return index._vocab, indptr, docs, tf, doc_len, weights


def _tie_groups(ids, scores) -> list[tuple[float, frozenset[str]]]:
    """A ranked list as its runs of equal scores, each run as a set of ids."""
    groups: list[tuple[float, frozenset[str]]] = []
    for i, s in zip(ids, scores.tolist()):
        if groups and groups[-1][0] == s:
            groups[-1] = (s, groups[-1][1] | {i})
        else:
            groups.append((s, frozenset([i])))
    return groups


@pytest.fixture()
def small_steps(monkeypatch):
    """Chunks far smaller than the catalog, so every streamed path really takes several steps."""
    monkeypatch.setattr(tv, "INDEX_CHUNK", 37)
    monkeypatch.setattr(lexical_mod, "_BUILD_CHUNK", 23)
    monkeypatch.setattr(lexical_mod, "_WEIGH_CHUNK", 101)


@pytest.mark.parametrize("idf", ["lucene", "okapi"])
def test_streamed_lexical_arrays_equal_the_one_shot_build(small_steps, idf):
    catalog = _catalog()
    texts = [tool_text(t) for t in catalog]
    streamed = LexicalIndex.build(catalog.ids, (t for t in texts), idf=idf)
    vocab, indptr, docs, tf, doc_len, weights = _one_shot_lexical_arrays(catalog.ids, texts, idf=idf)
    assert len(docs) > 5 * 101  # several weighing steps
    assert streamed._vocab == vocab
    for got, want in [(streamed._indptr, indptr), (streamed._docs, docs), (streamed._tf, tf),
                      (streamed._doc_len, doc_len), (streamed._weights, weights)]:
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_streamed_lexical_refuses_a_count_mismatch():
    with pytest.raises(Exception, match="2 ids but 3 texts|2 ids but more texts"):
        LexicalIndex.build(["a", "b"], iter(["x", "y", "z"]))
    with pytest.raises(Exception, match="2 ids but 1 texts"):
        LexicalIndex.build(["a", "b"], iter(["x"]))


def test_streamed_index_equals_one_add(selector, small_steps, monkeypatch):
    catalog = _catalog()
    want_index, _ = _one_shot_index(selector.embedder, catalog, selector.index.dtype)
    sizes: list[int] = []
    real_embed = selector.embedder.embed

    class Counting:
        dim = selector.embedder.dim

        def embed(self, texts, release=False):
            sizes.append(len(texts))
            calls.append((list(texts), release))
            return real_embed(texts)

    calls: list[tuple[list[str], bool]] = []
    adds: list[int] = []
    real_add = ToolIndex.add
    monkeypatch.setattr(ToolIndex, "add", lambda self, ids, v: (adds.append(len(ids)), real_add(self, ids, v))[1])
    got = tv.catalog_index(Counting(), catalog, model_sha="", dtype=selector.index.dtype)
    assert calls[-1] == (["."], True)  # the arena handed back by one tiny run (tool_vectors.give_back)
    sizes.pop()
    assert max(sizes) <= tv.EMBED_BATCH and sum(sizes) == len(catalog)
    assert [release for _, release in calls[:-1]] == [b % tv.RELEASE_EVERY == tv.RELEASE_EVERY - 1 or
                                                     b == len(sizes) - 1 for b in range(len(sizes))]
    assert max(adds) <= 37 and sum(adds) == len(catalog) and len(adds) > 5
    assert got.ids == want_index.ids == catalog.ids
    assert np.array_equal(got.vectors(catalog.ids), want_index.vectors(catalog.ids))
    for q in QUERIES:
        qv = selector.embedder.embed([q])
        (g_ids, g_s), = got.search(qv, len(catalog))
        (w_ids, w_s), = want_index.search(qv, len(catalog))
        assert np.array_equal(g_s, w_s)
        # usearch orders exactly equal vectors (the twins) arbitrarily, the one-shot index too
        assert _tie_groups(g_ids, g_s) == _tie_groups(w_ids, w_s)


def _one_shot_lexical(catalog: Catalog, **params) -> LexicalIndex:
    """A LexicalIndex holding the one-shot build's arrays."""
    index = LexicalIndex(**params)
    vocab, indptr, docs, tf, doc_len, weights = _one_shot_lexical_arrays(
        catalog.ids, [tool_text(t) for t in catalog], **params)
    index._vocab, index._term_id = vocab, {t: i for i, t in enumerate(vocab)}
    index._ids, index._row = list(catalog.ids), {i: r for r, i in enumerate(catalog.ids)}
    index._indptr, index._docs, index._tf, index._doc_len, index._weights = indptr, docs, tf, doc_len, weights
    return index


def test_with_catalog_selections_equal_the_one_shot_path(selector, small_steps, monkeypatch):
    import magicselector.selector as selector_mod

    catalog = _catalog(twins=False)  # no exactly equal vectors, so no tie whose order usearch leaves open
    got = selector.with_catalog(catalog)
    # the golden: the same with_catalog over the one-shot index and BM25 arrays
    monkeypatch.setattr(selector_mod, "catalog_index",
                        lambda embedder, cat, sha, dtype: _one_shot_index(embedder, cat, dtype)[0])
    monkeypatch.setattr(LexicalIndex, "from_catalog", classmethod(lambda cls, cat, **p: _one_shot_lexical(cat, **p)))
    want = selector.with_catalog(catalog)
    assert want.index is not got.index and want.live.lexical is not got.live.lexical
    for q in QUERIES + ["turn on bluetooth and play some jazz"]:
        a, b = got.select(q), want.select(q)
        assert [(t.id, t.score) for t in a.tools] == [(t.id, t.score) for t in b.tools], q
        assert a.k == b.k and a.subtasks == b.subtasks


def test_cached_vectors_are_read_back_without_embedding(selector, home, monkeypatch):
    catalog = Catalog(list(load_phone_catalog())[:100])
    first = tv.catalog_index(selector.embedder, catalog, model_sha="sha-for-test")
    key, _ = tv._texts_key_lengths(catalog, "sha-for-test")
    path = home / "embeddings" / f"{key}.npy"
    assert np.load(path).shape == (100, selector.embedder.dim)  # a plain .npy, as np.save writes

    class Refusing:
        dim = selector.embedder.dim

        def embed(self, texts, release=False):
            raise AssertionError("embedded although the vectors are cached")

    again = tv.catalog_index(Refusing(), catalog, model_sha="sha-for-test")
    assert np.array_equal(again.vectors(catalog.ids), first.vectors(catalog.ids))
    path.write_bytes(path.read_bytes()[:-10])  # torn: embedded again and replaced
    with pytest.raises(AssertionError, match="embedded although"):
        tv.catalog_index(Refusing(), catalog, model_sha="sha-for-test")
    fixed = tv.catalog_index(selector.embedder, catalog, model_sha="sha-for-test")
    assert np.array_equal(fixed.vectors(catalog.ids), first.vectors(catalog.ids))
    assert np.load(path).shape == (100, selector.embedder.dim)
    assert not list(path.parent.glob("*.tmp.npy"))


def test_an_embedder_of_another_dimension_is_a_bundle_error(selector):
    class Wrong:
        dim = 384

        def embed(self, texts, release=False):
            return np.zeros((len(texts), 12), dtype=np.float32)

    with pytest.raises(BundleError, match="shape"):
        tv.catalog_index(Wrong(), Catalog(list(load_phone_catalog())[:5]))


def test_an_embedder_put_in_by_hand_never_reads_the_bundle_s_cached_vectors(selector, home):
    """The cache is keyed by the bytes the embedder was opened from, not by the bundle beside it."""
    from magicselector import Selector

    catalog = Catalog(list(load_phone_catalog())[:30])
    assert selector.embedder.vectors_key.startswith(selector.bundle.sha256_of(selector.bundle.section("embedder")["file"]))
    cached = selector.with_catalog(catalog)  # fills the cache under the bundle embedder's key
    ids = catalog.ids

    class Reversed:
        """Another model: the bundle embedder's vectors, their components reversed."""
        dim = selector.embedder.dim

        def embed(self, texts, release=False):
            return selector.embedder.embed(texts, release)[:, ::-1].copy()

    other = Selector(selector.catalog, Reversed(), selector.index, config=selector.config, bundle=selector.bundle)
    got = other.with_catalog(catalog).index.vectors(ids)
    want = cached.index.vectors(ids)[:, ::-1]
    assert np.allclose(got, want, atol=2e-3)  # its own vectors (f16 index), not the cached ones
    assert not np.allclose(got, cached.index.vectors(ids), atol=2e-3)

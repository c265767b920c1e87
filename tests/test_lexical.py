"""The runtime's lexical channel: BM25 against rank_bm25, run-time updates, the file, and the Selector with it on."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from magicselector.catalog import Tool, load_catalog, load_phone_catalog, tool_text
from magicselector.errors import BundleError, InputError, UnknownToolError
from magicselector.stages.lexical import LexicalIndex, lexical_tokens, s_stem

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEMO = Path(__file__).resolve().parents[1] / "runtime" / "demo" / "dialogue.json"


def test_tokens_split_identifiers_and_strip_plurals():
    assert lexical_tokens("getWeatherForecast HTTPRequest set_alarm kebab-case") == [
        "get", "weather", "forecast", "http", "request", "set", "alarm", "kebab", "case"]
    assert lexical_tokens("Alarms queries glasses bus MP3 café_crème", stem=False) == [
        "alarms", "queries", "glasses", "bus", "mp3", "café", "crème"]
    assert [s_stem(w) for w in ("alarms", "queries", "glasses", "bus", "shoes", "is", "messages")] == [
        "alarm", "query", "glasse", "bus", "shoe", "is", "message"]


def _queries(name: str) -> tuple[object, list[str]]:
    if name == "phone":
        demo = [t["user"] for t in json.loads(DEMO.read_text())["turns"]]
        from magicselector.export.bundle import PROBE_QUERIES

        return load_phone_catalog(), (PROBE_QUERIES + demo)[:50]
    folder = SHARED_DATA / name
    if not (folder / "tools.jsonl").is_file():
        pytest.skip(f"{folder} is not here")
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines() if line.strip()]
    rng = np.random.default_rng(0)
    picked = sorted(rng.choice(len(rows), 50, replace=False))
    return load_catalog(folder), [rows[i]["query"] for i in picked]


def _reference(tokens: list[list[str]], idf: str):
    rank_bm25 = pytest.importorskip("rank_bm25", reason="needs the bench extra: pip install -e .[bench]")
    if idf == "okapi":
        return rank_bm25.BM25Okapi(tokens, k1=1.2, b=0.75)

    class LuceneIdf(rank_bm25.BM25Okapi):
        """BM25Okapi's scoring with Lucene's idf, ln(1 + (N - df + 0.5) / (df + 0.5))."""

        def _calc_idf(self, nd):
            self.idf = {w: float(np.log1p((self.corpus_size - f + 0.5) / (f + 0.5))) for w, f in nd.items()}

    return LuceneIdf(tokens, k1=1.2, b=0.75)


@pytest.mark.parametrize("catalog_name", ["phone", "bfcl", "metatool"])
@pytest.mark.parametrize("idf", ["lucene", "okapi"])
def test_scores_and_top10_match_rank_bm25(catalog_name, idf):
    catalog, queries = _queries(catalog_name)
    texts = [tool_text(t) for t in catalog]
    ours = LexicalIndex.build(catalog.ids, texts, idf=idf)
    ref = _reference([lexical_tokens(t) for t in texts], idf)
    matched = 0
    for q in queries:
        want = np.asarray(ref.get_scores(lexical_tokens(q)), dtype=np.float64)
        np.testing.assert_allclose(ours.scores(q), want, rtol=1e-5, atol=1e-5, err_msg=q)
        order = np.argsort(-want, kind="stable")
        want_top = [i for i in order[:10] if want[i] > 0]
        got_ids, got_scores = ours.search([q], 10)[0]
        np.testing.assert_allclose(got_scores, want[want_top], rtol=1e-5, atol=1e-5, err_msg=q)
        # the same tools in the same order, except where two scores tie within float tolerance
        for g, w in zip(got_ids, [catalog.ids[i] for i in want_top]):
            if g != w:
                assert abs(want[catalog.ids.index(g)] - want[catalog.ids.index(w)]) < 1e-5, q
        matched += bool(want_top)
    assert matched >= 0.8 * len(queries)  # the queries really exercise the scoring


def test_add_remove_equal_a_rebuild_and_survive_save_load(tmp_path):
    catalog = load_phone_catalog()
    tools = list(catalog)
    index = LexicalIndex.from_catalog(catalog)
    new = Tool("qzx_router", "qzx_router", "Route qzx packets through the frobnicator mesh.",
               {"type": "object", "properties": {"mesh_id": {"type": "string"}}})
    index.add(new.id, tool_text(new))
    index.remove(tools[5].id)
    replaced = Tool(tools[7].id, tools[7].name, "Entirely different words: photosynthesis chlorophyll.")
    index.add(replaced.id, tool_text(replaced))  # same id: replaces
    kept = [t for i, t in enumerate(tools) if i not in (5, 7)] + [new, replaced]
    rebuilt = LexicalIndex.build([t.id for t in kept], [tool_text(t) for t in kept])
    assert sorted(index.ids) == sorted(rebuilt.ids) and len(index) == len(kept)
    for q in ["route qzx packets", "set an alarm", "chlorophyll", "send a message to mom", tools[5].name]:
        a = dict(zip(index.ids, index.scores(q)))
        b = dict(zip(rebuilt.ids, rebuilt.scores(q)))
        assert max(abs(a[k] - b[k]) for k in a) < 1e-5, q
        assert index.search([q], 10)[0][0] == rebuilt.search([q], 10)[0][0], q
    assert index.search(["qzx frobnicator"], 3)[0][0][0] == "qzx_router"
    assert tools[5].id not in index
    with pytest.raises(UnknownToolError, match=tools[5].id):
        index.remove(tools[5].id)

    path = tmp_path / "lexical.npz"
    index.save(path)
    loaded = LexicalIndex.load(path, index.ids)
    assert loaded.params == index.params and loaded.ids == index.ids
    for q in ["route qzx packets", "weather in Berlin", "zzzz"]:
        np.testing.assert_array_equal(loaded.scores(q), index.scores(q))
    with pytest.raises(BundleError, match="holds"):
        LexicalIndex.load(path, index.ids[:-1])
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(BundleError, match="bad.npz"):
        LexicalIndex.load(tmp_path / "bad.npz")
    with pytest.raises(InputError, match="idf"):
        LexicalIndex(idf="tfidf")


def test_search_batches_counts_and_misses():
    catalog = load_phone_catalog()
    index = LexicalIndex.from_catalog(catalog)
    results = index.search(["turn on bluetooth", "zzzz qqqq", "alarm"], 5)
    assert len(results) == 3
    ids, scores = results[0]
    assert len(ids) == 5 and np.all(np.diff(scores) <= 0)
    assert "bluetooth" in " ".join(ids).lower()
    assert results[1][0] == [] and len(results[1][1]) == 0  # nothing shares a token: nothing returned


# -- the Selector with the lexical channel ----------------------------------------------------------
# Words of scripts the embedder's vocabulary lacks: each is one [UNK] to it, so tools that differ
# only in them embed identically, and only the lexical channel can tell them apart.
UNKNOWN_WORDS = {"svc_amharic": "ሰላም", "svc_cherokee": "ᎣᏏᏲ", "svc_khmer": "អាកាសធាតុ"}
UNKNOWN_TOOLS = [Tool(tid, word, "Opens this service.", {}) for tid, word in UNKNOWN_WORDS.items()]
CODE_TOOL = UNKNOWN_TOOLS[0]
CODE_QUERY = UNKNOWN_WORDS[CODE_TOOL.id]


@pytest.mark.slow
def test_bundle_carries_the_index_and_the_selector_finds_lexical_only_tools(bundle_dir):
    from magicselector import Selector
    from magicselector.bundle import Bundle

    section = Bundle.open(bundle_dir).section("lexical")
    assert section and section["format"] == "magicselector-bm25/1" and (bundle_dir / section["file"]).is_file()
    base = Selector.from_bundle(bundle_dir)
    assert base.live.lexical is not None and sorted(base.live.lexical.ids) == sorted(base.catalog.ids)

    for tool in UNKNOWN_TOOLS:
        base.add_tool(tool)
    vecs = base.embedder.embed([tool_text(t) for t in UNKNOWN_TOOLS])
    assert float(np.min(vecs @ vecs.T)) > 0.999  # the embedder cannot tell these tools apart
    dense = base.with_config(lexical=False, decompose="none")
    right_first = {"dense": 0, "hybrid": 0}
    for tid, word in UNKNOWN_WORDS.items():
        right_first["dense"] += dense.select(word).ranked_ids[0] == tid
        sel = base.with_config(lexical=True, decompose="none").select(word)
        right_first["hybrid"] += sel.ranked_ids[0] == tid
        assert "lexical" in sel.timings_ms
    assert right_first["dense"] <= 1 and right_first["hybrid"] == len(UNKNOWN_WORDS)
    # every sub-task of a decomposed turn gets the lexical list too
    multi = base.with_config(lexical=True, decompose="rules").select(
        f"set an alarm for 7 and then open {CODE_QUERY}")
    assert len(multi.subtasks) >= 2
    assert any(ids[0] == CODE_TOOL.id for _, ids, _ in multi.lists[1:])
    assert CODE_TOOL.id in multi.ranked_ids[:10] and any("alarm" in i for i in multi.ranked_ids[:5])
    hybrid = base.with_config(lexical=True)
    base.remove_tool(CODE_TOOL.id)
    assert CODE_TOOL.id not in base.lexical and CODE_TOOL.id not in hybrid.select(CODE_QUERY).ranked_ids


@pytest.mark.slow
def test_lexical_index_is_built_on_the_fly_and_for_another_catalog(selector):
    from magicselector import Selector

    fresh = Selector(selector.catalog, selector.embedder, selector.index)
    assert fresh.live.lexical is None
    assert fresh.lexical.ids == selector.lexical.ids
    other = load_phone_catalog()
    for tool in UNKNOWN_TOOLS:
        other = other.with_tool(tool)
    hybrid = selector.with_catalog(other, selector.config.__class__(lexical=True))
    assert hybrid.live.lexical is not None and CODE_TOOL.id in hybrid.lexical
    assert hybrid.select(CODE_QUERY).ranked_ids[0] == CODE_TOOL.id
    sel = hybrid.with_config(lexical_weight=0.3).select("turn on bluetooth")
    assert sel.ranked_ids and len(sel.ranked_ids) == len(set(sel.ranked_ids))
    # no token in common with any tool: the dense order stands
    dense = hybrid.with_config(lexical=False).select("zzzz qqqq")
    assert hybrid.select("zzzz qqqq").ranked_ids == dense.ranked_ids


def test_config_validates_lexical_settings():
    from magicselector.config import SelectorConfig

    with pytest.raises(InputError, match="lexical_weight"):
        SelectorConfig(lexical_weight=1.5)
    with pytest.raises(InputError, match="lexical_candidates"):
        SelectorConfig(lexical_candidates=0)


@pytest.mark.slow
def test_eval_hybrid_runs_with_decomposition_and_bm25_alone(tiny_benchmark, bundle_dir):
    from magicselector.bench.evaluate import EvalConfig, evaluate
    from magicselector.config import SelectorConfig

    hybrid = evaluate(tiny_benchmark, EvalConfig(SelectorConfig(decompose="rules"), retriever="hybrid"),
                      bundle=bundle_dir, progress=False)
    assert hybrid["counterfactual"]["queries"] == hybrid["overall"]["queries"]
    bm25 = evaluate(tiny_benchmark, EvalConfig(SelectorConfig(), retriever="bm25"), bundle=bundle_dir, progress=False)
    assert 0.0 < bm25["overall"]["ndcg@10"] <= 1.0
    with pytest.raises(InputError, match="hybrid"):
        EvalConfig(SelectorConfig(decompose="llm"), retriever="bm25")


@pytest.mark.slow
def test_eval_bm25_alone_is_bounded_by_the_budget_as_every_row_is(bundle_dir):
    from magicselector.bench.evaluate import _bm25_ranking
    from magicselector.config import SelectorConfig
    from magicselector.data.datasets import Query
    from magicselector.selector import Selector
    from magicselector.bench.cut_rules import FixedCut

    selector = Selector.from_bundle(bundle_dir)
    q = Query("q", "set an alarm, play some music, text mom a message and check the weather and my calendar",
              ("set_alarm",), history=())

    def ranked(max_tools: int | None) -> tuple[list[str], int]:
        return _bm25_ranking(selector, q, SelectorConfig(max_tools=max_tools, cut=FixedCut(8)), 30)

    (free, k_free), (capped, k_capped) = ranked(None), ranked(3)
    assert k_free == 8 and k_capped == 3  # the cut alone keeps 8; the budget bounds it as select's does
    assert capped == free  # one list: the bound keeps the ranked order's first tools


# -- add and remove are all or nothing ----------------------------------------------------------------
def _full_state(index: LexicalIndex) -> tuple:
    """Everything the index holds, and what it answers (scores and rankings of a few texts)."""
    arrays = tuple((a.dtype.str, a.tobytes()) for a in (index._indptr, index._docs, index._tf, index._doc_len))
    answers = [(index.scores(q).tobytes(), index.search([q], 10)[0][0])
               for q in ["set an alarm", "send a message to mom", "photosynthesis", "weather in Berlin"]]
    return (list(index._vocab), dict(index._term_id), list(index._ids), dict(index._row), arrays, answers)


def test_a_refused_add_or_remove_leaves_the_index_as_it_was():
    catalog = load_phone_catalog()
    index = LexicalIndex.from_catalog(catalog)
    held = catalog.ids[3]
    before = _full_state(index)
    # a held tool replaced by a text that is not a string: the old code had dropped the tool already
    for bad_text in (None, b"set an alarm", ["alarm"]):
        with pytest.raises(InputError, match=f"text of tool '{held}'"):
            index.add(held, bad_text)
        assert _full_state(index) == before
    for bad_id in (7, None, ("a",), ["unhashable"]):
        with pytest.raises(InputError, match="tool id must be a string"):
            index.add(bad_id, "photosynthesis chlorophyll")
        with pytest.raises(InputError, match="tool id must be a string"):
            index.remove(bad_id)
        assert _full_state(index) == before
    with pytest.raises(UnknownToolError, match="no_such_tool"):
        index.remove("no_such_tool")
    assert _full_state(index) == before


@pytest.mark.parametrize("failing", ["insert", "delete"])
def test_a_failure_part_way_through_add_or_remove_changes_nothing(monkeypatch, failing):
    """A MemoryError inside numpy after the new postings have begun to be computed (the old code had
    by then interned the new terms, dropped the replaced tool or shifted the term offsets)."""
    catalog = load_phone_catalog()
    index = LexicalIndex.from_catalog(catalog)
    held = catalog.ids[3]
    index.add("qzx_router", "Route qzx packets")  # a tool added at run time, with terms of its own
    before = _full_state(index)

    def out_of_memory(*args, **kwargs):
        raise MemoryError("numpy." + failing)

    monkeypatch.setattr(np, failing, out_of_memory)
    with pytest.raises(MemoryError):
        if failing == "insert":
            index.add(held, "Entirely new words: photosynthesis chlorophyll frobnicator")
        else:
            index.remove(held)
    monkeypatch.undo()
    assert _full_state(index) == before
    index.remove(held)  # and it still works
    assert held not in index and len(index) == len(catalog)  # the catalog's tools, less one, plus qzx_router


@pytest.mark.parametrize("ids,texts,field", [([1, "b"], ["a", "b"], "a tool id must be a string, got int 1"),
                                             (["a", None], ["a", "b"], "got NoneType"),
                                             (["a", "b"], ["x", 3], "text 1 must be a string, got int")])
def test_build_refuses_what_add_refuses_naming_it(ids, texts, field):
    """A non-string id or text was indexed by build (and saved) though add refuses it."""
    with pytest.raises(InputError, match=field):
        LexicalIndex.build(ids, texts)

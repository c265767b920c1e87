import threading

import pytest

from magicselector import InputError, SelectorConfig, Tool, UnknownToolError

pytestmark = pytest.mark.slow


def domains(selector, sel):
    return {selector.catalog.get(i).domain for i in sel.ids}


def test_bluetooth_and_jazz(selector):
    sel = selector.select("turn on bluetooth and play some jazz")
    names = set(sel.ids)
    assert names & {"bluetooth_toggle", "bluetooth_connect_device"}, sel.ids
    music = {t.id for t in selector.catalog if t.domain == "music"}
    assert names & music, sel.ids
    assert sel.k == len(sel.tools) and sel.subtasks
    assert {"embed", "search", "cut", "total"} <= set(sel.timings_ms)
    # one retrieval list (no decomposition): the tools come in score order
    single = selector.with_config(decompose="none").select("turn on bluetooth and play some jazz")
    assert all(a.score >= b.score for a, b in zip(single.tools, single.tools[1:]))


@pytest.mark.parametrize("utterance, expected", [
    ("wake me up at 6:30 tomorrow", "set_alarm"),
    ("set a ten minute timer", "start_timer"),
    ("send a text message to Sam saying I am late", "send_sms"),
    ("turn the wifi off", "wifi_toggle"),
])
def test_clear_requests_rank_their_tool_near_the_top(selector, utterance, expected):
    sel = selector.select(utterance)
    assert expected in sel.ranked_ids[:10], (utterance, sel.ranked_ids[:10])


def test_history_modes_change_the_retrieval_text(selector):
    history = [{"role": "user", "content": "what's the weather in Paris"},
               {"role": "assistant", "content": "Sunny and 21 degrees."}]
    plain = selector.with_config(history="none", decompose="none").select("and tomorrow?", history)
    with_user = selector.with_config(history="user", decompose="none").select("and tomorrow?", history)
    assert plain.subtasks == ["and tomorrow?"]
    assert "Paris" in with_user.subtasks[0]
    assert any(selector.catalog.get(i).domain == "weather" for i in with_user.ranked_ids[:3])


def test_shared_across_threads(selector):
    utterances = ["turn on bluetooth", "play some jazz", "call mom", "set an alarm for 7"] * 4
    expected = {u: selector.select(u).ids for u in set(utterances)}
    errors, results = [], []

    def work(u):
        try:
            results.append((u, selector.select(u).ids))
        except Exception as e:  # pragma: no cover - surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(u,)) for u in utterances]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(ids == expected[u] for u, ids in results)


def test_add_replace_remove_tool_at_run_time(bundle_dir):
    from magicselector import Selector

    sel = Selector.from_bundle(bundle_dir)
    n = len(sel.catalog)
    tool = Tool("feed_the_cat", "feed_the_cat", "Dispense a portion of dry food from the smart cat feeder.",
                {"type": "object", "properties": {"grams": {"type": "integer"}}})
    sel.add_tool(tool)
    assert len(sel.catalog) == n + 1 == len(sel.index)
    assert sel.select("feed the cat please").ids[0] == "feed_the_cat"
    sel.add_tool(Tool("feed_the_cat", "feed_the_cat", "Fire the confetti cannon at a party.", {}))
    assert len(sel.catalog) == n + 1
    assert sel.select("fire the confetti cannon").ids[0] == "feed_the_cat"
    sel.remove_tool("feed_the_cat")
    assert "feed_the_cat" not in sel.select("feed the cat please").ranked_ids
    with pytest.raises(UnknownToolError, match="feed_the_cat"):
        sel.remove_tool("feed_the_cat")


@pytest.mark.parametrize("utterance, history, message", [
    ("", (), "empty"),
    ("   \n\t ", (), "empty"),
    ("x" * 100_000, (), "limit"),
    (None, (), "must be a string"),
    ("hi", [{"role": "robot", "content": "beep"}], "unknown role"),
    ("hi", [{"role": "user"}], "content must be a string"),
    ("hi", "not a list", "not a string"),
])
def test_bad_input_gets_a_clear_error(selector, utterance, history, message):
    with pytest.raises(InputError, match=message):
        selector.select(utterance, history)


def test_config_validation():
    with pytest.raises(InputError):
        SelectorConfig(history="everything")
    with pytest.raises(InputError):
        SelectorConfig(candidates=0)


class WordOverlapReranker:
    """A test double for the rerank seam: scores a pair by shared words (no model)."""

    name = "word-overlap"

    def __init__(self):
        self.calls = []

    def score(self, query, texts):
        import numpy as np

        self.calls.append((query, list(texts)))
        q = set(query.lower().split())
        return np.array([len(q & set(t.lower().replace(":", " ").split())) for t in texts], dtype=np.float32)

    def score_pairs(self, pairs):  # the Reranker protocol's one call for a turn: per query text, as score
        import numpy as np

        out = np.zeros(len(pairs), dtype=np.float32)
        for query in dict.fromkeys(q for q, _ in pairs):
            at = [i for i, (q, _) in enumerate(pairs) if q == query]
            out[at] = self.score(query, [pairs[i][1] for i in at])
        return out


def test_rerank_seam_reorders_each_lists_head(bundle_dir):
    from magicselector import Selector
    from magicselector.selector import Selector as S

    base = Selector.from_bundle(bundle_dir)
    rr = WordOverlapReranker()
    one_list = dict(decompose="none", lexical=False, history="none")  # one dense list, as the seam is tested on
    sel = S(base.catalog, base.embedder, base.index,
            config=base.config.__class__(rerank=True, rerank_candidates=7, rerank_weight=1.0, **one_list),
            bundle=base.bundle, reranker=rr)
    out = sel.select("start navigation home")
    assert "rerank" in out.timings_ms
    assert len(rr.calls) == 1 and len(rr.calls[0][1]) == 7  # bounded candidate count
    assert out.candidates == 7 and len(out.ranked_ids) == 7
    assert out.ranked_scores == sorted(out.ranked_scores, reverse=True)
    scores = rr.score("start navigation home", rr.calls[0][1])
    best = max(range(7), key=lambda i: (scores[i], -i))  # stable: first of the highest
    assert out.ranked_ids[0] == base.with_config(rerank=False, **one_list).select("start navigation home").ranked_ids[best]
    calls = len(rr.calls)
    off = sel.with_config(rerank=False).select("start navigation home")
    assert "rerank" not in off.timings_ms and len(rr.calls) == calls


def test_retrieval_texts_are_the_texts_select_embeds(selector):
    """Selector.retrieval_texts (what bench latency and --compare time) lists exactly the texts of
    select's retrieval lists: the utterance, its sub-tasks, the history-folded utterance."""
    history = [{"role": "user", "content": "order a large pepperoni pizza"},
               {"role": "assistant", "content": "One large pepperoni pizza from Tony's, 25 minutes."}]
    for query, hist in [("turn on bluetooth and play some jazz", []), ("make it two", history),
                        ("and text Maria that it is on the way", history)]:
        texts = selector.retrieval_texts(query, hist)
        assert texts == [text for text, _, _ in selector.select(query, hist).lists]
    folded = selector.retrieval_texts("make it two", history)
    assert folded[0] == "make it two" and any("pepperoni" in t for t in folded[1:])

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

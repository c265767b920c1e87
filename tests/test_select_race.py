"""Catalog changes during concurrent selects: decomposed turns with the per-sub-task cut never fail, and
every selection's tools are the tools of one catalog state (real default bundle)."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from magicselector import Selector, SelectorConfig
from magicselector.bench.cut_rules import PaperCut
from magicselector.stages.cut import CutConfig

pytestmark = pytest.mark.slow

UTTERANCES = [
    "turn on bluetooth and play some jazz",
    "set an alarm for 7, then start a timer for 10 minutes",
    "text Sam that I'm running late; call mom",
    "play some music. Oh and dim the lights",
    "what's the weather like tomorrow? And turn on the Wi-Fi.",
]


# rmargin: the shipped cut. paper: the rule that reads the tools' vectors, which the cut used to
# fetch after the catalog lock was released.
@pytest.mark.parametrize("rule", ["rmargin", "paper"])
def test_tools_removed_and_readded_during_concurrent_decomposed_selects(bundle_dir, rule):
    cut = CutConfig() if rule == "rmargin" else PaperCut(k_max=10, anchor_k_max=5)
    config = SelectorConfig(decompose="rules", cut=cut)  # the per-sub-task cut: it reads the listed tools' vectors
    selector = Selector.from_bundle(bundle_dir, config=config)
    assert all(len(selector.select(u).subtasks) > 1 for u in UTTERANCES)
    # the tools these turns select are the ones to take away and give back
    churned = list(dict.fromkeys(i for u in UTTERANCES for i in selector.select(u).ranked_ids[:6]))
    originals = {i: selector.catalog.get(i) for i in churned}

    # Catalog states in order. The churn thread is the only writer, so this list is the sequence of
    # states every select saw one of; a re-added tool gets a new name, so a selection names its state.
    states = [{t.id: t.name for t in selector.catalog}]
    stop = threading.Event()
    errors: list[BaseException] = []
    results = []

    def churn() -> None:
        version = 0
        try:
            while not stop.is_set():
                version += 1
                for tool_id in churned:
                    selector.remove_tool(tool_id)
                    states.append({k: v for k, v in states[-1].items() if k != tool_id})
                for tool_id in churned:
                    tool = dataclasses.replace(originals[tool_id], name=f"{originals[tool_id].name}_v{version}")
                    selector.add_tool(tool)
                    states.append({**states[-1], tool_id: tool.name})
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def work(n: int) -> None:
        try:
            for i in range(12):
                sel = selector.select(UTTERANCES[(n + i) % len(UTTERANCES)])
                results.append(sel)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    writer = threading.Thread(target=churn)
    readers = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    writer.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    writer.join()

    assert not errors, errors
    assert len(results) == 36 and len(states) > 2 * len(churned)
    for sel in results:
        chosen = {t.id: t.name for t in sel.tools}
        assert chosen and len(chosen) == len(sel.tools) == sel.k
        assert any(all(s.get(i) == name for i, name in chosen.items()) for s in states), \
            f"{chosen} is not one catalog state"
    # the churn overlapped the selects: some selections chose a tool re-added during the run
    assert any(t.name.rsplit("_v", 1)[-1].isdigit() for sel in results for t in sel.tools)


def test_a_removal_waiting_on_a_select_takes_effect_after_it(bundle_dir, monkeypatch):
    """The interleaving that used to break a select, made certain: a tool of the turn's lists is
    removed while the per-sub-task cut reads their vectors. The removal waits for the select, which
    completes on the catalog it started with."""
    config = SelectorConfig(decompose="rules", cut=PaperCut(k_max=10, anchor_k_max=5))
    selector = Selector.from_bundle(bundle_dir, config=config)
    utterance = UTTERANCES[0]
    before = selector.select(utterance)
    victim = before.ids[0]
    removed = threading.Event()

    def remove() -> None:
        selector.remove_tool(victim)
        removed.set()

    remover = threading.Thread(target=remove)
    real_vectors = selector.index.vectors

    def vectors(ids):
        if not remover.is_alive() and not removed.is_set():
            remover.start()
        removed.wait(0.2)  # give the removal every chance to run before the vectors are read
        return real_vectors(ids)

    monkeypatch.setattr(selector.index, "vectors", vectors)
    during = selector.select(utterance)
    remover.join()
    assert removed.is_set() and victim not in selector.catalog.ids
    assert during.ids == before.ids  # the turn saw the catalog as it was when it started
    assert victim not in selector.select(utterance).ranked_ids


def test_copies_from_with_config_share_one_catalog_state(bundle_dir):
    """Tools added and removed through a with_config copy, while the original and another copy
    select: no error, and every Selector sees the same catalog at every moment (issue 27.1)."""
    selector = Selector.from_bundle(bundle_dir, config=SelectorConfig())
    writer, reader = selector.with_config(history="none"), selector.with_config(decompose="none")
    churned = list(dict.fromkeys(i for u in UTTERANCES for i in selector.select(u).ranked_ids[:4]))
    originals = {i: selector.catalog.get(i) for i in churned}
    errors: list[BaseException] = []
    stop = threading.Event()

    def churn() -> None:
        try:
            for version in range(1, 4):
                for tool_id in churned:
                    writer.remove_tool(tool_id)
                for tool_id in churned:
                    writer.add_tool(dataclasses.replace(originals[tool_id], name=f"{originals[tool_id].name}_v{version}"))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            stop.set()

    def work(sel_: Selector, n: int) -> None:
        i = 0
        while not stop.is_set() or i < 3:
            try:
                sel = sel_.select(UTTERANCES[(n + i) % len(UTTERANCES)])
                assert sel.tools and len(sel.tools) == sel.k
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return
            i += 1

    threads = [threading.Thread(target=churn)] + [threading.Thread(target=work, args=(s, n))
                                                   for n, s in enumerate((selector, reader, selector))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert selector.catalog is writer.catalog is reader.catalog
    assert selector.catalog_version == reader.catalog_version == 3 * 2 * len(churned)
    assert selector.catalog.get(churned[0]).name.endswith("_v3")
    assert all(i in selector.index and i in reader.lexical for i in churned)


def test_a_selections_schemas_are_those_of_the_catalog_it_searched(bundle_dir):
    """Issue 47: ``schemas(selection)`` read the catalog as it was at the call, so a tool removed
    after the select was an UnknownToolError and a replaced one came back with its new definition."""
    selector = Selector.from_bundle(bundle_dir)
    sel = selector.select("turn on bluetooth and set an alarm for 7")
    removed, replaced = sel.ids[0], sel.ids[1]
    old = selector.catalog.get(replaced)
    selector.remove_tool(removed)
    selector.add_tool(dataclasses.replace(old, description="A different tool now."))
    assert [d["name"] for d in selector.schemas(sel)] == [t.name for t in sel.tools]  # the removed one too
    by_name = {d["name"]: d for d in selector.schemas(sel)}
    assert by_name[old.name]["description"] == old.description  # as the turn saw it
    assert selector.schemas(selector.select("turn on bluetooth and set an alarm for 7"))  # a new turn: today's


def test_schemas_never_miss_a_tool_removed_and_replaced_by_other_threads(bundle_dir):
    """Selects and their schemas on two threads while a third removes and re-adds (with another
    description) the tools they select: every selection's schemas are its own tools, as it saw them."""
    selector = Selector.from_bundle(bundle_dir, config=SelectorConfig(decompose="rules"))
    churned = list(dict.fromkeys(i for u in UTTERANCES for i in selector.select(u).ids[:3]))
    originals = {i: selector.catalog.get(i) for i in churned}
    stop, errors, checked = threading.Event(), [], [0]

    def churn():
        version = 0
        while not stop.is_set():
            for tool_id in churned:
                version += 1
                selector.remove_tool(tool_id)
                selector.add_tool(dataclasses.replace(originals[tool_id], description=f"version {version}"))

    def read():
        for n in range(60):
            sel = selector.select(UTTERANCES[n % len(UTTERANCES)])
            try:
                schemas = selector.schemas(sel)
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(e))
                continue
            if [d["name"] for d in schemas] != [t.name for t in sel.tools] or any(
                    d["description"] != sel.catalog.get(t.id).description for d, t in zip(schemas, sel.tools)):
                errors.append(f"{sel.ids}: schemas of another catalog")
            checked[0] += 1

    churner = threading.Thread(target=churn)
    readers = [threading.Thread(target=read) for _ in range(2)]
    churner.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=300)
    stop.set()
    churner.join(timeout=60)
    assert errors == [] and checked[0] == 120

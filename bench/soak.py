"""``magicselector bench soak``: many selects from several threads while tools are added and removed.

Worker threads share one Selector (every other select through a ``with_config()`` copy of it) and
select phone utterances (some with a dialogue history) while a churn thread, through another copy,
removes catalog tools, puts them back and adds and removes tools of its own. Every
selection records the catalog version it searched (``Selection.catalog_version``). Afterwards a
fresh Selector replays the churn log single-threaded and selects every (utterance, version) pair
seen, and each concurrent result must equal its replay: the same tools, K, ranked list and scores
(to 6 decimals). The process RSS is sampled throughout; after the warm-up (the
first ``warmup_share`` of the selects) it must stay within ``rss_tolerance`` of its value at the
end of the warm-up. Reports errors, mismatches, RSS and throughput.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

# Phone requests, a few elliptical follow-ups that need the history, and multi-intent turns.
UTTERANCES = (
    "turn on bluetooth", "set an alarm for 7 am", "play some jazz", "what's the weather in Paris tomorrow",
    "text mom that I'm running late", "call the dentist", "navigate to the nearest gas station",
    "start a 10 minute timer", "turn the volume down", "take a screenshot", "remind me to buy milk at 6",
    "book a table for two tonight", "how long is my commute", "translate good morning into Spanish",
    "open the camera", "switch on do not disturb", "what's on my calendar today", "order a pizza",
    "send 20 dollars to Alex", "find a podcast about history", "dim the living room lights",
    "turn on bluetooth and play some jazz", "set an alarm for 6 and remind me to call John",
    "check the weather and book a taxi to the airport", "mute notifications, then start a timer",
    "and tomorrow?", "make it 8 instead", "do that again", "what about London?", "turn it off",
)
HISTORY = (
    {"role": "user", "content": "what's the weather in Berlin"},
    {"role": "assistant", "content": "Cloudy, 14 degrees."},
    {"role": "user", "content": "set an alarm for 7"},
    {"role": "assistant", "content": "Alarm set for 7:00."},
)


@dataclass(frozen=True)
class SoakConfig:
    selects: int = 100_000
    threads: int = 4
    churn_interval_ms: float = 50.0   # the churn thread's pause between catalog changes
    extra_tools: int = 20             # at most this many of the churn's own tools in the catalog at once
    warmup_share: float = 0.1
    rss_tolerance: float = 0.05
    rss_interval_s: float = 0.5
    seed: int = 0
    decompose: str = "none"
    history_share: float = 0.3        # share of selects that carry HISTORY
    copies: bool = True               # churn, and every other select, through with_config() copies (issue 27.2)


def _rss_mb() -> float:
    """The process's resident set size now (Linux /proc; resource's peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def _churn_tool(n: int):
    from magicselector.catalog import Tool

    topics = ("garden watering schedule", "parking meter payment", "bike lock status", "aquarium heater",
              "library book renewal", "laundry machine status", "plant moisture sensor", "boat mooring booking")
    topic = topics[n % len(topics)]
    return Tool(id=f"soak_tool_{n}", name=f"soak_tool_{n}", description=f"Check or change the {topic} ({n}).",
                parameters={"type": "object", "properties": {"value": {"type": "string"}}})


def _workload(config: SoakConfig) -> list[tuple[str, bool]]:
    rng = random.Random(config.seed)
    return [(rng.choice(UTTERANCES), rng.random() < config.history_share) for _ in range(config.selects)]


def _digest(sel) -> bytes:
    """16 bytes standing for a selection: its tools, K, ranked list and scores (6 decimals). The
    soak keeps only these, in an array allocated before the run, so that its own bookkeeping does
    not grow the RSS it measures."""
    key = (sel.ids, sel.k, sel.ranked_ids, [round(t.score, 6) for t in sel.tools])
    return hashlib.blake2b(repr(key).encode("utf-8"), digest_size=16).digest()


class _ConcurrentRun:
    """The concurrent half of the soak: worker threads selecting, a churn thread changing the
    catalog, a sampler reading the RSS. The record arrays are allocated up front and written in
    place, so the soak's own bookkeeping does not grow the RSS it measures."""

    def __init__(self, selector, work: list[tuple[str, bool]], config: SoakConfig) -> None:
        self.selector, self.work, self.config = selector, work, config
        # Selectors sharing one catalog state: the churn's, and those the workers take turns with
        self.churner = selector.with_config() if config.copies else selector
        self.selectors = [selector, selector.with_config()] if config.copies else [selector]
        self.digests = np.full((len(work), 16), 0xFF, dtype=np.uint8)
        self.versions = np.full(len(work), -1, dtype=np.int64)   # -1: the select did not finish
        self.errors: list[str] = []
        self.churn_log: list[tuple[int, str, Any]] = []   # (version after the change, op, tool or id)
        self.rss: list[tuple[float, int, float]] = []     # (seconds, selects done, MB)
        self.done = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.next_item = iter(range(len(work)))

    def worker(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                i = next(self.next_item, None)
            if i is None:
                return
            text, with_history = self.work[i]
            try:
                sel = self.selectors[i % len(self.selectors)].select(text, HISTORY if with_history else ())
                self.digests[i] = np.frombuffer(_digest(sel), dtype=np.uint8)
                self.versions[i] = sel.catalog_version
            except Exception as e:  # the soak's finding: any error at all
                with self.lock:
                    self.errors.append(f"select {i} ({text!r}): {type(e).__name__}: {e}")
            with self.lock:
                self.done += 1

    def churn(self) -> None:
        selector, log = self.churner, self.churn_log
        rng = random.Random(self.config.seed + 1)
        removed: list = []
        extra: list = []
        made = 0
        while not self.stop.is_set():
            try:
                op = rng.random()
                if op < 0.3 and len(removed) < 10:
                    tool = rng.choice([t for t in selector.catalog if not t.id.startswith("soak_tool_")])
                    selector.remove_tool(tool.id)
                    removed.append(tool)
                    log.append((selector.catalog_version, "remove", tool.id))
                elif op < 0.6 and removed:
                    tool = removed.pop(rng.randrange(len(removed)))
                    selector.add_tool(tool)
                    log.append((selector.catalog_version, "add", tool))
                elif op < 0.8 and len(extra) < self.config.extra_tools:
                    tool = _churn_tool(made)
                    made += 1
                    selector.add_tool(tool)
                    extra.append(tool)
                    log.append((selector.catalog_version, "add", tool))
                elif extra:
                    tool = extra.pop(rng.randrange(len(extra)))
                    selector.remove_tool(tool.id)
                    log.append((selector.catalog_version, "remove", tool.id))
            except Exception as e:
                with self.lock:
                    self.errors.append(f"churn: {type(e).__name__}: {e}")
            self.stop.wait(self.config.churn_interval_ms / 1e3)

    def sample_rss(self) -> None:
        t0 = time.perf_counter()
        while not self.stop.is_set():
            self.rss.append((time.perf_counter() - t0, self.done, _rss_mb()))
            self.stop.wait(self.config.rss_interval_s)

    def run(self, say: Callable[[str], None]) -> float:
        """Start every thread, report every 30 s, wait for the workers; the seconds they took."""
        config = self.config
        t0 = time.perf_counter()
        workers = [threading.Thread(target=self.worker, name=f"soak-{n}") for n in range(config.threads)]
        helpers = [threading.Thread(target=self.churn, name="soak-churn"),
                   threading.Thread(target=self.sample_rss, name="soak-rss")]
        for th in helpers + workers:
            th.start()
        last = time.perf_counter()
        while any(th.is_alive() for th in workers):
            time.sleep(0.2)
            if time.perf_counter() - last > 30:
                last = time.perf_counter()
                say(f"[soak] {self.done:,}/{config.selects:,} selects, {len(self.churn_log)} catalog changes, "
                    f"RSS {self.rss[-1][2] if self.rss else 0:.0f} MB, {len(self.errors)} errors")
        for th in workers:
            th.join()
        seconds = time.perf_counter() - t0
        self.rss.append((seconds, self.done, _rss_mb()))
        self.stop.set()
        for th in helpers:
            th.join()
        return seconds


def _rss_after_warmup(rss: list[tuple[float, int, float]], config: SoakConfig) -> tuple[dict[str, Any], bool]:
    """The RSS report, and whether it stayed within ``rss_tolerance`` after the warm-up."""
    warm = int(config.selects * config.warmup_share)
    after = [mb for _, n, mb in rss if n >= warm]
    base = after[0] if after else None
    report = {"samples": len(rss), "start_mb": round(rss[0][2], 1) if rss else None,
              "after_warmup_mb": round(base, 1) if base else None,
              "max_after_warmup_mb": round(max(after), 1) if after else None,
              "end_mb": round(rss[-1][2], 1) if rss else None,
              "growth_after_warmup": round(max(after) / base - 1, 4) if base else None}
    return report, base is not None and max(after) <= base * (1 + config.rss_tolerance)


def _replay(replay, run: _ConcurrentRun) -> tuple[dict[int, set[tuple[str, bool]]],
                                                 dict[tuple[int, str, bool], tuple[bytes, list[str]]]]:
    """Walk ``replay`` (a fresh Selector) through the churn log single-threaded and select every
    (utterance, history) pair at the catalog version it was seen at; returns (the pairs wanted per
    version, the replayed digest and ids per (version, utterance, history)). A replayed change that
    lands on another version than the logged one is recorded in ``run.errors``."""
    wanted: dict[int, set[tuple[str, bool]]] = {}
    for i, (text, hist) in enumerate(run.work):
        if run.versions[i] >= 0:
            wanted.setdefault(int(run.versions[i]), set()).add((text, hist))
    expected: dict[tuple[int, str, bool], tuple[bytes, list[str]]] = {}
    changes = iter(run.churn_log)
    version = 0
    for v in sorted(wanted):
        while version < v:
            logged, op, what = next(changes)
            (replay.add_tool if op == "add" else replay.remove_tool)(what)
            version = replay.catalog_version
            if version != logged:
                run.errors.append(f"replay: version {version} after change {logged}")
        for text, hist in sorted(wanted[v]):
            sel = replay.select(text, HISTORY if hist else ())
            expected[(v, text, hist)] = (_digest(sel), sel.ids)
    return wanted, expected


def _mismatches(run: _ConcurrentRun, expected: dict[tuple[int, str, bool], tuple[bytes, list[str]]]
                ) -> list[dict[str, Any]]:
    """Every finished concurrent select whose digest differs from its replay."""
    out = []
    for i, (text, hist) in enumerate(run.work):
        if run.versions[i] < 0:
            continue
        want, ids = expected[(int(run.versions[i]), text, hist)]
        if run.digests[i].tobytes() != want:
            out.append({"select": i, "text": text, "history": hist, "version": int(run.versions[i]),
                        "replay": ids})
    return out


def run_soak(bundle: str | Path | None = None, config: SoakConfig = SoakConfig(),
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the soak (see the module docstring); returns the report, ``ok`` when nothing failed."""
    from magicselector.default_bundle import ensure_default_bundle
    from magicselector.config import SelectorConfig
    from magicselector.selector import Selector

    say = progress or (lambda line: None)
    path = bundle if bundle is not None else ensure_default_bundle(progress=False)
    sel_config = SelectorConfig(decompose=config.decompose, history="user")
    selector = Selector.from_bundle(path, config=sel_config)
    originals = list(selector.catalog)
    run = _ConcurrentRun(selector, _workload(config), config)
    say(f"[soak] {config.selects:,} selects from {config.threads} threads, churn every "
        f"{config.churn_interval_ms:g} ms, {len(originals)} tools, "
        f"decompose={config.decompose}")
    seconds = run.run(say)
    rss_report, rss_ok = _rss_after_warmup(run.rss, config)

    say(f"[soak] replaying {len(run.churn_log)} catalog changes single-threaded")
    t1 = time.perf_counter()
    wanted, expected = _replay(Selector.from_bundle(path, config=sel_config), run)
    mismatches = _mismatches(run, expected)
    replay_s = time.perf_counter() - t1

    errors = run.errors
    completed = int((run.versions >= 0).sum())
    report = {
        "config": {**config.__dict__, "bundle": str(path), "tools": len(originals)},
        "selects": completed,
        "errors": len(errors),
        "error_examples": errors[:10],
        "catalog_changes": len(run.churn_log),
        "versions_seen": len(wanted),
        "replayed_pairs": len(expected),
        "mismatches": len(mismatches),
        "mismatch_examples": mismatches[:5],
        "rss": rss_report,
        "rss_ok": rss_ok,
        "seconds": round(seconds, 1),
        "selects_per_s": round(completed / seconds, 1) if seconds else None,
        "replay_seconds": round(replay_s, 1),
        "host": _host(),
    }
    report["ok"] = (not errors and not mismatches and rss_ok and completed == config.selects)
    say(f"[soak] {completed:,} selects in {seconds:.0f} s, {len(run.churn_log)} changes, {len(errors)} errors, "
        f"{len(mismatches)} mismatches, RSS growth after warm-up {rss_report['growth_after_warmup']}")
    return report


def _host() -> dict[str, Any]:
    """CPU model, INT8-relevant ISA flags, cores and Python: bench.latency.machine_description's."""
    from .latency import machine_description

    d = machine_description()
    return {"cpu": d["cpu_model"], "isa": d["isa"], "cores": d["cores"], "python": d["python"]}


def format_soak(report: dict[str, Any]) -> str:
    c = report["config"]
    lines = [
        f"soak: {report['selects']:,} selects from {c['threads']} threads in {report['seconds']} s "
        f"({report['selects_per_s']} selects/s), {report['catalog_changes']} catalog changes "
        f"({report['versions_seen']} versions seen), decompose={c['decompose']}",
        f"errors: {report['errors']}; mismatches against the single-threaded replay: {report['mismatches']} "
        f"({report['replayed_pairs']} (utterance, version) pairs replayed in {report['replay_seconds']} s)",
        f"RSS: start {report['rss']['start_mb']} MB, after warm-up {report['rss']['after_warmup_mb']} MB, "
        f"max after warm-up {report['rss']['max_after_warmup_mb']} MB (growth {report['rss']['growth_after_warmup']}, "
        f"limit {c['rss_tolerance']}), end {report['rss']['end_mb']} MB",
        f"host: {report['host']['cpu']}, {' '.join(report['host']['isa'])}, {report['host']['cores']} cores",
        "result: " + ("ok" if report["ok"] else "FAILED"),
    ]
    return "\n".join(lines)


def write_soak(report: dict[str, Any], out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return out / "soak.json"

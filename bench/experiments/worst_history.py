"""One worst-case history in this process: the time and the peak RSS over the idle process of ``bounded_history`` and of one ``select`` (Linux: VmHWM reset through /proc/self/clear_refs).

    OMP_NUM_THREADS=1 python3 -m magicselector.bench.experiments.worst_history CASE [--bundle DIR]

CASE is one of the histories below (``CASES``); each is built in memory. To compare with the code
before a change, run the same module from an unpacked older tree (``git archive COMMIT``) on
PYTHONPATH. docs/bench/robustness.md ("One budget for a history") holds the numbers.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable, Sequence

from magicselector.dialogue import bounded_history
from magicselector.errors import MagicSelectorError

from .common import open_bundle


def _names(kchars: int) -> list[dict[str, Any]]:
    """32 assistant messages of 64 tool calls each, every name ``kchars`` thousand characters."""
    n = kchars * 1000
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}_{j}", "type": "function", "function": {"name": "n" * n + f"_{i}_{j}", "arguments": "{}"}}
        for j in range(64)]} for i in range(32)]


def _nested(leaf: Any) -> Any:
    for k in "gfedcba":
        leaf = {k: leaf}
    return leaf


CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "limits": lambda: [{"role": ("user", "assistant")[i % 2], "content": "please set an alarm " * 25} for i in range(32)],
    "nonstrkeys": lambda: [{"role": "user", "content": {1: "a", "b": 2}}],
    "names4": lambda: _names(4),
    "names16": lambda: _names(16),
    "dict1m": lambda: [{"role": "user", "content": {f"k{i}": i for i in range(1_000_000)}}],
    # one 30 MB string 8 levels down in a tool result
    "deep30mb": lambda: [{"role": "user", "content": "what did it say"},
                         {"role": "tool", "tool_call_id": "c1",
                          "content": {"content": [], "structuredContent": _nested("x" * 30_000_000)}}],
    # 30 MB in 30,000 strings 8 levels down
    "deepwide": lambda: [{"role": "tool", "tool_call_id": "c1", "content": {
        "content": [], "structuredContent": _nested({f"v{i}": "y" * 1000 for i in range(30_000)})}}],
    # as many values as the budget reaches: 64 keys x 64 x 64 per message, 32 messages
    "maxread": lambda: [{"role": "tool", "tool_call_id": f"c{i}", "content": {
        "content": [], "structuredContent": {f"k{j}": [[1] * 64] * 64 for j in range(64)}}} for i in range(32)],
}


def rss_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise OSError(f"/proc/self/status has no {field}")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM back to the current RSS


def run(case: str, bundle: str | None = None) -> dict[str, Any]:
    selector = open_bundle(bundle)
    selector.select("turn on bluetooth", [{"role": "user", "content": "hi"}])  # warm-up
    history = CASES[case]()
    idle = rss_mb("VmRSS")
    out: dict[str, Any] = {"case": case, "idle_rss_mb": round(idle)}
    for what, fn in (("bounded_history", lambda: bounded_history(history, 32, 16_000)),
                     ("select", lambda: selector.select("set an alarm for 7", history))):
        reset_peak()
        t = time.perf_counter()
        try:
            fn()
            result = "ok"
        except MagicSelectorError as e:
            result = f"{type(e).__name__}: {str(e)[:70]}"
        except Exception as e:  # what the measurement looks for: an error that is not the library's
            result = f"RAW {type(e).__name__}: {str(e)[:70]}"
        out[what] = {"ms": round((time.perf_counter() - t) * 1000, 1),
                     "peak_over_idle_mb": round(rss_mb("VmHWM") - idle), "result": result}
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.worst_history",
                                description=__doc__.split("\n")[0])
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--bundle", help="bundle folder (default: the default bundle)")
    out = run(**vars(p.parse_args(argv)))
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()

"""One worst-case history (issue 27.2), in this process: the time and the peak RSS over the idle
process (VmHWM reset through /proc/self/clear_refs, Linux) of ``bounded_history`` and of one
``select`` with the default bundle, after a warm-up select. The numbers are in
docs/bench/robustness.md ("One budget for a history").

    OMP_NUM_THREADS=1 python3 docs/bench/worst_history.py CASE
    # CASE: limits nonstrkeys names4 names16 dict1m deep30mb deepwide maxread
    # the code before the change, for comparison: git archive <commit> runtime | tar -x -C /tmp/old
    # && mv /tmp/old/runtime /tmp/old/magicselector && PYTHONPATH=/tmp/old python3 ... CASE
"""
import json, resource, sys, time

case = sys.argv[1]


def rss_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def build(case):
    if case.startswith("names"):
        n = int(case[5:]) * 1000
        return [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}_{j}", "type": "function", "function": {"name": "n" * n + f"_{i}_{j}", "arguments": "{}"}}
            for j in range(64)]} for i in range(32)]
    if case == "dict1m":
        return [{"role": "user", "content": {f"k{i}": i for i in range(1_000_000)}}]
    if case == "deep30mb":
        deep = "x" * 30_000_000
        for k in "gfedcba":
            deep = {k: deep}
        return [{"role": "user", "content": "what did it say"},
                {"role": "tool", "tool_call_id": "c1", "content": {"content": [], "structuredContent": deep}}]
    if case == "deepwide":  # 30 MB in 30,000 strings 8 levels down
        leaf = {f"v{i}": "y" * 1000 for i in range(30_000)}
        for k in "gfedcba":
            leaf = {k: leaf}
        return [{"role": "tool", "tool_call_id": "c1", "content": {"content": [], "structuredContent": leaf}}]
    if case == "maxread":  # as many values as the budget reaches: 64 keys x 64 x 64 per message, 32 messages
        wide = {f"k{i}": [[1] * 64] * 64 for i in range(64)}
        return [{"role": "tool", "tool_call_id": f"c{i}", "content": {"content": [], "structuredContent": wide}}
                for i in range(32)]
    if case == "nonstrkeys":
        return [{"role": "user", "content": {1: "a", "b": 2}}]
    if case == "limits":
        return [{"role": ("user", "assistant")[i % 2], "content": "please set an alarm " * 25} for i in range(32)]
    raise SystemExit(f"unknown case {case}")


from magicselector import Selector, MagicSelectorError
from magicselector.selector import bounded_history

selector = Selector.from_bundle()
selector.select("turn on bluetooth", [{"role": "user", "content": "hi"}])  # warm-up
history = build(case)
idle = rss_mb("VmRSS")
out = {"case": case, "idle_rss_mb": round(idle)}
for what, fn in (("bounded_history", lambda: bounded_history(history, 32, 16_000)),
                 ("select", lambda: selector.select("set an alarm for 7", history))):
    reset_peak()
    t = time.perf_counter()
    try:
        fn()
        result = "ok"
    except MagicSelectorError as e:
        result = f"{type(e).__name__}: {str(e)[:70]}"
    except Exception as e:
        result = f"RAW {type(e).__name__}: {str(e)[:70]}"
    out[what] = {"ms": round((time.perf_counter() - t) * 1000, 1), "peak_over_idle_mb": round(rss_mb("VmHWM") - idle),
                 "result": result}
print(json.dumps(out))

"""Renders a generated mobile split's histories as a chat API writes them: each earlier turn's
gold tools become an assistant ``tool_calls`` message (OpenAI Chat Completions) with one ``tool``
result per call, before the assistant's reply. The history measurement of docs/bench/history.md
evaluates these copies against the plain splits.

    python3 tools/render_tool_calls.py /tmp/mobile/dev /tmp/mobile_tc/dev
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def render(src: Path, dst: Path) -> tuple[int, int]:
    """Write ``dst`` (tools.jsonl copied, queries.jsonl re-rendered); returns (queries, calls)."""
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "tools.jsonl", dst / "tools.jsonl")
    rows = [json.loads(line) for line in open(src / "queries.jsonl", encoding="utf-8") if line.strip()]
    # a query's id is <dialogue>-<turn>; its history holds one user/assistant pair per earlier turn
    gold = {(r["dialogue_id"], int(r["id"].rsplit("-", 1)[1])): r["gold"] for r in rows}
    calls_written = 0
    with open(dst / "queries.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            history, out = r["history"], []
            for j in range(0, len(history), 2):
                out.append(history[j])
                tools = gold.get((r["dialogue_id"], j // 2))
                if tools:
                    calls = [{"id": f"call_{j // 2}_{i}", "type": "function",
                              "function": {"name": t, "arguments": "{}"}} for i, t in enumerate(tools)]
                    out.append({"role": "assistant", "content": None, "tool_calls": calls})
                    out += [{"role": "tool", "tool_call_id": c["id"], "content": "{\"status\": \"ok\"}"} for c in calls]
                    calls_written += len(calls)
                out.append(history[j + 1])
            f.write(json.dumps({**r, "history": out}, ensure_ascii=False) + "\n")
    return len(rows), calls_written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    n, calls = render(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{sys.argv[2]}: {n} queries, {calls} tool calls rendered")

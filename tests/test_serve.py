"""`magicselector serve` end to end: the mcp package's own client spawns the server over stdio,
lists its tools and calls search_tools."""
import json
import os
import sys

import pytest

pytest.importorskip("mcp", reason="needs the serve extra: pip install -e .[serve]")

import anyio  # noqa: E402
from magicselector.errors import InputError  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402


def run_session(args, body):
    """Spawn ``python -m magicselector serve ARGS`` and run ``body(session)`` against it."""
    async def main():
        params = StdioServerParameters(command=sys.executable, args=["-m", "magicselector", "serve", *args],
                                       env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)
    return anyio.run(main)


@pytest.mark.slow
def test_search_tools_over_stdio(bundle_dir):
    async def body(session):
        listed = await session.list_tools()
        mcp_result = await session.call_tool("search_tools", {"query": "wake me up at 6:30 tomorrow"})
        history = [{"role": "user", "content": "turn on bluetooth"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function", "function": {"name": "bluetooth_toggle", "arguments": "{}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "on"},
                   {"role": "assistant", "content": "Bluetooth is on."}]
        anthropic = await session.call_tool("search_tools", {"query": "and connect my headphones", "history": history,
                                                             "format": "anthropic", "max_tools": 3})
        bad_history = await session.call_tool("search_tools", {"query": "hi", "history": [{"role": "robot",
                                                                                           "content": "x"}]})
        bad_format = await session.call_tool("search_tools", {"query": "hi", "format": "gemini"})
        return listed, mcp_result, anthropic, bad_history, bad_format

    listed, mcp_result, anthropic, bad_history, bad_format = run_session(["--bundle", str(bundle_dir)], body)
    assert [t.name for t in listed.tools] == ["search_tools"]
    tool = listed.tools[0]
    assert tool.input_schema["required"] == ["query"] and tool.annotations.read_only_hint is True

    assert not mcp_result.is_error
    payload = mcp_result.structured_content
    assert json.loads(mcp_result.content[0].text) == payload
    names = [t["name"] for t in payload["tools"]]
    assert "set_alarm" in names and len(names) == len(payload["scores"]) < 20
    assert set(payload["tools"][0]) >= {"name", "description", "inputSchema"}  # MCP definitions by default

    assert not anthropic.is_error
    defs = anthropic.structured_content["tools"]
    assert 1 <= len(defs) <= 3 and all(set(d) == {"name", "description", "input_schema"} for d in defs)
    assert "bluetooth_connect_device" in [d["name"] for d in defs]

    # bad arguments come back as tool errors naming the field, and the server keeps serving
    assert bad_history.is_error and "history[0].role" in bad_history.content[0].text
    assert bad_format.is_error and "format must be one of" in bad_format.content[0].text


@pytest.mark.slow
def test_serve_over_mcp_catalogs(bundle_dir, tmp_path):
    github = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "create_issue", "title": "Create issue", "description": "Open a new issue in a GitHub repository.",
         "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}, "title": {"type": "string"}}},
         "annotations": {"readOnlyHint": False}},
        {"name": "merge_pull_request", "description": "Merge an open pull request.",
         "inputSchema": {"type": "object", "properties": {"number": {"type": "integer"}}}}]}}
    slack = {"tools": [{"name": "send_message", "description": "Post a message to a Slack channel.",
                        "inputSchema": {"type": "object", "properties": {"channel": {"type": "string"}}}}]}
    (tmp_path / "github.json").write_text(json.dumps(github))
    (tmp_path / "slack.json").write_text(json.dumps(slack))

    async def body(session):
        return await session.call_tool("search_tools", {"query": "file a bug about the login page"})

    result = run_session(["--bundle", str(bundle_dir), "--catalog", str(tmp_path / "github.json"),
                          str(tmp_path / "slack.json")], body)
    tools = result.structured_content["tools"]
    assert tools[0]["name"] == "github__create_issue"
    assert tools[0]["title"] == "Create issue" and tools[0]["annotations"] == {"readOnlyHint": False}


class MeetingSelector:
    """A real Selector whose select first waits until ``parties`` selects are inside it at once: a
    server that ran its calls one after another would never get there (the wait times out)."""

    def __init__(self, selector, parties: int) -> None:
        import threading

        self.inner = selector
        self.meeting = threading.Barrier(parties, timeout=30)

    def select(self, query, history=(), **budget):
        self.meeting.wait()
        return self.inner.select(query, history)

    def schemas(self, selection, format="mcp"):
        return self.inner.schemas(selection, format=format)


@pytest.mark.slow
def test_concurrent_calls_on_one_session_run_at_once(selector):
    from mcp import Client

    from magicselector.cli.serve import build_server, search

    queries = ["wake me up at 6:30 tomorrow", "text Maria that I'm running late", "turn on bluetooth"]
    meeting = MeetingSelector(selector, parties=len(queries))

    async def main():
        results = [None] * len(queries)
        async with Client(build_server(meeting)) as client:
            async def call(i):
                results[i] = await client.call_tool("search_tools", {"query": queries[i]})
            async with anyio.create_task_group() as tg:
                for i in range(len(queries)):
                    tg.start_soon(call, i)
        return results

    results = anyio.run(main)
    for query, result in zip(queries, results):
        assert not result.is_error, result.content[0].text
        assert result.structured_content["tools"] == search(selector, {"query": query})["tools"]


@pytest.mark.slow
def test_concurrent_calls_over_stdio_match_sequential_ones(bundle_dir):
    queries = ["wake me up at 6:30 tomorrow", "text Maria that I'm running late", "turn on bluetooth and play jazz",
               "what's the weather in Lisbon?"]

    async def body(session):
        sequential = [await session.call_tool("search_tools", {"query": q}) for q in queries]
        together = [None] * len(queries)

        async def call(i):
            together[i] = await session.call_tool("search_tools", {"query": queries[i]})
        async with anyio.create_task_group() as tg:
            for i in range(len(queries)):
                tg.start_soon(call, i)
        return sequential, together

    sequential, together = run_session(["--bundle", str(bundle_dir)], body)
    for one, other in zip(sequential, together):
        assert not one.is_error and not other.is_error
        assert other.structured_content["tools"] == one.structured_content["tools"]
        assert other.structured_content["scores"] == one.structured_content["scores"]
    assert "set_alarm" in [t["name"] for t in sequential[0].structured_content["tools"]]


@pytest.mark.slow
def test_bench_serve_reports_every_caller_count(bundle_dir, tmp_path):
    from magicselector.bench.serve_bench import SCHEMA, ServeBenchConfig, bench_serve, format_markdown, write_report

    config = ServeBenchConfig(callers=(1, 2), requests=3, warmup=1, variants=("shipped",))
    report = bench_serve(str(bundle_dir), config)
    assert report["schema"] == SCHEMA and report["config"]["threads"] == 1
    assert report["device"]["cpu_model"] and "isa" in report["device"]
    rows = report["results"]
    assert [(r["variant"], r["callers"], r["requests"]) for r in rows] == [("shipped", 1, 3), ("shipped", 2, 6)]
    for r in rows:
        assert r["errors"] == 0 and r["selects_per_s"] > 0 and 0 < r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"]
    assert rows[0]["same_tools"] is None and rows[1]["same_tools"] == 1.0  # concurrency changes no answer
    written = write_report(report, tmp_path / "serve.json", tmp_path / "serve.md")
    assert json.loads((tmp_path / "serve.json").read_text())["results"][1]["callers"] == 2
    assert "| shipped | 2 |" in (tmp_path / "serve.md").read_text() and len(written) == 2
    assert "1 inference thread(s)" in format_markdown(report)


@pytest.mark.slow
def test_bench_serve_over_http_with_one_and_two_processes(bundle_dir):
    from magicselector.bench.serve_bench import ServeBenchConfig, bench_serve, format_markdown

    config = ServeBenchConfig(callers=(1, 3), requests=3, warmup=1, rounds=1, variants=("shipped",),
                              transport="http", processes=(1, 2))
    report = bench_serve(str(bundle_dir), config)
    rows = report["results"]
    assert [(r["processes"], r["callers"], r["requests"]) for r in rows] == [(1, 1, 3), (1, 3, 9), (2, 1, 3),
                                                                             (2, 3, 9)]
    for r in rows:
        assert r["transport"] == "streamable-http" and r["errors"] == 0, r.get("first_error")
        assert r["selects_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"]
    assert [r["same_tools"] for r in rows if r["callers"] == 3] == [1.0, 1.0]
    assert report["config"]["processes"] == [1, 2]
    table = format_markdown(report)
    assert "| shipped | 2 | 3 |" in table and "streamable HTTP" in table


def test_bench_serve_runs_the_shipped_server_and_names_an_unknown_variant():
    from magicselector.bench.serve_bench import ServeBenchConfig

    assert ServeBenchConfig().server_variants() == {"shipped": []}
    with pytest.raises(InputError, match="unknown \\['rerank'\\]"):
        ServeBenchConfig(variants=("shipped", "rerank"))  # the cross-encoder left the runtime

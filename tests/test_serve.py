"""`magicselector serve` end to end: the mcp package's own client spawns the server over stdio,
lists its tools and calls search_tools."""
import json
import os
import sys

import pytest

pytest.importorskip("mcp")  # the serve extra (installed by the dev extra)

import anyio  # noqa: E402
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

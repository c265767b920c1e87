"""`magicselector serve` as a real subprocess: every malformed request gets its JSON-RPC error over
stdio and over streamable HTTP and the server keeps serving; the HTTP transport with the mcp
package's own client, its bearer token, its loopback rule, and replicas sharing one port."""
import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp", reason="needs the serve extra: pip install -e .[serve]")

import anyio  # noqa: E402

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/mcp \(pid (\d+)\)")
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _call(rid, arguments):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "search_tools", "arguments": arguments}})


# (name, the raw line or body, the error code, the id the answer must carry)
MALFORMED = [
    ("not json", "this is not json", -32700, None),
    ("truncated", '{"jsonrpc": "2.0", "id": 1, "method": "tools/li', -32700, None),
    ("object id", json.dumps({"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}), -32600, None),
    ("array id", json.dumps({"jsonrpc": "2.0", "id": [1], "method": "tools/list"}), -32600, None),
    ("batch", json.dumps([{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}]), -32600, None),
    ("no method", json.dumps({"jsonrpc": "2.0", "id": 4}), -32600, 4),
    ("params list", json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                                "params": ["search_tools", {"query": "x"}]}), -32602, 5),
    ("history 5000 deep", _call(6, {"query": "x"})[:-3] + ', "history": ' + "[" * 5000 + "]" * 5000 + "}}}",
     -32602, 6),
    ("lone surrogate", _call(7, {"query": "PLACEHOLDER alarm"}).replace("PLACEHOLDER", "\\ud800"), -32602, 7),
]


def _check_error(answer, code, rid, case):
    assert answer is not None, f"{case}: no answer"
    assert answer["jsonrpc"] == "2.0" and answer["id"] == rid, (case, answer)
    assert answer["error"]["code"] == code, (case, answer)
    assert answer["error"]["message"], case


class StdioServer:
    def __init__(self, bundle_dir):
        self.proc = subprocess.Popen([sys.executable, "-m", "magicselector", "serve", "--bundle", str(bundle_dir)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout=60.0):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def close(self):
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.mark.slow
def test_every_malformed_line_gets_an_error_over_stdio_and_the_server_keeps_serving(bundle_dir):
    server = StdioServer(bundle_dir)
    try:
        server.send(json.dumps(INIT))
        assert server.receive(120)["result"]["serverInfo"]["name"] == "magicselector"
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for i, (case, line, code, rid) in enumerate(MALFORMED):
            server.send(line)
            _check_error(server.receive(), code, rid, case)
            server.send(_call(100 + i, {"query": "wake me up at 6:30", "max_tools": 2}))  # still serving
            answer = server.receive()
            assert answer["id"] == 100 + i and "set_alarm" in answer["result"]["content"][0]["text"], case
        # a notification with bad params gets no answer (JSON-RPC never answers a notification)
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]}))
        server.send(json.dumps({"jsonrpc": "2.0", "id": 200, "method": "tools/list"}))
        assert server.receive()["id"] == 200
        assert server.close() == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    assert b"Traceback" not in server.proc.stderr.read()


def test_a_line_over_the_message_limit_is_refused_with_its_id_and_the_next_one_served(selector):
    import io

    from magicselector.cli.serve import serve_stdio

    big = _call(1, {"query": "x" * 4096})  # the id first, as the mcp client writes it
    # the id last, as the TypeScript SDK writes it, with an "id" nested in params that is not the message's
    big_ts = json.dumps({"method": "tools/call", "params": {"name": "search_tools",
                                                            "arguments": {"query": "y" * 9000, "id": 99}},
                         "jsonrpc": "2.0", "id": "req-3"})
    no_id = json.dumps({"method": "tools/call", "params": {"arguments": {"query": "z" * 9000, "id": 98}}})
    lines = [json.dumps(INIT), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), big, big_ts,
             no_id, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})]
    wire_in, wire_out = io.BytesIO(("\n".join(lines) + "\n").encode()), io.BytesIO()
    anyio.run(serve_stdio, selector, 1024, wire_in, wire_out)
    answers = [json.loads(line) for line in wire_out.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [0, 1, "req-3", None, 2]  # the client waiting on its id hears back
    for answer in answers[1:4]:
        assert answer["error"]["code"] == -32600 and "1024 bytes" in answer["error"]["message"]
    assert answers[4]["result"]["tools"][0]["name"] == "search_tools"


class HTTPServer:
    def __init__(self, bundle_dir, *extra, port=0):
        self.proc = subprocess.Popen([sys.executable, "-m", "magicselector", "serve", "--bundle", str(bundle_dir),
                                      "--transport", "streamable-http", "--port", str(port), *extra],
                                     stderr=subprocess.PIPE, text=True)
        self.port, self.pids = None, []

    def wait_listening(self, count=1, timeout=120.0):
        # The pipe's bytes are read here, not by readline: a buffered readline takes in every line
        # there is, and when two workers announce themselves at once select would then wait, until
        # the timeout, for a second line already read.
        deadline, fd, pending = time.monotonic() + timeout, self.proc.stderr.fileno(), b""
        while len(self.pids) < count:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the server did not start listening"
            chunk = os.read(fd, 65536)
            assert chunk, f"the server ended: {self.proc.poll()}"
            *lines, pending = (pending + chunk).split(b"\n")
            for match in filter(None, (LISTENING.search(line.decode("utf-8", "replace")) for line in lines)):
                self.port = int(match.group(1))
                self.pids.append(int(match.group(2)))
        return self

    def post(self, body, token=None, timeout=60.0):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            connection.request("POST", "/mcp", body=body.encode("utf-8"), headers=headers)
            response = connection.getresponse()
            data = response.read()
            return response.status, (json.loads(data) if data else None)
        finally:
            connection.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def http_server(bundle_dir):
    server = HTTPServer(bundle_dir, "--token", "s3cret").wait_listening()
    yield server
    server.stop()


@pytest.mark.slow
def test_every_malformed_body_gets_an_error_over_http_and_the_server_keeps_serving(http_server):
    for i, (case, body, code, rid) in enumerate(MALFORMED):
        status, answer = http_server.post(body, token="s3cret")
        _check_error(answer, code, rid, case)
        # the transport's rule: a body the server cannot take is a 400; a well-formed request's
        # invalid params are an answer to that request
        assert status == (200 if code == -32602 else 400), (case, status)
        status, answer = http_server.post(_call(100 + i, {"query": "wake me up at 6:30", "max_tools": 2}),
                                          token="s3cret")
        assert status == 200 and answer["id"] == 100 + i, case
        assert [t["name"] for t in answer["result"]["structuredContent"]["tools"]][:2].count("set_alarm") == 1


@pytest.mark.slow
def test_answers_on_a_kept_alive_connection_are_not_held_back_by_nagle(http_server):
    # a listening socket made without IPPROTO_TCP gets no TCP_NODELAY from asyncio, and every
    # answer then waited about 40 ms for a delayed ACK; a ping takes a few ms without that
    connection = http.client.HTTPConnection("127.0.0.1", http_server.port, timeout=60)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": "Bearer s3cret"}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    took = []
    try:
        for _ in range(25):
            t = time.perf_counter()
            connection.request("POST", "/mcp", body=body, headers=headers)
            response = connection.getresponse()
            assert response.status == 200 and json.loads(response.read())["result"] == {}
            took.append(time.perf_counter() - t)
    finally:
        connection.close()
    assert sorted(took)[len(took) // 2] < 0.025, took


@pytest.mark.slow
def test_the_bearer_token_is_required(http_server):
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert http_server.post(listing)[0] == 401
    assert http_server.post(listing, token="wrong")[0] == 401
    status, answer = http_server.post(listing, token="s3cret")
    assert status == 200 and answer["result"]["tools"][0]["name"] == "search_tools"


@pytest.mark.slow
def test_the_mcp_client_lists_and_calls_search_tools_over_http(http_server):
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main():
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}) as http:
            async with streamable_http_client(f"http://127.0.0.1:{http_server.port}/mcp", http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    found = await session.call_tool("search_tools", {"query": "text Maria that I'm running late",
                                                                     "format": "openai", "max_tools": 3})
                    bad = await session.call_tool("search_tools", {"query": "hi", "format": "gemini"})
                    return listed, found, bad

    listed, found, bad = anyio.run(main)
    assert [t.name for t in listed.tools] == ["search_tools"]
    assert listed.tools[0].input_schema["required"] == ["query"]
    assert not found.is_error
    tools = found.structured_content["tools"]
    assert 1 <= len(tools) <= 3 and all(t["type"] == "function" for t in tools)
    assert "send_sms" in [t["function"]["name"] for t in tools]
    assert bad.is_error and "format must be one of" in bad.content[0].text


def _serve_exit(*args):
    done = subprocess.run([sys.executable, "-m", "magicselector", "serve", *args], capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stderr


def test_a_host_beyond_loopback_needs_allow_remote():
    code, err = _serve_exit("--transport", "streamable-http", "--host", "0.0.0.0", "--port", "0")
    assert code == 2 and "--allow-remote" in err and "Traceback" not in err
    code, err = _serve_exit("--token", "x")
    assert code == 2 and "--token applies with --transport streamable-http" in err


@pytest.mark.slow
def test_two_replicas_share_one_port_and_either_keeps_it_served(bundle_dir):
    first = HTTPServer(bundle_dir, "--reuse-port").wait_listening()
    second = HTTPServer(bundle_dir, "--reuse-port", port=first.port).wait_listening()
    try:
        assert second.port == first.port and first.pids != second.pids
        listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        for _ in range(6):  # a new connection each: the kernel may hand it to either process
            assert first.post(listing)[0] == 200
        first.stop()
        for i in range(6):
            status, answer = second.post(_call(i, {"query": "turn on bluetooth"}))
            assert status == 200 and "bluetooth_toggle" in answer["result"]["content"][0]["text"]
    finally:
        first.stop()
        second.stop()


@pytest.mark.slow
def test_workers_runs_replicas_on_one_port(bundle_dir):
    import socket

    with socket.socket() as probe:  # a free port for the replicas
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = HTTPServer(bundle_dir, "--workers", "2", port=port).wait_listening(count=2)
    try:
        assert len(set(server.pids)) == 2 and server.proc.pid not in server.pids
        for i in range(4):
            status, answer = server.post(_call(i, {"query": "what's the weather in Lisbon?"}))
            assert status == 200 and not answer["result"].get("isError")
    finally:
        server.stop()
    for pid in server.pids:  # the replicas end with their supervisor
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        assert not _alive(pid)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie has ended
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def _rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")
def test_the_server_gives_back_the_memory_of_large_messages(bundle_dir):
    # glibc's dynamic mmap threshold served every large message after the first from the heap,
    # which stayed grown: six 20 MB messages left the server at 1.6x its warm RSS
    server = StdioServer(bundle_dir)
    queries = ["wake me up at 6:30 tomorrow", "text Maria that I'm running late", "turn on bluetooth and play jazz"]
    history = [{"role": "user", "content": "turn on bluetooth"}, {"role": "assistant", "content": "It is on."}]

    def calls(first, count):
        for i in range(first, first + count, 8):
            for j in range(i, i + 8):
                server.send(_call(j, {"query": queries[j % 3], "history": history}))
            for j in range(i, i + 8):
                answer = server.receive()
                assert answer is not None and "result" in answer, answer

    try:
        server.send(json.dumps(INIT))
        assert server.receive(120)["result"]
        calls(0, 160)
        warm = _rss_mb(server.proc.pid)
        big = 20 * 10**6
        for i in range(6):
            arguments = [{"query": "word " * (big // 5)},
                         {"query": "set an alarm", "history": [{"role": "user", "content": "word " * (big // 5)}]},
                         {"query": "set an alarm", "history": [{"role": "user", "content": "x " * 100}] * (big // 250)}]
            server.send(_call(1000 + i, arguments[i % 3]))
            answer = server.receive(120)
            assert answer is not None and answer["id"] == 1000 + i
        calls(2000, 160)
        after = _rss_mb(server.proc.pid)
    finally:
        server.close()
    assert after <= 1.25 * warm, f"warm {warm:.0f} MB, after the large messages {after:.0f} MB"

"""The streamable HTTP server against a hostile caller, as a real subprocess on loopback addresses
only (127.0.0.1, 127.0.0.2 and [::1] where the machine has them): Host and Origin are checked on
every loopback bind before a body is read; header and body timeouts, a connection cap, a cap on
bytes in flight and a declared Content-Length over the limit refuse early; GET is 405; an
unsupported MCP-Protocol-Version says so; a schema budget that fits no tool is an error. Every
probe is bounded in count (a handful of sockets) and time (seconds)."""
from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp", reason="needs the serve extra: pip install -e .[serve]")

from hypothesis import given, settings, strategies as st  # noqa: E402

from magicselector.cli.serve import foreign_host_or_origin, is_loopback  # noqa: E402

LISTENING = re.compile(r"listening on http://(\S+):(\d+)/mcp \(pid (\d+)\)")
LIMITS = ["--header-timeout", "2", "--body-timeout", "3", "--max-connections", "8", "--max-message-mb", "1",
          "--max-inflight-mb", "2"]
TOOLS_LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()


class Server:
    def __init__(self, bundle_dir, host, *extra):
        self.host = host
        self.proc = subprocess.Popen([sys.executable, "-m", "magicselector", "serve", "--bundle", str(bundle_dir),
                                      "--transport", "streamable-http", "--host", host, "--port", "0", *extra],
                                     stderr=subprocess.PIPE, text=True)
        deadline, fd, seen = time.monotonic() + 120, self.proc.stderr.fileno(), b""
        while True:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the server did not start listening"
            chunk = os.read(fd, 65536)
            assert chunk, f"the server ended: {self.proc.poll()} {seen.decode(errors='replace')}"
            seen += chunk
            match = LISTENING.search(seen.decode("utf-8", "replace"))
            if match:
                self.port = int(match.group(2))
                return

    def connect(self, timeout=10.0) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect((self.host, self.port))
        return sock

    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def request(self, method="POST", body=TOOLS_LIST, headers=None, send_body=True, timeout=10.0):
        """(status, headers, body, seconds) of one request on a new connection; ``send_body`` False sends
        only the head (the declared Content-Length stays owed)."""
        head = {"Host": self.authority(), "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream", "Content-Length": str(len(body))}
        head.update(headers or {})
        raw = f"{method} /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items() if v is not None)
        start = time.monotonic()
        with self.connect(timeout) as sock:
            sock.sendall(raw.encode("latin-1") + b"\r\n" + (body if send_body else b""))
            return (*read_response(sock), time.monotonic() - start)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read()
        assert "Traceback" not in err, err


def read_response(sock: socket.socket):
    """(status, headers, body) of one HTTP/1.1 answer; status None if the server closed without one."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, {}, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", 0))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _can_bind(host: str) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(bundle_dir):
    s = Server(bundle_dir, "127.0.0.1", *LIMITS)
    yield s
    s.stop()


@pytest.mark.slow
def test_a_foreign_host_or_origin_is_refused_before_the_body_is_read(server):
    # headers only, with a large body owed: the refusal comes at once, not after the body timeout
    status, _, body, took = server.request(headers={"Host": f"evil.example:{server.port}",
                                                    "Content-Length": "900000"}, send_body=False)
    assert status == 421 and b"not this machine" in body and took < 1.5, (status, body, took)
    status, _, body, took = server.request(headers={"Origin": "http://evil.example", "Content-Length": "900000"},
                                           send_body=False)
    assert status == 403 and b"Origin" in body and took < 1.5, (status, body, took)
    # a foreign Origin with malformed JSON is a 403, not the screen's 400: the body is never parsed
    assert server.request(body=b"{not json", headers={"Origin": "https://evil.example"})[0] == 403
    assert server.request(headers={"Origin": "null"})[0] == 403
    for origin in ("http://localhost:6274", "http://127.0.0.1:3000", "http://[::1]:8080", None):
        assert server.request(headers={"Origin": origin})[0] == 200, origin
    for host in (f"localhost:{server.port}", f"127.0.0.2:{server.port}", f"[::1]:{server.port}"):
        assert server.request(headers={"Host": host})[0] == 200, host


@pytest.mark.slow
def test_a_declared_content_length_over_the_limit_is_refused_before_reading(server):
    for declared in (str(2 << 20), str(100 << 30)):  # over 1 MB; 100 GiB
        status, headers, body, took = server.request(headers={"Content-Length": declared}, send_body=False)
        assert status == 413 and took < 1.5, (status, body, took)
        assert json.loads(body)["error"]["code"] == -32600 and headers.get("connection") == "close"
    assert server.request(headers={"Content-Length": "12abc"}, send_body=False)[0] == 400


@pytest.mark.slow
def test_half_sent_headers_are_closed_after_the_header_timeout(server):
    with server.connect() as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: " + server.authority().encode())  # never finished
        start = time.monotonic()
        status, _, _ = read_response(sock)
        took = time.monotonic() - start
    assert status in (408, None) and 1.5 < took < 6, (status, took)
    with server.connect() as sock:  # a connection that sends nothing at all
        start = time.monotonic()
        assert read_response(sock)[0] in (408, None)
        assert time.monotonic() - start < 6


@pytest.mark.slow
def test_a_body_that_stops_arriving_gets_408_after_the_body_timeout(server):
    body = TOOLS_LIST + b" " * 200
    status, headers, _, took = server.request(body=body[:20], headers={"Content-Length": str(len(body))})
    assert status == 408 and 2.5 < took < 8 and headers.get("connection") == "close", (status, took)


@pytest.mark.slow
def test_connections_beyond_the_cap_get_503_and_the_server_recovers(server):
    held = [server.connect() for _ in range(8)]
    try:
        time.sleep(0.5)  # the server has accepted them
        with server.connect() as extra:
            status, headers, _ = read_response(extra)
        assert status == 503 and headers.get("retry-after") == "1"
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.5)
    assert server.request()[0] == 200


@pytest.mark.slow
def test_bodies_in_flight_are_capped(server):
    declared = 1_000_000  # each under the 1 MB message limit; three pass the 2 MB in flight
    held = []
    try:
        for _ in range(2):
            sock = server.connect()
            sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: {server.authority()}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {declared}\r\n\r\n".encode() + b" " * 1000)
            held.append(sock)
        time.sleep(0.5)
        status, headers, body, took = server.request(headers={"Content-Length": str(declared)}, send_body=False)
        assert status == 503 and b"in flight" in body and took < 1.5, (status, body)
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.5)
    assert server.request()[0] == 200  # the reservations were given back


@pytest.mark.slow
def test_get_and_delete_are_405_for_a_stateless_server(server):
    for method in ("GET", "DELETE"):
        status, headers, body, took = server.request(method=method, body=b"", headers={"Content-Length": None,
                                                                                        "Accept": "text/event-stream"})
        assert status == 405 and headers.get("allow") == "POST" and took < 1.5, (method, status, body)


@pytest.mark.slow
def test_an_unsupported_protocol_version_header_is_a_400_that_says_so(server):
    status, _, body, _ = server.request(headers={"MCP-Protocol-Version": "1999-01-01"})
    assert status == 400
    message = json.loads(body)["error"]["message"]
    assert "Unsupported MCP-Protocol-Version '1999-01-01'" in message and "2025-06-18" in message
    assert server.request(headers={"MCP-Protocol-Version": "2025-06-18"})[0] == 200


@pytest.mark.slow
def test_a_schema_budget_that_fits_no_tool_is_an_error(server):
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "search_tools", "arguments": {"query": "set an alarm for 7", "max_schema_tokens": 1}}}
    status, _, body, _ = server.request(body=json.dumps(call).encode())
    result = json.loads(body)["result"]
    assert status == 200 and result["isError"] and "max_schema_tokens" in result["content"][0]["text"]


@pytest.mark.slow
@pytest.mark.parametrize("host", ["127.0.0.2", "0:0:0:0:0:0:0:1"])
def test_every_loopback_bind_checks_host_and_origin(bundle_dir, host):
    if not _can_bind(host):
        pytest.skip(f"this machine cannot bind {host}")
    s = Server(bundle_dir, host)  # no --allow-remote: loopback in any spelling
    try:
        assert s.request()[0] == 200
        assert s.request(headers={"Host": f"evil.example:{s.port}"})[0] == 421
        assert s.request(headers={"Origin": "http://evil.example"})[0] == 403
    finally:
        s.stop()


def test_a_server_beyond_loopback_without_a_token_refuses_to_start():
    done = subprocess.run([sys.executable, "-m", "magicselector", "serve", "--transport", "streamable-http",
                           "--host", "0.0.0.0", "--allow-remote", "--port", "0"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MAGICSELECTOR_SERVE_TOKEN": ""})
    assert done.returncode == 2 and "without a token" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("flags, message", [
    (["--max-inflight-mb", "1"], "must be at least --max-message-mb"),
    (["--header-timeout", "0"], "--header-timeout must be a number of seconds > 0"),
    (["--max-connections", "0"], "--max-connections must be >= 1"),
])
def test_bad_limits_are_refused_by_name(flags, message):
    done = subprocess.run([sys.executable, "-m", "magicselector", "serve", "--transport", "streamable-http",
                           "--port", "0", *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_loopback_in_every_spelling():
    for host in ("localhost", "127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "0:0:0:0:0:0:0:1", "[::1]",
                 "::ffff:127.0.0.1", "LOCALHOST"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "192.168.1.5", "evil.example", "localhost.evil.example", "", "127.0.0.1.nip.io"):
        assert not is_loopback(host), host


@settings(max_examples=300, deadline=None)
@given(host=st.text(max_size=60), origin=st.one_of(st.none(), st.text(max_size=60)))
def test_the_host_and_origin_check_never_fails_and_passes_only_local_names(host, origin):
    headers = {"host": host, **({"origin": origin} if origin is not None else {})}
    refusal = foreign_host_or_origin(headers)
    if refusal is None:
        name = host.strip()
        name = name[: name.find("]") + 1] if name.startswith("[") else name.rsplit(":", 1)[0] if name.count(":") == 1 \
            else name
        assert is_loopback(name), headers
    else:
        assert refusal[0] in (403, 421)


_JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=20))
_JSON = st.recursive(_JSON_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                           st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(request_id=st.one_of(st.integers(-10**12, 10**12), st.text(max_size=40)),
       params=st.dictionaries(st.text(max_size=8), _JSON, max_size=4), id_first=st.booleans(),
       cut=st.integers(0, 400))
def test_an_over_limit_message_id_is_read_from_its_head_or_its_tail(request_id, params, id_first, cut):
    from magicselector.cli.serve import TooLong

    members = {"jsonrpc": "2.0", "method": "tools/call", "params": {**params, "id": "not-this-one", "pad": "x" * 500}}
    message = {"id": request_id, **members} if id_first else {**members, "id": request_id}
    line = json.dumps(message).encode()
    # the head holds the whole id member when it comes first; when it comes last, the tail holds it
    head = line[: len(json.dumps({"id": request_id})) + cut] if id_first else line[:cut]
    assert TooLong(head, line[-4096:]).request_id() == request_id


@settings(max_examples=300, deadline=None)
@given(head=st.binary(max_size=300), tail=st.binary(max_size=300))
def test_reading_an_over_limit_id_never_fails(head, tail):
    from magicselector.cli.serve import TooLong

    found = TooLong(head, tail).request_id()
    assert found is None or isinstance(found, (int, str))

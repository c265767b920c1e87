"""``magicselector bench serve``: throughput and latency of ``magicselector serve`` under concurrent callers.

The real server is spawned over stdio and driven through the mcp package's own client, as an MCP
host would: one server per configuration (variant), all started first; then for each caller count
N, N callers send their requests concurrently over a server's one session, each waiting for its
answer before sending the next. The variants take turns in rounds (a quarter of the requests each
by default), so that a change in the machine's load reaches every variant alike. A request is a
``search_tools`` call for one turn of the phone workload (``magicselector.bench.latency.WORKLOAD``,
with its dialogue history), callers starting at different turns. Latency is the client's round
trip; throughput is all callers' selects over the wall time.

Every answer of a configuration is checked against the same turn's answer with one caller: the
tool names must be the same; the share that agreed is reported.

``--transport http`` drives the streamable HTTP transport instead (``serve --transport
streamable-http``, stateless): for each variant one server process and one of two processes behind
one port (``--workers 2``, SO_REUSEPORT), all on loopback and started first; a caller is an HTTP
client with its own keep-alive connection, POSTing ``tools/call`` JSON-RPC requests and reading the
JSON answer (no MCP session: the server is stateless), so the kernel spreads callers over the
processes. A row then also names its ``processes``, and the config the servers' HTTP limits
(``serve``'s defaults: header and body timeouts, connections, bytes in flight) and what the checks
ahead of the mcp app cost a request (``magicselector.cli.serve.checks_cost_us``).

``--memory`` measures memory instead (``bench_serve_memory``): one stdio server, 10,000 calls and
six messages at the 64 MiB message limit among them; its RSS at the end against its warm RSS.

Results schema ``magicselector-serve-bench/1``::

    {"schema": ..., "started": ISO time, "device": machine_description(),
     "loadavg_after": [1, 5, 15 min], "config": {callers, requests_per_caller, rounds, warmup, threads,
                                                 variants: {name: server args}, bundle, http_limits,
                                                 checks_us_per_request: {all, screen}, ...},
     "results": [{"variant", "callers", "requests", "wall_s", "selects_per_s", "p50_ms", "p90_ms",
                  "p99_ms", "mean_ms", "select_p50_ms", "errors", "same_tools", "transport",
                  "processes"}]}
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

# the server's default message limit (cli/serve.py): the bench may not import the CLI layer it
# drives as a subprocess; tests/test_serve_memory_bench.py checks the two agree
DEFAULT_MAX_MESSAGE_MB = 64.0

SCHEMA = "magicselector-serve-bench/1"


@dataclass(frozen=True)
class ServeBenchConfig:
    """callers: the concurrent caller counts, in order. requests: requests each caller sends per
    count. warmup: untimed requests per server before the first count. threads: the server's
    ``--threads`` (None: the shipped default). variants: which server configurations of
    ``BASE_VARIANTS`` to run (``shipped``: no flags). rounds: each count's requests are sent in
    this many rounds, the variants taking turns round by round."""

    callers: tuple[int, ...] = (1, 2, 4)
    requests: int = 48
    warmup: int = 8
    threads: int | None = None
    variants: tuple[str, ...] = ("shipped",)
    rounds: int = 4
    server_timeout_s: float = 120.0
    transport: str = "stdio"
    processes: tuple[int, ...] = (1, 2)

    def __post_init__(self) -> None:
        from magicselector.errors import InputError

        if not self.callers or any(not isinstance(n, int) or n < 1 for n in self.callers):
            raise InputError(f"ServeBenchConfig.callers must be integers >= 1, got {self.callers!r}")
        if self.requests < 1 or self.warmup < 0 or self.rounds < 1:
            raise InputError("ServeBenchConfig: requests and rounds must be >= 1 and warmup >= 0")
        if self.threads is not None and self.threads < 1:
            raise InputError("ServeBenchConfig.threads must be >= 1")
        unknown = sorted(set(self.variants) - set(BASE_VARIANTS))
        if unknown:
            raise InputError(f"ServeBenchConfig.variants: unknown {unknown}; choose from {sorted(BASE_VARIANTS)}")
        if not self.variants:
            raise InputError("ServeBenchConfig: no variant to run")
        if self.transport not in TRANSPORTS:
            raise InputError(f"ServeBenchConfig.transport must be one of {list(TRANSPORTS)}, got {self.transport!r}")
        if not self.processes or any(not isinstance(n, int) or not 1 <= n <= 16 for n in self.processes):
            raise InputError(f"ServeBenchConfig.processes must be integers 1..16, got {self.processes!r}")

    def server_variants(self) -> dict[str, list[str]]:
        """variant name -> the ``magicselector serve`` arguments it adds."""
        return {name: list(BASE_VARIANTS[name]) for name in self.variants}


BASE_VARIANTS: dict[str, tuple[str, ...]] = {"shipped": ()}
TRANSPORTS = ("stdio", "http")


def requests_for(workload: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``search_tools`` arguments for each workload turn (the history only where the turn has one)."""
    out = []
    for turn in workload:
        args: dict[str, Any] = {"query": turn["utterance"]}
        if turn.get("history"):
            args["history"] = list(turn["history"])
        out.append(args)
    return out


def _percentile(sorted_ms: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(sorted_ms, dtype=np.float64), q)) if len(sorted_ms) else float("nan")


def _samples() -> dict[str, Any]:
    return {"latencies": [], "selects": [], "errors": [], "names": []}


def _record(got: dict[str, Any], which: int, latency_ms: float, error: str | None, payload: Mapping[str, Any]) -> None:
    got["latencies"].append(latency_ms)
    if error is not None:
        got["errors"].append(error)
        return
    got["selects"].append(float((payload.get("timings_ms") or {}).get("total", float("nan"))))
    got["names"].append((which, [tool["name"] for tool in payload.get("tools", [])]))


async def _concurrently(callers: int, caller: Callable[[int], Any]) -> float:
    """Run ``caller(k)`` for k < ``callers`` at once; the wall time in seconds."""
    import anyio

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for k in range(callers):
            tg.start_soon(caller, k)
    return time.perf_counter() - t0


async def _drive(session: Any, requests: list[dict[str, Any]], callers: int, per_caller: int,
                 offset: int = 0) -> dict[str, Any]:
    """``callers`` concurrent loops of ``per_caller`` requests each over one session: the raw samples."""
    got = _samples()

    async def caller(k: int) -> None:
        for i in range(per_caller):
            which = (k * len(requests) // callers + offset + i) % len(requests)
            t = time.perf_counter()
            result = await session.call_tool("search_tools", requests[which])
            error = (result.content[0].text if result.content else "error") if result.is_error else None
            _record(got, which, (time.perf_counter() - t) * 1e3, error, result.structured_content or {})

    got["wall_s"] = await _concurrently(callers, caller)
    return got


HTTP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _drive_http(url: str, requests: list[dict[str, Any]], callers: int, per_caller: int,
                      offset: int = 0) -> dict[str, Any]:
    """``callers`` HTTP clients, each on its own keep-alive connection, sending ``per_caller``
    ``tools/call`` requests one after another: the raw samples."""
    import httpx2

    got = _samples()

    async def caller(k: int) -> None:
        async with httpx2.AsyncClient(timeout=120.0, headers=HTTP_HEADERS) as client:
            for i in range(per_caller):
                which = (k * len(requests) // callers + offset + i) % len(requests)
                body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "search_tools", "arguments": requests[which]}}
                t = time.perf_counter()
                response = await client.post(url, json=body)
                latency = (time.perf_counter() - t) * 1e3
                answer = response.json() if response.content else {}
                result = answer.get("result") or {}
                error = None
                if response.status_code != 200 or "error" in answer or result.get("isError"):
                    error = f"HTTP {response.status_code}: {json.dumps(answer)[:300]}"
                _record(got, which, latency, error, result.get("structuredContent") or {})

    got["wall_s"] = await _concurrently(callers, caller)
    return got


def _row(parts: list[dict[str, Any]], callers: int, reference: dict[int, list[str]] | None) -> dict[str, Any]:
    """One (variant, caller count) row from its rounds' samples."""
    lat = sorted(x for p in parts for x in p["latencies"])
    selects = sorted(x for p in parts for x in p["selects"])
    errors = [e for p in parts for e in p["errors"]]
    names = [n for p in parts for n in p["names"]]
    wall = sum(p["wall_s"] for p in parts)
    compared = [reference[which] == got for which, got in names if reference is not None and which in reference]
    return {"callers": callers, "requests": len(lat), "wall_s": round(wall, 4),
            "selects_per_s": round(len(lat) / wall, 3) if wall > 0 else None,
            "p50_ms": round(_percentile(lat, 50), 3), "p90_ms": round(_percentile(lat, 90), 3),
            "p99_ms": round(_percentile(lat, 99), 3), "mean_ms": round(sum(lat) / len(lat), 3) if lat else None,
            "select_p50_ms": round(_percentile(selects, 50), 3) if selects else None,
            "errors": len(errors), "first_error": errors[0] if errors else None,
            "same_tools": round(sum(compared) / len(compared), 4) if compared else None}


def _round_sizes(requests: int, rounds: int) -> list[int]:
    return [n for n in (requests // rounds + (1 if r < requests % rounds else 0) for r in range(rounds)) if n]


async def _bench_all(commands: Mapping[str, list[str]], config: ServeBenchConfig, requests: list[dict[str, Any]],
                     progress: Callable[[str], None]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Spawn one server per variant, then per caller count run the variants in turn, round after
    round, so that a change in the machine's load reaches every variant alike. The rows, and the
    stderr tail of each server that answered an error."""
    from contextlib import AsyncExitStack

    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from magicselector.errors import InputError

    async with AsyncExitStack() as stack:
        sessions: dict[str, tuple[Any, Any]] = {}
        for name, command in commands.items():
            errlog = stack.enter_context(tempfile.TemporaryFile(mode="w+", encoding="utf-8"))
            params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
            try:
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                session = await stack.enter_async_context(ClientSession(read, write))
                with anyio.fail_after(config.server_timeout_s):
                    await session.initialize()
                    for i in range(config.warmup):
                        await session.call_tool("search_tools", requests[i % len(requests)])
            except Exception as e:
                errlog.seek(0)
                raise InputError(f"bench serve: the {name} server failed ({type(e).__name__}: {e}); its stderr:\n"
                                 f"{errlog.read()[-2000:]}") from e
            sessions[name] = (session, errlog)
            progress(f"[serve] {name}: server up ({' '.join(command[4:]) or 'no flags'})")
        rows = await _run_counts({(name, None): (lambda n, size, offset, session=session:
                                                 _drive(session, requests, n, size, offset))
                                  for name, (session, _) in sessions.items()}, config, progress)
        tails = {}
        for name, (_, errlog) in sessions.items():
            if any(r["errors"] for r in rows if r["variant"] == name):
                errlog.seek(0)
                tails[name] = errlog.read()[-2000:]
    return rows, tails


async def _run_counts(drivers: Mapping[tuple[str, int | None], Callable[[int, int, int], Any]],
                     config: ServeBenchConfig, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """For each caller count, every server (``(variant, processes)`` -> its driver) in turn, round
    after round; one row per server and count, each checked against its one-caller answers."""
    rows: list[dict[str, Any]] = []
    references: dict[Any, dict[int, list[str]] | None] = {key: None for key in drivers}
    for n in config.callers:
        parts: dict[Any, list[dict[str, Any]]] = {key: [] for key in drivers}
        offset = 0
        for size in _round_sizes(config.requests, config.rounds):
            for key, drive in drivers.items():
                parts[key].append(await drive(n, size, offset))
            offset += size
        for key in drivers:
            name, processes = key
            row = {"variant": name, **_row(parts[key], n, references[key]),
                   "transport": "stdio" if processes is None else "streamable-http", "processes": processes or 1}
            if references[key] is None:  # the first count's answers are what later counts must match
                references[key] = {}
                for which, got in (x for p in parts[key] for x in p["names"]):
                    references[key].setdefault(which, got)
            rows.append(row)
            label = name if processes is None else f"{name} x{processes}"
            progress(f"[serve] {label}: {n} caller(s): {row['selects_per_s']} selects/s, "
                     f"p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, errors {row['errors']}")
    return rows


class _HTTPServer:
    """``magicselector serve --transport streamable-http`` on a free loopback port, with
    ``processes`` replicas behind it (``--workers``); its stderr goes to ``errpath``."""

    def __init__(self, command: list[str], processes: int, errpath: Path) -> None:
        import socket
        import subprocess

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        extra = ["--transport", "streamable-http", "--host", "127.0.0.1", "--port", str(self.port)]
        if processes > 1:
            extra += ["--workers", str(processes)]
        self.processes, self.errpath = processes, errpath
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        with open(errpath, "ab") as err:
            self.proc = subprocess.Popen(command + extra, stdout=subprocess.DEVNULL, stderr=err)

    def stderr(self) -> str:
        return self.errpath.read_text(encoding="utf-8", errors="replace")

    def wait_listening(self, timeout_s: float) -> None:
        from magicselector.errors import InputError

        deadline = time.monotonic() + timeout_s
        while self.stderr().count("listening on http://") < self.processes:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise InputError(f"bench serve: the HTTP server on port {self.port} did not start; its stderr:\n"
                                 f"{self.stderr()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _bench_all_http(commands: Mapping[str, list[str]], config: ServeBenchConfig,
                          requests: list[dict[str, Any]], progress: Callable[[str], None]
                          ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One HTTP server per (variant, process count), all started and warmed first; then the counts."""
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        servers: dict[tuple[str, int | None], _HTTPServer] = {}
        try:
            for name, command in commands.items():
                for n in config.processes:
                    servers[(name, n)] = _HTTPServer(command, n, Path(tmp) / f"{name}-{n}.err")
            for (name, n), server in servers.items():
                server.wait_listening(config.server_timeout_s)
                if config.warmup:  # several connections, so that every replica warms up
                    await _drive_http(server.url, requests, 2 * n, config.warmup)
                progress(f"[serve] {name} x{n}: HTTP server up on port {server.port}")
            rows = await _run_counts({key: (lambda c, size, offset, url=server.url:
                                            _drive_http(url, requests, c, size, offset))
                                      for key, server in servers.items()}, config, progress)
            tails = {f"{name} x{n}": servers[(name, n)].stderr()[-2000:] for name, n in servers
                     if any(r["errors"] for r in rows if (r["variant"], r["processes"]) == (name, n))}
        finally:
            for server in servers.values():
                server.stop()
    return rows, tails


def bench_serve(bundle: str | None = None, config: ServeBenchConfig = ServeBenchConfig(),
                progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Run every variant of ``config`` against freshly spawned servers; the ``SCHEMA`` dict."""
    import anyio

    from magicselector.config import SelectorConfig

    from .latency import WORKLOAD, machine_description

    requests = requests_for(WORKLOAD)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    device = machine_description()
    base = [sys.executable, "-m", "magicselector", "serve"]
    if bundle is not None:
        base += ["--bundle", str(bundle)]
    if config.threads is not None:
        base += ["--threads", str(config.threads)]
    variants = config.server_variants()
    run = _bench_all if config.transport == "stdio" else _bench_all_http
    results, tails = anyio.run(run, {name: base + extra for name, extra in variants.items()}, config, requests,
                               progress)
    results.sort(key=lambda r: (list(variants).index(r["variant"]), r["processes"]))  # callers stay in order
    try:
        load_after = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load_after = None
    return {"schema": SCHEMA, "started": started, "device": device, "loadavg_after": load_after,
            "config": {"callers": list(config.callers), "requests_per_caller": config.requests,
                       "rounds": config.rounds, "warmup": config.warmup,
                       "threads": config.threads if config.threads is not None else SelectorConfig().threads,
                       "variants": variants, "bundle": str(bundle) if bundle is not None else "default",
                       "workload_turns": len(requests),
                       "transport": ("stdio, one session per server" if config.transport == "stdio" else
                                     "streamable HTTP on loopback, stateless; one connection per caller"),
                       **({"processes": list(config.processes), **http_limits_report()}
                          if config.transport == "http" else {})},
            "results": results, **({"server_stderr": tails} if tails else {})}


def http_limits_report() -> dict[str, Any]:
    """The limits every HTTP server of the bench runs under (``serve``'s defaults: no limit flags) and
    what the checks ahead of the mcp app cost a request, asked of ``magicselector.cli.serve`` as a
    process, as the servers themselves are run (bench sits below the CLI)."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "magicselector.cli.serve", "--limits-report"], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr[-500:]}
    return dict(json.loads(done.stdout))




MEMORY_SCHEMA = "magicselector-serve-memory/1"
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}


def _vm_mb(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


def _call_line(rid: int, arguments: Mapping[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "search_tools", "arguments": arguments}}, separators=(",", ":")).encode()


def _large_line(rid: int, size: int) -> bytes:
    """A ``search_tools`` call of ``size`` bytes: a follow-up whose one history message fills it."""
    head, tail = _call_line(rid, {"query": "and turn it off", "history": [{"role": "user", "content": "@"}]}).split(b"@")
    words = b"turn on the living room lights and play some jazz "
    return head + (words * (size // len(words) + 1))[: max(0, size - len(head) - len(tail))] + tail


def _exchange(proc: Any, line: bytes) -> dict[str, Any]:
    """Send one JSON-RPC line to a stdio server and read its answer (the next line)."""
    proc.stdin.write(line + b"\n")
    proc.stdin.flush()
    answer = proc.stdout.readline()
    if not answer:
        raise RuntimeError("the server closed its output")
    return json.loads(answer)


def bench_serve_memory(bundle: str | None = None, calls: int = 10_000, large: int = 6, large_mb: float | None = None,
                       threads: int | None = None, progress: Callable[[str], None] = lambda line: None
                       ) -> dict[str, Any]:
    """``bench serve --memory``: one ``magicselector serve`` over stdio, driven with raw JSON-RPC
    lines: a warm-up of 100 phone-workload calls (the warm RSS), then ``calls`` calls with
    ``large`` messages spread among them, in turn just under the server's 64 MiB message limit
    (a follow-up whose one history message fills it, answered) and just over it (refused), or
    with ``large_mb`` every one of that size (answered). The server's RSS (``/proc/PID/status``) is sampled every 500 calls and after each large message;
    the run holds if the RSS at the end is within 25 % of the warm RSS (issue 27.7), with no error."""
    import subprocess

    from magicselector.errors import InputError

    from .latency import WORKLOAD, machine_description

    requests, limit = requests_for(WORKLOAD), int(DEFAULT_MAX_MESSAGE_MB * 1024 * 1024)
    command = [sys.executable, "-m", "magicselector", "serve"] + (["--bundle", str(bundle)] if bundle else []) + (
        ["--threads", str(threads)] if threads else [])
    at_large = {(k + 1) * calls // (large + 1) for k in range(large)}
    sizes = ([int(large_mb * 2**20)] if large_mb is not None else [limit - 4096, limit + (1 << 20)])
    errors, samples, sent = 0, [], 0
    device = machine_description()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        try:
            if "result" not in _exchange(proc, json.dumps(INIT).encode()):
                raise RuntimeError("initialize was refused")
            proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            for i in range(100):
                errors += "result" not in _exchange(proc, _call_line(i, requests[i % len(requests)]))
            warm, t0 = _vm_mb(proc.pid), time.perf_counter()
            progress(f"[serve memory] warm RSS {warm:.1f} MB after 100 calls")
            for i in range(calls):
                if i in at_large:  # at the limit: alternately answered (just under) and refused (just over)
                    size, sent = sizes[sent % len(sizes)], sent + 1
                    answer = _exchange(proc, _large_line(10**9 + i, size))
                    errors += ("error" not in answer) if size > limit else ("result" not in answer)
                    samples.append({"calls": i, "large": sent, "rss_mb": round(_vm_mb(proc.pid), 1)})
                errors += "result" not in _exchange(proc, _call_line(1000 + i, requests[i % len(requests)]))
                if (i + 1) % 500 == 0:
                    samples.append({"calls": i + 1, "large": sent, "rss_mb": round(_vm_mb(proc.pid), 1)})
                    progress(f"[serve memory] {i + 1} calls, {sent} large: RSS {samples[-1]['rss_mb']} MB")
            wall, final, hwm = time.perf_counter() - t0, _vm_mb(proc.pid), _vm_mb(proc.pid, "VmHWM")
        except (OSError, RuntimeError, ValueError) as e:
            err.seek(0)
            raise InputError(f"bench serve --memory: the server failed ({type(e).__name__}: {e}); its stderr:\n"
                             f"{err.read().decode('utf-8', 'replace')[-2000:]}") from e
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
    return {"schema": MEMORY_SCHEMA, "device": device, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "config": {"calls": calls, "large": large, "large_bytes": sizes, "limit_bytes": limit, "bundle": str(bundle or "default"),
                       "threads": threads, "command": command[2:]},
            "warm_rss_mb": round(warm, 1), "final_rss_mb": round(final, 1), "peak_rss_mb": round(hwm, 1),
            "max_sampled_rss_mb": max((x["rss_mb"] for x in samples), default=round(final, 1)),
            "final_over_warm": round(final / warm, 3), "ok": final <= 1.25 * warm and errors == 0,
            "errors": errors, "wall_s": round(wall, 1), "samples": samples}


def format_memory(report: Mapping[str, Any]) -> str:
    from .latency import isa_summary

    c = report["config"]
    size = (f"{c['large_bytes'][0] / 2**20:g} MiB" if len(c["large_bytes"]) == 1 else
            f"{c['limit_bytes'] / 2**20:g} MiB (the limit: alternately 4 KiB under it and 1 MiB over it, refused)")
    return (f"Machine: {isa_summary(report['device'])}; load avg {report['device'].get('loadavg')} at the start, "
            f"{report['loadavg_after']} at the end.\n`magicselector serve` over stdio: {c['calls']:,} calls and "
            f"{c['large']} messages of {size} in {report['wall_s']} s, {report['errors']} "
            f"errors; RSS warm {report['warm_rss_mb']} MB, at most {report['max_sampled_rss_mb']} MB sampled "
            f"(peak {report['peak_rss_mb']}), at the end {report['final_rss_mb']} MB = "
            f"{report['final_over_warm']:.2f}x warm: {'ok' if report['ok'] else 'FAILED'} (bound 1.25x).\n")


def format_markdown(report: Mapping[str, Any], command: str | None = None) -> str:
    from .latency import isa_summary

    dev, cfg = report["device"], report["config"]
    http = "processes" in cfg
    lines = ["| variant | " + ("processes | " if http else "") + "callers | selects/s | p50 ms | p90 ms | p99 ms | "
             "select p50 ms | errors | same tools |", "|---|" + ("---:|" if http else "") + "---:|" * 8]
    for r in report["results"]:
        same = "–" if r["same_tools"] is None else f"{r['same_tools']:.2f}"
        sel = "–" if r["select_p50_ms"] is None else f"{r['select_p50_ms']:.1f}"
        lines.append(f"| {r['variant']} | " + (f"{r['processes']} | " if http else "") +
                     f"{r['callers']} | {r['selects_per_s']:.1f} | {r['p50_ms']:.1f} | "
                     f"{r['p90_ms']:.1f} | {r['p99_ms']:.1f} | {sel} | {r['errors']} | {same} |")
    where = ("over stdio" if not http else "over streamable HTTP on loopback (stateless; one keep-alive connection "
             "per caller; 2 processes: `--workers 2`, SO_REUSEPORT)")
    head = [f"Machine: {isa_summary(dev)}; load avg {dev.get('loadavg')} at the start, "
            f"{report.get('loadavg_after')} at the end; onnxruntime "
            f"{dev.get('onnxruntime')} ({dev.get('onnxruntime_build')}); python {dev.get('python')}.",
            f"Server: `magicselector serve` {where}, {cfg['threads']} inference thread(s) per process; "
            f"{cfg['requests_per_caller']} requests per caller after {cfg['warmup']} warm-up requests, the "
            f"variants taking turns in {cfg.get('rounds', 1)} rounds, "
            f"{cfg['workload_turns']} phone turns; variants: "
            + ", ".join(f"{k} = `{' '.join(v) or '(no flags)'}`" for k, v in cfg["variants"].items()) + "."]
    if http and cfg.get("http_limits"):
        lim, cost = cfg["http_limits"], cfg.get("checks_us_per_request") or {}
        head.append(f"HTTP limits (serve's defaults): headers within {lim['header_timeout_s']:g} s, body within "
                    f"{lim['body_timeout_s']:g} s, {lim['max_connections']} connections and "
                    f"{lim['max_inflight_mb']:g} MB of bodies in flight per process, {lim['max_message_mb']:g} MB a "
                    f"message; Host/Origin checked (loopback). Checks ahead of the app: {cost.get('all')} us a "
                    f"request, against {cost.get('screen')} us for the token and JSON screen alone.")
    if command:
        head.append(f"Command: `{command}`")
    return "\n".join(head + [""] + lines) + "\n"


def write_report(report: Mapping[str, Any], json_path: str | Path | None = None, md_path: str | Path | None = None,
                 command: str | None = None) -> list[str]:
    written = []
    if json_path:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        written.append(str(out))
    if md_path:
        out = Path(md_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(format_markdown(report, command), encoding="utf-8")
        written.append(str(out))
    return written


def add_arguments(sp: Any) -> None:
    """The ``bench serve`` options (registered by ``magicselector.cli.bench``)."""
    sp.add_argument("--bundle", metavar="DIR", help="bundle folder (default: the default bundle, built on first use)")
    sp.add_argument("--callers", type=int, nargs="+", default=[1, 2, 4], metavar="N",
                    help="concurrent caller counts, in order (default 1 2 4)")
    sp.add_argument("--requests", type=int, default=48, metavar="N", help="requests per caller per count (default 48)")
    sp.add_argument("--warmup", type=int, default=8, metavar="N", help="untimed requests per server (default 8)")
    sp.add_argument("--rounds", type=int, default=4, metavar="N",
                    help="the variants take turns in N rounds per caller count (default 4)")
    sp.add_argument("--threads", type=int, metavar="N", help="the server's inference threads (default: the shipped 1)")
    sp.add_argument("--variants", nargs="*", default=["shipped"], choices=sorted(BASE_VARIANTS),
                    help="server configurations: shipped (no flags; the default)")
    sp.add_argument("--transport", choices=TRANSPORTS, default="stdio",
                    help="stdio (default: one session per server, the callers share it) or http (serve "
                         "--transport streamable-http on loopback, one connection per caller)")
    sp.add_argument("--processes", type=int, nargs="+", default=[1, 2], metavar="N",
                    help="with --transport http: server processes behind one port, one server per count "
                         "(default 1 2)")
    sp.add_argument("--memory", action="store_true",
                    help="instead: the server's RSS over --calls calls and --large messages at the 64 MiB limit, "
                         "against its warm RSS (one stdio server, shipped settings)")
    sp.add_argument("--calls", type=int, default=10_000, metavar="N", help="with --memory: calls (default 10000)")
    sp.add_argument("--large", type=int, default=6, metavar="N",
                    help="with --memory: messages at the limit among them, alternately answered and refused (default 6)")
    sp.add_argument("--large-mb", type=float, metavar="MB",
                    help="with --memory: each large message this many MiB, all answered (default: at the limit)")
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON")
    sp.add_argument("--md", metavar="OUT", help="write the markdown table")


def cmd_bench_serve(args: Any) -> int:
    from magicselector.errors import InputError

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise InputError("`magicselector bench serve` needs the mcp package: "
                         "pip install 'magicselector[serve]'") from None
    if getattr(args, "memory", False):
        return _cmd_memory(args)
    config = ServeBenchConfig(callers=tuple(args.callers), requests=args.requests, warmup=args.warmup,
                              threads=args.threads, variants=tuple(args.variants), rounds=args.rounds,
                              transport=args.transport,
                              processes=tuple(args.processes))
    command = "magicselector bench serve" + "".join(
        f" {flag} {value}" for flag, value in (("--bundle", args.bundle),
                                               ("--callers", " ".join(map(str, args.callers))),
                                               ("--requests", args.requests), ("--rounds", args.rounds),
                                               ("--threads", args.threads))
        if value is not None) + (
        f" --transport http --processes {' '.join(map(str, args.processes))}" if args.transport == "http" else "") + (
        f" --variants {' '.join(args.variants)}" if list(args.variants) != ["shipped"] else "")
    report = bench_serve(args.bundle, config, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_markdown(report, command))
    written = write_report(report, args.json, args.md, command)
    if written:
        print(f"wrote {', '.join(written)}", file=sys.stderr)
    return 0 if not any(r["errors"] for r in report["results"]) else 1


def _cmd_memory(args: Any) -> int:
    from magicselector.errors import InputError

    if args.calls < 1 or args.large < 0:
        raise InputError(f"bench serve --memory: --calls must be >= 1 and --large >= 0, got {args.calls}, {args.large}")
    large_mb = getattr(args, "large_mb", None)
    if large_mb is not None and not 0 < large_mb < DEFAULT_MAX_MESSAGE_MB:
        raise InputError(f"bench serve --memory: --large-mb must be above 0 and under the {DEFAULT_MAX_MESSAGE_MB:g} MiB "
                         f"message limit, got {large_mb}")
    report = bench_serve_memory(args.bundle, args.calls, args.large, large_mb, args.threads,
                                progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_memory(report))
    for path, text in ((args.json, json.dumps(report, indent=2) + "\n"), (args.md, format_memory(report))):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
    return 0 if report["ok"] else 1

"""``bench serve --memory``: the server's RSS over many calls and messages at the message limit."""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from magicselector.bench import serve_bench
from magicselector.errors import InputError


def test_a_large_message_is_one_valid_call_of_exactly_the_size_asked():
    for size in (400, 10_000, 1 << 20):
        line = serve_bench._large_line(7, size)
        assert len(line) == size and b"\n" not in line
        call = json.loads(line)
        assert call["id"] == 7 and call["params"]["name"] == "search_tools"
        assert call["params"]["arguments"]["history"][0]["content"].startswith("turn on the living room")


def test_the_memory_mode_refuses_bad_counts():
    for calls, large in ((0, 6), (10, -1)):
        with pytest.raises(InputError, match="--calls"):
            serve_bench._cmd_memory(SimpleNamespace(calls=calls, large=large, large_mb=None, bundle=None,
                                                    threads=None, json=None, md=None))
    for mb in (0, 64, 100):
        with pytest.raises(InputError, match="--large-mb"):
            serve_bench._cmd_memory(SimpleNamespace(calls=10, large=1, large_mb=mb, bundle=None, threads=None,
                                                    json=None, md=None))


@pytest.mark.slow
@pytest.mark.extra("serve")  # the server it starts is `magicselector serve`
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")
def test_bench_serve_memory_samples_the_server_and_answers_every_call(bundle_dir, tmp_path):
    report = serve_bench.bench_serve_memory(str(bundle_dir), calls=40, large=2)
    assert report["schema"] == serve_bench.MEMORY_SCHEMA and report["errors"] == 0
    assert [s["large"] for s in report["samples"]] == [1, 2]  # one answered, one refused, each sampled
    assert report["warm_rss_mb"] > 0 and report["peak_rss_mb"] >= report["max_sampled_rss_mb"]
    # the ratio is of the unrounded RSS figures, the test sees them rounded to 0.1 MB
    assert report["final_over_warm"] == pytest.approx(report["final_rss_mb"] / report["warm_rss_mb"], abs=2e-3)
    assert "2 messages of 64 MiB (the limit" in serve_bench.format_memory(report)


def test_the_bench_sends_at_the_servers_own_message_limit():
    from magicselector.bench.serve_bench import DEFAULT_MAX_MESSAGE_MB
    from magicselector.cli.serve import DEFAULT_MAX_MESSAGE_MB as SERVER_DEFAULT

    assert DEFAULT_MAX_MESSAGE_MB == SERVER_DEFAULT

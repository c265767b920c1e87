"""The GGUF decomposer bench (llama-bench's figures): the shipped GGUF on one short prompt, the result's
shape, bad settings, the ``bench llm`` parser. No timing thresholds."""
from __future__ import annotations

import subprocess
import sys

import pytest

from magicselector.bench.llm_bench import SCHEMA, format_llm_bench, measure_llm
from magicselector.errors import InputError, ModelError


@pytest.fixture(scope="module")
def shipped_gguf():
    pytest.importorskip("llama_cpp", reason="the llm extra (llama-cpp-python) is not installed: "
                                            "pip install 'magicselector[llm]'")
    from magicselector.decompose.model import ensure_default_model

    try:
        return ensure_default_model()
    except ModelError as e:  # the chunk packages of the llm extra are missing
        pytest.skip(f"the shipped GGUF cannot be assembled: {e}")


@pytest.mark.slow
def test_llama_bench_figures_on_the_shipped_gguf(shipped_gguf):
    # zero_shot: the short prompt keeps this to seconds; the decomposer's few-shot prompt is the default
    lines = []
    res = measure_llm(threads=2, prompt_style="zero_shot", prompts=1, runs=1, gen_tokens=4, progress=lines.append)
    assert res["schema"] == SCHEMA and res["model"]["path"] == str(shipped_gguf)
    assert res["model"]["source"].startswith("the pinned default") and res["model"]["size_bytes"] > 10**8
    assert res["config"]["n_threads"] == 2 and res["config"]["prompts"] == 1 and res["config"]["gen_tokens"] == 4
    assert res["load_ms"] > 0 and res["prefix"]["tokens"] > 0 and res["prefix"]["eval_ms"] > 0
    for rate in (res["pp"]["tokens_per_s"], res["tg"]["tokens_per_s"]):
        assert rate["n"] == 1 and rate["mean"] > 0
    assert 0 < res["ttft_ms"]["p50"] <= res["decompose_ms"]["p50"]
    (row,) = res["prompts"]
    assert row["prompt_tokens"] == res["prefix"]["tokens"] + row["suffix_tokens"] and row["suffix_tokens"] > 0
    assert row["tasks"] and all(isinstance(t, str) and t for t in row["tasks"])
    assert res["host"]["cpu_model"] and "isa" in res["host"]
    report = format_llm_bench(res)
    assert f"| pp{row['prompt_tokens']} " in report and "| tg4 " in report and "n_threads 2" in report
    assert len(lines) == 2  # the load, one run
    # bench latency --decompose llm|auto carries the same figures in its summary
    from magicselector.cli.bench import latency_summary

    summary = latency_summary({"device": {}, "config": {}, "stages": {}, "cold_start_ms": 1.0, "peak_rss_mb": 1.0,
                               "llm": res})
    assert "## GGUF decomposer (llama-bench figures)" in summary and "| tg4 " in summary


def test_latency_over_adb_says_why_the_gguf_figures_are_missing():
    from magicselector.cli.bench import _llm_figures, latency_summary

    skipped = _llm_figures("unused", "adb:SERIAL")
    assert "adb:SERIAL" in skipped["skipped"]
    summary = latency_summary({"device": {}, "config": {}, "stages": {}, "cold_start_ms": 1.0, "peak_rss_mb": 1.0,
                               "llm": skipped})
    assert "Not measured: measured on the machine that runs the bench only" in summary


def test_bad_settings_are_clear_errors():
    for bad in ({"prompts": 0}, {"runs": 0}, {"gen_tokens": 0}, {"threads": 0}, {"prompts": 99}):
        with pytest.raises(InputError):
            measure_llm(**bad)


def test_bench_llm_parser_is_registered_and_lean():
    code = ("import sys; from magicselector.cli import build_parser; "
            "a = build_parser().parse_args(['bench', 'llm', '--threads', '1', '--prompts', '2', '--runs', '1', "
            "'--gen-tokens', '8', '--prompt', 'zero_shot']); "
            "print(a.threads, a.prompts, a.runs, a.gen_tokens, a.prompt, a.func.__name__); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('llama_cpp', 'torch') "
            "or m == 'magicselector.bench.llm_bench'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip().splitlines() == ["1 2 1 8 zero_shot cmd_llm", "[]"]

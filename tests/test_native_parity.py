"""The native core selects as the Python runtime does: with the Python vectors fed in, the same kept ids, order and K on every turn; its bundle checks and refusals."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import native_build


def native_binary() -> Path | None:
    """The host build of ``magicselector native build`` (or MAGICSELECTOR_NATIVE_BIN), None when there is none."""
    env = os.environ.get("MAGICSELECTOR_NATIVE_BIN")
    exe = Path(env) if env else native_build("host") / "bin" / "magicselector-native"
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


@pytest.fixture(scope="module")
def binary() -> Path:
    exe = native_binary()
    if exe is None:
        pytest.skip("no native build: run `magicselector native build --target host` (the native extra) "
                    "or set MAGICSELECTOR_NATIVE_BIN")
    return exe


def test_verify_passes_every_golden_stage(binary, bundle_dir):
    """Every stage but the embedder's cosine (test_embed's, and docs/bench/native.md's table) matches."""
    report = json.loads(run(binary, "verify", bundle_dir).stdout)
    later = {k: v for k, v in report["stages"].items() if k != "vectors"}
    assert report["turns"] >= 30 and all(v["mismatches"] == 0 for v in later.values()), report
    assert later["selection"]["checked"] == report["turns"] and later["token_ids"]["checked"] > report["turns"]


def test_fed_vectors_give_the_same_selection(binary, selector, tmp_path, tiny_benchmark):
    """A small version of bench/native_parity.py: a catalog of its own, histories, multi-intent turns."""
    from magicselector.bench.native_parity import compare_part, part_bundle, python_turns
    from magicselector.data.datasets import load_benchmark

    bench = load_benchmark(tiny_benchmark)
    py = part_bundle(selector, bench.catalog, tmp_path / "tiny")
    turns = python_turns(py, bench.queries)
    report = compare_part(binary, tmp_path / "tiny", turns)
    assert report["answered"] == len(bench.queries) and report["refused_by_one"] == 0
    assert report["fed_vectors_same_selection"] == report["answered"], report["fed_vectors_first_difference"]


def run(binary: Path, command: str, bundle: Path, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), command, str(bundle)], input=stdin, capture_output=True, text=True, timeout=300)


def test_bad_requests_are_errors_naming_the_field(binary, bundle_dir):
    lines = ['{"query": "x", "max_tools": 0}', '{"query": "x", "format": "yaml"}', '{"history": []}',
             '{"query": "x", "history": [{"role": 3, "content": "a"}]}', "not json", '{"query": "' + "a" * 16001 + '"}']
    out = run(binary, "replay", bundle_dir, "\n".join(lines) + "\n")
    errors = [json.loads(line)["error"] for line in out.stdout.splitlines()]
    assert [e["status"] for e in errors] == ["input", "input", "argument", "argument", "argument", "input"]
    for e, field in zip(errors, ["max_tools", "format", "query", "history[0].role", "request", "query"]):
        assert field in e["message"]


def test_a_tampered_bundle_is_refused_naming_the_file(binary, bundle_dir, tmp_path):
    import shutil

    copy = tmp_path / "b"
    shutil.copytree(bundle_dir, copy)
    data = bytearray((copy / "lexical.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "lexical.npz").write_bytes(bytes(data))
    out = run(binary, "verify", copy)
    assert out.returncode == 2 and "lexical.npz" in out.stdout and "sha256" in out.stdout

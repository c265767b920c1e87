"""The native build passes the default bundle's golden check with its own embedder (gguf_embeddings exact, the ONNX vectors at the cross-engine floor), and opens a bundle reading only the files it uses."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import host_native_binary


@pytest.fixture(scope="module")
def binary() -> Path:
    return host_native_binary()


def test_bundle_verify_native_passes_on_the_default_bundle(binary, bundle_dir, capsys):
    from magicselector.cli.main import main

    assert main(["bundle", "verify", str(bundle_dir), "--native", str(binary)]) == 0
    native = json.loads(capsys.readouterr().out)["native"]
    assert native["ok"] and all(v["mismatches"] == 0 for v in native["stages"].values()), native
    assert native["stages"]["gguf_embeddings"]["checked"] == 3 and native["stages"]["vectors"]["checked"] > native["turns"]
    emb = native["embedder"]
    assert emb["gguf_vectors_min_cosine"] >= emb["gguf_vectors_cosine_min"] == 0.999
    assert emb["onnx_vectors_min_cosine"] >= emb["onnx_vectors_cosine_min"] == 0.97


def test_native_verify_fails_on_gguf_vectors_that_are_not_the_ggufs(binary, bundle_dir, tmp_path):
    from magicselector.bundle import write_manifest

    copy = tmp_path / "b"
    shutil.copytree(bundle_dir, copy)
    golden = json.loads((copy / "golden.json").read_text())
    golden["gguf_embeddings"]["embeddings"][2]["vector"] = golden["embeddings"][2]["vector"]  # the ONNX one: 0.986
    (copy / "golden.json").write_text(json.dumps(golden) + "\n")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest.pop("files", None)
    write_manifest(copy, manifest)
    out = subprocess.run([str(binary), "verify", str(copy)], capture_output=True, text=True, timeout=300)
    report = json.loads(out.stdout)
    assert out.returncode != 0 and not report["ok"]
    assert report["stages"]["gguf_embeddings"]["mismatches"] == 1 and "gguf_embeddings hi" in report["first_mismatch"]


def test_open_reads_only_the_files_the_native_core_uses(binary, bundle_dir, tmp_path):
    """The ONNX embedder (Python's) is never read, so damage there does not stop it; damage to the
    GGUF it runs does, naming the file."""
    copy = tmp_path / "b"
    shutil.copytree(bundle_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / manifest["embedder"]["file"]).write_bytes(b"not a model")
    request = '{"query": "turn on bluetooth", "max_tools": 3}\n'
    out = subprocess.run([str(binary), "select", str(copy)], input=request, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and json.loads(out.stdout.splitlines()[0])["tools"], out.stdout + out.stderr
    data = bytearray((copy / "embedder" / "model.gguf").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "embedder" / "model.gguf").write_bytes(bytes(data))
    out = subprocess.run([str(binary), "select", str(copy)], input=request, capture_output=True, text=True, timeout=300)
    assert "model.gguf" in out.stdout + out.stderr and "sha256" in out.stdout + out.stderr

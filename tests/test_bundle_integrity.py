"""Bundles are checked, then used from the very bytes that were checked, at load: a damaged model,
index, catalog or lexical file is a BundleError naming it before any select; links are refused."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs
from magicselector import Selector
from magicselector.bundle import MANIFEST, Bundle, write_manifest
from magicselector.errors import BundleError


@pytest.fixture()
def copy(bundle_dir, tmp_path) -> Path:
    out = tmp_path / "b"
    shutil.copytree(bundle_dir, out)
    return out


def _rehash(root: Path) -> None:
    """Re-hash the files into the manifest: a damaged file that the manifest vouches for (as a
    careless or hostile builder would make it), so only the load's own checks can catch it."""
    manifest = json.loads((root / MANIFEST).read_text())
    write_manifest(root, {k: v for k, v in manifest.items() if k != "files"})


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif how == "random":
        path.write_bytes(os.urandom(len(data)))
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["truncated", "random", "empty"])
def test_damaged_model_is_a_bundle_error_at_load(copy, how):
    """The embedder loads with the bundle: a damaged one fails there, before any turn."""
    rel = "embedder/model.onnx"
    _damage(copy / rel, how)
    _rehash(copy)
    with pytest.raises(BundleError, match=rf"{rel}: not a loadable ONNX model") as e:
        Selector.from_bundle(copy)
    assert "onnxruntime" not in str(e.value).lower() and "protobuf" not in str(e.value).lower()


@pytest.mark.parametrize("rel, match", [
    ("index.usearch", "not a readable usearch index"),
    ("lexical.npz", "not a readable lexical index"),
    ("embedder/tokenizer.json", "not a readable tokenizer"),
])
@pytest.mark.parametrize("how", ["truncated", "random"])
def test_damaged_index_lexical_or_tokenizer_is_a_bundle_error_at_load(copy, rel, match, how):
    _damage(copy / rel, how)
    _rehash(copy)
    with pytest.raises(BundleError, match=match) as e:
        Selector.from_bundle(copy)
    assert rel in str(e.value)


def test_damaged_catalog_names_its_line(copy):
    (copy / "catalog.jsonl").write_bytes(b"{not json\n")
    _rehash(copy)
    with pytest.raises(Exception, match=r"catalog.jsonl:1: not valid JSON") as e:
        Selector.from_bundle(copy)
    assert isinstance(e.value, __import__("magicselector").MagicSelectorError)


@pytest.mark.parametrize("rel", ["embedder/model.onnx", "index.usearch", "lexical.npz", "golden.json"])
def test_missing_file_is_named_at_load(copy, rel):
    (copy / rel).unlink()
    with pytest.raises(BundleError, match=rf"{rel}: missing from the bundle"):
        Selector.from_bundle(copy)


def test_altered_file_is_refused_even_when_its_size_holds(copy):
    p = copy / "lexical.npz"
    data = bytearray(p.read_bytes())
    data[-10] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"lexical.npz: sha256 .* does not match"):
        Selector.from_bundle(copy)


def test_model_swapped_after_load_is_never_run(copy):
    """The embedder's session is made from the checked bytes at load: replacing the file afterwards
    (what ran unsigned at the first select before) changes nothing the Selector runs."""
    sel = Selector.from_bundle(copy)
    assert sel.embedder.model.loaded
    before = sel.embedder.embed(["turn on bluetooth"])
    (copy / "embedder" / "model.onnx").write_bytes(b"swapped")
    after = sel.embedder.embed(["turn on bluetooth"])
    assert (before == after).all()
    assert sel.select("turn on bluetooth").ids


def test_symlinked_manifest_is_refused(copy, tmp_path):
    outside = tmp_path / "elsewhere.json"
    shutil.move(copy / MANIFEST, outside)
    (copy / MANIFEST).symlink_to(outside)
    with pytest.raises(BundleError, match="manifest.json: a symbolic link"):
        Bundle.open(copy)
    with pytest.raises(BundleError, match="manifest.json: a symbolic link"):
        Selector.from_bundle(copy)


def test_symlinked_model_pointing_outside_is_refused(copy, tmp_path):
    outside = tmp_path / "model.onnx"
    shutil.move(copy / "embedder" / "model.onnx", outside)
    (copy / "embedder" / "model.onnx").symlink_to(outside)
    with pytest.raises(BundleError, match="outside the bundle folder"):
        Selector.from_bundle(copy)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "magicselector", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_bundle_verify_exits_2_with_a_message_on_a_damaged_model(copy):
    _damage(copy / "embedder" / "model.onnx", "truncated")
    _rehash(copy)
    proc = _cli("bundle", "verify", str(copy))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "embedder/model.onnx: not a loadable ONNX model" in proc.stderr


def test_serve_refuses_a_damaged_bundle_at_start_without_onnx_runtime_text(copy):
    pytest.importorskip("mcp", reason=needs("serve"))
    _damage(copy / "embedder" / "model.onnx", "random")
    _rehash(copy)
    proc = subprocess.run([sys.executable, "-m", "magicselector", "serve", "--bundle", str(copy)], input="",
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert "embedder/model.onnx: not a loadable ONNX model" in proc.stderr
    assert "Traceback" not in proc.stderr and "onnxruntime" not in proc.stderr.lower()


@pytest.mark.parametrize("data", [b"", os.urandom(4096), b"\x00\x00\x00\x00ET12" + os.urandom(4000),
                                  b"\x1c\x00\x00\x00ET12" + os.urandom(40)], ids=["empty", "random", "body", "short"])
def test_damaged_pte_from_bytes_is_a_bundle_error(tmp_path, data):
    """Random bytes once aborted the whole process inside executorch; now they never reach it."""
    pytest.importorskip("executorch", reason=needs("release"))
    from magicselector.backends import open_model

    with pytest.raises(BundleError, match=r"b/embedder/model.pte: not a loadable ExecuTorch program"):
        open_model(tmp_path / "model.pte", data=data, name="b/embedder/model.pte")


def test_a_load_racing_a_rebuild_reads_the_new_bundle_whole(copy, tmp_path, monkeypatch):
    """A rebuild swaps the folder after the manifest was read: the stale manifest's hashes fail on
    the new files, so from_bundle starts again from the new manifest instead of failing."""
    from magicselector import sections
    from magicselector.bundle_writer import rewrite_bundle
    from magicselector.files import swap_into_place

    newer = tmp_path / "newer"
    src = Selector.from_bundle(copy)
    src.remove_tool(src.catalog.ids[0])
    src.save(newer, release=777)
    real, calls = sections.load_artifacts, []

    def racing(bundle, **kw):
        calls.append(bundle.release)
        if len(calls) == 1:
            staging = copy.with_name(".b.staging-swap")
            shutil.copytree(newer, staging)
            swap_into_place(staging, copy)
        return real(bundle, **kw)

    monkeypatch.setattr(sections, "load_artifacts", racing)
    sel = Selector.from_bundle(copy)
    assert calls[0] != 777 and calls[-1] == 777 and len(calls) == 2
    assert sel.bundle.release == 777 and len(sel.catalog) == len(src.catalog)
    assert rewrite_bundle  # the writer the save used

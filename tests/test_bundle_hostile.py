"""Hostile bundles never block or balloon a load: a FIFO in place of a listed file is refused at
once (verify on, off, or signed), a file larger than its manifest entry is refused before it is
read, a lexical index that would inflate or allocate beyond its own size is refused, and an ONNX
model that keeps its weights outside the bundle does not load."""
from __future__ import annotations

import io
import json
import os
import shutil
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import needs
from hypothesis import given, settings, strategies as st

from magicselector import Selector
from magicselector.bundle import MANIFEST, Bundle, write_manifest
from magicselector.errors import BundleError
from magicselector.stages.lexical import LexicalIndex

FIFO_FILES = ["embedder/model.onnx", "catalog.jsonl", "lexical.npz"]
FAST_S = 10.0  # a refusal takes milliseconds; a blocked open waits until the unblocker below opens the FIFO


@pytest.fixture()
def copy(bundle_dir, tmp_path) -> Path:
    out = tmp_path / "b"
    shutil.copytree(bundle_dir, out)
    return out


def _fifo_in_place_of(root: Path, rel: str) -> Path:
    path = root / rel
    path.unlink()
    os.mkfifo(path)
    return path


class Unblocker:
    """If the code under test opens the FIFO for reading and blocks, open it for writing after
    ``FAST_S`` seconds so the test fails on its time instead of hanging the suite."""

    def __init__(self, fifo: Path) -> None:
        self.fifo, self.done = fifo, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.done.wait(FAST_S):
            return
        try:
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)  # the blocked reader now reads an end of file
        except OSError:
            pass

    def __enter__(self) -> "Unblocker":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def _refused_fast(fifo: Path, load) -> BundleError:
    start = time.monotonic()
    with Unblocker(fifo), pytest.raises(BundleError) as e:
        load()
    took = time.monotonic() - start
    assert took < FAST_S, f"the load waited on the FIFO for {took:.1f} s"
    assert "FIFO" in str(e.value) and str(fifo.name) in str(e.value), str(e.value)
    return e.value


@pytest.mark.parametrize("rel", FIFO_FILES)
def test_a_fifo_in_place_of_a_listed_file_is_refused_at_once_with_verify(copy, rel):
    fifo = _fifo_in_place_of(copy, rel)
    _refused_fast(fifo, lambda: Bundle.open(copy))  # what `bundle verify` does first
    _refused_fast(fifo, lambda: Selector.from_bundle(copy))


@pytest.mark.parametrize("rel", FIFO_FILES)
def test_a_fifo_in_place_of_a_listed_file_is_refused_at_once_without_verify(copy, rel):
    fifo = _fifo_in_place_of(copy, rel)
    _refused_fast(fifo, lambda: Selector.from_bundle(copy, verify=False))


def test_a_fifo_is_refused_at_once_in_a_signed_bundle(copy, tmp_path):
    pytest.importorskip("cryptography", reason=needs("sign"))
    from magicselector.bundle_writer import sign_bundle
    from magicselector.signing import generate_keypair

    keys = generate_keypair(tmp_path / "k")
    sign_bundle(copy, keys["private_key"])
    fifo = _fifo_in_place_of(copy, "catalog.jsonl")
    _refused_fast(fifo, lambda: Selector.from_bundle(copy, verify=False, public_key=keys["public_key"]))


def test_a_fifo_in_place_of_the_manifest_is_not_a_bundle(copy):
    fifo = _fifo_in_place_of(copy, MANIFEST)
    start = time.monotonic()
    with Unblocker(fifo), pytest.raises(BundleError, match="not a file"):
        Bundle.open(copy)
    assert time.monotonic() - start < FAST_S


@pytest.mark.parametrize("verify", [True, False])
def test_a_file_larger_than_its_manifest_entry_is_refused_before_it_is_read(copy, verify):
    path = copy / "catalog.jsonl"
    listed = path.stat().st_size
    with open(path, "ab") as f:  # sparse: 4 GiB more that nothing may read
        f.truncate(listed + (4 << 30))
    with pytest.raises(BundleError, match=r"catalog\.jsonl: size 4,29.* does not match the manifest"):
        Selector.from_bundle(copy, verify=verify)


def test_a_manifest_size_that_is_not_a_count_is_a_bundle_error(copy):
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["files"]["catalog.jsonl"]["size"] = "big"
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"files\['catalog.jsonl'\]\.size must be a non-negative integer"):
        Selector.from_bundle(copy, verify=False)


def _npz(members: dict[str, bytes], compression: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, array)
    return out.getvalue()


def test_a_compressed_lexical_index_is_refused_before_it_inflates(copy):
    # 64 MiB of zeros deflate to about 64 KB: inflating it whole is what the bound prevents
    bomb = _npz({"meta.npy": _npy(np.zeros(64 << 20, dtype=np.uint8))}, zipfile.ZIP_DEFLATED)
    assert len(bomb) < 1 << 20
    (copy / "lexical.npz").write_bytes(bomb)
    write_manifest(copy, {k: v for k, v in json.loads((copy / MANIFEST).read_text()).items() if k != "files"})
    with pytest.raises(BundleError, match=r"lexical\.npz: member 'meta\.npy' is compressed"):
        Selector.from_bundle(copy)


def test_a_lexical_header_declaring_more_than_its_member_holds_is_refused():
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    crafted = _npz({"meta.npy": header.getvalue() + b"\0" * 64}, zipfile.ZIP_STORED)
    with pytest.raises(BundleError, match=r"declares 8,000,000,000,000 bytes of array in"):
        LexicalIndex.load("lexical.npz", data=crafted)


def test_the_shipped_lexical_index_passes_the_bound(bundle_dir):
    data = (bundle_dir / "lexical.npz").read_bytes()
    assert len(LexicalIndex.load(bundle_dir / "lexical.npz", data=data)._ids) > 0


def test_an_onnx_model_with_external_data_does_not_load_from_its_bytes(tmp_path, monkeypatch):
    onnx = pytest.importorskip("onnx", reason=needs("export"))
    from onnx import TensorProto, helper, numpy_helper

    from magicselector.backends.onnx import OnnxModel

    weights = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], [weights])
    onnx.save_model(helper.make_model(graph), tmp_path / "model.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    monkeypatch.chdir(tmp_path)  # weights.bin sits in the working folder, where ONNX Runtime looked before
    with pytest.raises(BundleError, match="external data"):
        OnnxModel(tmp_path / "model.onnx", data=(tmp_path / "model.onnx").read_bytes())


def _small_lexical_bytes() -> bytes:
    from magicselector.catalog import Catalog, Tool

    catalog = Catalog([Tool(id=f"t{i}", name=f"tool_{i}", description=f"Does thing number {i} with files.")
                       for i in range(5)])
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lexical.npz"
        LexicalIndex.from_catalog(catalog).save(path)
        return path.read_bytes()


SMALL_LEXICAL = _small_lexical_bytes()


@settings(max_examples=200, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, len(SMALL_LEXICAL) - 1), st.integers(1, 255)), min_size=1,
                      max_size=6), cut=st.integers(0, len(SMALL_LEXICAL)))
def test_a_damaged_lexical_index_is_a_bundle_error_or_loads(flips, cut):
    data = bytearray(SMALL_LEXICAL)
    for at, xor in flips:
        data[at] ^= xor
    try:
        LexicalIndex.load("lexical.npz", data=bytes(data[:cut] if cut < len(data) // 2 else data))
    except BundleError:
        pass


def test_a_lexical_index_naming_a_zip_version_zipfile_lacks_is_a_bundle_error():
    # found by the fuzz test above: zipfile raises NotImplementedError for a member whose header asks
    # for a newer zip version (here 10.9), which must be a BundleError like any other damage
    data = bytearray(SMALL_LEXICAL)
    at = data.index(b"PK\x01\x02")  # the first central directory entry
    data[at + 6:at + 8] = (109).to_bytes(2, "little")  # "version needed to extract": 10.9
    with pytest.raises(BundleError, match="not a readable lexical index"):
        LexicalIndex.load("lexical.npz", data=bytes(data))

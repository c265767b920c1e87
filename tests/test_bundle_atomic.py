"""Bundle writes are atomic and signed before they appear: a build or a save killed at any step
leaves the previous bundle loadable and verified, the next build sweeps what the kill left, a
running Selector keeps working while its folder is rebuilt, and an app can refuse older releases."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import needs
from magicselector import Selector, Tool
from magicselector.bundle import MANIFEST, Bundle
from magicselector.errors import BundleError, InputError
from magicselector.files import CRASH_ENV, NO_EXCHANGE_ENV, previous_dir, sweep

pytest.importorskip("cryptography", reason=needs("sign"))

N_TOOLS = 24
BUILD = """
import sys
from magicselector.catalog import Catalog, load_phone_catalog
from magicselector.default_bundle import build_default_bundle
build_default_bundle(sys.argv[1], catalog=Catalog(list(load_phone_catalog())[:%d]), progress=False,
                     signing_key=sys.argv[2], release=int(sys.argv[3]))
""" % N_TOOLS
SAVE = """
import sys
from magicselector import Selector, Tool
sel = Selector.from_bundle(sys.argv[1])
sel.add_tool(Tool(id="saved_tool", name="saved_tool", description="A tool added at run time and saved."))
sel.save(sys.argv[1], signing_key=sys.argv[2], release=int(sys.argv[3]))
"""


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    from magicselector.signing import generate_keypair

    return generate_keypair(tmp_path_factory.mktemp("keys") / "k")


@pytest.fixture(scope="module")
def signed_bundle(tmp_path_factory, keys, home) -> Path:
    from magicselector.catalog import Catalog, load_phone_catalog
    from magicselector.default_bundle import build_default_bundle

    out = tmp_path_factory.mktemp("signed") / "b"
    build_default_bundle(out, catalog=Catalog(list(load_phone_catalog())[:N_TOOLS]), progress=False,
                         signing_key=keys["private_key"], release=100)
    return out


def _run(script: str, target: Path, key: str, release: int, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, str(target), key, str(release)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", **env})


def _siblings(target: Path) -> set[str]:
    return {p.name for p in target.parent.iterdir()} - {target.name}


def _loads_signed(target: Path, keys) -> Bundle:
    """The folder at ``target`` opens under the public key with every file checked, and selects."""
    bundle = Bundle.open(target, verify=True, public_key=keys["public_key"])
    assert Selector.from_bundle(target, public_key=keys["public_key"]).select("set an alarm for 7").ids
    return bundle


# the step a kill comes after, whether the swap happened by then, and how the folders are swapped
KILLS = [("manifest-written", False, {}), ("signed", False, {}), ("before-swap", False, {}),
         ("exchanged", True, {}), ("between-renames", False, {NO_EXCHANGE_ENV: "1"}),
         ("renamed", True, {NO_EXCHANGE_ENV: "1"})]


@pytest.mark.parametrize("step, swapped, env", KILLS, ids=[k[0] for k in KILLS])
@pytest.mark.parametrize("script", [BUILD, SAVE], ids=["build", "save"])
def test_a_kill_at_any_step_leaves_a_complete_signed_bundle(signed_bundle, keys, tmp_path, step, swapped, env,
                                                            script):
    target = tmp_path / "b"
    shutil.copytree(signed_bundle, target)
    proc = _run(script, target, keys["private_key"], 200, **{CRASH_ENV: step}, **env)
    assert proc.returncode == 86, proc.stderr[-3000:]  # it died at that step, as a kill leaves it
    bundle = _loads_signed(target, keys)  # before any sweep: what an app finds right after the kill
    assert bundle.release == (200 if swapped else 100)
    if step == "between-renames":
        assert not target.exists() and previous_dir(target).is_dir()  # open found the previous folder
    sweep(target)
    assert target.is_dir() and not _siblings(target), _siblings(target)
    assert _loads_signed(target, keys).release == (200 if swapped else 100)
    proc = _run(script, target, keys["private_key"], 300)  # the next write completes over what is left
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _loads_signed(target, keys).release == 300 and not _siblings(target)


def test_sigkill_once_staging_appears_keeps_the_old_bundle_and_is_swept(signed_bundle, keys, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(signed_bundle, target)
    proc = subprocess.Popen([sys.executable, "-c", BUILD, str(target), keys["private_key"], "200"],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not any(".staging-" in n for n in _siblings(target)):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert any(".staging-" in n for n in _siblings(target))
    assert _loads_signed(target, keys).release == 100
    assert sweep(target) and not _siblings(target)


def test_bad_key_fails_before_anything_is_replaced(signed_bundle, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(signed_bundle, target)
    before = (target / MANIFEST).read_bytes()
    bad = tmp_path / "bad.key"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    proc = subprocess.run([sys.executable, "-m", "magicselector", "bundle", "build", "--out", str(target), "--force",
                           "--signing-key", str(bad)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "bad.key: not an unencrypted PEM private key" in proc.stderr
    assert (target / MANIFEST).read_bytes() == before and (target / "manifest.sig").is_file()
    assert _siblings(target) == {"bad.key"}  # no staging folder either


def test_a_running_selector_keeps_working_while_its_bundle_is_rebuilt(signed_bundle, keys, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(signed_bundle, target)
    sel = Selector.from_bundle(target)
    before = sel.select("wake me up at 6:30 tomorrow").ids
    proc = _run(BUILD, target, keys["private_key"], 200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Bundle.open(target).release == 200
    assert sel.select("wake me up at 6:30 tomorrow").ids == before
    sel.add_tool(Tool(id="late_tool", name="late_tool", description="Added after the rebuild."))
    assert "late_tool" in sel.catalog


def test_min_release_refuses_a_rollback(signed_bundle, keys):
    assert Selector.from_bundle(signed_bundle, min_release=100, public_key=keys["public_key"]).bundle.release == 100
    with pytest.raises(BundleError, match=r"release 100 is older than .* \(101\)"):
        Selector.from_bundle(signed_bundle, min_release=101, public_key=keys["public_key"])
    with pytest.raises(BundleError, match="release 100 is older"):
        Bundle.open(signed_bundle, min_release=101)


def test_a_bundle_without_release_is_release_0(signed_bundle, tmp_path):
    from magicselector.bundle import write_manifest

    target = tmp_path / "b"
    shutil.copytree(signed_bundle, target)
    manifest = json.loads((target / MANIFEST).read_text())
    del manifest["release"]
    write_manifest(target, {k: v for k, v in manifest.items() if k != "files"})
    assert Bundle.open(target).release == 0
    with pytest.raises(BundleError, match="release 0 is older"):
        Bundle.open(target, min_release=1)
    manifest["release"] = "7"
    write_manifest(target, {k: v for k, v in manifest.items() if k != "files"})
    with pytest.raises(BundleError, match="release must be a non-negative integer"):
        Bundle.open(target)


def test_default_release_grows(tmp_path, signed_bundle):
    from magicselector.bundle_writer import resolve_release

    assert resolve_release(signed_bundle, None) >= int(time.time()) - 5
    future = tmp_path / "f"
    future.mkdir()
    (future / MANIFEST).write_text(json.dumps({"release": 10 ** 12}))
    assert resolve_release(future, None) == 10 ** 12 + 1
    assert resolve_release(future, 5) == 5
    with pytest.raises(InputError, match="release must be a positive integer"):
        resolve_release(future, 0)


QUERIES = ["wake me up at 6:30 tomorrow", "set a timer for ten minutes", "order pizza for dinner",
           "check my moonbase oxygen", "turn the wifi off and text Sam"]


def test_save_restores_exactly_the_same_selections(bundle_dir, tmp_path, keys):
    sel = Selector.from_bundle(bundle_dir).with_config(lexical=True)
    removed = sel.catalog.ids[:3]
    for tool_id in removed:
        sel.remove_tool(tool_id)
    sel.add_tool(Tool(id="moonbase_oxygen", name="moonbase_oxygen",
                      description="Check the oxygen level of the moonbase habitat."))
    sel.add_tool(Tool(id="pizza_express", name="pizza_express", description="Order pizza for delivery tonight."))
    out = tmp_path / "saved"
    manifest = sel.save(out, signing_key=keys["private_key"], release=42)
    assert manifest["release"] == 42 and manifest["catalog"]["tools"] == len(sel.catalog)
    back = Selector.from_bundle(out, public_key=keys["public_key"], min_release=42).with_config(lexical=True)
    assert back.catalog.ids == sel.catalog.ids
    assert not set(removed) & set(back.catalog.ids) and "moonbase_oxygen" in back.catalog
    for q in QUERIES:
        a, b = sel.select(q), back.select(q)
        assert a.ids == b.ids and [round(t.score, 6) for t in a.tools] == [round(t.score, 6) for t in b.tools], q
    assert back.select("check my moonbase oxygen").ids[0] == "moonbase_oxygen"
    from magicselector.bundle_check import verify_bundle

    assert verify_bundle(out)["tools"] == len(sel.catalog)


def test_save_needs_a_bundle(selector):
    bare = Selector(selector.catalog, selector.embedder, selector.index)
    with pytest.raises(InputError, match="not loaded from a bundle"):
        bare.save("/nonexistent/never-written")


def test_bundle_rewrite_cli(signed_bundle, keys, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(signed_bundle, target)
    first = Bundle.open(target).manifest
    gone = json.loads((target / "catalog.jsonl").read_text().splitlines()[0])["id"]
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"tools": [{"name": "moonbase_oxygen", "description": "Check moonbase oxygen.",
                                            "inputSchema": {"type": "object"}}]}))
    proc = subprocess.run([sys.executable, "-m", "magicselector", "bundle", "rewrite", str(target),
                           "--add-tools", str(extra), "--remove-tools", gone, "--signing-key", keys["private_key"],
                           "--release", "150"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["added"] == ["moonbase_oxygen"] and summary["removed"] == [gone] and summary["release"] == 150
    bundle = _loads_signed(target, keys)
    assert bundle.release == 150 and bundle.manifest["catalog"]["tools"] == first["catalog"]["tools"]
    assert bundle.manifest["embedder"]["file"] == first["embedder"]["file"]
    assert bundle.manifest["files"]["embedder/model.onnx"] == first["files"]["embedder/model.onnx"]
    sel = Selector.from_bundle(target)
    assert gone not in sel.catalog and sel.select("check the moonbase oxygen").ids[0] == "moonbase_oxygen"
    proc = subprocess.run([sys.executable, "-m", "magicselector", "bundle", "rewrite", str(target),
                           "--remove-tools", "no_such_tool"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "no_such_tool" in proc.stderr and "Traceback" not in proc.stderr


def test_sweep_leaves_unrelated_siblings_alone(tmp_path):
    target = tmp_path / "b"
    target.mkdir()
    (tmp_path / ".b.settings").mkdir()  # 8 characters, but not a build's leftover
    (tmp_path / ".b.settings" / "x.txt").write_text("mine")
    (tmp_path / ".b.abcd1234").mkdir()  # what an older build left: mkdtemp's name, a half-written bundle
    (tmp_path / ".b.abcd1234" / "embedder").mkdir()
    (tmp_path / f".b.staging-{os.getpid()}-00")  .mkdir()  # a live build (this process)
    removed = {p.name for p in sweep(target)}
    assert removed == {".b.abcd1234"}
    assert (tmp_path / ".b.settings" / "x.txt").is_file() and (tmp_path / f".b.staging-{os.getpid()}-00").is_dir()

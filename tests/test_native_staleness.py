"""A cached native build older than the checkout's sources is rebuilt (or refused) before a release or the ADB bench runs it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from magicselector.bench import adb
from magicselector.cli import release
from magicselector.export import native


@pytest.fixture()
def checkout(tmp_path, monkeypatch):
    """A fake native source folder and cache; ``build_native`` is recorded, and writes the executable."""
    src = tmp_path / "native"
    (src / "src").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("project(x)\n")
    (src / "src" / "embed.cpp").write_text("int f() { return 1; }\n")
    monkeypatch.setattr(native, "native_source_dir", lambda: src)
    monkeypatch.setenv("MAGICSELECTOR_NATIVE_CACHE", str(tmp_path / "cache"))
    builds: list[str] = []

    def fake_build(target, **kw):
        builds.append(target)
        exe = native.default_build_dir(target) / "bin" / "magicselector-native"
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_bytes(b"built")
        return None

    monkeypatch.setattr(native, "build_native", fake_build)
    exe = native.default_build_dir("arm64") / "bin" / "magicselector-native"
    exe.parent.mkdir(parents=True)
    exe.write_bytes(b"old")
    old = (src / "src" / "embed.cpp").stat().st_mtime
    os.utime(exe, (old + 10, old + 10))  # built after the sources
    return src, exe, builds


def _touch_later(path: Path, than: Path) -> None:
    t = than.stat().st_mtime + 20
    os.utime(path, (t, t))


def test_a_build_newer_than_every_source_is_used_as_it_is(checkout):
    src, exe, builds = checkout
    assert native.sources_newer_than(exe) == []
    assert native.current_build("arm64", log=lambda _: None) == exe
    assert builds == [] and exe.read_bytes() == b"old"


def test_a_source_changed_after_the_build_rebuilds_it(checkout):
    src, exe, builds = checkout
    _touch_later(src / "src" / "embed.cpp", exe)
    assert native.sources_newer_than(exe) == [src / "src" / "embed.cpp"]
    said: list[str] = []
    assert native.current_build("arm64", log=said.append) == exe
    assert builds == ["arm64"] and exe.read_bytes() == b"built"
    assert "older than 1 native source file(s) (embed.cpp" in said[0]


def test_the_release_skips_its_arm64_check_when_a_stale_build_cannot_be_rebuilt(checkout, monkeypatch):
    src, exe, builds = checkout
    _touch_later(src / "CMakeLists.txt", exe)

    def no_toolchain(target, **kw):
        raise native.ExportError("the arm64 build needs zig")

    monkeypatch.setattr(native, "build_native", no_toolchain)
    monkeypatch.setattr(release.shutil, "which", lambda name: "/usr/bin/" + name)
    (src.parent / "ckpt").mkdir()
    (src.parent / "key.pem").write_text("not read here")
    config = release.ReleaseConfig(embedder=src.parent / "ckpt", out=src.parent / "out",
                                   signing_key=src.parent / "key.pem")
    got, why = release._native_arm64(config, log=lambda _: None)
    assert got is None
    assert "older than the native sources" in why and "needs zig" in why


def test_the_adb_bench_refuses_a_stale_runner_when_it_may_not_build(checkout):
    src, exe, builds = checkout
    runner = native.default_build_dir("arm64") / "bin" / adb.NATIVE_RUNNER
    runner.write_bytes(b"old")
    os.utime(runner, (exe.stat().st_mtime, exe.stat().st_mtime))
    _touch_later(src / "src" / "embed.cpp", runner)
    with pytest.raises(adb.DeviceError, match="older than .*embed.cpp.*magicselector native build --target arm64"):
        adb.find_native_runner(build_if_missing=False)
    assert builds == []


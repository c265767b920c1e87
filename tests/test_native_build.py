"""The native core's build (magicselector.export.native, `magicselector native build|test`): pinned
sdists refused when their hash or paths are wrong, the ARM64 configure on zig, and real builds whose
native tests pass under ctest (host; ARM64 under qemu-aarch64-static)."""
from __future__ import annotations

import io
import shutil
import struct
import tarfile
from pathlib import Path

import pytest

from magicselector.export.native import (DEFAULT_ARM_CPU, LLAMA_CPP_PYTHON, USEARCH, build_native, configure_args,
                                         fetch_source)
from magicselector.export.onnx import ExportError

NATIVE = Path(__file__).resolve().parent.parent / "native"


def _sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_sdist_whose_hash_is_not_the_pin_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MAGICSELECTOR_NATIVE_CACHE", str(tmp_path / "home" / "native"))  # not the shared build cache
    sdist = _sdist(tmp_path / "usearch-9.9.9.tar.gz", {"usearch-9.9.9/include/usearch/index.hpp": b"// not usearch\n"})
    with pytest.raises(ExportError, match="sha256 .* pinned at"):
        fetch_source(("usearch", "9.9.9", "0" * 64), sdist=sdist, log=lambda m: None)
    assert not (tmp_path / "home" / "native" / "src" / "usearch-9.9.9").exists()


def test_an_sdist_is_unpacked_once_and_only_the_folders_the_build_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("MAGICSELECTOR_NATIVE_CACHE", str(tmp_path / "home" / "native"))  # not the shared build cache
    sdist = _sdist(tmp_path / "usearch-9.9.9.tar.gz", {"usearch-9.9.9/include/usearch/index.hpp": b"// header\n",
                                                       "usearch-9.9.9/python/lib.cpp": b"// binding\n"})
    got = fetch_source(("usearch", "9.9.9", _sha256(sdist)), sdist=sdist, log=lambda m: None)
    assert (got / "include" / "usearch" / "index.hpp").read_bytes() == b"// header\n"
    assert not (got / "python").exists()
    # the second call finds the folder unpacked from the pinned hash and neither fetches nor reads an archive
    pin = ("usearch", "9.9.9", _sha256(sdist))
    assert fetch_source(pin, sdist=tmp_path / "absent.tar.gz", log=lambda m: None) == got
    # a folder unpacked from another archive is not trusted under a new pin: the archive is checked again
    with pytest.raises(ExportError, match="sha256 .* pinned at"):
        fetch_source(("usearch", "9.9.9", "0" * 64), sdist=sdist, log=lambda m: None)


def test_a_build_folder_another_checkout_configured_is_refused_naming_both(tmp_path, monkeypatch):
    import magicselector.export.native as native

    monkeypatch.setenv("MAGICSELECTOR_NATIVE_CACHE", str(tmp_path / "home" / "native"))
    ours = native.default_build_dir("host")
    monkeypatch.setattr(native, "native_source_dir", lambda: tmp_path / "other" / "native")
    assert native.default_build_dir("host") != ours  # one build folder per checkout in the shared cache
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/elsewhere/native\n")
    with pytest.raises(ExportError, match="configured from another checkout .*/elsewhere/native"):
        build_native("host", out=tmp_path / "b", log=lambda m: None)


def test_an_sdist_member_climbing_out_of_its_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MAGICSELECTOR_NATIVE_CACHE", str(tmp_path / "home" / "native"))  # not the shared build cache
    sdist = _sdist(tmp_path / "usearch-9.9.9.tar.gz", {"usearch-9.9.9/include/../../../evil.hpp": b"x"})
    with pytest.raises(ExportError, match="unsafe path"):
        fetch_source(("usearch", "9.9.9", _sha256(sdist)), sdist=sdist, log=lambda m: None)
    assert not list(tmp_path.rglob("evil.hpp"))


def test_the_pins_name_the_versions_the_project_installs():
    import tomllib

    project = tomllib.loads((NATIVE.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"{LLAMA_CPP_PYTHON[0]}=={LLAMA_CPP_PYTHON[1]}" in project["llm"]
    assert any(dep.startswith("ziglang==") for dep in project["native"])
    assert all(len(pin[2]) == 64 for pin in (LLAMA_CPP_PYTHON, USEARCH))


@pytest.mark.parametrize("target, sanitize, message", [("riscv", False, "target must be one of"),
                                                       ("arm64", True, "host target only")])
def test_a_target_or_sanitizer_the_build_cannot_make_is_refused(tmp_path, target, sanitize, message):
    with pytest.raises(ExportError, match=message):
        configure_args(target, tmp_path, sanitize=sanitize)


def _elf_header(path: Path) -> tuple[int, bool]:
    """(e_machine, has a PT_INTERP program header: dynamically linked) of a 64-bit little-endian ELF."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path} is not a 64-bit little-endian ELF"
    machine = struct.unpack_from("<H", data, 18)[0]
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    interp = any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))
    return machine, interp


def _run_native_tests(target: str, tmp_path: Path, *extra: str) -> str:
    from magicselector.cli.main import main

    rc = main(["native", "test", "--target", target, "--data", str(tmp_path / "data"), "--limit", "20", "--fuzz", "100",
               "--strict", *extra])
    assert rc == 0
    return (tmp_path / "data").as_posix()


@pytest.mark.slow
@pytest.mark.extra("llm")  # the test bundle's GGUF golden vectors come from llama.cpp's Python binding
def test_host_build_passes_its_native_tests_under_asan_and_ubsan(tmp_path, capsys, monkeypatch):
    if shutil.which("cmake") is None:
        pytest.skip("the native build needs CMake >= 3.25 on PATH")
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=1")  # a leak fails the test too
    _run_native_tests("host", tmp_path, "--sanitize")
    out = capsys.readouterr().out
    assert "test_embed" in out and "100% tests passed" in out
    build = build_native("host", sanitize=True, log=lambda m: None)  # configured and built already: nothing to do
    assert build.tests and all(p.is_file() for p in build.libraries)
    assert _elf_header(build.tests[0])[0] == 62  # EM_X86_64


@pytest.mark.slow
@pytest.mark.extra("native")
def test_arm64_build_is_a_static_aarch64_executable_that_passes_its_tests_under_qemu(tmp_path, capsys):
    if shutil.which("cmake") is None:
        pytest.skip("the native build needs CMake >= 3.25 on PATH")
    build = build_native("arm64", log=lambda m: None)
    for exe in [*build.tests, *([build.executable] if build.executable else [])]:
        machine, dynamic = _elf_header(exe)
        assert machine == 183 and not dynamic, f"{exe}: e_machine {machine}, dynamically linked: {dynamic}"
    assert f"-mcpu={DEFAULT_ARM_CPU}" in (build.build_dir / "toolchain" / "zcxx").read_text()
    if shutil.which("qemu-aarch64-static") is None:
        pytest.skip("built and checked; running the ARM64 tests needs qemu-aarch64-static (apt-get install "
                    "qemu-user-static)")
    _run_native_tests("arm64", tmp_path)
    out = capsys.readouterr().out
    assert "test_embed" in out and "100% tests passed" in out

"""Copy the installed onnxruntime package with every CPUID instruction of its Python binding replaced
by UD2, for ``tools/run_as_cpu.sh`` on CPUs and VMs without CPUID faulting: there
``tools/cpuid_mask/cpuid_mask.c`` (with ``MAGICSELECTOR_CPUID_PATCHED=1``) answers each UD2 at a
listed site with the masked CPUID, so onnxruntime (MLAS) picks the profile's kernels.

    python3 tools/cpuid_mask/patch_onnxruntime.py        # prints the folder to put on PYTHONPATH

The copy lands in ``${XDG_CACHE_HOME:-~/.cache}/magicselector/cpuid-patched/
onnxruntime-<version>-<sha256 prefix of the binding>/``: ``onnxruntime/`` (the package) and
``cpuid-sites.txt`` (the patched file and the virtual addresses of its sites, which the library
reads). An existing copy is reused as it is. The sites are the ``cpuid`` instructions of
``objdump -d`` (binutils), i.e. real instructions of the executable sections; each one's two bytes
are checked to be 0F A2 in the file before they become 0F 0B. The binding links onnxruntime
statically (the package's libonnxruntime.so is for C API users), so it is the only file patched.
Stdlib only; exits 1 with a message on failure.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

SITES_FILE = "cpuid-sites.txt"
CPUID = b"\x0f\xa2"
UD2 = b"\x0f\x0b"
# " 12150b2:\t0f a2                \tcpuid" (objdump -d, AT&T or Intel syntax alike)
_OBJDUMP_CPUID = re.compile(r"^\s*([0-9a-f]+):\s+0f a2\s+cpuid\s*$")


class PatchError(Exception):
    pass


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "magicselector" / "cpuid-patched"


def installed_package() -> Path:
    """The onnxruntime package folder this Python imports (without importing it)."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("onnxruntime is not installed for " + sys.executable)
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def binding_of(package: Path) -> Path:
    found = sorted((package / "capi").glob("onnxruntime_pybind11_state*.so"))
    if len(found) != 1:
        raise PatchError(f"expected one onnxruntime_pybind11_state*.so in {package / 'capi'}, found {len(found)}")
    return found[0]


def version_of(package: Path) -> str:
    text = (package / "__init__.py").read_text(encoding="utf-8", errors="replace")
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.M)
    if not match:
        raise PatchError(f"no __version__ in {package / '__init__.py'}")
    return match.group(1)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_segments(data: bytes | bytearray) -> list[tuple[int, int, int]]:
    """(virtual address, file offset, size in the file) of each PT_LOAD of a 64-bit little-endian ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise PatchError("not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != 62:  # EM_X86_64
        raise PatchError(f"not an x86-64 ELF file (e_machine {machine})")
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    segments = []
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            segments.append((p_vaddr, p_offset, p_filesz))
    return segments


def file_offset(segments: list[tuple[int, int, int]], vaddr: int) -> int:
    for seg_vaddr, seg_offset, size in segments:
        if seg_vaddr <= vaddr and vaddr + 2 <= seg_vaddr + size:
            return seg_offset + vaddr - seg_vaddr
    raise PatchError(f"address {vaddr:#x} is in no loaded segment")


def cpuid_sites(path: Path) -> list[int]:
    """Virtual addresses of the cpuid instructions objdump disassembles in the file's code."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise PatchError("objdump (binutils) is needed to find the CPUID instructions")
    proc = subprocess.Popen([objdump, "-d", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    sites = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if "cpuid" in line:
            match = _OBJDUMP_CPUID.match(line)
            if match:
                sites.append(int(match.group(1), 16))
    stderr = proc.stderr.read() if proc.stderr else ""
    if proc.wait() != 0:
        raise PatchError(f"objdump -d {path} failed: {stderr.strip()}")
    return sites


def patch_file(path: Path) -> list[int]:
    """Replaces each CPUID of the file with UD2 in place; returns the patched virtual addresses."""
    sites = cpuid_sites(path)
    if not sites:
        raise PatchError(f"objdump finds no cpuid instruction in {path}")
    data = bytearray(path.read_bytes())
    segments = load_segments(data)
    for vaddr in sites:
        offset = file_offset(segments, vaddr)
        if bytes(data[offset:offset + 2]) != CPUID:
            raise PatchError(f"{path}: the bytes at {vaddr:#x} (file offset {offset:#x}) are "
                             f"{bytes(data[offset:offset + 2]).hex(' ')}, not 0f a2")
        data[offset:offset + 2] = UD2
    path.write_bytes(data)
    return sites


def patched_copy(package: Path, root: Path) -> Path:
    """The PYTHONPATH folder holding the patched copy of ``package``, made if missing."""
    binding = binding_of(package)
    target = root / f"onnxruntime-{version_of(package)}-{sha256_of(binding)[:16]}"
    if (target / SITES_FILE).is_file() and (target / "onnxruntime").is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        copy = work / "onnxruntime"
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
        patched = binding_of(copy)
        sites = patch_file(patched)
        relative = patched.relative_to(work).as_posix()
        lines = [f"# CPUID instructions of {binding} replaced by UD2 (0f 0b) by tools/cpuid_mask/patch_onnxruntime.py",
                 "# virtual addresses, read by tools/cpuid_mask/cpuid_mask.c through MAGICSELECTOR_CPUID_SITES",
                 f"file {relative}", *(f"{vaddr:x}" for vaddr in sites)]
        (work / SITES_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            work.chmod(0o755)
            work.rename(target)
        except OSError:
            if not (target / SITES_FILE).is_file():  # not another run that finished first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None,
                        help="cache folder (default: ${XDG_CACHE_HOME:-~/.cache}/magicselector/cpuid-patched)")
    args = parser.parse_args(argv)
    try:
        package = installed_package()
        # the onnxruntime found is already a patched copy (a wrapper run inside another): reuse it
        if (package.parent / SITES_FILE).is_file():
            print(package.parent)
            return 0
        print(patched_copy(package, args.cache or cache_root()))
    except (PatchError, OSError) as exc:
        print(f"patch_onnxruntime: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ISA flags this process's CPUID reports (x86-64), which is what onnxruntime, numpy and torch
dispatch on, as opposed to /proc/cpuinfo, which describes the hardware even where CPUID is masked
(``tools/run_as_cpu.sh``).

CPUID and XGETBV run from a few bytes of machine code in an executable anonymous mapping, called
through ctypes; where that is impossible (not x86-64, no executable mappings allowed) the functions
return None and callers keep the /proc/cpuinfo flags.
"""
from __future__ import annotations

import os
import platform
from typing import Callable

# the profile tools/run_as_cpu.sh exports for tools/cpuid_mask
PROFILE_ENV = "MAGICSELECTOR_CPUID_PROFILE"
# set by tools/run_as_cpu.sh where the CPU has no CPUID faulting: only a patched copy of
# onnxruntime sees the profile, so this process's own CPUID reads still see the real CPU
PATCHED_ENV = "MAGICSELECTOR_CPUID_PATCHED"
# the flags a profile hides (as tools/cpuid_mask/cpuid_mask.c clears them)
PROFILE_HIDES: dict[str, Callable[[str], bool]] = {
    "avx2": lambda f: f.startswith("avx512") or f in {"avx_vnni", "amx_tile", "amx_int8", "amx_bf16"},
}

# x86-64 System V: cpuid(leaf=edi, subleaf=esi, out=rdx) stores EAX, EBX, ECX, EDX to out[0..3]
_CPUID_CODE = bytes([
    0x53,                    # push rbx (callee-saved, CPUID writes it)
    0x49, 0x89, 0xD0,        # mov r8, rdx
    0x89, 0xF8,              # mov eax, edi
    0x89, 0xF1,              # mov ecx, esi
    0x0F, 0xA2,              # cpuid
    0x41, 0x89, 0x00,        # mov [r8], eax
    0x41, 0x89, 0x58, 0x04,  # mov [r8+4], ebx
    0x41, 0x89, 0x48, 0x08,  # mov [r8+8], ecx
    0x41, 0x89, 0x50, 0x0C,  # mov [r8+12], edx
    0x5B,                    # pop rbx
    0xC3,                    # ret
])
# xgetbv0() -> XCR0 (which register states the OS saves: YMM, opmask/ZMM, AMX tiles)
_XGETBV_CODE = bytes([
    0x31, 0xC9,              # xor ecx, ecx
    0x0F, 0x01, 0xD0,        # xgetbv
    0x48, 0xC1, 0xE2, 0x20,  # shl rdx, 32
    0x48, 0x09, 0xD0,        # or rax, rdx
    0xC3,                    # ret
])

_XCR0_YMM = 0x6           # SSE + AVX state
_XCR0_ZMM = 0xE0          # opmask, ZMM_Hi256, Hi16_ZMM
_XCR0_TILE = 0x60000      # XTILECFG, XTILEDATA

# Linux flag name -> (leaf, subleaf, register index EAX=0..EDX=3, bit, XCR0 bits the OS must save)
FLAG_BITS: dict[str, tuple[int, int, int, int, int]] = {
    "fma": (1, 0, 2, 12, _XCR0_YMM),
    "avx2": (7, 0, 1, 5, _XCR0_YMM),
    "avx512f": (7, 0, 1, 16, _XCR0_ZMM),
    "avx512bw": (7, 0, 1, 30, _XCR0_ZMM),
    "avx512_vnni": (7, 0, 2, 11, _XCR0_ZMM),
    "amx_bf16": (7, 0, 3, 22, _XCR0_TILE),
    "amx_tile": (7, 0, 3, 24, _XCR0_TILE),
    "amx_int8": (7, 0, 3, 25, _XCR0_TILE),
    "avx_vnni": (7, 1, 0, 4, _XCR0_YMM),
    "avx512_bf16": (7, 1, 0, 5, _XCR0_ZMM),
}

_functions: tuple[Callable[[int, int], tuple[int, int, int, int]], Callable[[], int]] | None = None
_unavailable = False


def _load() -> tuple[Callable[[int, int], tuple[int, int, int, int]], Callable[[], int]] | None:
    global _functions, _unavailable
    if _functions is not None or _unavailable:
        return _functions
    if platform.machine().lower() not in ("x86_64", "amd64") or os.name != "posix":
        _unavailable = True
        return None
    try:
        import ctypes
        import mmap

        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(_CPUID_CODE + bytes(16 - len(_CPUID_CODE) % 16) + _XGETBV_CODE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(page))
        regs_type = ctypes.c_uint32 * 4
        raw_cpuid = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(regs_type))(base)
        raw_xgetbv = ctypes.CFUNCTYPE(ctypes.c_uint64)(base + len(_CPUID_CODE) + (16 - len(_CPUID_CODE) % 16))
    except (OSError, ValueError, TypeError, AttributeError):  # W^X policies refuse executable mappings
        _unavailable = True
        return None

    def cpuid(leaf: int, subleaf: int = 0) -> tuple[int, int, int, int]:
        regs = regs_type()
        raw_cpuid(leaf, subleaf, ctypes.byref(regs))
        return regs[0], regs[1], regs[2], regs[3]

    def xgetbv() -> int:
        return int(raw_xgetbv())

    cpuid.page = page  # type: ignore[attr-defined]  # the mapping lives as long as the function
    _functions = (cpuid, xgetbv)
    return _functions


def cpuid(leaf: int, subleaf: int = 0) -> tuple[int, int, int, int] | None:
    """EAX, EBX, ECX, EDX of the CPUID instruction in this process, or None where it cannot run."""
    fns = _load()
    return fns[0](leaf, subleaf) if fns else None


def cpuid_flags() -> frozenset[str] | None:
    """Those of :data:`FLAG_BITS` that this process's CPUID reports and whose register state the OS
    saves (XCR0), i.e. what a kernel dispatcher here would use; None where CPUID cannot run."""
    fns = _load()
    if fns is None:
        return None
    read, xgetbv = fns
    max_leaf = read(0, 0)[0]
    leaf1 = read(1, 0)
    osxsave = bool(leaf1[2] >> 27 & 1)
    xcr0 = xgetbv() if osxsave else 0
    regs = {(1, 0): leaf1}
    if max_leaf >= 7:
        regs[(7, 0)] = read(7, 0)
        if regs[(7, 0)][0] >= 1:
            regs[(7, 1)] = read(7, 1)
    seen = set()
    for name, (leaf, subleaf, reg, bit, state) in FLAG_BITS.items():
        values = regs.get((leaf, subleaf))
        if values is not None and values[reg] >> bit & 1 and xcr0 & state == state:
            seen.add(name)
    return frozenset(seen)


def seen_flags(proc_flags: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
    """``(flags, hidden)``: /proc/cpuinfo's flags less those of :data:`FLAG_BITS` that this process's
    CPUID denies, and the denied ones (empty where CPUID cannot be read or agrees)."""
    from_cpuid = cpuid_flags()
    if from_cpuid is None:
        return proc_flags, frozenset()
    hidden = frozenset(f for f in proc_flags if f in FLAG_BITS and f not in from_cpuid)
    return proc_flags - hidden, hidden


def patched_onnxruntime_hides(flags: frozenset[str]) -> frozenset[str]:
    """The flags that the patched onnxruntime of ``tools/run_as_cpu.sh``'s fallback (no CPUID
    faulting) does not see, when this process runs under it and imports that copy; else empty."""
    profile = os.environ.get(PROFILE_ENV, "")
    if os.environ.get(PATCHED_ENV) != "1" or profile not in PROFILE_HIDES:
        return frozenset()
    try:
        import onnxruntime
    except ImportError:
        return frozenset()
    if "cpuid-patched" not in (getattr(onnxruntime, "__file__", "") or ""):
        return frozenset()
    return frozenset(f for f in flags if PROFILE_HIDES[profile](f))


def mask_note(hidden: frozenset[str], onnxruntime_only: bool = False) -> str | None:
    """The line a report carries when CPUID hides flags from this process, naming who masked it."""
    if not hidden:
        return None
    profile = os.environ.get(PROFILE_ENV, "")
    if onnxruntime_only:
        return (f"onnxruntime's CPUID masked to {profile} by tools/run_as_cpu.sh (a patched copy; no CPUID "
                f"faulting here): the INT8 kernels are {profile}'s, numpy and usearch see the real CPU")
    if profile and profile != "none":
        return f"CPUID masked to {profile} by tools/run_as_cpu.sh"
    return f"CPUID hides {', '.join(sorted(hidden))} that /proc/cpuinfo lists"

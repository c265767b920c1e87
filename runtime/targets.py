"""CPU targets of the INT8 models: what each target needs from quantization, which one this CPU is,
and the one warning a process gets when a bundle was made for another CPU."""
from __future__ import annotations

import platform
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from .errors import BundleError, InputError

HOST = "host"


@dataclass(frozen=True)
class Target:
    """One kind of CPU that INT8 artifacts are quantized for."""

    name: str
    reduce_range: bool  # 7-bit weights: the guard against u8 x s8 pair sums saturating int16
    preset: str  # the export's quantization preset (magicselector.export.onnx.QUANT_PRESETS)
    description: str


# onnxruntime's dynamic INT8 multiplies u8 activations by s8 weights. x86 CPUs without VNNI do it with
# vpmaddubsw, which saturates int16 when two products add up past 32767, so their weights keep 7 bits
# (reduce_range); VNNI's vpdpbusd and ARM's sdot/udot accumulate in int32 and take full-range weights.
TARGETS: dict[str, Target] = {
    "arm64": Target("arm64", reduce_range=False, preset="qint8_arm64",
                    description="phones and ARM laptops (NEON dot-product kernels)"),
    "x86-avx2": Target("x86-avx2", reduce_range=True, preset="qint8_x86",
                       description="x86 CPUs with AVX2 and without VNNI"),
    "x86-vnni": Target("x86-vnni", reduce_range=False, preset="qint8_avx512_vnni",
                       description="x86 CPUs with AVX512-VNNI or AVX-VNNI"),
}
TARGET_CHOICES = (HOST, *TARGETS)


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's feature flags from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def host_target(machine: str | None = None, flags: frozenset[str] | None = None) -> str:
    """The target this CPU is: ``arm64`` on ARM, ``x86-vnni`` where /proc/cpuinfo lists avx512_vnni or
    avx_vnni, else ``x86-avx2`` (reduced-range weights are exact on every x86 CPU, so an x86 CPU
    without AVX2, or one whose flags cannot be read, takes them too)."""
    machine = (machine if machine is not None else platform.machine()).lower()
    if machine in ("arm64", "aarch64", "armv8", "armv8l"):
        return "arm64"
    flags = cpu_flags() if flags is None else flags
    return "x86-vnni" if flags & {"avx512_vnni", "avx_vnni"} else "x86-avx2"


def resolve_target(name: str | None) -> str:
    """A target name from a flag or a config (``host`` or None: this CPU's) -> a key of ``TARGETS``."""
    if name is None or name == HOST:
        return host_target()
    if name not in TARGETS:
        raise InputError(f"unknown target {name!r}; choose one of {', '.join(TARGET_CHOICES)}")
    return name


class TargetMismatchWarning(UserWarning):
    """A bundle's INT8 models were quantized for another kind of CPU than the one running them."""


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _first_time(target: str, host: str) -> bool:
    """Whether this (bundle target, host target) pair is seen for the first time in this process."""
    with _warned_lock:
        first = (target, host) not in _warned
        _warned.add((target, host))
    return first


def warn_if_other_target(target: str | None, where: str | Path = "the bundle") -> bool:
    """Warn once per process and (bundle target, host target) pair when ``target`` is not this CPU's;
    returns whether the targets differ. A bundle that records no target is not checked; one that
    records something else than a target name is a BundleError."""
    if target is None:
        return False
    if not isinstance(target, str) or target not in TARGETS:
        raise BundleError(f"{where}: manifest field 'target' must be one of {', '.join(TARGETS)}, "
                          f"got {target!r:.40}")
    host = host_target()
    if target == host:
        return False
    if _first_time(target, host):
        warnings.warn(f"{where} was quantized for {target} ({TARGETS[target].description}) but runs on {host}; "
                      "its INT8 scores may drift from its parity report. Build one for this CPU with "
                      f"`magicselector bundle build --target {host}`", TargetMismatchWarning, stacklevel=3)
    return True

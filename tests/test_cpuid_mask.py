"""tools/run_as_cpu.sh and tools/cpuid_mask: a process under the avx2 profile sees AVX2 but no
AVX-512/VNNI/AMX in CPUID (numpy, the bench's machine description, threads with every signal
blocked), and a SIGSEGV that is not a CPUID still kills it.

The checks run in plain ``python -c`` subprocesses: pytest's faulthandler owns SIGSEGV in this one.
"""
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WRAPPER = REPO / "tools" / "run_as_cpu.sh"


def _cpuid_faulting() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and "cpuid_fault" in line.split() for line in text.splitlines())


pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="CPUID masking is x86-64 only"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build tools/cpuid_mask"),
    pytest.mark.skipif(not _cpuid_faulting(), reason="this CPU/kernel has no CPUID faulting (cpuid_fault)"),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    # a fresh cache: the wrapper builds the library in this test
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache"))}


def run_masked(env, code: str, *python_args: str, profile: str = "avx2") -> subprocess.CompletedProcess:
    return subprocess.run([str(WRAPPER), profile, "--", sys.executable, *python_args, "-c", code],
                          env=env, capture_output=True, text=True, timeout=120)


NUMPY_FEATURES = ("from numpy._core._multiarray_umath import __cpu_features__ as f; "
                  "print(' '.join(k for k in ('AVX2', 'FMA3', 'AVX512F', 'AVX512BW', 'AVX512VNNI') if f[k]))")


def test_numpy_sees_avx2_without_avx512_or_vnni(env):
    masked = run_masked(env, NUMPY_FEATURES)
    assert masked.returncode == 0, masked.stderr
    assert masked.stdout.split() == ["AVX2", "FMA3"]
    built = list((Path(env["XDG_CACHE_HOME"]) / "magicselector" / "cpuid_mask").glob("libcpuid_mask-*.so"))
    assert len(built) == 1


def test_machine_description_reports_the_masked_flags(env):
    code = ("import json; from magicselector.bench.latency import machine_description as m, isa_summary; "
            "d = m(); print(json.dumps([d['isa'], d['cpuid_mask'], d['int8_target'], isa_summary(d)]))")
    out = run_masked(env, code)
    assert out.returncode == 0, out.stderr
    isa, note, target, summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert "avx2" in isa and not {"avx512f", "avx512_vnni", "avx_vnni", "amx_int8"} & set(isa)
    assert note == "CPUID masked to avx2 by tools/run_as_cpu.sh"
    assert target == "x86-avx2"
    assert note in summary


def test_threads_with_every_signal_blocked_see_the_mask(env):
    # worker pools block all signals; a CPUID fault with SIGSEGV blocked would kill the process
    code = ("import signal, threading; from magicselector.bench.cpu_features import cpuid_flags\n"
            "seen = []\n"
            "def work():\n"
            "    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))\n"
            "    seen.append(sorted(cpuid_flags()))\n"
            "t = threading.Thread(target=work); t.start(); t.join()\n"
            "print(' '.join(seen[0]))")
    out = run_masked(env, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["avx2", "fma"]


@pytest.mark.parametrize("python_args, code", [
    ((), "import ctypes; ctypes.string_at(0)"),                              # a real fault
    (("-X", "faulthandler"), "import ctypes; ctypes.string_at(0)"),          # through the program's handler
    ((), "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"),        # a sent SIGSEGV
])
def test_other_sigsegv_still_kills(env, python_args, code):
    out = run_masked(env, code, *python_args)
    assert out.returncode == -signal.SIGSEGV, (out.returncode, out.stderr)
    if python_args:
        assert "Fatal Python error: Segmentation fault" in out.stderr


def test_unknown_profile_is_refused(env):
    out = run_masked(env, "print('ran')", profile="avx9")
    assert out.returncode == 2 and "unknown profile 'avx9'" in out.stderr and "ran" not in out.stdout

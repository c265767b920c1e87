"""tools/run_as_cpu.sh and tools/cpuid_mask: a process under the avx2 profile sees AVX2 but no
AVX-512/VNNI/AMX in CPUID (numpy, the bench's machine description, threads with every signal
blocked), and a SIGSEGV that is not a CPUID still kills it.

Without CPUID faulting the wrapper falls back to a copy of onnxruntime whose CPUIDs are patched to
UD2 (tools/cpuid_mask/patch_onnxruntime.py): onnxruntime takes its AVX2 kernels there, which shows
in a U8S8 MatMulInteger (AVX2's vpmaddubsw saturates pairs of products to int16, VNNI does not),
and a SIGILL that is not a patched CPUID still kills. Those tests run on hosts with faulting too
(MAGICSELECTOR_CPUID_FALLBACK=1).

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
]
needs_faulting = pytest.mark.skipif(not _cpuid_faulting(), reason="this CPU/kernel has no CPUID faulting (cpuid_fault)")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    # a fresh cache: the wrapper builds the library in this test
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache"))}


def run_masked(env, code: str, *python_args: str, profile: str = "avx2") -> subprocess.CompletedProcess:
    return subprocess.run([str(WRAPPER), profile, "--", sys.executable, *python_args, "-c", code],
                          env=env, capture_output=True, text=True, timeout=120)


NUMPY_FEATURES = ("from numpy._core._multiarray_umath import __cpu_features__ as f; "
                  "print(' '.join(k for k in ('AVX2', 'FMA3', 'AVX512F', 'AVX512BW', 'AVX512VNNI') if f[k]))")


@needs_faulting
def test_numpy_sees_avx2_without_avx512_or_vnni(env):
    masked = run_masked(env, NUMPY_FEATURES)
    assert masked.returncode == 0, masked.stderr
    assert masked.stdout.split() == ["AVX2", "FMA3"]
    built = list((Path(env["XDG_CACHE_HOME"]) / "magicselector" / "cpuid_mask").glob("libcpuid_mask-*.so"))
    assert len(built) == 1


@needs_faulting
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


@needs_faulting
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


@needs_faulting
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


# --- the fallback without CPUID faulting: a patched copy of onnxruntime --------------------------------

FALLBACK_NOTE = ("run_as_cpu: no CPUID faulting here; onnxruntime (patched copy) sees an avx2 CPU, other "
                 "libraries (numpy, usearch, glibc string functions via tunables) see the real CPU")


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _host_has_vnni() -> bool:
    text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    flags = next((line.split() for line in text.splitlines() if line.startswith("flags")), [])
    return "avx512_vnni" in flags or "avx_vnni" in flags


@pytest.fixture(scope="module")
def fallback_env(env):
    if shutil.which("objdump") is None:
        pytest.skip("the fallback needs objdump (binutils)")
    if not _has("onnxruntime"):
        pytest.skip("the fallback patches onnxruntime, which is not installed")
    # on a host with CPUID faulting the wrapper takes the fallback only when asked to
    return {**env, "MAGICSELECTOR_CPUID_FALLBACK": "1", "MAGICSELECTOR_PYTHON": sys.executable}


K, N = 64, 16
EXACT = K * 255 * 127             # uint8 255 x int8 127, summed exactly (VNNI's vpdpbusd, scalar code)
SATURATED = K // 2 * 32767        # AVX2's vpmaddubsw: each pair 2 * 255 * 127 saturates to int16 32767


@pytest.fixture(scope="module")
def u8s8_model(tmp_path_factory):
    """A MatMulInteger of uint8 A (1 x K) and a constant int8 B (K x N): its result tells the AVX2
    kernel (saturating) from the AVX-512 VNNI / AVX-VNNI ones (exact)."""
    onnx = pytest.importorskip("onnx", reason="needs the export extra: pip install -e .[export]")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.full((K, N), 127, dtype=np.int8), "B")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "u8s8",
                              [helper.make_tensor_value_info("A", TensorProto.UINT8, [1, K])],
                              [helper.make_tensor_value_info("Y", TensorProto.INT32, [1, N])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("model") / "u8s8.onnx"
    onnx.save(model, str(path))
    return path


def u8s8_code(model: Path) -> str:
    return ("def u8s8():\n"
            "    import numpy as np, onnxruntime as ort\n"
            "    o = ort.SessionOptions(); o.intra_op_num_threads = o.inter_op_num_threads = 1\n"
            f"    s = ort.InferenceSession({str(model)!r}, o, providers=['CPUExecutionProvider'])\n"
            f"    y = s.run(None, {{'A': np.full((1, {K}), 255, dtype=np.uint8)}})[0]\n"
            "    return sorted(set(int(v) for v in y.ravel()))\n")


def run_fallback(fallback_env, code: str, *python_args: str, env_extra=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(WRAPPER), "avx2", "--", sys.executable, *python_args, "-c", code],
                          env={**fallback_env, **(env_extra or {})}, capture_output=True, text=True, timeout=300)


def patched_root(fallback_env) -> Path:
    found = list((Path(fallback_env["XDG_CACHE_HOME"]) / "magicselector" / "cpuid-patched").glob("onnxruntime-*"))
    assert len(found) == 1, found
    return found[0]


def test_fallback_onnxruntime_takes_avx2_kernels(fallback_env, u8s8_model):
    code = (u8s8_code(u8s8_model) +
            "import json, onnxruntime\n"
            "print(json.dumps([onnxruntime.__file__, u8s8()]))\n")
    out = run_fallback(fallback_env, code, env_extra={"MAGICSELECTOR_CPUID_STATS": "1"})
    assert out.returncode == 0, out.stderr
    ort_file, values = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(ort_file).is_relative_to(patched_root(fallback_env))
    assert values == [SATURATED], f"onnxruntime did not take its AVX2 U8S8 kernel: {values}"
    assert out.stderr.count(FALLBACK_NOTE) == 1, out.stderr
    answered = [int(line.split()[1]) for line in out.stderr.splitlines() if line.startswith("cpuid_mask[")]
    assert answered and max(answered) > 0, out.stderr
    if _host_has_vnni():
        # the check can fail: unmasked, this host's VNNI kernel sums exactly
        plain = subprocess.run([sys.executable, "-c", u8s8_code(u8s8_model) + "print(u8s8())"],
                               env={k: v for k, v in fallback_env.items() if not k.startswith("MAGICSELECTOR_")},
                               capture_output=True, text=True, timeout=120)
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout.strip() == f"[{EXACT}]"


def test_fallback_threads_with_every_signal_blocked(fallback_env, u8s8_model):
    # the binding's CPUIDs (now UD2s) run when a worker that blocked every signal imports it
    code = (u8s8_code(u8s8_model) +
            "import signal, threading\n"
            "seen = []\n"
            "def work():\n"
            "    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))\n"
            "    seen.append(u8s8())\n"
            "t = threading.Thread(target=work); t.start(); t.join()\n"
            "print(seen[0])")
    out = run_fallback(fallback_env, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"[{SATURATED}]"


UD2_IN_ANONYMOUS_PAGE = ("import onnxruntime, ctypes, mmap\n"
                         "page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
                         "page.write(b'\\x0f\\x0b')\n"
                         "ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()\n")


@pytest.mark.parametrize("python_args, code", [
    ((), UD2_IN_ANONYMOUS_PAGE),                                                   # a UD2 that is no patched site
    (("-X", "faulthandler"), UD2_IN_ANONYMOUS_PAGE),                               # through the program's handler
    ((), "import onnxruntime, os, signal; os.kill(os.getpid(), signal.SIGILL)"),   # a sent SIGILL
])
def test_fallback_other_sigill_still_kills(fallback_env, python_args, code):
    out = run_fallback(fallback_env, code, *python_args)
    assert out.returncode == -signal.SIGILL, (out.returncode, out.stderr)
    if python_args:
        assert "Fatal Python error: Illegal instruction" in out.stderr


def test_fallback_program_sigill_handler_runs(fallback_env):
    code = ("import onnxruntime, os, signal\n"
            "signal.signal(signal.SIGILL, lambda *a: print('handled'))\n"
            "os.kill(os.getpid(), signal.SIGILL)\n"
            "print('after', signal.getsignal(signal.SIGILL) not in (signal.SIG_DFL, None))")
    out = run_fallback(fallback_env, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["handled", "after True"]


def test_patcher_changes_only_the_cpuid_sites(fallback_env):
    import numpy as np

    sys.path.insert(0, str(REPO / "tools" / "cpuid_mask"))
    try:
        import patch_onnxruntime as patcher
    finally:
        sys.path.pop(0)
    assert run_fallback(fallback_env, "pass").returncode == 0  # makes the copy if no test did yet
    root = patched_root(fallback_env)
    lines = [ln for ln in (root / "cpuid-sites.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0].startswith("file onnxruntime/capi/onnxruntime_pybind11_state")
    sites = [int(x, 16) for x in lines[1:]]
    assert len(sites) > 0 and len(set(sites)) == len(sites)

    original = patcher.binding_of(patcher.installed_package())
    patched = root / lines[0].split(" ", 1)[1]
    before, after = original.read_bytes(), patched.read_bytes()
    assert len(before) == len(after)
    segments = patcher.load_segments(before)
    offsets = sorted(patcher.file_offset(segments, vaddr) for vaddr in sites)
    assert all(before[o:o + 2] == b"\x0f\xa2" and after[o:o + 2] == b"\x0f\x0b" for o in offsets)
    changed = np.flatnonzero(np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8))
    assert changed.tolist() == [o + 1 for o in offsets]
    assert root.name.startswith("onnxruntime-") and patcher.sha256_of(original)[:16] in root.name

    # a second run reuses the copy, and so does a run whose onnxruntime is the copy itself
    stamp = (root / "cpuid-sites.txt").stat().st_mtime_ns
    tool = [sys.executable, str(REPO / "tools" / "cpuid_mask" / "patch_onnxruntime.py")]
    again = subprocess.run(tool, env=fallback_env, capture_output=True, text=True, timeout=120)
    nested = subprocess.run(tool, env={**fallback_env, "PYTHONPATH": str(root)}, capture_output=True, text=True,
                            timeout=120)
    assert again.stdout.strip() == nested.stdout.strip() == str(root), (again.stderr, nested.stderr)
    assert (root / "cpuid-sites.txt").stat().st_mtime_ns == stamp


def test_fallback_without_objdump_exits_3(fallback_env, tmp_path):
    assert run_fallback(fallback_env, "pass").returncode == 0  # builds the library with the full PATH
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("bash", "dirname", "uname", "grep", "sha256sum", "cut", "mkdir", "mktemp", "mv", "gcc"):
        (tools / tool).symlink_to(shutil.which(tool))
    out = subprocess.run([str(WRAPPER), "avx2", "--", sys.executable, "-c", "print('ran')"],
                         env={**fallback_env, "PATH": str(tools)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "needs objdump" in out.stderr and "ran" not in out.stdout, out.stderr


def test_fallback_failing_patch_exits_3(fallback_env, tmp_path):
    fake = tmp_path / "onnxruntime"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "0.0"\n')
    out = run_fallback(fallback_env, "print('ran')", env_extra={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 3 and "ran" not in out.stdout, out.stderr
    assert "expected one onnxruntime_pybind11_state" in out.stderr and "patching a copy of onnxruntime" in out.stderr


def test_fallback_machine_description_reports_what_onnxruntime_sees(fallback_env):
    code = ("import json; from magicselector.bench.latency import machine_description as m, isa_summary; "
            "d = m(); print(json.dumps([d['isa'], d['cpuid_mask'], d['int8_target'], isa_summary(d)]))")
    out = run_fallback(fallback_env, code)
    assert out.returncode == 0, out.stderr
    isa, note, target, summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert "avx2" in isa and not {"avx512f", "avx512_vnni", "avx_vnni", "amx_int8"} & set(isa)
    assert note.startswith("onnxruntime's CPUID masked to avx2 by tools/run_as_cpu.sh (a patched copy")
    assert target == "x86-avx2" and note in summary

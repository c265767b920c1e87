"""The native core's build driver: fetches the pinned sdists (llama.cpp inside llama-cpp-python,
usearch's headers) with pip, checks their sha256, unpacks them into the cache, and runs CMake on
``native/`` for the host (the system compiler) or for static ARM64 (zig's clang from the ``ziglang``
package, aarch64-linux-musl). No network but the package index; nothing of either source lives in
the repository."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from magicselector.files import cache_home, staged_dir

from .onnx import ExportError

TARGETS = ("host", "arm64")

# The pinned sources: (PyPI name, version, sha256 of the sdist, the folders of it the build reads).
# llama-cpp-python's version is the llm extra's pin (the decomposer runs the same llama.cpp revision).
LLAMA_CPP_PYTHON = ("llama-cpp-python", "0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
# usearch's version is the one whose Python wheel wrote the bundles' index files
USEARCH = ("usearch", "2.26.6", "eefb8dc019ad5a184f6089b22f20b91b3961720e504e97ba2718ad62ed65674b")
ZIGLANG_VERSION = "0.17.0"  # the cross toolchain: the native extra pins it

# What of each sdist is unpacked (prefixes below the sdist's top folder): llama.cpp's library, its
# vendored headers and CMake files, and its converter (export/gguf.py reads it too); not its docs,
# test models, tools and examples (~120 MB).
_LLAMA_KEEP = ("vendor/llama.cpp/",)
_LLAMA_SKIP = ("vendor/llama.cpp/docs/", "vendor/llama.cpp/models/", "vendor/llama.cpp/media/",
               "vendor/llama.cpp/tools/", "vendor/llama.cpp/examples/", "vendor/llama.cpp/benches/",
               "vendor/llama.cpp/tests/", "vendor/llama.cpp/app/", "vendor/llama.cpp/pocs/",
               "vendor/llama.cpp/.devops/", "vendor/llama.cpp/ci/", "vendor/llama.cpp/skills/")
_USEARCH_KEEP = ("include/", "numkong/include/", "LICENSE", "numkong/LICENSE", "VERSION")

# The ARM64 CPU zig compiles for. Cortex-A55 is Armv8.2-A with the dot product and FP16 arithmetic
# (ggml's int8 kernels use SDOT): every phone core since about 2018 (A55/A75 and later) has them.
# Older cores (Cortex-A53/A73, Armv8.0) lack them; --arm-cpu generic builds for those, at the cost of
# slower int8 dot products. The core checks the CPU at open and refuses instead of dying of SIGILL.
DEFAULT_ARM_CPU = "cortex_a55"


@dataclass
class NativeBuild:
    """Where a build put things, and what it took."""
    target: str
    build_dir: Path
    executable: Path | None
    libraries: list[Path]
    tests: list[Path]
    seconds: float
    sanitize: bool = False
    configure: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"target": self.target, "sanitize": self.sanitize, "build_dir": str(self.build_dir),
                "executable": str(self.executable) if self.executable else None,
                "libraries": [str(p) for p in self.libraries], "tests": [str(p) for p in self.tests],
                "seconds": round(self.seconds, 1)}


def native_source_dir() -> Path:
    """The repository's ``native/`` folder (a source checkout or an editable install)."""
    here = Path(__file__).resolve().parent.parent / "native"
    if not (here / "CMakeLists.txt").is_file():
        raise ExportError(f"no native sources at {here}: `magicselector native build` runs from a source "
                          "checkout of magicselector (pip install -e .)")
    return here


def native_cache() -> Path:
    """Where sources and builds are cached: $MAGICSELECTOR_NATIVE_CACHE, else the cache's ``native/``
    (the test suite points the first at the user's cache, so its private MAGICSELECTOR_HOME does not
    rebuild llama.cpp in every run)."""
    env = os.environ.get("MAGICSELECTOR_NATIVE_CACHE")
    return Path(env) if env else cache_home() / "native"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _safe_member(name: str) -> str | None:
    """The member's path below the sdist's top folder, or None for the top folder itself; an absolute
    path or one climbing out is refused."""
    parts = name.split("/", 1)
    if len(parts) != 2 or not parts[1]:
        return None
    rel = parts[1]
    if rel.startswith("/") or ".." in Path(rel).parts:
        raise ExportError(f"unsafe path in the sdist: {name}")
    return rel


def _unpack(sdist: Path, root: Path, keep: Sequence[str], skip: Sequence[str] = ()) -> int:
    n = 0
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            rel = _safe_member(member.name)
            if rel is None or not member.isfile():
                continue  # folders are made as needed; links are never followed or made
            if not any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in keep):
                continue
            if any(rel.startswith(s) for s in skip):
                continue
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            if src is None:
                continue
            with src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            if member.mode & stat.S_IXUSR:
                dest.chmod(0o755)
            n += 1
    return n


def fetch_source(pin: tuple[str, str, str], log: Callable[[str], None] = print,
                 sdist: str | Path | None = None) -> Path:
    """The unpacked sdist of ``pin`` (name, version, sha256) under the cache's ``native/src/``, fetched
    with ``pip download`` on first use (``sdist`` may name a local copy); a hash other than the pin's
    is refused."""
    name, version, sha256 = pin
    target = native_cache() / "src" / f"{name}-{version}"
    marker = target / ".complete"
    # the marker records the hash the folder was unpacked from: a folder from another archive under the
    # same name (a pin moved, a hand-made folder) is unpacked again, not trusted
    if marker.is_file() and marker.read_text().split()[2:3] == [sha256]:
        return target
    keep, skip = ((_LLAMA_KEEP, _LLAMA_SKIP) if name == LLAMA_CPP_PYTHON[0] else (_USEARCH_KEEP, ()))
    with tempfile.TemporaryDirectory(prefix="magicselector-native-sdist-") as tmp:
        if sdist is None:
            log(f"fetching the {name} {version} sdist with pip")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
                   f"{name}=={version}", "-d", tmp, "--quiet"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            found = sorted(p for p in Path(tmp).iterdir() if p.name.endswith(".tar.gz"))
            if proc.returncode != 0 or not found:
                raise ExportError(f"could not fetch the {name} {version} sdist ({' '.join(cmd)}): "
                                  f"{proc.stderr.strip()[-500:]}")
            sdist = found[0]
        got = _sha256(Path(sdist))
        if got != sha256:
            raise ExportError(f"{sdist}: sha256 {got}, but {name} {version} is pinned at {sha256}")
        with staged_dir(target) as root:
            n = _unpack(Path(sdist), root, keep, skip)
            (root / ".complete").write_text(f"{name} {version} {sha256} {n} files\n")
    log(f"unpacked {name} {version} into {target}")
    return target


def llama_source(log: Callable[[str], None] = print) -> Path:
    return fetch_source(LLAMA_CPP_PYTHON, log) / "vendor" / "llama.cpp"


def usearch_source(log: Callable[[str], None] = print) -> Path:
    return fetch_source(USEARCH, log)


def _zig_wrappers(folder: Path, arm_cpu: str) -> dict[str, Path]:
    """Shell scripts that CMake takes as one compiler path each: ``python -m ziglang cc|c++|ar|ranlib``
    with this interpreter (zig ships as a Python package, so there is no zig on PATH)."""
    try:
        import ziglang  # noqa: F401  (only checks the package is there)
    except ImportError:
        raise ExportError("the arm64 build needs zig: pip install 'magicselector[native]' "
                          f"(ziglang=={ZIGLANG_VERSION})") from None
    folder.mkdir(parents=True, exist_ok=True)
    target = ["-target", "aarch64-linux-musl", f"-mcpu={arm_cpu}"]
    tools = {"zcc": ["cc", *target], "zcxx": ["c++", *target], "zar": ["ar"], "zranlib": ["ranlib"]}
    out = {}
    for name, args in tools.items():
        path = folder / name
        path.write_text("#!/bin/sh\n" f'exec "{sys.executable}" -m ziglang {" ".join(args)} "$@"\n')
        path.chmod(0o755)
        out[name] = path
    return out


def _generator() -> list[str]:
    return ["-G", "Ninja"] if shutil.which("ninja") else []


def _cmake() -> str:
    cmake = shutil.which("cmake")
    if not cmake:
        raise ExportError("the native build needs CMake 3.25 or later on PATH (apt-get install cmake, or pip install cmake)")
    return cmake


def default_build_dir(target: str, sanitize: bool = False) -> Path:
    """The cache's build folder for ``target``, one per checkout: CMake binds a build folder to the
    source folder that configured it, so two checkouts sharing the cache (a CI clone beside a
    developer's tree) would otherwise refuse each other's builds."""
    checkout = hashlib.sha256(str(native_source_dir().resolve()).encode()).hexdigest()[:10]
    return native_cache() / "build" / f"{target}{'-sanitize' if sanitize else ''}-{checkout}"


def sources_newer_than(built: Path) -> list[Path]:
    """The native source files (CMake lists, C/C++ sources and headers under ``native/``) modified after
    ``built`` was written: a cached executable older than the checkout's sources is not this code's
    build, and a check run with it would vouch for code that no longer exists."""
    stamp = built.stat().st_mtime
    src = native_source_dir()
    kinds = {".c", ".cc", ".cpp", ".h", ".hpp", ".cmake", ".txt"}
    return sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in kinds and p.stat().st_mtime > stamp)


def current_build(target: str, name: str = "magicselector-native", *, build: bool = True,
                  log: Callable[[str], None] = print) -> Path:
    """The cache's ``target`` executable ``name`` of this checkout, built or rebuilt first where it is
    missing or older than a native source (an incremental build: seconds when little changed); with
    ``build`` False an ExportError says which instead."""
    exe = default_build_dir(target) / "bin" / name
    fix = f"magicselector native build --target {target}"
    if exe.is_file():
        newer = sources_newer_than(exe)
        if not newer:
            return exe
        if not build:
            raise ExportError(f"{exe} is older than {newer[0]} (and {len(newer) - 1} more native sources): run `{fix}`")
        log(f"[native] {exe} is older than {len(newer)} native source file(s) ({newer[0].name}, ...): rebuilding")
    else:
        if not build:
            raise ExportError(f"no {target} build at {exe}: run `{fix}`")
        log(f"[native] no {target} build at {exe}: building it ({fix})")
    build_native(target, log=log)
    if not exe.is_file():
        raise ExportError(f"the {target} build did not produce {exe}")
    return exe


def _stale_cmake_cache(build_dir: Path) -> str | None:
    """The source folder a build folder's CMakeCache.txt was configured from, when it is not this
    checkout's (CMake would refuse it with a message naming neither the fix nor the folder)."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return None
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith("CMAKE_HOME_DIRECTORY:"):
            home = line.split("=", 1)[-1].strip()
            return home if Path(home).resolve() != native_source_dir().resolve() else None
    return None


def configure_args(target: str, build_dir: Path, *, sanitize: bool = False, arm_cpu: str = DEFAULT_ARM_CPU,
                   test_bundle: str | Path | None = None, test_data: str | Path | None = None,
                   log: Callable[[str], None] = print) -> list[str]:
    """The ``cmake`` configure command for ``target``."""
    if target not in TARGETS:
        raise ExportError(f"target must be one of {list(TARGETS)}, got {target!r}")
    if sanitize and target != "host":
        raise ExportError("--sanitize builds the host target only (the sanitizers' runtimes are the host compiler's)")
    src = native_source_dir()
    args = [_cmake(), "-S", str(src), "-B", str(build_dir), *_generator(),
            f"-DMS_LLAMA_DIR={llama_source(log)}", f"-DMS_USEARCH_DIR={usearch_source(log)}",
            f"-DMS_SANITIZE={'ON' if sanitize else 'OFF'}", f"-DMS_STRIP={'OFF' if sanitize else 'ON'}",
            f"-DCMAKE_BUILD_TYPE={'RelWithDebInfo' if sanitize else 'Release'}",
            f"-DMS_TEST_BUNDLE={Path(test_bundle).resolve() if test_bundle else ''}",
            f"-DMS_TEST_DATA={Path(test_data).resolve() if test_data else ''}"]
    if target == "arm64":
        z = _zig_wrappers(build_dir / "toolchain", arm_cpu)
        args += ["-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
                 f"-DCMAKE_C_COMPILER={z['zcc']}", f"-DCMAKE_CXX_COMPILER={z['zcxx']}",
                 f"-DCMAKE_AR={z['zar']}", f"-DCMAKE_RANLIB={z['zranlib']}",
                 "-DCMAKE_EXE_LINKER_FLAGS=-static"]
        qemu = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
        if qemu:  # ctest runs the ARM64 tests through it
            args.append(f"-DCMAKE_CROSSCOMPILING_EMULATOR={qemu}")
    return args


def build_native(target: str, out: str | Path | None = None, sanitize: bool = False, *, jobs: int | None = None,
                 arm_cpu: str = DEFAULT_ARM_CPU, test_bundle: str | Path | None = None,
                 test_data: str | Path | None = None, log: Callable[[str], None] = print) -> NativeBuild:
    """Configure and build the native core for ``target`` ("host" or "arm64") in ``out`` (default: the
    cache's ``native/build/TARGET[-sanitize]-CHECKOUT``, one per checkout); returns the paths of the
    executable, the libraries an app links and the test executables. ``test_bundle`` / ``test_data`` are the native tests' argv."""
    build_dir = Path(out) if out is not None else default_build_dir(target, sanitize)
    build_dir.mkdir(parents=True, exist_ok=True)
    stale = _stale_cmake_cache(build_dir)
    if stale is not None:
        raise ExportError(f"build folder {build_dir} was configured from another checkout ({stale}); "
                          "give another --out or delete that folder")
    t0 = time.perf_counter()
    configure = configure_args(target, build_dir, sanitize=sanitize, arm_cpu=arm_cpu, test_bundle=test_bundle,
                               test_data=test_data, log=log)
    _run(configure, "configure", log)
    jobs = jobs or os.cpu_count() or 1
    _run([_cmake(), "--build", str(build_dir), "--parallel", str(jobs)], "build", log)
    seconds = time.perf_counter() - t0
    bin_dir = build_dir / "bin"
    exe = bin_dir / "magicselector-native"
    tests = sorted(p for p in bin_dir.glob("test_*") if p.is_file()) if bin_dir.is_dir() else []
    tests += sorted(p for p in bin_dir.glob("fuzz_*") if p.is_file()) if bin_dir.is_dir() else []
    libs = [build_dir / "lib" / "libmagicselector_core.a"]
    libs += sorted(p for p in (build_dir / "llama.cpp").rglob("*.a"))
    return NativeBuild(target=target, build_dir=build_dir, executable=exe if exe.is_file() else None,
                       libraries=[p for p in libs if p.is_file()], tests=tests, seconds=seconds,
                       sanitize=sanitize, configure=configure)


def run_native_tests(build: NativeBuild, *, bundle: str | Path | None = None, data: str | Path | None = None,
                     log: Callable[[str], None] = print, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run the build's native tests with ctest (through qemu for arm64), after pointing their argv at
    ``bundle`` and ``data`` (a re-configure, which rebuilds nothing)."""
    if bundle is not None or data is not None:
        _run([_cmake(), "-S", str(native_source_dir()), "-B", str(build.build_dir),
              f"-DMS_TEST_BUNDLE={Path(bundle).resolve() if bundle else ''}",
              f"-DMS_TEST_DATA={Path(data).resolve() if data else ''}"], "configure the tests", log)
    env = dict(os.environ)
    if build.sanitize:
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    ctest = shutil.which("ctest") or "ctest"
    cmd = [ctest, "--test-dir", str(build.build_dir), "--output-on-failure"]
    if build.target == "arm64":
        # the fuzz loops run on the host build, under the sanitizers; emulated without them they would
        # cost many times as long and could only find crashes
        cmd += ["-E", "^fuzz_"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


# Utterances for the embedder's parity beside the catalog's tool texts: short, long (past the
# tokenizer's 128 ids), multi-intent, non-ASCII (accents, CJK, emoji) and odd spacing.
EMBED_PROBE_TEXTS = (
    "turn on bluetooth and play some jazz",
    "hi",
    "Set an alarm for 6:30 tomorrow and text Maria that I'll be late",
    "what's the weather like in São Paulo this weekend?",
    "Réserve une table pour deux à 20h",
    "明天早上七点叫我起床",
    "play my 🎵 workout playlist 🔥🔥",
    "   remind me\tto call mom   ",
    "Find the area of a triangle with a base of 10 units and height of 5 units.",
    "Can you pause it? Actually skip to the next episode instead, and lower the volume a bit.",
    " ".join(["book a flight from Berlin to Lisbon next friday morning, window seat, one checked bag"] * 6),
)
EMBED_CASES_FILE = "embed_cases.json"  # what native/tests/test_embed.cpp reads from its data folder
# The native embedder (the Q8_0 GGUF on ggml) against the shipped INT8 ONNX one, every text alone.
# Issue 42 asks 0.995 on every text; the ONNX model quantizes its activations per run and ggml does
# not, so short texts land lower (measured: min 0.986 on "hi", mean 0.995; the GGUF helper's FP32
# rebuild of the same weights is no closer). These floors sit just under what is measured.
EMBED_MIN_COSINE = 0.98
EMBED_MIN_MEAN_COSINE = 0.994


def write_embed_cases(folder: str | Path, bundle: str | Path, gguf: str | Path | None = None,
                      tools: int = 48) -> Path:
    """``folder/embed_cases.json``: token ids and the bundle's ONNX embedder's vectors for the probe
    utterances and the first ``tools`` tool texts of its catalog, with the GGUF the native embedder
    loads (``gguf``, default the bundle's own ``embedder.gguf`` file)."""
    import json

    from magicselector.catalog import load_catalog, tool_text
    from magicselector.stages.embed import TextEmbedder

    root = Path(bundle)
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    emb = manifest["embedder"]
    if gguf is None:
        entry = emb.get("gguf")
        if not entry:
            raise ExportError(f"{root}: the bundle's embedder has no GGUF file (manifest embedder.gguf); pass one")
        gguf = root / (entry["file"] if isinstance(entry, dict) else entry)
    catalog = load_catalog(root / manifest["catalog"]["file"])
    texts = [*EMBED_PROBE_TEXTS, *(tool_text(t) for t in list(catalog)[:tools])]
    embedder = TextEmbedder.from_path(root / emb["file"], root / emb["tokenizer"], dim=int(emb["dim"]),
                                      max_length=int(emb.get("max_length", 128)))
    enc = embedder.tokenizer.encode(texts)
    ids = [enc["input_ids"][i][enc["attention_mask"][i] == 1].tolist() for i in range(len(texts))]
    # each text alone: the INT8 ONNX model quantizes its activations per run, so a text's vector
    # moves with the batch it shares (the native embedder runs every text alone)
    cases = [{"text": t, "input_ids": ids[i], "vector": [float(x) for x in embedder.embed([t])[0]]}
             for i, t in enumerate(texts)]
    try:  # the same GGUF and ids on llama-cpp-python (the llm extra), which the native port must equal
        from .gguf import GgufEmbedder

        reference = GgufEmbedder(gguf, threads=1).embed_ids(ids)
        for case, vec in zip(cases, reference):
            case["llama"] = [float(x) for x in vec]
    except ImportError:
        pass
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / EMBED_CASES_FILE
    path.write_text(json.dumps({"gguf": str(Path(gguf).resolve()), "min_cosine": EMBED_MIN_COSINE,
                                "min_mean_cosine": EMBED_MIN_MEAN_COSINE,
                                "against": str(root / emb["file"]), "cases": cases}) + "\n", encoding="utf-8")
    return path


def _run(cmd: list[str], what: str, log: Callable[[str], None]) -> None:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip()[-3000:]
        raise ExportError(f"native {what} failed ({' '.join(cmd[:3])} ...):\n{tail}")
    log(f"{what}: {time.perf_counter() - t0:.1f} s")

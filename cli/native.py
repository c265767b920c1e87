"""``magicselector native build|test``: builds the native core (host or static ARM64) from the pinned
sdists and runs its tests with the files they compare against (written here by the Python runtime).
The build driver is ``magicselector.export.native``; nothing heavy is imported until a command runs."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

TARGET_HELP = ("host: this machine's compiler, x86-64-v3 kernels (AVX2/FMA/F16C); arm64: a static "
               "aarch64-linux-musl executable built with zig (the native extra), for `adb push`")


def register(sub: Any) -> None:
    np_ = sub.add_parser("native", help="build and test the native core (C++ on llama.cpp/ggml): a host or a "
                                        "static ARM64 build").add_subparsers(dest="native_command", required=True)
    sp = np_.add_parser("build", help="fetch the pinned sources with pip, build the core, print where the "
                                      "executable and libraries are")
    _add_build_options(sp)
    sp.add_argument("--json", action="store_true", help="print the paths and times as JSON")
    sp.set_defaults(func=cmd_native_build)

    sp = np_.add_parser("test", help="build (if needed), write the parity files the native tests read (embedder "
                                     "vectors, text stages) and run the tests with ctest (ARM64 under qemu)")
    _add_build_options(sp)
    sp.add_argument("--bundle", help="the bundle the tests open (default: the default bundle)")
    sp.add_argument("--data", help="where the parity files go (default: BUILD_DIR/test-data)")
    sp.add_argument("--limit", type=int, default=100, metavar="N",
                    help="queries per development part in the text-parity file (default 100; 500 is the issue's "
                         "full check)")
    sp.add_argument("--fuzz", type=int, default=500, metavar="N", help="fuzz turns in the text-parity file (default 500)")
    sp.add_argument("--reuse-data", action="store_true", help="keep the parity files already in --data (another "
                                                               "target's run wrote them)")
    sp.add_argument("--strict", action="store_true", help="a skipped native test fails the run (CI)")
    sp.set_defaults(func=cmd_native_test)


def _add_build_options(sp: argparse.ArgumentParser) -> None:
    from magicselector.export.native import DEFAULT_ARM_CPU, TARGETS

    sp.add_argument("--target", choices=TARGETS, default="host", help=TARGET_HELP)
    sp.add_argument("--sanitize", action="store_true",
                    help="host only: our code with AddressSanitizer and UndefinedBehaviorSanitizer")
    sp.add_argument("--jobs", type=int, default=None, metavar="N", help="parallel compile jobs (default: CPU count)")
    sp.add_argument("--out", metavar="DIR", help="build folder (default: ~/.cache/magicselector/native/build/TARGET-CHECKOUT, one per checkout)")
    sp.add_argument("--arm-cpu", default=DEFAULT_ARM_CPU, metavar="CPU",
                    help=f"arm64: the CPU zig compiles for (default {DEFAULT_ARM_CPU}: Armv8.2-A with the dot "
                         "product, phones since about 2018; 'generic' runs on every ARM64 core, Cortex-A53 "
                         "included, with slower int8 kernels)")


def _log(msg: str) -> None:
    print(f"[native] {msg}", file=sys.stderr, flush=True)


def _build(args: argparse.Namespace, **tests: Any):
    from magicselector.export.native import build_native

    return build_native(args.target, out=args.out, sanitize=args.sanitize, jobs=args.jobs, arm_cpu=args.arm_cpu,
                        log=_log, **tests)


def cmd_native_build(args: argparse.Namespace) -> int:
    build = _build(args)
    info = build.to_dict()
    if build.executable is not None:
        info["executable_bytes"] = build.executable.stat().st_size
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"built {build.target}{' (sanitizers)' if build.sanitize else ''} in {build.seconds:.0f} s: {build.build_dir}")
    print(f"  executable: {build.executable or '- (native/cli/main.cpp is not there yet)'}")
    for lib in build.libraries:
        print(f"  library:    {lib}")
    print(f"  tests:      {len(build.tests)} (magicselector native test --target {build.target}"
          f"{' --sanitize' if build.sanitize else ''})")
    return 0


def write_test_data(folder: Path, bundle: Path, *, limit: int, fuzz: int) -> dict[str, Any]:
    """The files the native tests compare against, written by the Python runtime into ``folder``."""
    from magicselector.bench.native_text_parity import PARITY_FILE, write_parity
    from magicselector.export.native import write_embed_cases
    from magicselector.export.onnx import ExportError

    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        written["embed"] = str(write_embed_cases(folder, bundle))
    except ExportError as e:  # a bundle without a GGUF: test_embed skips, and --strict fails on that
        _log(f"no embedder cases: {e}")
    with tempfile.TemporaryDirectory(prefix="ms-native-test-") as work:
        written["text"] = write_parity(folder / PARITY_FILE, work=Path(work), limit=limit or None, fuzz=fuzz,
                                       tokenizer_file=bundle / "embedder" / "tokenizer.json", note=_log)
    _log(f"parity files written in {time.perf_counter() - t0:.0f} s: {folder}")
    return written


def cmd_native_test(args: argparse.Namespace) -> int:
    from magicselector.default_bundle import ensure_default_bundle
    from magicselector.export.native import run_native_tests

    from magicselector.export.native import default_build_dir

    bundle = Path(args.bundle) if args.bundle else ensure_default_bundle()
    build_dir = Path(args.out) if args.out else default_build_dir(args.target, args.sanitize)
    data = Path(args.data) if args.data else build_dir / "test-data"
    build = _build(args, test_bundle=bundle, test_data=data)
    if not (args.reuse_data and data.is_dir() and any(data.iterdir())):
        write_test_data(data, bundle, limit=args.limit, fuzz=args.fuzz)
    t0 = time.perf_counter()
    proc = run_native_tests(build, log=_log)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    _log(f"ctest ({build.target}{', sanitizers' if build.sanitize else ''}): {time.perf_counter() - t0:.0f} s")
    if proc.returncode != 0:
        return 1
    skipped = [line.strip() for line in proc.stdout.splitlines() if "***Skipped" in line or "Not Run" in line]
    if args.strict and skipped:
        _log("--strict: skipped tests fail the run:\n  " + "\n  ".join(skipped))
        return 1
    return 0

"""``magicselector release`` (an embedder checkpoint to signed, verified bundles per CPU target and a report against the shipped bundle) and ``magicselector bundle compare A B``.

A release holds the embedder and the learned head (the cross-encoder reranker left the runtime).
Nothing heavy is imported until a command runs: the exporters need the export extra, training a
head the train extra, the native ARM64 check a ``magicselector native build --target arm64``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from magicselector.errors import BundleError, InputError

RELEASE_TARGETS = ("x86-avx2", "x86-vnni", "arm64")
PTE_BUNDLE = "pte"  # the ExecuTorch bundle's folder: XNNPACK INT8 is made for no CPU target
SCHEMA = "magicselector-release/1"


@dataclass(frozen=True)
class ReleaseConfig:
    """One release: which bundles from which models, signed with which key, compared on what."""

    embedder: Path                    # the embedder checkpoint folder (`magicselector train embedder --out`)
    out: Path                         # OUT/bundles/<target>/, OUT/compare.{md,json}, OUT/release.json
    signing_key: Path                 # Ed25519 private key (PEM, `magicselector bundle keygen`)
    targets: tuple[str, ...] = RELEASE_TARGETS
    pte: bool = False                 # also an ExecuTorch .pte bundle
    head: Path | None = None          # a head file (`train head`), or:
    train_head: tuple[Path, ...] = () # train the head on these train parts, on this embedder's rankings
    catalog: Path | None = None       # None: the phone catalog the default bundle holds
    against: Path | None = None       # None: the shipped default bundle for this CPU
    shared_data: Path | None = None   # the public sets for the development parts (bench quality's)
    limit: int | None = 200           # seeded queries per development part
    latency: bool = True              # host latency and RSS in the report
    peers: bool = True                # the peers' reference rows in the report (bench quality's)
    release: int | None = None        # None: the Unix time, the same for every bundle of the release
    native_arm64: Path | None = None  # None: the checkout's `native build --target arm64` executable, if built
    gguf: bool | None = None          # the GGUF embedder the native core runs (None: where llama-cpp-python is)
    parts: tuple[tuple[str, Path], ...] = field(default=())  # development parts (tests); () = bench quality's

    def __post_init__(self) -> None:
        unknown = [t for t in self.targets if t not in RELEASE_TARGETS]
        if unknown or not self.targets:
            raise InputError(f"--targets: {', '.join(unknown) or 'none given'}; choose from "
                             f"{', '.join(RELEASE_TARGETS)}")
        if self.head is not None and self.train_head:
            raise InputError("--head and --train-head: give one (a head file, or the train parts to fit one on)")
        if not Path(self.embedder).is_dir():
            raise InputError(f"--embedder {self.embedder}: not a checkpoint folder (a release starts from a "
                             "trained checkpoint: magicselector train embedder --out DIR)")
        if not Path(self.signing_key).is_file():
            raise InputError(f"--signing-key {self.signing_key}: no such key file (magicselector bundle keygen)")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"--limit must be >= 1, got {self.limit}")
        if self.release is not None and self.release < 1:
            raise InputError(f"--release must be a positive integer, got {self.release}")


def _native_arm64(config: ReleaseConfig, log: Callable[[str], None] = print) -> tuple[Path | None, str | None]:
    """(the ARM64 executable and the qemu that runs it, or None and why the check is skipped)."""
    qemu = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
    exe = config.native_arm64
    if exe is None:
        try:
            from magicselector.export.native import default_build_dir

            exe = default_build_dir("arm64") / "bin" / "magicselector-native"
        except Exception as e:  # no native sources in this install
            return None, f"no native sources to find an ARM64 build by ({e})"
    if not exe.is_file():
        return None, (f"no native ARM64 build at {exe} (build one with `magicselector native build --target arm64`, "
                      "or pass --native-arm64 BIN)")
    if config.native_arm64 is None:  # the cache's build: rebuilt where the checkout's sources are newer
        from magicselector.export.native import current_build

        try:
            exe = current_build("arm64", log=log)
        except Exception as e:  # noqa: BLE001 - no toolchain here: the check is skipped, with the reason
            return None, f"the ARM64 build at {exe} is older than the native sources and could not be rebuilt ({e})"
    if qemu is None:
        return None, "no qemu-aarch64(-static) on PATH to run the ARM64 build (apt-get install qemu-user-static)"
    return exe, qemu


def arm64_parity(bundle: Path, config: ReleaseConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The native ARM64 build's own check of the bundle (``magicselector-native verify``: its GGUF
    embedder against golden.json's vectors, every golden stage) under qemu; skipped with the reason
    where there is no build, no qemu or no GGUF in the bundle. ``status`` is ``failed`` where the
    native core disagrees with the golden file (``first_mismatch`` names the first stage), which
    fails the release after its report is written."""
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    if not isinstance((manifest.get("embedder") or {}).get("gguf"), dict):
        return {"status": "skipped", "why": "the bundle has no GGUF embedder (llama-cpp-python was not installed "
                                            "at build: pip install 'magicselector[llm]'); the native core runs one"}
    exe, qemu = _native_arm64(config, log)
    if exe is None:
        return {"status": "skipped", "why": qemu}
    t0 = time.perf_counter()
    run = subprocess.run([str(qemu), str(exe), "verify", str(bundle)], capture_output=True, text=True, timeout=1800)
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict) or (run.returncode != 0 and "ok" not in report):
        said = (run.stdout.strip() or run.stderr.strip())[-1500:]
        raise BundleError(f"{bundle}: the native ARM64 build under qemu cannot check the bundle (exit "
                          f"{run.returncode}): {said}")
    return {"status": "passed" if run.returncode == 0 and report.get("ok") else "failed",
            "first_mismatch": report.get("first_mismatch"), "embedder": report.get("embedder"),
            "runner": f"{qemu} {exe}", "seconds": round(time.perf_counter() - t0, 1), "checks": report}


def _trained_head(config: ReleaseConfig, catalog: Any, log: Callable[[str], None]) -> Path:
    """Fit the head on ``config.train_head`` over the rankings of a head-less host bundle of this
    embedder (the head scores how the lists rank a tool, so it is fitted on this embedder's lists)."""
    from magicselector.export.bundle import export_bundle
    from magicselector.train.head import train_head

    base = config.out / "work" / "head-base"
    log("building a head-less host bundle of the embedder to fit the head on its rankings")
    export_bundle(base, embedder=config.embedder, catalog=catalog, target="host", gguf=False, verify=False,
                  log=log, release=1)
    head = config.out / "head.json"
    log(f"training the head on {', '.join(map(str, config.train_head))}")
    train_head(list(config.train_head), head, bundle=base, overwrite=True, log=log)
    shutil.rmtree(config.out / "work")  # the head-less bundle served the fit only
    return head


def run_release(config: ReleaseConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build, sign and verify one bundle per target (and the ``.pte`` one when asked), check the
    ARM64 bundle natively where a build exists, and compare the host's bundle with the shipped one;
    writes ``OUT/release.json`` and ``OUT/compare.md`` / ``.json``, returns the release summary."""
    from magicselector.bundle_check import verify_bundle
    from magicselector.catalog import load_catalog, load_phone_catalog
    from magicselector.export.bundle import export_bundle
    from magicselector.signing import key_fingerprint, load_private_key, verify_bundle_signature
    from magicselector.targets import resolve_target

    from magicselector.bench.bundle_compare import CompareConfig, compare_bundles, write_compare

    from magicselector.export.record import require_export_extra

    t0 = time.perf_counter()
    require_export_extra("release", train=bool(config.train_head))
    public = load_private_key(config.signing_key).public_key()  # a bad key fails before any work
    catalog = load_catalog(config.catalog) if config.catalog is not None else load_phone_catalog()
    release = config.release or int(time.time())
    config.out.mkdir(parents=True, exist_ok=True)
    head = config.head if config.head is not None else (_trained_head(config, catalog, log) if config.train_head
                                                       else None)
    builds = [(t, "onnx", t) for t in config.targets] + ([(PTE_BUNDLE, "pte", "host")] if config.pte else [])
    bundles: dict[str, Any] = {}
    for name, fmt, target in builds:
        out = config.out / "bundles" / name
        log(f"building the {name} bundle ({fmt})")
        started = time.perf_counter()
        manifest = export_bundle(out, embedder=config.embedder, catalog=catalog, fmt=fmt, target=target,
                                 head=head, signing_key=config.signing_key, release=release, gguf=config.gguf,
                                 log=log)
        signature = verify_bundle_signature(out, public)
        checks = verify_bundle(out) if fmt == "onnx" else {"verified": "in a child process at build (ExecuTorch)"}
        bundles[name] = {"path": str(out), "format": fmt, "target": manifest.get("target"),
                         "content_sha256": manifest["content_sha256"], "signature": signature,
                         "verify": checks, "seconds": round(time.perf_counter() - started, 1)}
        if name == "arm64":
            log("ARM64 parity: the native ARM64 build's verify of the bundle under qemu")
            bundles[name]["arm64_native"] = arm64_parity(out, config, log)
    host = resolve_target("host")
    mine = host if host in bundles else next(iter(bundles))
    if mine != host:
        log(f"no {host} bundle in this release: the report compares the {mine} bundle on this {host} host")
    from magicselector.default_bundle import ensure_default_bundle

    against = config.against or ensure_default_bundle(progress=True)
    log(f"comparing {mine} with {against}")
    report = compare_bundles(against, bundles[mine]["path"], sets=list(config.parts) or None,
                             shared_data=config.shared_data,
                             config=CompareConfig(limit=config.limit, latency=config.latency, peers=config.peers),
                             note=log)
    md, js = write_compare(report, config.out / "compare", command=" ".join(["magicselector", *sys.argv[1:]])
                           if sys.argv[1:2] == ["release"] else None)
    summary = {"schema": SCHEMA, "release": release, "embedder": str(config.embedder),
               "head": str(head) if head is not None else None, "key_fingerprint": key_fingerprint(public),
               "bundles": bundles, "compared": {"a": str(against), "b": bundles[mine]["path"], "markdown": str(md),
                                                "json": str(js), "verdicts": {v["metric"]: v["verdict"]
                                                                              for v in report["verdicts"]},
                                                # B against the best peer on the mean (None: --no-peers)
                                                "against_best_peer": None if report["peers"] is None else
                                                {st["metric"]: st["b"]["standing"]
                                                 for st in report["peers"]["standing"]}},
               "seconds": round(time.perf_counter() - t0, 1)}
    (config.out / "release.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    failed = [f"{n}: {b['arm64_native']['first_mismatch']}" for n, b in bundles.items()
              if b.get("arm64_native", {}).get("status") == "failed"]
    if failed:  # written and reported, but not a release: the phone's own runtime disagrees with the golden file
        raise BundleError(f"the native ARM64 check under qemu failed ({'; '.join(failed)}); see "
                          f"{config.out / 'release.json'}")
    return summary


def _log(msg: str) -> None:
    print(f"[release] {msg}", file=sys.stderr, flush=True)


def cmd_release(args: argparse.Namespace) -> int:
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    config = ReleaseConfig(embedder=Path(args.embedder), out=Path(args.out), signing_key=Path(args.signing_key),
                           targets=targets, pte=args.pte, head=Path(args.head) if args.head else None,
                           train_head=tuple(Path(p) for p in args.train_head or ()),
                           catalog=Path(args.catalog) if args.catalog else None,
                           against=Path(args.against) if args.against else None,
                           shared_data=Path(args.shared_data) if args.shared_data else None,
                           limit=args.limit or None, latency=not args.no_latency, peers=not args.no_peers,
                           release=args.release,
                           native_arm64=Path(args.native_arm64) if args.native_arm64 else None)
    summary = run_release(config, log=_log)
    print(json.dumps({k: summary[k] for k in ("release", "key_fingerprint", "compared", "seconds")}
                     | {"bundles": {n: {"path": b["path"], "content_sha256": b["content_sha256"],
                                        "arm64_native": b.get("arm64_native", {}).get("status")}
                                    for n, b in summary["bundles"].items()}}, indent=2))
    return 0


def register(sub: Any) -> None:
    """Add ``release`` to the ``magicselector`` command's subparsers."""
    sp = sub.add_parser("release", help="from an embedder checkpoint: signed, verified bundles per CPU target and a "
                                        "report against the shipped bundle (needs the export extra)")
    sp.add_argument("--embedder", required=True, metavar="CKPT", help="the embedder checkpoint folder "
                                                                      "(magicselector train embedder --out)")
    sp.add_argument("--out", required=True, metavar="DIR", help="OUT/bundles/TARGET/, OUT/compare.md and .json, "
                                                                 "OUT/release.json")
    sp.add_argument("--signing-key", required=True, metavar="KEY", help="Ed25519 private key (PEM, from `bundle "
                                                                         "keygen`) every bundle is signed with")
    sp.add_argument("--targets", default=",".join(RELEASE_TARGETS), metavar="T,T",
                    help=f"CPU targets, comma-separated (default {','.join(RELEASE_TARGETS)})")
    sp.add_argument("--pte", action="store_true", help="also an ExecuTorch bundle (XNNPACK INT8), OUT/bundles/pte")
    head = sp.add_mutually_exclusive_group()
    head.add_argument("--head", metavar="FILE", help="the learned head to ship (head.json of `train head`)")
    head.add_argument("--train-head", nargs="+", metavar="DIR", help="fit the head on these train parts, on the "
                                                                     "new embedder's rankings (needs the train extra)")
    sp.add_argument("--catalog", metavar="PATH", help="the bundles' tools (default: the phone catalog)")
    sp.add_argument("--against", metavar="DIR", help="the bundle to compare with (default: the shipped default "
                                                     "bundle for this CPU)")
    sp.add_argument("--shared-data", metavar="DIR", help="the public sets' folder for the development parts "
                                                         "(as bench quality takes it)")
    sp.add_argument("--limit", type=int, default=200, metavar="N", help="seeded queries per development part "
                                                                       "(default 200; 0: all)")
    sp.add_argument("--no-latency", action="store_true", help="quality only in the report (no latency, no RSS)")
    sp.add_argument("--no-peers", action="store_true", help="no peer rows in the report (the PyPI tool retrievers "
                                                            "bench quality runs as reference rows)")
    sp.add_argument("--release", type=int, metavar="N", help="the release number of every bundle (default: the "
                                                             "Unix time)")
    sp.add_argument("--native-arm64", metavar="BIN", help="the ARM64 magicselector-native for the parity check "
                                                          "under qemu (default: the checkout's arm64 build)")
    sp.set_defaults(func=cmd_release)


def cmd_bundle_compare(args: argparse.Namespace) -> int:
    from magicselector.bench.bundle_compare import CompareConfig, compare_bundles, format_markdown, write_compare

    config = CompareConfig(limit=args.limit or None, threads=args.threads, runs=args.runs,
                           latency=not args.no_latency, peers=not args.no_peers)
    report = compare_bundles(args.a, args.b, shared_data=args.shared_data, config=config,
                             note=lambda m: print(m, file=sys.stderr))
    command = " ".join(["magicselector", *sys.argv[1:]]) if sys.argv[1:3] == ["bundle", "compare"] else None
    if args.out:
        md, js = write_compare(report, args.out, command)
        print(f"wrote {md} and {js}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else format_markdown(report, command))
    return 0


def register_bundle_compare(bp: Any) -> None:
    """Add ``compare`` to the ``magicselector bundle`` subcommands."""
    sp = bp.add_parser("compare", help="two bundles in one run: quality on the development parts, host latency "
                                       "and RSS, a verdict per metric")
    sp.add_argument("a", metavar="A", help="the bundle compared against (e.g. the shipped default)")
    sp.add_argument("b", metavar="B", help="the bundle judged: better / worse / same as A")
    sp.add_argument("--shared-data", metavar="DIR", help="the public sets' folder (as bench quality takes it)")
    sp.add_argument("--limit", type=int, default=200, metavar="N", help="seeded queries per part (default 200; 0: all)")
    sp.add_argument("--threads", type=int, default=1, metavar="N", help="inference threads (default 1)")
    sp.add_argument("--runs", type=int, default=10, metavar="N", help="timed latency passes per bundle (default 10)")
    sp.add_argument("--no-latency", action="store_true", help="quality only")
    sp.add_argument("--no-peers", action="store_true", help="no peer rows (the PyPI tool retrievers bench quality "
                                                            "runs as reference rows; computed once per report)")
    sp.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    sp.add_argument("--out", metavar="PATH", help="also write PATH.md and PATH.json")
    sp.set_defaults(func=cmd_bundle_compare)

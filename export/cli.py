"""``magicselector export bundle``: the deprecated spelling of ``magicselector bundle build
--embedder ... --catalog ...``, and ``run_export_bundle``, the code both spellings run. Parsing
imports nothing heavy; the exporters (torch, transformers, onnx, executorch, llama-cpp-python)
are imported when the command runs.

Registered by ``magicselector.cli.build_parser`` through ``register(subparsers)``; also runnable
alone as ``python -m magicselector.export.cli export bundle ...``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from magicselector.targets import TARGET_CHOICES


def run_export_bundle(*, out: str | Path, embedder: str | Path, catalog: str | Path,
                      reranker: str | Path | None = None, decomposer: str | Path | None = None,
                      fmt: str = "onnx", preset: str | None = None, quant: str = "q8_0",
                      verify: bool = True, signing_key: str | None = None, target: str | None = None,
                      release: int | None = None) -> int:
    """Export every model, check parity, write and verify the bundle (signed with ``signing_key``,
    when given); print a JSON summary."""
    from .bundle import export_bundle

    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[export {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    manifest = export_bundle(out, embedder=embedder, reranker=reranker, decomposer=decomposer,
                             catalog=catalog, fmt=fmt, preset=preset, quant=quant, verify=verify, log=log,
                             signing_key=signing_key, target=target, release=release)
    summary = {"out": str(out), "files": {k: v["size"] for k, v in manifest["files"].items()}}
    for section in ("embedder", "reranker", "decomposer"):
        sec = manifest.get(section)
        if sec:
            summary[section] = {"file": sec["file"], "quantization": sec.get("quantization"),
                                "shapes": sec.get("shapes"), "parity": sec.get("parity")}
    print(json.dumps(summary, indent=2, default=str))
    return 0


def cmd_export_bundle(args: argparse.Namespace) -> int:
    from magicselector.cli_options import warn

    warn("warning: `magicselector export bundle` is deprecated and will be removed in the next release; use "
         "`magicselector bundle build --embedder ... --catalog ... --out DIR` (--format is --model-format there)")
    return run_export_bundle(out=args.out, embedder=args.embedder, catalog=args.catalog, reranker=args.reranker,
                             decomposer=args.decomposer, fmt=args.format, preset=args.preset, quant=args.quant,
                             verify=not args.no_verify, signing_key=args.signing_key, target=args.target,
                             release=None)  # the deprecated spelling takes no --release (bundle build does)


def register(subparsers) -> None:
    """Add ``export bundle`` (deprecated: ``bundle build``) to a ``magicselector`` subparsers object."""
    ep = subparsers.add_parser("export", help="deprecated: use `magicselector bundle build`")
    sub = ep.add_subparsers(dest="export_command", required=True)
    sp = sub.add_parser("bundle", help="deprecated spelling of `magicselector bundle build --embedder ... "
                                       "--catalog ... --out DIR`")
    sp.add_argument("--embedder", required=True, help="embedder: Hugging Face checkpoint folder, or a ready "
                    ".onnx / .pte with tokenizer.json beside it")
    sp.add_argument("--reranker", help="cross-encoder: checkpoint folder, or a ready .onnx / .pte")
    sp.add_argument("--decomposer", help="decomposer: causal-LM checkpoint folder (converted to GGUF), or a .gguf")
    sp.add_argument("--catalog", required=True, help="tool catalog: MCP JSON, tools.jsonl or a folder")
    sp.add_argument("--out", required=True, help="bundle folder to write (appears only when everything passed)")
    sp.add_argument("--preset", help="ONNX INT8 preset: qint8_arm64, qint8_x86, qint8_avx512_vnni, "
                                     "qint8_per_tensor (default: this machine's)")
    sp.add_argument("--target", choices=TARGET_CHOICES, default="host",
                    help="CPU the ONNX INT8 models are quantized for (default: this machine's)")
    sp.add_argument("--format", choices=["onnx", "pte"], default="onnx",
                    help="encoder format: onnx (onnxruntime) or pte (ExecuTorch, XNNPACK INT8)")
    sp.add_argument("--quant", default="q8_0", help="decomposer GGUF quantization: q8_0 (default), q4_k_m, "
                                                    "q4_0, q5_k_m, q6_k, f16, ...")
    sp.add_argument("--no-verify", action="store_true", help="skip the final bundle verify")
    sp.add_argument("--signing-key", metavar="KEY", help="sign the bundle with this Ed25519 private key (PEM)")
    sp.set_defaults(func=cmd_export_bundle)


def main(argv: Sequence[str] | None = None) -> int:
    from magicselector.errors import MagicSelectorError

    parser = argparse.ArgumentParser(prog="magicselector")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MagicSelectorError as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

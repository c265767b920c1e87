"""``run_export_bundle``: the code of ``magicselector bundle build --embedder ... --catalog ...``
(``cli/main.py`` parses the flags). Importing it imports nothing heavy; the exporters (torch,
transformers, onnx, executorch, llama-cpp-python) are imported when it runs.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def run_export_bundle(*, out: str | Path, embedder: str | Path, catalog: str | Path,
                      decomposer: str | Path | None = None,
                      fmt: str = "onnx", preset: str | None = None, quant: str = "q8_0",
                      verify: bool = True, signing_key: str | None = None, target: str | None = None,
                      release: int | None = None, head: str | Path | None = None) -> int:
    """Export every model, check parity, write and verify the bundle (signed with ``signing_key``,
    when given); print a JSON summary."""
    from .bundle import export_bundle

    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[export {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    manifest = export_bundle(out, embedder=embedder, decomposer=decomposer,
                             catalog=catalog, fmt=fmt, preset=preset, quant=quant, verify=verify, log=log,
                             signing_key=signing_key, target=target, release=release, head=head)
    summary = {"out": str(out), "files": {k: v["size"] for k, v in manifest["files"].items()}}
    summary["content_sha256"] = manifest["content_sha256"]
    for section in ("embedder", "decomposer"):
        sec = manifest.get(section)
        if sec:
            summary[section] = {"file": sec["file"], "quantization": sec.get("quantization"),
                                "shapes": sec.get("shapes"), "parity": sec.get("parity"),
                                "record": "yes" if sec.get("record") else sec.get("record_reason")}
    head = manifest.get("head")  # None: the bundle has no learned head
    summary["head"] = {k: v for k, v in head.items() if k != "record"} if head else None
    print(json.dumps(summary, indent=2, default=str))
    return 0

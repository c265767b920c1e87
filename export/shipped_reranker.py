"""The reranker folder the package ships (``runtime/models/reranker``): a cross-encoder checkpoint as
one INT8 ONNX per distinct quantization of the CPU targets, its tokenizer and ``reranker.json``.

Regenerate it from a ``magicselector train reranker`` checkpoint with
``python3 -m magicselector.export.shipped_reranker --checkpoint CKPT --out runtime/models/reranker``
(needs the export extra); ``tools/quantization_parity.py --role reranker`` then adds the per-target
parity. ``--apply-graph-passes`` rewrites the INT8 files of an existing folder with the cost passes
of ``graph_passes`` (a folder exported before them) and records each file's agreement with its source.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from magicselector.bundle import SHIPPED_RERANKER_DIR
from magicselector.bundle_writer import PROBE_QUERIES
from magicselector.catalog import load_phone_catalog
from magicselector.files import sha256_file
from magicselector.stages.rerank import RERANKER_META
from magicselector.targets import TARGETS

from .bundle import MIN_RERANKER_SPEARMAN, checked_reranker_parity, rerank_probe_groups
from .onnx import ExportError, checkpoint_pair_window, export_encoder_onnx
from .shipped_embedder import (_kept_parity, _read_meta, _weights_file, apply_passes_command, install_files,
                               quantize_per_target, rewrite_folder_files, target_map, training_summary)

COMMAND = "python3 -m magicselector.export.shipped_reranker"


def export_shipped_reranker(checkpoint: str | Path, out: str | Path = SHIPPED_RERANKER_DIR,
                            targets: Sequence[str] = tuple(TARGETS), *,
                            min_spearman: float = MIN_RERANKER_SPEARMAN, command: str | None = None,
                            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Export a cross-encoder checkpoint to FP32 ONNX once, quantize it once per distinct
    quantization that ``targets`` need, check each INT8 file against the PyTorch model on the
    probe pairs ``export_reranker`` uses (a file below ``min_spearman`` stops the export) and write
    the folder (model files, ``tokenizer.json``, ``reranker.json``); returns ``reranker.json``'s
    content. Per-target parity from an earlier run is kept while the files it measured are unchanged."""
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise ExportError(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
    checkpoint, out = Path(checkpoint), Path(out)
    if not checkpoint.is_dir():
        raise ExportError(f"{checkpoint}: no such reranker checkpoint folder")
    window = checkpoint_pair_window(checkpoint)
    pairs = [(q, t) for q, texts in rerank_probe_groups(load_phone_catalog()).items() for t in texts]
    previous = _read_meta(out, RERANKER_META)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="magicselector-reranker-") as work:
        work = Path(work)
        log(f"exporting {checkpoint.name} to ONNX (FP32)")
        fp32 = export_encoder_onnx(checkpoint, work / "model.fp32.onnx", kind="reranker")
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        weights = _weights_file(checkpoint)
        def check(name: str, target: str) -> dict[str, Any]:
            return checked_reranker_parity(checkpoint, work / name, pairs, window["max_length"], min_spearman,
                                           f"{name} ({target})", log)

        files = quantize_per_target(fp32.output, work, targets, check, log)
        install_files(work, out, files, checkpoint / "tokenizer.json")
        meta = {
            "architecture": config.get("model_type"), "layers": int(config.get("num_hidden_layers", 0)),
            "format": "onnx", "shapes": "dynamic", **window, **fp32.extra,
            "source": {"checkpoint": checkpoint.name, "weights_file": weights.name,
                       "weights_sha256": sha256_file(weights), "fp32_onnx_size_bytes": fp32.size_bytes,
                       **training_summary(checkpoint)},
            "targets": target_map(files),
            "files": files,
            "tokenizer": "tokenizer.json",
            "command": command or f"{COMMAND} --checkpoint {shlex.quote(str(checkpoint))} "
                                  f"--out {shlex.quote(str(out))}"
                                  + (f" --target {' '.join(targets)}" if list(targets) != list(TARGETS) else ""),
            "export_seconds": round(time.perf_counter() - t0, 1),
        }
        kept = _kept_parity(previous, files)
        if kept:
            meta["parity_by_target"] = kept
        (out / RERANKER_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    sizes = ", ".join(f"{name} ({entry['size_bytes'] / 1e6:.1f} MB)" for name, entry in files.items())
    log(f"wrote {out}: {sizes}")
    return meta


def apply_graph_passes_to_folder(folder: str | Path = SHIPPED_RERANKER_DIR,
                                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Rewrite every INT8 file of a reranker folder with ``onnx.apply_reranker_passes`` (no
    checkpoint needed; ``shipped_embedder.rewrite_folder_files`` records what changed). The
    agreement with the source: their scores on every probe query of the phone catalog, 24 lists of
    20 tools (``compare_rerank_scores``)."""
    from magicselector.stages.rerank import CrossEncoder, PairTokenizer, pair_window

    from .onnx import apply_reranker_passes, compare_rerank_scores

    folder = Path(folder)
    meta = _read_meta(folder, RERANKER_META)
    if not meta or not isinstance(meta.get("files"), dict):
        raise ExportError(f"{folder}: not a per-target reranker folder (no 'files' in {RERANKER_META})")
    groups = rerank_probe_groups(load_phone_catalog(), PROBE_QUERIES, per_query=20)
    tokenizer = PairTokenizer(folder / "tokenizer.json", **pair_window(meta))

    def agreement(source: Path, rewritten: Path) -> dict[str, Any]:
        before, after = (CrossEncoder(m, tokenizer, threads=1) for m in (source, rewritten))
        return {**compare_rerank_scores({q: before.score(q, t) for q, t in groups.items()},
                                        {q: after.score(q, t) for q, t in groups.items()}), "lists": len(groups)}

    return rewrite_folder_files(folder, meta, RERANKER_META, apply_reranker_passes, agreement, log)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="write the INT8 reranker folder the package ships, "
                                                               "one file per quantization of the CPU targets")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="the cross-encoder checkpoint folder (`magicselector train reranker --out`)")
    source.add_argument("--apply-graph-passes", action="store_true",
                        help="rewrite the INT8 files already in --out with the export's graph passes (no checkpoint)")
    parser.add_argument("--out", default=str(SHIPPED_RERANKER_DIR), help="folder to write (default: the package's)")
    parser.add_argument("--target", nargs="+", default=list(TARGETS), choices=list(TARGETS),
                        help="CPU targets to quantize for (default: all; targets that quantize alike share a file)")
    parser.add_argument("--min-spearman", type=float, default=MIN_RERANKER_SPEARMAN,
                        help="parity floor: overall Spearman of each INT8 file against the PyTorch model")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[reranker {time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    command = " ".join([COMMAND, *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    if args.apply_graph_passes:
        return apply_passes_command(apply_graph_passes_to_folder, args.out, log)
    try:
        meta = export_shipped_reranker(args.checkpoint, args.out, args.target, min_spearman=args.min_spearman,
                                       command=command, log=log)
    except ExportError as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, "targets": meta["targets"],
                      "parity": {name: {k: f["parity"][k] for k in ("spearman", "spearman_per_list_mean",
                                                                    "spearman_per_list_min", "top1_agreement")}
                                 for name, f in meta["files"].items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

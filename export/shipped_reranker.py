"""The cross-encoder experiment's export (the runtime carries no reranker: docs/bench/reranker.md): a
checkpoint to an INT8 ``.onnx`` / ``.pte`` reranker with its parity (``export_reranker``), reranker
folders (``save_reranker_dir``, ``reranker_from_folder``) and the experiment's folder
(``bench/experiments/reranker``, ``EXPERIMENT_RERANKER_DIR``): one INT8 ONNX per distinct
quantization of the CPU targets, its tokenizer and ``reranker.json``.

Regenerate that folder from a ``magicselector train reranker`` checkpoint with
``python3 -m magicselector.export.shipped_reranker --checkpoint CKPT`` (needs the export extra);
``tools/quantization_parity.py --role reranker`` then adds the per-target parity.
``--apply-graph-passes`` rewrites the INT8 files of an existing folder with the cost passes of
``graph_passes`` (a folder exported before them) and records each file's agreement with its source.
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from magicselector.bundle_writer import PROBE_QUERIES
from magicselector.catalog import load_phone_catalog
from magicselector.data.cross_encoder import (EXPERIMENT_RERANKER_DIR, RERANKER_META, read_reranker_meta,
                                              rerank_probe_groups, reranker_model_file)
from magicselector.errors import BundleError
from magicselector.files import sha256_file
from magicselector.targets import TARGETS, resolve_target

from .bundle import _prebuilt, _tokenizer_next_to, quantization_for
from .onnx import ExportError, checkpoint_pair_window, export_encoder_onnx, quantize_onnx_int8
from .shipped_embedder import (_kept_parity, _read_meta, _weights_file, apply_passes_command, install_files,
                               quantize_per_target, rewrite_folder_files, target_map, training_summary)

MIN_RERANKER_SPEARMAN = 0.9  # parity floor (overall Spearman vs PyTorch FP32) for an exported reranker
COMMAND = "python3 -m magicselector.export.shipped_reranker"


# what a per-target reranker folder's metadata says of the model as a whole, copied into the meta
_RERANKER_MODEL_FIELDS = ("architecture", "layers", "format", "shapes", "max_length", "truncation", "min_tool_tokens")


def reranker_from_folder(target: str | None = None, folder: str | Path = EXPERIMENT_RERANKER_DIR
                         ) -> dict[str, Any] | None:
    """A reranker folder's model for ``target`` (``host`` or None: this CPU's) as ``export_reranker``
    returns it: ``{"file", "tokenizer", "meta"}``, the meta recording the target its file was
    quantized for; None where the folder holds no reranker (an installed wheel has no experiment
    folder). A folder of one ``model.onnx`` (no ``targets`` in ``reranker.json``) gives that file
    whatever the target."""
    folder = Path(folder)
    if not (folder / RERANKER_META).is_file():
        return None
    info = read_reranker_meta(folder)
    model = reranker_model_file(folder, info, target)
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise BundleError(f"{tokenizer}: the reranker folder lacks its tokenizer")
    if info.get("targets") is None:  # one file: the target it records, else the one its preset is for
        preset = (info.get("quantization") or {}).get("preset")
        made_for = next((name for name, spec in TARGETS.items() if spec.preset == preset), None)
        return {"file": str(model), "tokenizer": str(tokenizer), "meta": {"target": made_for, **info}}
    target = resolve_target(target)
    file_info = (info.get("files") or {}).get(model.name)
    if not isinstance(file_info, dict):
        raise BundleError(f"{folder / RERANKER_META}: 'files' does not describe {model.name}")
    meta = {k: info[k] for k in _RERANKER_MODEL_FIELDS if k in info}
    meta.update({
        "target": target,
        "quantization": {**file_info["quantization"], "preset": TARGETS[target].preset, "target": target},
        "parity": file_info["parity"], "size_bytes": int(file_info["size_bytes"]),
        "fp32_size_bytes": int(info["source"]["fp32_onnx_size_bytes"]), "source": info["source"],
    })
    on_target = (info.get("parity_by_target") or {}).get(target)
    if on_target:
        meta["parity_on_target"] = on_target
    return {"file": str(model), "tokenizer": str(tokenizer), "meta": meta}


def checked_reranker_parity(checkpoint: str | Path, model: str | Path, pairs: Sequence[tuple[str, str]],
                            max_length: int, min_spearman: float = MIN_RERANKER_SPEARMAN, what: str = "onnx",
                            log: Callable[[str], None] = print) -> dict[str, Any]:
    """The ``parity`` of an exported reranker's metadata: ``model`` against its PyTorch checkpoint
    on the probe ``pairs`` (``reranker_parity``); an overall Spearman below ``min_spearman`` stops
    the export."""
    from .onnx import reranker_parity

    log(f"reranker parity of {Path(model).name} against the PyTorch model on {len(pairs)} pairs")
    parity = reranker_parity(checkpoint, model, pairs, max_length=max_length)
    parity["probe_pairs_from"] = "catalog tools x probe queries"
    if parity["spearman"] < min_spearman:
        raise ExportError(f"{what} INT8 reranker parity too low: Spearman {parity['spearman']:.3f} < {min_spearman} "
                          f"(top-1 agreement {parity['top1_agreement']:.2f}); try another --preset (per-channel "
                          "vs per-tensor), static QDQ (quantize_onnx_static) or ship the reranker in FP32")
    return {"against": "pytorch-fp32", "min_spearman": min_spearman, **parity}


def export_reranker(source: str | Path, workdir: str | Path, fmt: str = "onnx", preset: str | None = None,
                    groups: dict[str, list[str]] | None = None, max_length: int | None = None,
                    min_spearman: float = MIN_RERANKER_SPEARMAN, log: Callable[[str], None] = print,
                    target: str | None = None) -> dict[str, Any]:
    """Cross-encoder checkpoint (or a ready .onnx/.pte, or a reranker folder) -> INT8 reranker
    with a parity report: ``{"file", "tokenizer", "meta"}``. The pair window (max_length,
    truncation) is the one the checkpoint was trained with (its ``train_config.json``);
    ``max_length`` overrides it. Parity below ``min_spearman`` stops the export. ONNX is
    quantized for ``target`` unless ``preset`` says otherwise (``quantization_for``); from a
    reranker folder of one file per target, that target's file is taken."""
    source, workdir = Path(source), Path(workdir)
    preset, made_for = quantization_for(target, preset)
    if source.is_dir() and (source / RERANKER_META).is_file():  # an exported reranker folder
        if fmt == "onnx":
            found = reranker_from_folder(made_for, source)
            assert found is not None  # the folder has its reranker.json
            return found
        meta = json.loads((source / RERANKER_META).read_text(encoding="utf-8"))
        model = source / "model.pte"
        if not model.is_file():
            raise ExportError(f"{source}: the reranker folder has no {model.name}")
        return {"file": str(model), "tokenizer": str(source / "tokenizer.json"), "meta": meta}
    if source.is_file():
        _prebuilt(source, fmt, "reranker")
        return {"file": str(source), "tokenizer": str(_tokenizer_next_to(source)),
                "meta": {"max_length": max_length or 96, "format": fmt, "quantization": {"type": "prebuilt"},
                         "parity": {"against": "none (prebuilt model)"}, "size_bytes": source.stat().st_size}}
    if not source.is_dir():
        raise ExportError(f"{source}: no such reranker checkpoint or model file")
    pairs = [(q, t) for q, texts in (groups or {}).items() for t in texts]
    if not pairs:
        raise ExportError("reranker parity needs probe (query, tool text) pairs; pass a non-empty catalog")
    window = checkpoint_pair_window(source, max_length)
    max_length = window["max_length"]
    workdir.mkdir(parents=True, exist_ok=True)
    if fmt == "onnx":
        log(f"exporting reranker {source.name} to ONNX (FP32)")
        fp32 = export_encoder_onnx(source, workdir / "reranker.fp32.onnx", kind="reranker")
        log(f"quantizing the reranker to INT8 ({preset})")
        q = quantize_onnx_int8(fp32.output, workdir / "reranker.int8.onnx", preset)
        model, quant = q.output, {"type": "dynamic-int8", **q.extra}
        sizes = {"fp32_size_bytes": fp32.size_bytes, "size_bytes": q.size_bytes, **fp32.extra}
        seconds, shapes = fp32.seconds + q.seconds, {"shapes": "dynamic"}
    else:
        from .executorch import export_encoder_pte

        log(f"exporting reranker {source.name} to ExecuTorch (XNNPACK, INT8)")
        rep = export_encoder_pte(source, workdir / "reranker.int8.pte", kind="reranker", quantize="int8",
                                 max_length=max_length, calibration_texts=pairs[:8])
        model, quant = rep.output, {"type": "pt2e-int8", "scheme": rep.extra.get("scheme")}
        sizes, seconds = {"size_bytes": rep.size_bytes}, rep.seconds
        shapes = {"shapes": rep.shapes, "max_batch": rep.max_batch, "backend": "xnnpack"}
    parity = checked_reranker_parity(source, model, pairs, max_length, min_spearman, fmt, log)
    config = json.loads((source / "config.json").read_text())
    return {"file": model, "tokenizer": str(source / "tokenizer.json"),
            "meta": {"architecture": config.get("model_type"), "layers": int(config.get("num_hidden_layers", 0)),
                     "format": fmt, **window, "quantization": quant, **shapes, "parity": parity,
                     "target": made_for if fmt == "onnx" else None,  # ExecuTorch INT8 is made for no CPU target
                     **sizes, "export_seconds": round(seconds, 2)}}


def save_reranker_dir(exported: dict[str, Any], out: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write an exported reranker (``export_reranker``'s result) as a reranker folder:
    ``model.onnx`` (or ``model.pte``), ``tokenizer.json`` and ``reranker.json`` (its metadata,
    pair window and parity), the form ``CrossEncoder.from_dir`` loads."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(exported["file"])
    model = out / ("model.pte" if src.suffix == ".pte" else "model.onnx")
    if src.resolve() != model.resolve():
        shutil.copy2(src, model)
    tok = Path(exported["tokenizer"])
    if tok.resolve() != (out / "tokenizer.json").resolve():
        shutil.copy2(tok, out / "tokenizer.json")
    meta = {**exported.get("meta", {}), **(extra or {})}
    meta["size_bytes"] = model.stat().st_size
    (out / RERANKER_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def export_shipped_reranker(checkpoint: str | Path, out: str | Path = EXPERIMENT_RERANKER_DIR,
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


def apply_graph_passes_to_folder(folder: str | Path = EXPERIMENT_RERANKER_DIR,
                                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Rewrite every INT8 file of a reranker folder with ``onnx.apply_reranker_passes`` (no
    checkpoint needed; ``shipped_embedder.rewrite_folder_files`` records what changed). The
    agreement with the source: their scores on every probe query of the phone catalog, 24 lists of
    20 tools (``compare_rerank_scores``)."""
    from magicselector.data.cross_encoder import CrossEncoder, PairTokenizer, pair_window

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
    parser = argparse.ArgumentParser(prog=COMMAND, description="write the cross-encoder experiment's INT8 reranker "
                                                               "folder, one file per quantization of the CPU targets")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="the cross-encoder checkpoint folder (`magicselector train reranker --out`)")
    source.add_argument("--apply-graph-passes", action="store_true",
                        help="rewrite the INT8 files already in --out with the export's graph passes (no checkpoint)")
    parser.add_argument("--out", default=str(EXPERIMENT_RERANKER_DIR),
                        help="folder to write (default: the experiment's, bench/experiments/reranker)")
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

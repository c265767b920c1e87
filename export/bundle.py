"""Bundles from checkpoints: every model exported and checked, then written by ``magicselector.bundle_writer``."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from magicselector.bundle_writer import PROBE_QUERIES, build_bundle  # noqa: F401  (re-exported)
from magicselector.catalog import Catalog, load_phone_catalog, tool_text
from magicselector.default_bundle import shipped_embedder
from magicselector.stages.embed import TextEmbedder, TextTokenizer
from magicselector.targets import TARGETS, resolve_target

from .onnx import (ExportError, apply_embedder_passes, embedder_parity, export_encoder_onnx, get_preset, host_preset,
                   quantize_onnx_int8)

MIN_EMBEDDER_COSINE = 0.97  # parity floor: below this the INT8 model is not shipped


def export_embedder(checkpoint: str | Path, workdir: str | Path, preset: str | None = None,
                    probe_texts: Sequence[str] = (), log: Callable[[str], None] = print) -> dict[str, Any]:
    """Checkpoint -> FP32 ONNX -> INT8 ONNX, with a parity report. Returns the embedder manifest section."""
    checkpoint, workdir = Path(checkpoint), Path(workdir)
    log(f"exporting {checkpoint.name} to ONNX (FP32)")
    fp32 = export_encoder_onnx(checkpoint, workdir / "model.fp32.onnx", kind="embedder")
    log(f"quantizing to INT8 ({preset or host_preset()})")
    q = quantize_onnx_int8(workdir / "model.fp32.onnx", workdir / "model.int8.onnx", preset)
    rewritten = apply_embedder_passes(workdir / "model.int8.onnx")
    log(f"parity against the PyTorch model on {len(probe_texts)} probes")
    parity = embedder_parity(checkpoint, workdir / "model.int8.onnx", list(probe_texts))
    if parity["min_cosine"] < MIN_EMBEDDER_COSINE:
        raise ExportError(f"INT8 embedder parity too low: worst cosine {parity['min_cosine']:.4f} < "
                          f"{MIN_EMBEDDER_COSINE}; try another preset (e.g. qint8_per_tensor vs per-channel) "
                          "or ship FP32")
    config = json.loads((checkpoint / "config.json").read_text())
    return {
        "onnx": str(workdir / "model.int8.onnx"),
        "meta": {"dim": int(config["hidden_size"]), "architecture": config.get("model_type"),
                 "layers": int(config.get("num_hidden_layers", 0)),
                 "quantization": {"type": "dynamic-int8", **q.extra}, **rewritten,
                 "parity": {"against": "pytorch-fp32", **parity},
                 "fp32_size_bytes": fp32.size_bytes, "size_bytes": (workdir / "model.int8.onnx").stat().st_size,
                 "export_seconds": round(fp32.seconds + q.seconds, 2)},
    }


def quantization_for(target: str | None, preset: str | None) -> tuple[str, str | None]:
    """(INT8 preset, CPU target to record) for a build: ``preset`` wins where given, and the target
    recorded is then the one that preset is for (None for a preset made for no target); otherwise
    the preset of ``target`` (``host`` or None: this CPU)."""
    if preset is None:
        name = resolve_target(target)
        return TARGETS[name].preset, name
    get_preset(preset)
    by_preset = {spec.preset: name for name, spec in TARGETS.items()}
    if target not in (None, "host"):
        name = resolve_target(target)
        if TARGETS[name].reduce_range != get_preset(preset).reduce_range:
            raise ExportError(f"--preset {preset} and --target {name} disagree on reduce_range; give one of them")
        return preset, name
    return preset, by_preset.get(preset)


def build_default_bundle(out: str | Path, progress: bool = True, catalog: Catalog | None = None,
                         preset: str | None = None, target: str | None = None,
                         signing_key: Any = None, release: int | None = None) -> dict[str, Any]:
    """The embedded default: the shipped INT8 embedder for ``target`` over the phone catalog (no
    reranker: the cross-encoder left the bundle). ``signing_key`` signs it before it appears;
    ``release`` as ``build_bundle`` takes it. ``preset`` must be ``target``'s quantization (``host``
    or None: this CPU's): the shipped embedder exists as INT8 per target only. Without torch,
    ``magicselector.default_bundle.build_default_bundle`` builds the same bundle from the shipped models."""
    t0 = time.perf_counter()
    steps = ["add embedder", "index catalog", "write manifest"]

    def log(msg: str) -> None:
        if progress:
            print(f"[bundle {time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    log(f"building the default bundle in {out} ({', '.join(steps)}); this happens once")
    catalog = catalog or load_phone_catalog()
    preset, target = quantization_for(target, preset)
    if target is None:
        # the shipped embedder is a checkpoint trained here, shipped as INT8 per target only
        raise ExportError(f"--preset {preset} is not a CPU target's quantization, and the shipped embedder exists "
                          "only as INT8 per target; build from its checkpoint instead: magicselector bundle build "
                          "--embedder CKPT --catalog PATH --preset P (runtime/models/embedder/MODEL_CARD.md)")
    emb = shipped_embedder(target)
    manifest = build_bundle(out, embedder_onnx=emb["onnx"], tokenizer_file=emb["tokenizer"],
                            catalog=catalog, embedder_meta=emb["meta"], embedder_gguf=emb["gguf"],
                            log=log, target=target, signing_key=signing_key, release=release)
    log("done")
    return manifest


# -- release export: embedder (+ decomposer) in ONNX or ExecuTorch form ----------------------------

FORMATS = ("onnx", "pte")


def _tokenizer_next_to(model: Path) -> Path:
    tok = model.parent / "tokenizer.json"
    if not tok.is_file():
        raise ExportError(f"{model}: no tokenizer.json next to the model; put the tokenizer the model was "
                          "trained with (tokenizer.save_pretrained(dir)) in the same folder")
    return tok


def _prebuilt(model: Path, fmt: str, role: str) -> None:
    if model.suffix not in (".onnx", ".pte"):
        raise ExportError(f"{model}: the {role} must be a Hugging Face checkpoint folder, an .onnx or a .pte file")
    if model.suffix != f".{fmt}":
        raise ExportError(f"{model}: a prebuilt {model.suffix} {role} cannot go into a --format {fmt} bundle; "
                          f"pass the checkpoint folder so it is exported, or use --format {model.suffix[1:]}")


def gguf_available() -> bool:
    """Whether this install can write GGUF (llama-cpp-python, the llm extra, gives the converter's
    version and runs the parity check)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def export_embedder_gguf(checkpoint: str | Path, workdir: str | Path, against: str | Path, tokenizer: str | Path,
                         probe_texts: Sequence[str], max_length: int = 128, quant: str | None = None,
                         log: Callable[[str], None] = print) -> dict[str, Any]:
    """A BERT embedder checkpoint -> GGUF by llama.cpp's converter, checked against ``against`` (the
    bundle's own embedder file) on ``probe_texts``: ``{"file", "meta"}`` as ``build_bundle`` takes
    it. A worst cosine under ``MIN_GGUF_COSINE`` stops the export."""
    from .gguf import EMBEDDER_GGUF_QUANT, MIN_GGUF_COSINE, convert_embedder_checkpoint, embedder_gguf_parity

    quant = quant or EMBEDDER_GGUF_QUANT
    checkpoint, workdir = Path(checkpoint), Path(workdir)
    log(f"converting {checkpoint.name} to GGUF ({quant}) with llama.cpp's converter")
    rep = convert_embedder_checkpoint(checkpoint, workdir / f"embedder.{quant}.gguf", quant)
    log(f"parity of the GGUF against {Path(against).name} on {len(probe_texts)} probes")
    parity = embedder_gguf_parity(rep.output, against, tokenizer, list(probe_texts), max_length=max_length)
    if parity["min_cosine"] < MIN_GGUF_COSINE:
        raise ExportError(f"GGUF embedder parity too low: worst cosine {parity['min_cosine']:.4f} with "
                          f"{Path(against).name} < {MIN_GGUF_COSINE}")
    return {"file": rep.output,
            "meta": {"quantization": quant, "pooling": "mean", "normalize": True, "size_bytes": rep.size_bytes,
                     "from": {"checkpoint_weights_sha256": checkpoint_weights_sha256(checkpoint)},
                     "converter": rep.extra["converter"],
                     "parity": {"against": parity.pop("against"), **parity}}}


def checkpoint_weights_sha256(checkpoint: Path) -> str | None:
    """The checkpoint's weights by their sha256 (a folder's name is not what it holds)."""
    from magicselector.files import sha256_file

    from .record import weights_file

    weights = weights_file(checkpoint)
    return sha256_file(weights) if weights is not None else None


def export_embedder_for(source: str | Path, workdir: str | Path, fmt: str = "onnx", preset: str | None = None,
                        probe_texts: Sequence[str] = (), max_length: int = 128,
                        log: Callable[[str], None] = print, gguf: bool | None = None) -> dict[str, Any]:
    """Checkpoint (or a ready .onnx/.pte with tokenizer.json beside it) -> the bundle's embedder:
    ``{"onnx": model file, "tokenizer": tokenizer.json, "meta": manifest fields, "gguf": the same
    checkpoint as GGUF (``export_embedder_gguf``) or None}``. ``gguf``: True writes it (a
    checkpoint is needed), False does not, None writes it from a checkpoint where llama-cpp-python
    is installed."""
    source, workdir = Path(source), Path(workdir)
    if source.is_file():
        _prebuilt(source, fmt, "embedder")
        tok = _tokenizer_next_to(source)
        if gguf:
            raise ExportError(f"{source}: a GGUF is written from the embedder's checkpoint folder, not from a "
                              "prebuilt model file")
        probe = TextEmbedder(source, TextTokenizer(tok, max_length), dim=0).embed(["dimension probe"])
        return {"onnx": str(source), "tokenizer": str(tok), "gguf": None,
                "meta": {"dim": int(probe.shape[1]), "max_length": max_length, "format": fmt,
                         "quantization": {"type": "prebuilt"}, "parity": {"against": "none (prebuilt model)"},
                         "size_bytes": source.stat().st_size}}
    if not source.is_dir():
        raise ExportError(f"{source}: no such embedder checkpoint or model file")
    emb = _export_embedder_model(source, workdir, fmt, preset, probe_texts, max_length, log)
    if gguf is None:
        gguf = gguf_available()
        if not gguf:
            log("llama-cpp-python is not installed: the bundle gets no GGUF embedder (the native core needs one; "
                "pip install 'magicselector[llm]')")
    emb["gguf"] = export_embedder_gguf(source, workdir, emb["onnx"], emb["tokenizer"], probe_texts, max_length,
                                       log=log) if gguf else None
    return emb


def _export_embedder_model(source: Path, workdir: Path, fmt: str, preset: str | None, probe_texts: Sequence[str],
                           max_length: int, log: Callable[[str], None]) -> dict[str, Any]:
    if fmt == "onnx":
        emb = export_embedder(source, workdir, preset=preset, probe_texts=probe_texts, log=log)
        emb["meta"].update(format="onnx", max_length=max_length)
        return {**emb, "tokenizer": str(source / "tokenizer.json")}
    from .executorch import MIN_PTE_COSINE, export_encoder_pte

    log(f"exporting {source.name} to ExecuTorch (XNNPACK, INT8)")
    rep = export_encoder_pte(source, workdir / "embedder.int8.pte", kind="embedder", quantize="int8",
                             max_length=max_length, calibration_texts=list(probe_texts)[:8])
    log(f"parity against the PyTorch model on {len(probe_texts)} probes")
    parity = embedder_parity(source, rep.output, list(probe_texts), max_length=max_length)
    floor = MIN_PTE_COSINE["int8"]
    if parity["min_cosine"] < floor:
        raise ExportError(f"ExecuTorch INT8 embedder parity too low: worst cosine {parity['min_cosine']:.4f} < "
                          f"{floor}; export FP32 (export_encoder_pte(quantize='fp32')) or use --format onnx")
    config = json.loads((source / "config.json").read_text())
    return {"onnx": rep.output, "tokenizer": str(source / "tokenizer.json"),
            "meta": {"dim": int(config["hidden_size"]), "architecture": config.get("model_type"),
                     "layers": int(config.get("num_hidden_layers", 0)), "format": "pte", "max_length": max_length,
                     "quantization": {"type": "pt2e-int8", "scheme": rep.extra.get("scheme")},
                     "shapes": rep.shapes, "max_batch": rep.max_batch, "backend": "xnnpack",
                     "parity": {"against": "pytorch-fp32", **parity}, "size_bytes": rep.size_bytes,
                     "export_seconds": round(rep.seconds, 2)}}


def export_bundle(out: str | Path, *, embedder: str | Path, catalog: str | Path | Catalog,
                  decomposer: str | Path | None = None,
                  fmt: str = "onnx", preset: str | None = None, quant: str = "q8_0",
                  min_decomposer_first_token: float | None = None, verify: bool = True,
                  log: Callable[[str], None] = print, signing_key: Any = None,
                  target: str | None = None, release: int | None = None, gguf: bool | None = None,
                  head: str | Path | None = None) -> dict[str, Any]:
    """``magicselector bundle build --embedder ...``: export every model, check parity, write and verify the bundle.
    ``head``: a learned-head file as ``magicselector train head`` writes it (``head.json``), checked
    before any export and carried as the bundle's ``head`` section (None: the bundle has no head).
    ONNX models are quantized for ``target`` (``host`` or None: this CPU) unless ``preset`` says otherwise.
    The embedder checkpoint is also written as GGUF for the native core (``gguf``, as
    ``export_embedder_for`` takes it). Each model's training record (``export.record``: the
    checkpoint's ``train_config.json``, the head file's ``meta``) goes into its manifest section as
    ``record`` (None plus ``record_reason`` where there is none) and into a model card in the bundle.

    Every argument is checked before any export work; any failure (parity below its floor,
    unsupported architecture, missing tokenizer, unknown quantization) raises ExportError and
    leaves no output folder behind. With ``signing_key`` (an Ed25519 private key, PEM) the
    manifest is signed (``manifest.sig``, ``magicselector.signing``) before the folder appears."""
    import tempfile

    from magicselector.catalog import load_catalog

    from .record import EMBEDDER_CARD, HEAD_CARD, embedder_record, head_record, model_card

    if signing_key is not None:  # a bad key fails before any export work
        from magicselector.signing import load_private_key

        signing_key = load_private_key(signing_key)

    if fmt not in FORMATS:
        raise ExportError(f"unknown bundle format {fmt!r}; choose one of {list(FORMATS)}")
    preset, quant_target = quantization_for(target, preset)
    if decomposer is not None:
        from .gguf import check_quant_name

        quant = check_quant_name(quant)
    for role, path in (("embedder", embedder), ("decomposer", decomposer)):
        if path is not None and not Path(path).exists():
            raise ExportError(f"{path}: no such {role} checkpoint or model file")
    if head is not None:  # a bad head fails before minutes of export work, as build_bundle would after them
        check_head_file(head)
    cat = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    if len(cat) == 0:
        raise ExportError(f"{catalog}: the catalog holds no tools")
    record, reason, weights_sha256 = embedder_record(Path(embedder))
    hrecord, hreason = head_record(Path(head)) if head is not None else (None, None)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="magicselector-export-") as work:
        work = Path(work)
        # the catalog as the bundle gives it back (parameters in key order), so that the parity probes'
        # tool texts, like the index's, are the same when the bundle is rebuilt from its own catalog.jsonl
        cat.write_jsonl(work / "catalog.jsonl")
        cat = Catalog(list(load_catalog(work / "catalog.jsonl")), source=cat.source)
        probes = PROBE_QUERIES + [tool_text(t) for t in list(cat)[:40]]
        emb = export_embedder_for(embedder, work / "embedder", fmt=fmt, preset=preset, probe_texts=probes, log=log,
                                  gguf=gguf)
        emb["meta"].update(record=record, weights_sha256=weights_sha256)
        if record is None:
            emb["meta"]["record_reason"] = reason
        cards = {EMBEDDER_CARD: model_card("embedder", {"file": "embedder/model." + fmt, **emb["meta"]}, record,
                                           reason)}
        if head is not None:
            cards[HEAD_CARD] = model_card("head", {"file": "head.json"}, hrecord, hreason)
        dec = None
        if decomposer is not None:
            from .gguf import export_decomposer

            dec = export_decomposer(decomposer, work / "decomposer", quant=quant,
                                    min_first_token=min_decomposer_first_token, log=log)

        def check(root: Path) -> None:  # before the signature: what is signed was verified
            if verify:
                from magicselector.bundle_check import verify_bundle

                log("verifying the bundle (hashes, loading, golden vectors)")
                if fmt == "pte":  # ExecuTorch can take the process down: a crash must fail the build, not end it
                    verify_in_child(root, name=str(out))
                else:
                    verify_bundle(root)

        manifest = build_bundle(out, embedder_onnx=emb["onnx"], tokenizer_file=emb["tokenizer"], catalog=cat,
                                embedder_meta=emb["meta"], embedder_gguf=emb["gguf"], decomposer=dec,
                                log=log,
                                extra={"export": {"format": fmt, "preset": preset, "decomposer_quant":
                                                  quant if decomposer is not None else None}},
                                build={"seconds": {"export": round(time.perf_counter() - t0, 1)}},
                                build_check=check, signing_key=signing_key, release=release, head=head,
                                cards=cards, head_meta=None if head is None else
                                {"record": hrecord, **({"record_reason": hreason} if hrecord is None else {})},
                                # a prebuilt or ExecuTorch embedder was not quantized here for any target
                                target=quant_target if emb["meta"].get("quantization", {}).get("type")
                                == "dynamic-int8" else None)
    return manifest


def verify_in_child(root: str | Path, name: str | None = None) -> None:
    """``verify_bundle(root)`` in a child Python process; its failure, or its death by a signal
    (a native crash in a model runtime), raises BundleError naming the bundle (``name``, default ``root``)."""
    import signal
    import subprocess

    from magicselector.errors import BundleError

    code = ("import sys\nfrom magicselector.bundle_check import verify_bundle\nfrom magicselector.errors import "
            "MagicSelectorError\ntry:\n    verify_bundle(sys.argv[1])\nexcept MagicSelectorError as e:\n"
            "    print(e, file=sys.stderr)\n    sys.exit(1)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True)
    if proc.returncode == 0:
        return
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        raise BundleError(f"{name or root}: verifying the bundle crashed the model runtime ({sig}); the bundle was not "
                          "written (rebuild with --model-format onnx, or report the crash)")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    raise BundleError(lines[-1] if lines else f"{root}: bundle verification failed (exit {proc.returncode})")


def check_head_file(path: str | Path) -> None:
    """A learned-head file (``head.json`` of ``magicselector train head``) that the runtime loads;
    else ExportError naming ``--head``."""
    from magicselector.errors import MagicSelectorError
    from magicselector.stages.head import HeadModel

    path = Path(path)
    if not path.is_file():
        raise ExportError(f"--head {path}: no such head file (magicselector train head writes head.json)")
    try:
        HeadModel.from_bytes(path.read_bytes(), str(path))
    except MagicSelectorError as e:
        raise ExportError(f"--head {e}") from None  # the message names the file and the field

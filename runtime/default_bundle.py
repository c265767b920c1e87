"""The default bundle, built from what the package ships: the target's INT8 embedder
(``models/embedder``) and the same embedder as GGUF for the native core, the learned head fitted
on that embedder's rankings (``models/head``) and the phone catalog. No exporter,
no torch: embedding the catalog, the index and the golden vectors are all runtime work.
``ensure_default_bundle`` builds it on first use."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .bundle import DEFAULT_BUNDLE_RECIPE, MANIFEST, default_bundle_dir
from .bundle_writer import build_bundle
from .catalog import Catalog, load_phone_catalog
from .errors import BundleError
from .files import sweep
from .targets import TARGETS, resolve_target

SHIPPED_EMBEDDER_DIR = Path(__file__).parent / "models" / "embedder"  # INT8 ONNX per quantization + model card
EMBEDDER_META = "embedder.json"  # the metadata file of the shipped embedder folder
SHIPPED_HEAD = Path(__file__).parent / "models" / "head" / "head.json"  # train/head.py's fit + model card


def int8_file_name(reduce_range: bool) -> str:
    """The shipped INT8 embedder file for one quantization; targets that quantize alike share it."""
    return "model-int8-reduce-range.onnx" if reduce_range else "model-int8.onnx"


def gguf_file_name(quant: str) -> str:
    """The shipped embedder's GGUF (llama.cpp, one file for every target) at a quantization."""
    return f"model-{quant}.gguf"


def gguf_golden_file_name(gguf_name: str) -> str:
    """The file beside a shipped GGUF holding its own golden vectors (``bundle_writer.gguf_golden_embeddings``)."""
    return gguf_name.removesuffix(".gguf") + ".golden.json"


def shipped_embedder(target: str | None = None, folder: str | Path = SHIPPED_EMBEDDER_DIR) -> dict[str, Any]:
    """The shipped embedder for ``target`` (``host`` or None: this CPU's) as ``build_bundle`` takes it:
    ``{"onnx": model file, "tokenizer": tokenizer.json, "meta": manifest fields, "gguf": the GGUF
    as ``build_bundle`` takes it, or None where the folder records none}``."""
    target = resolve_target(target)
    folder = Path(folder)
    path = folder / EMBEDDER_META
    info = _embedder_info(folder)
    entry = (info.get("targets") or {}).get(target)
    if not isinstance(entry, dict) or entry.get("file") not in (info.get("files") or {}):
        raise BundleError(f"{path}: no INT8 file for target {target!r} (it has "
                          f"{', '.join(sorted(info.get('targets') or {})) or 'none'})")
    name = entry["file"]
    model, tokenizer = folder / name, folder / info.get("tokenizer", "tokenizer.json")
    for p in (model, tokenizer):
        if not p.is_file():
            raise BundleError(f"{p}: listed in {path} but missing from the installed package")
    return {"onnx": str(model), "tokenizer": str(tokenizer), "meta": _embedder_meta(info, name, target),
            "gguf": _shipped_gguf(folder, info)}


def _embedder_info(folder: Path) -> dict[str, Any]:
    """The shipped embedder folder's ``embedder.json``."""
    path = folder / EMBEDDER_META
    try:
        info: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise BundleError(f"{folder}: no shipped embedder ({EMBEDDER_META} is missing); reinstall magicselector "
                          "or regenerate it: python3 -m magicselector.export.shipped_embedder") from None
    except ValueError as e:
        raise BundleError(f"{path}: unreadable embedder metadata ({e})") from None
    return info


def _embedder_meta(info: dict[str, Any], name: str, target: str) -> dict[str, Any]:
    """The bundle manifest's embedder fields for the target's INT8 file ``name``."""
    file_info = info["files"][name]
    meta = {
        "dim": int(info["dim"]), "max_length": int(info.get("max_length", 128)),
        "architecture": info.get("architecture"), "layers": info.get("layers"), "format": "onnx",
        "target": target,
        "quantization": {**file_info["quantization"], "preset": TARGETS[target].preset, "target": target},
        "parity": file_info["parity"],
        "size_bytes": int(file_info["size_bytes"]),
        "fp32_size_bytes": int(info["source"]["fp32_onnx_size_bytes"]),
        "source": info["source"],
    }
    on_target = (info.get("parity_by_target") or {}).get(target)
    if on_target:
        meta["parity_on_target"] = on_target
    return meta


def _shipped_gguf(folder: Path, info: dict[str, Any]) -> dict[str, Any] | None:
    """The folder's GGUF record as ``build_bundle`` takes it (``{"file", "meta"}``), its bytes
    checked against the sha256 that ``embedder.json`` records."""
    from .files import sha256_file

    entry = info.get("gguf")
    if entry is None:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) or "/" in entry["file"]:
        raise BundleError(f"{folder / EMBEDDER_META}: 'gguf' must be an object naming a file of the folder")
    path = folder / entry["file"]
    if not path.is_file():
        raise BundleError(f"{path}: listed in {folder / EMBEDDER_META} but missing from the installed package")
    if sha256_file(path) != entry.get("sha256"):
        raise BundleError(f"{path}: its sha256 is not the one {EMBEDDER_META} records; reinstall magicselector "
                          "or regenerate it: python3 -m magicselector.export.shipped_embedder --gguf")
    meta = {k: entry[k] for k in ("quantization", "pooling", "normalize", "size_bytes", "from", "converter", "parity")
            if k in entry}
    return {"file": str(path), "meta": meta, "golden": _gguf_golden(folder / gguf_golden_file_name(entry["file"]))}


def _gguf_golden(golden_path: Path) -> Any:
    """The golden vectors shipped beside a GGUF."""
    try:
        return json.loads(golden_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BundleError(f"{golden_path}: the GGUF's golden vectors are unreadable ({e}); regenerate them: "
                          "python3 -m magicselector.export.shipped_embedder --gguf-golden") from None


def build_default_bundle(out: str | Path, *, target: str | None = None, catalog: Catalog | None = None,
                         progress: bool = True, log: Callable[[str], None] | None = None,
                         signing_key: Any = None, release: int | None = None) -> dict[str, Any]:
    """Write the default bundle to ``out`` from the shipped artifacts, for ``target`` (``host`` or
    None: this CPU's); returns the manifest. ``catalog`` replaces the phone catalog. With
    ``signing_key`` the manifest is signed before the folder appears; ``release`` as ``build_bundle``
    takes it."""
    t0 = time.perf_counter()
    if log is None:
        def log(msg: str) -> None:
            if progress:
                print(f"[bundle {time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    target = resolve_target(target)
    log(f"building the default bundle for {target} in {out} from the shipped models; this happens once")
    emb = shipped_embedder(target)
    manifest = build_bundle(out, embedder_onnx=emb["onnx"], tokenizer_file=emb["tokenizer"],
                            catalog=catalog or load_phone_catalog(), embedder_meta=emb["meta"],
                            embedder_gguf=emb["gguf"],
                            target=target, log=log, signing_key=signing_key, release=release,
                            head=SHIPPED_HEAD if SHIPPED_HEAD.is_file() else None,
                            extra={"recipe": DEFAULT_BUNDLE_RECIPE, "target_description": TARGETS[target].description})
    log("done")
    return manifest


def ensure_default_bundle(progress: bool = True) -> Path:
    """The default bundle's folder, built on first use for this CPU from the models the package ships."""
    path = default_bundle_dir()
    sweep(path)  # a build killed between the renames of its swap: the old bundle comes back first
    if (path / MANIFEST).is_file():
        return path
    build_default_bundle(path, progress=progress)
    return path

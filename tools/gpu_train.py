"""One bounded training session of the embedder and the decomposer, for a borrowed accelerator.

What it runs is the library's trainers, with settings fixed here so the run can be repeated:

1. ``train_embedder``: InfoNCE, random negatives, then ``--emb-rounds`` rounds of self-distilled
   hard negatives (Algorithm 1), word-embedding table frozen.
2. ``train_decomposer_sft``: SmolLM2-135M-Instruct (from its GGUF), LoRA rank 16, on the runtime's
   prompt -> gold tasks.
3. ``train_decomposer_grpo``: from the merged SFT model, fresh LoRA adapters, the joint reward with
   the product's embedder (the FP32 MiniLM the bundle's INT8 model is exported from) as the
   retriever inside R_cf and as the preference scorer's embedder.

Only what changed comes back (the session's result files are limited in size): the embedder's
weights except the frozen word-embedding table, in FP16, and the two LoRA adapters in FP16, plus a
``meta.tar.gz`` of every log and summary. ``tools/gpu_train_unpack.py`` rebuilds full checkpoints
from them and the same base models. Each stage writes its files as soon as it ends, so a run cut
short still returns the stages it finished.

    python3 tools/gpu_train.py --gguf SmolLM2.gguf --minilm MINILM_DIR --data TRAIN_DIR \\
        --work /tmp/work --out OUT [--device cuda] [--sft-seconds 150 --grpo-seconds 180]

Status: prepared for an accelerator session that was not granted; exercised only on the CPU with
tiny budgets (``--device cpu --emb-queries 300 --sft-steps 2 --sft-batch 2 ...``), and
``gpu_train_unpack.py`` rebuilt those checkpoints within FP16 rounding. The checkpoints measured
in ``docs/bench/training.md`` were trained on the CPU with the ``magicselector train`` commands.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import torch

SPLIT_BYTES = 15_000_000  # result files must stay under 16 MB each


def _save_fp16_chunks(tensors: dict[str, torch.Tensor], out: Path, stem: str) -> list[str]:
    """``tensors`` in FP16 as ``{stem}_0.safetensors``, ``{stem}_1...``, each under SPLIT_BYTES."""
    from safetensors.torch import save_file

    names, chunk, size, i = [], {}, 0, 0
    for k in sorted(tensors):
        t = tensors[k].detach().to("cpu")
        t = (t.to(torch.float16) if t.is_floating_point() else t).contiguous()
        if chunk and size + t.numel() * t.element_size() > SPLIT_BYTES:
            save_file(chunk, str(out / f"{stem}_{i}.safetensors"))
            names.append(f"{stem}_{i}.safetensors")
            chunk, size, i = {}, 0, i + 1
        chunk[k] = t
        size += t.numel() * t.element_size()
    if chunk:
        save_file(chunk, str(out / f"{stem}_{i}.safetensors"))
        names.append(f"{stem}_{i}.safetensors")
    return names


def _fp32_copy(src: Path, dst: Path) -> Path:
    """The MiniLM folder with its weights in FP32 (it may travel in FP16)."""
    from safetensors.torch import load_file, save_file

    if (dst / "model.safetensors").is_file():
        return dst
    shutil.copytree(src, dst, dirs_exist_ok=True)
    weights = load_file(str(src / "model.safetensors"))
    save_file({k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in weights.items()},
              str(dst / "model.safetensors"))
    return dst


def _meta(out: Path, work: Path, record: dict) -> None:
    from magicselector.train.lora import ADAPTER_CONFIG

    (work / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    with tarfile.open(out / "meta.tar.gz", "w:gz") as tar:
        tar.add(work / "run.json", arcname="run.json")
        for stage in ("emb", "sft", "grpo"):
            d = work / stage
            for name in ("train_config.json", "training_log.csv", "samples.jsonl", f"adapter/{ADAPTER_CONFIG}"):
                if (d / name).is_file():
                    tar.add(d / name, arcname=f"{stage}/{name}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--minilm", required=True, type=Path)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--stages", default="emb,sft,grpo")
    ap.add_argument("--emb-queries", type=int, default=20000)
    ap.add_argument("--emb-rounds", type=int, default=2)
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--sft-seconds", type=float, default=150)
    ap.add_argument("--sft-examples", type=int)
    ap.add_argument("--sft-batch", type=int, default=16)
    ap.add_argument("--grpo-micro", type=int, default=32)
    ap.add_argument("--grpo-steps", type=int, default=400)
    ap.add_argument("--grpo-seconds", type=float, default=180)
    ap.add_argument("--grpo-prompts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def _stage_done(args: argparse.Namespace, record: dict, stage: str, entry: dict) -> None:
    record["stages"][stage] = entry
    _meta(args.out, args.work, record)
    print(json.dumps(entry), flush=True)


def _emb_stage(args: argparse.Namespace, emb_base: Path, record: dict) -> None:
    from safetensors.torch import load_file

    from magicselector.train.embedder import EmbedderTrainConfig, train_embedder

    t = time.perf_counter()
    cfg = EmbedderTrainConfig(seed=args.seed, epochs=1, rounds=args.emb_rounds, negatives=7, pool=20,
                              batch_size=64, lr=2e-5, in_batch=True, max_queries=args.emb_queries,
                              base_model=str(emb_base), freeze_embeddings=True, device=args.device,
                              encode_batch_size=256)
    summary = train_embedder([args.data], args.work / "emb", cfg, progress=False, overwrite=True)
    weights = load_file(str(args.work / "emb" / "model.safetensors"))
    changed = {k: v for k, v in weights.items() if not k.endswith("word_embeddings.weight")}
    files = _save_fp16_chunks(changed, args.out, "emb")
    _stage_done(args, record, "emb", {
        "seconds": round(time.perf_counter() - t, 1), "files": files,
        "probe_loss": [summary["probe_loss_before"], summary["probe_loss_after"]],
        "train_retrieval": [summary["train_retrieval_before"], summary["train_retrieval_after"]]})


def _sft_stage(args: argparse.Namespace, base_lm: Path, cuda: bool, record: dict) -> None:
    from safetensors.torch import load_file

    from magicselector.train.decomposer import DecomposerSFTConfig, train_decomposer_sft
    from magicselector.train.lora import ADAPTER_WEIGHTS

    t = time.perf_counter()
    cfg = DecomposerSFTConfig(seed=args.seed, steps=args.sft_steps, batch_size=args.sft_batch, lr=2e-4,
                              warmup_ratio=0.05, max_examples=args.sft_examples, device=args.device, bf16=cuda,
                              lora_rank=16, lora_alpha=32.0, max_seconds=args.sft_seconds)
    summary = train_decomposer_sft(base_lm, [args.data], args.work / "sft", cfg, progress=False, overwrite=True)
    files = _save_fp16_chunks(load_file(str(args.work / "sft" / "adapter" / ADAPTER_WEIGHTS)), args.out, "sft_lora")
    _stage_done(args, record, "sft", {
        "seconds": round(time.perf_counter() - t, 1), "files": files, "counts": summary["counts"],
        "loss": [summary["loss_first_10pct_mean"], summary["loss_last_10pct_mean"]]})


def _grpo_stage(args: argparse.Namespace, emb_base: Path, device, record: dict) -> None:
    from safetensors.torch import load_file

    from magicselector.data.datasets import load_benchmark
    from magicselector.stages.embed import TextTokenizer
    from magicselector.train.decomposer import GRPOConfig, embedding_retriever, train_decomposer_grpo
    from magicselector.train.embedder import embed_texts, load_embedder
    from magicselector.train.lora import ADAPTER_WEIGHTS
    from magicselector.train.rewards import SimilarityScorer

    t = time.perf_counter()
    encoder = load_embedder(emb_base).to(device).eval()
    text_tok = TextTokenizer(emb_base / "tokenizer.json", 128)

    def embed(texts):
        return embed_texts(encoder, text_tok, list(texts), 256)

    retrieve = embedding_retriever(load_benchmark(args.data).catalog, embed, candidates=30)
    cfg = GRPOConfig(seed=args.seed, steps=args.grpo_steps, prompts_per_step=args.grpo_prompts, group_size=8,
                     updates_per_batch=2, lr=2e-5, kl_coef=0.04, micro_batch=args.grpo_micro, device=args.device,
                     lora_rank=16, lora_alpha=32.0, max_seconds=args.grpo_seconds)
    summary = train_decomposer_grpo(args.work / "sft", [args.data], args.work / "grpo", cfg, retrieve=retrieve,
                                    scorer=SimilarityScorer(embed=embed), progress=False, overwrite=True)
    files = _save_fp16_chunks(load_file(str(args.work / "grpo" / "adapter" / ADAPTER_WEIGHTS)), args.out,
                              "grpo_lora")
    _stage_done(args, record, "grpo", {"seconds": round(time.perf_counter() - t, 1), "files": files,
                                       "counts": summary["counts"], "trends": summary["trends"]})


def main() -> int:
    args = _parser().parse_args()
    os.environ.setdefault("MAGICSELECTOR_HOME", str(args.work / "home"))
    from magicselector.train.decomposer import resolve_base_model, torch_device

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = torch_device(args.device)
    cuda = device.type == "cuda"
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stages = set(args.stages.split(","))
    t0 = time.perf_counter()
    record: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "device": str(device),
                    "torch": torch.__version__, "python": platform.python_version(), "stages": {}}
    if cuda:
        record["gpu"] = torch.cuda.get_device_name(0)
    emb_base = _fp32_copy(args.minilm, args.work / "minilm32")
    if "emb" in stages:
        _emb_stage(args, emb_base, record)
    base_lm = resolve_base_model(args.gguf)
    if "sft" in stages:
        _sft_stage(args, base_lm, cuda, record)
    if "grpo" in stages:
        _grpo_stage(args, emb_base, device, record)

    record["seconds"] = round(time.perf_counter() - t0, 1)
    if cuda:
        record["max_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        try:
            record["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.used", "--format=csv"],
                                                  capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            pass
    _meta(args.out, args.work, record)
    print(json.dumps({"seconds": record["seconds"]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

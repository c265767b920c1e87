"""What both decomposer stages (SFT, GRPO) share: the config fields on top of ``TrainConfig``, the
model loading, LoRA and saving, autocast, and the stage summary and finish step.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from magicselector.decompose.prompts import checkpoint_prompt_style
from magicselector.errors import InputError

from .decomposer_data import EXAMPLE_KINDS, PreparedRun, data_summary, parser_agreement
from .decomposer_tokens import PromptTokens, prompt_format
from .toolkit import Processes, quiet_transformers, save_checkpoint
from .training import TrainConfig, check_at_least, finish_run, run_summary


@dataclass(frozen=True)
class DecomposerRunConfig(TrainConfig):
    """The fields both decomposer stages have on top of ``TrainConfig`` (see ``DecomposerSFTConfig``).

    max_examples: a seeded sample of at most this many examples.
    bf16: autocast matrix work to bfloat16 on cuda (the weights and the optimizer stay FP32).
    lora_rank / lora_alpha: 0 trains every weight; r >= 1 trains rank-r adapters (``train/lora.py``).
    max_seconds: stop after the step that passes this wall-clock budget.
    keep_whole_share: the most the public keep-whole examples may be of the run's examples.
    """

    weight_decay: float = 0.0
    max_examples: int | None = None
    bf16: bool = False
    lora_rank: int = 0
    lora_alpha: float = 32.0
    max_seconds: float | None = None
    keep_whole_share: float = 0.2

    def __post_init__(self) -> None:
        need = self._need
        check_at_least(self, need, 1, "max_examples")
        need(0 <= self.keep_whole_share < 1, "keep_whole_share must be in [0, 1)")
        need(self.lora_rank >= 0, "lora_rank must be >= 0 (0: full fine-tuning)")
        need(self.lora_alpha > 0, "lora_alpha must be > 0")
        need(self.max_seconds is None or self.max_seconds > 0, "max_seconds must be > 0")
        super().__post_init__()


def load_lm(path: Path, progress: bool):
    """A causal-LM checkpoint folder's FP32 model and fast tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (path / "config.json").is_file():
        raise InputError(f"{path}: not a Hugging Face checkpoint (no config.json)")
    with quiet_transformers(progress, warnings_too=False):
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(f"{path}: no fast tokenizer (tokenizer.json); the GGUF export needs one")
    return model, tokenizer


def checkpoint_prompt(checkpoint: str | Path) -> str:
    """The prompt style a decomposer checkpoint was trained with (its ``train_config.json``;
    ``few_shot`` when it has none, e.g. an untrained instruction model)."""
    return checkpoint_prompt_style(checkpoint)


def autocast(config, device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bool(config.bf16 and device.type == "cuda"))


def to_device(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def with_lora(model, config):
    """``(peft model, trainable parameters)``: adapters on ``model`` (in place) when
    ``config.lora_rank`` asks for them, else ``(None, all parameters)``."""
    from .lora import add_lora, trainable_parameters

    adapters = add_lora(model, config.lora_rank, config.lora_alpha) if config.lora_rank else None
    return adapters, trainable_parameters(model)


def save_trained(model, adapters, tokenizer, out_dir: Path, progress: bool) -> None:
    """The checkpoint ``export`` takes: with LoRA, ``adapter/`` first, then the merged model."""
    if adapters is not None:
        from .lora import merge_lora, save_adapter

        save_adapter(adapters, out_dir / "adapter")
        model = merge_lora(adapters)
    save_checkpoint(model.to("cpu"), tokenizer, out_dir, progress)


def stage_summary(stage: str, config: Any, base: Any, run: PreparedRun, toks: PromptTokens, procs: Processes,
                  device: torch.device, counts: dict[str, Any], *, before_data: Mapping[str, Any] = {},
                  before_counts: Mapping[str, Any] = {}, config_record: dict[str, Any] | None = None,
                  **after: Any) -> dict[str, Any]:
    """The ``train_config.json`` of a stage: ``run_summary`` with what both stages record (data,
    prompt format, example counts, the parser's agreement with the targets), ``counts`` added to
    the example counts, ``before_data`` / ``before_counts`` / ``after`` fields in their places."""
    examples = run.examples
    return run_summary(
        f"decomposer-{stage}", config, base, procs, device, run.t_start, run.out_dir, stage=stage,
        config_record=config_record, **before_data,
        data=data_summary(run.benches, examples, run.sources),
        seed=config.seed,
        prompt_format=prompt_format(run.dec, toks),
        **before_counts,
        counts={"examples_available": run.available, "examples": len(examples), "skipped_too_long": run.too_long,
                "examples_by_kind": {k: sum(ex.kind == k for ex in examples) for k in EXAMPLE_KINDS}, **counts},
        parser_agreement=parser_agreement(examples, run.dec),
        **after)


def finish_stage(procs: Processes, model, adapters, tokenizer, out_dir: Path, summary: dict[str, Any],
                 progress: bool) -> dict[str, Any]:
    """Rank 0 saves the trained model (``save_trained``) and the run summary; every rank waits for it."""
    return finish_run(procs, out_dir, summary, lambda: save_trained(model, adapters, tokenizer, out_dir, progress))

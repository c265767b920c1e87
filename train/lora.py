"""Low-rank adapters (LoRA, Hu et al. 2021) for the decomposer's causal LM, without the ``peft`` package.

Why: a LoRA run trains and writes a few MB (rank 16 on SmolLM2-135M's seven projections: 4.9M
parameters) instead of the whole model, so a run on a borrowed accelerator can bring its result
back, and the adapter is merged into the base weights before export (``merge_lora``): the GGUF
that ships has no adapter and runs at the base model's speed.

    W x  ->  W x + (alpha / r) * B (A x),   A: r x in (small random), B: out x r (zeros)

so an adapter starts as the identity change. ``add_lora`` freezes everything else.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from magicselector.errors import InputError

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_WEIGHTS = "lora.safetensors"
ADAPTER_CONFIG = "lora.json"


class LoraLinear(nn.Module):
    """``base(x) + scale * (x A^T) B^T`` with ``base`` frozen."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        if rank < 1:
            raise InputError("LoRA rank must be >= 1")
        self.base = base
        self.rank = rank
        self.scale = alpha / rank
        w = base.weight
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, dtype=w.dtype, device=w.device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, dtype=w.dtype, device=w.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear (and peft) initialise A
        for p in self.base.parameters():
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x.to(self.lora_a.dtype) @ self.lora_a.T @ self.lora_b.T).to(x.dtype) * self.scale

    def merged(self) -> nn.Linear:
        """The base layer with the adapter folded into its weight (a new module, same device)."""
        out = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None,
                        device=self.base.weight.device, dtype=self.base.weight.dtype)
        with torch.no_grad():
            delta = (self.lora_b.float() @ self.lora_a.float()) * self.scale
            out.weight.copy_((self.base.weight.float() + delta).to(out.weight.dtype))
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out


def _targets(model: nn.Module, targets: Sequence[str]) -> list[tuple[nn.Module, str, nn.Linear]]:
    found = []
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            if child_name in targets and isinstance(child, nn.Linear):
                found.append((module, child_name, child))
    return found


def add_lora(model: nn.Module, rank: int, alpha: float, targets: Sequence[str] = DEFAULT_TARGETS) -> int:
    """Wrap every ``nn.Linear`` child named in ``targets`` with a ``LoraLinear`` and freeze all other
    parameters. Returns the number of trainable parameters."""
    found = _targets(model, targets)
    if not found:
        raise InputError(f"no linear layer named {list(targets)} in {type(model).__name__}")
    for p in model.parameters():
        p.requires_grad_(False)
    for parent, name, child in found:
        setattr(parent, name, LoraLinear(child, rank, alpha))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def lora_layers(model: nn.Module) -> dict[str, LoraLinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLinear)}


def merge_lora(model: nn.Module) -> nn.Module:
    """Replace every ``LoraLinear`` by its merged ``nn.Linear`` (in place; returns the model)."""
    for name, layer in list(lora_layers(model).items()):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer.merged())
    return model


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors only, by module name: ``<module>.lora_a`` / ``<module>.lora_b``."""
    out = {}
    for name, layer in lora_layers(model).items():
        out[f"{name}.lora_a"] = layer.lora_a.detach().cpu().contiguous()
        out[f"{name}.lora_b"] = layer.lora_b.detach().cpu().contiguous()
    if not out:
        raise InputError("the model has no LoRA layers")
    return out


def save_adapter(model: nn.Module, out_dir: str | Path, rank: int, alpha: float, targets: Sequence[str],
                 dtype: torch.dtype = torch.float32, extra: dict[str, Any] | None = None) -> Path:
    """``lora.safetensors`` (in ``dtype``) and ``lora.json`` (rank, alpha, targets, ``extra``)."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(dtype) for k, v in lora_state_dict(model).items()}, str(out_dir / ADAPTER_WEIGHTS))
    meta = {"rank": rank, "alpha": alpha, "targets": list(targets), "dtype": str(dtype).replace("torch.", ""),
            **(extra or {})}
    (out_dir / ADAPTER_CONFIG).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out_dir


def load_adapter(model: nn.Module, adapter_dir: str | Path) -> nn.Module:
    """Add the adapter of ``adapter_dir`` (``save_adapter``'s files) to ``model`` and load its tensors;
    every adapter tensor must match a wrapped layer."""
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / ADAPTER_CONFIG).is_file() or not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        raise InputError(f"{adapter_dir}: not a LoRA adapter folder ({ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    meta = json.loads((adapter_dir / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    add_lora(model, int(meta["rank"]), float(meta["alpha"]), meta["targets"])
    tensors = load_file(str(adapter_dir / ADAPTER_WEIGHTS))
    layers = lora_layers(model)
    expected = {f"{n}.{p}" for n in layers for p in ("lora_a", "lora_b")}
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise InputError(f"{adapter_dir}: the adapter does not fit this model (missing {missing[:3]}, "
                         f"unexpected {extra[:3]})")
    with torch.no_grad():
        for name, layer in layers.items():
            layer.lora_a.copy_(tensors[f"{name}.lora_a"].to(layer.lora_a.dtype))
            layer.lora_b.copy_(tensors[f"{name}.lora_b"].to(layer.lora_b.dtype))
    return model


def merge_adapter_checkpoint(base_dir: str | Path, adapter_dirs: Sequence[str | Path], out_dir: str | Path,
                             progress: bool = False) -> Path:
    """A Hugging Face causal-LM checkpoint = ``base_dir`` with each adapter merged in turn (SFT's,
    then GRPO's, which was trained on the merged SFT model); the tokenizer is the base's. ``out_dir``
    is written atomically; the adapters' ``lora.json`` files are copied next to it as a record."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from magicselector.bundle import staged_dir

    from .reranker import _save_checkpoint

    base_dir, out_dir = Path(base_dir), Path(out_dir)
    if not (base_dir / "config.json").is_file():
        raise InputError(f"{base_dir}: not a Hugging Face checkpoint (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    for adapter in adapter_dirs:
        load_adapter(model, adapter)
        merge_lora(model)
    with staged_dir(out_dir) as tmp:
        _save_checkpoint(model.eval(), tokenizer, tmp, progress)
        for i, adapter in enumerate(adapter_dirs):
            shutil.copy(Path(adapter) / ADAPTER_CONFIG, tmp / f"adapter{i}_{ADAPTER_CONFIG}")
    return out_dir

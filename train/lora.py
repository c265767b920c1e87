"""Low-rank adapters (LoRA, Hu et al. 2021) for the decomposer's causal LM, through ``peft``: add
them, save and load adapter folders, merge them into the base weights.

Why adapters: a LoRA run trains and writes a few MB (rank 16 on SmolLM2-135M's seven projections:
4.9M parameters) instead of the whole model, so a run on a borrowed accelerator can bring its
result back, and the adapter is merged into the base weights before export: the GGUF that ships
has no adapter and runs at the base model's speed.

    W x  ->  W x + (alpha / r) * B (A x),   A: r x in (Kaiming-uniform), B: out x r (zeros)

so an adapter starts as the identity change; ``add_lora`` freezes everything else. An adapter
folder is ``peft``'s (``adapter_config.json`` + ``adapter_model.safetensors``); folders in
magicselector's own adapter format (``lora.json`` + ``lora.safetensors`` with ``<module>.lora_a`` /
``<module>.lora_b`` tensors) are read too.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from magicselector.errors import InputError

from .toolkit import save_checkpoint

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OWN_CONFIG = "lora.json"
OWN_WEIGHTS = "lora.safetensors"


def _config(rank: int, alpha: float, targets: Sequence[str]):
    from peft import LoraConfig

    if rank < 1:
        raise InputError("LoRA rank must be >= 1")
    return LoraConfig(r=int(rank), lora_alpha=float(alpha), target_modules=list(targets), lora_dropout=0.0,
                      bias="none")


def add_lora(model: nn.Module, rank: int, alpha: float, targets: Sequence[str] = DEFAULT_TARGETS):
    """Adapters on every ``nn.Linear`` named in ``targets``; every other parameter frozen. ``model``
    itself is changed in place (its forward and ``generate`` run through the adapters); the returned
    ``peft`` model saves (``save_adapter``) and merges (``merge_lora``) them."""
    from peft import get_peft_model

    found = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    if not found & set(targets):
        raise InputError(f"no linear layer named {list(targets)} in {type(model).__name__}")
    return get_peft_model(model, _config(rank, alpha, targets))


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def merge_lora(peft_model) -> nn.Module:
    """The base model with every adapter folded into its weights (``merge_and_unload``)."""
    return peft_model.merge_and_unload()


def save_adapter(peft_model, out_dir: str | Path) -> Path:
    """The adapter folder: ``adapter_config.json`` and ``adapter_model.safetensors``."""
    out_dir = Path(out_dir)
    peft_model.save_pretrained(str(out_dir))
    if not (out_dir / ADAPTER_WEIGHTS).is_file():
        raise InputError(f"{out_dir}: peft did not write {ADAPTER_WEIGHTS}")
    return out_dir


def _check_fit(peft_model, keys: set[str], adapter_dir: Path) -> None:
    """The adapter tensors (peft's names, without the adapter name) are exactly the model's."""
    expected = {k.replace(".default.", ".") for k in peft_model.state_dict() if ".lora_A." in k or ".lora_B." in k}
    if keys != expected:
        missing, extra = sorted(expected - keys), sorted(keys - expected)
        raise InputError(f"{adapter_dir}: the adapter does not fit this model (missing {missing[:3]}, "
                         f"unexpected {extra[:3]})")


def _load_own_format(model: nn.Module, adapter_dir: Path):
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    meta = json.loads((adapter_dir / OWN_CONFIG).read_text(encoding="utf-8"))
    peft_model = add_lora(model, int(meta["rank"]), float(meta["alpha"]), meta["targets"])
    state = {}
    for key, value in load_file(str(adapter_dir / OWN_WEIGHTS)).items():
        module, _, kind = key.rpartition(".")
        if kind not in ("lora_a", "lora_b"):
            raise InputError(f"{adapter_dir / OWN_WEIGHTS}: unexpected tensor {key!r}")
        state[f"base_model.model.{module}.lora_{kind[-1].upper()}.weight"] = value
    _check_fit(peft_model, set(state), adapter_dir)
    set_peft_model_state_dict(peft_model, state)
    return peft_model


def load_adapter(model: nn.Module, adapter_dir: str | Path):
    """``model`` with the adapter of ``adapter_dir`` (a peft folder, or magicselector's own format)
    added and loaded; returns the ``peft`` model. Every adapter tensor must match a layer."""
    from peft import LoraConfig, PeftConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    if (adapter_dir / OWN_CONFIG).is_file() and (adapter_dir / OWN_WEIGHTS).is_file():
        return _load_own_format(model, adapter_dir)
    if not (adapter_dir / ADAPTER_CONFIG).is_file() or not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        raise InputError(f"{adapter_dir}: not a LoRA adapter folder ({ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    config = PeftConfig.from_pretrained(str(adapter_dir))
    if not isinstance(config, LoraConfig):
        raise InputError(f"{adapter_dir}: a {type(config).__name__} adapter, not LoRA")
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as e:  # no module of the model matches the adapter's targets
        raise InputError(f"{adapter_dir}: the adapter does not fit this model ({e})") from None
    state = load_file(str(adapter_dir / ADAPTER_WEIGHTS))
    _check_fit(peft_model, set(state), adapter_dir)
    set_peft_model_state_dict(peft_model, state)
    return peft_model


def merge_adapter_checkpoint(base_dir: str | Path, adapter_dirs: Sequence[str | Path], out_dir: str | Path,
                             progress: bool = False) -> Path:
    """A Hugging Face causal-LM checkpoint = ``base_dir`` with each adapter merged in turn (SFT's,
    then GRPO's, which was trained on the merged SFT model); the tokenizer is the base's. ``out_dir``
    is written atomically; each adapter's config file is copied next to it as a record."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from magicselector.files import staged_dir

    base_dir, out_dir = Path(base_dir), Path(out_dir)
    if not (base_dir / "config.json").is_file():
        raise InputError(f"{base_dir}: not a Hugging Face checkpoint (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    for adapter in adapter_dirs:
        model = merge_lora(load_adapter(model, adapter))
    with staged_dir(out_dir) as tmp:
        save_checkpoint(model.eval(), tokenizer, tmp, progress)
        for i, adapter in enumerate(adapter_dirs):
            name = OWN_CONFIG if (Path(adapter) / OWN_CONFIG).is_file() else ADAPTER_CONFIG
            shutil.copy(Path(adapter) / name, tmp / f"adapter{i}_{name}")
    return out_dir

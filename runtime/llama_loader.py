"""Loading a GGUF with llama-cpp-python (imported only here, only when called) and greedy decoding.

Shared by the exporter's parity check and ``bundle verify``. On x86 CPUs with AMX, llama.cpp's AMX
"extra buffer type" segfaults on quantized matmuls in the llama-cpp-python 0.3.36 build used here
(a known llama.cpp issue, ggml_backend_amx_mul_mat), so extra buffer types are off on such hosts;
``MAGICSELECTOR_LLAMA_EXTRA_BUFTS=1`` / ``=0`` overrides. Phones (arm64) keep them (repacked
Q4_0 kernels).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Sequence

from .errors import BundleError

_patch_lock = threading.Lock()


def _extra_bufts_default() -> bool:
    env = os.environ.get("MAGICSELECTOR_LLAMA_EXTRA_BUFTS")
    if env is not None:
        return env.strip() not in ("0", "false", "no", "")
    try:
        return "amx" not in Path("/proc/cpuinfo").read_text()
    except OSError:
        return True


def load_llama(path: str | Path, n_ctx: int = 512, threads: int = 2, extra_bufts: bool | None = None) -> Any:
    """A ``llama_cpp.Llama`` over the GGUF at ``path`` (quiet, seed 0)."""
    try:
        import llama_cpp
        import llama_cpp.llama_cpp as lowlevel
    except ImportError as e:
        raise BundleError(f"loading {path} needs llama-cpp-python: pip install llama-cpp-python ({e})") from None
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"GGUF model not found: {path}")
    use_extra = _extra_bufts_default() if extra_bufts is None else extra_bufts
    if use_extra:
        return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, verbose=False, seed=0)
    # Llama() builds its model params from llama_model_default_params() and loads at once; the
    # field is not one of its arguments, so the defaults are swapped for the call.
    with _patch_lock:
        original = lowlevel.llama_model_default_params

        def defaults():
            params = original()
            params.use_extra_bufts = False
            return params

        lowlevel.llama_model_default_params = defaults
        try:
            return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, verbose=False, seed=0)
        finally:
            lowlevel.llama_model_default_params = original


def greedy(llm: Any, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
    """Greedy continuation (temperature 0, no penalties) of token ids, stopping at end-of-generation."""
    import llama_cpp

    is_eog = getattr(llama_cpp, "llama_vocab_is_eog", None)
    vocab = llama_cpp.llama_model_get_vocab(llm.model) if is_eog is not None else None
    out: list[int] = []
    if max_new_tokens <= 0:
        return out
    for tok in llm.generate(list(prompt_ids), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                            reset=True):
        out.append(int(tok))
        if len(out) >= max_new_tokens or tok == llm.token_eos() or (is_eog is not None and is_eog(vocab, tok)):
            break
    return out

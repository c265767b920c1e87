"""Decomposer (a Hugging Face causal LM) to GGUF for llama.cpp, with parity against PyTorch.

The converter is llama.cpp's own ``convert_hf_to_gguf.py``, taken from the sdist of the
installed llama-cpp-python (so converter and runtime are the same llama.cpp revision): fetched
once with ``pip download`` and unpacked (the script, its ``conversion`` package and ``gguf-py``)
into ``cache_home()/llama.cpp-<version>``. Nothing of llama.cpp is kept in this repository.
Quantization is ``llama_cpp.llama_model_quantize``.
"""
from __future__ import annotations

import ast
import ctypes
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from magicselector.bundle import cache_home, staged_dir
from magicselector.decompose.prompts import checkpoint_prompt_style

from .onnx import ExportError

# name -> llama_cpp.LLAMA_FTYPE_* constant
GGUF_QUANTS: dict[str, str] = {
    "f16": "LLAMA_FTYPE_MOSTLY_F16",
    "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "q5_k_s": "LLAMA_FTYPE_MOSTLY_Q5_K_S",
    "q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0",
    "q5_1": "LLAMA_FTYPE_MOSTLY_Q5_1",
    "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "q4_k_s": "LLAMA_FTYPE_MOSTLY_Q4_K_S",
    "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
    "q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
    "q3_k_m": "LLAMA_FTYPE_MOSTLY_Q3_K_M",
    "q3_k_s": "LLAMA_FTYPE_MOSTLY_Q3_K_S",
    "q3_k_l": "LLAMA_FTYPE_MOSTLY_Q3_K_L",
    "q2_k": "LLAMA_FTYPE_MOSTLY_Q2_K",
}

# Parity floors (share of probe prompts whose first greedy token matches PyTorch's).
MIN_FIRST_TOKEN_AGREEMENT = {"f16": 0.9, "bf16": 0.9, "q8_0": 0.8}
DEFAULT_MIN_FIRST_TOKEN_AGREEMENT = 0.5

PROBE_PROMPTS = [
    "User: turn on bluetooth and play some jazz\nSub-tasks:",
    "User: wake me up at 6:30 and tell me the weather\nSub-tasks:",
    "User: text Sam that I'm running late\nSub-tasks:",
    "User: navigate home and call mom on the way\nSub-tasks:",
    "User: add milk to my shopping list\nSub-tasks:",
    "User: what's on my calendar tomorrow\nSub-tasks:",
]


@dataclass(frozen=True)
class GgufReport:
    source: str
    output: str
    quantization: str
    seconds: float
    size_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def llama_cpp_version() -> str:
    try:
        from importlib.metadata import version

        return version("llama-cpp-python")
    except Exception:
        raise ExportError("GGUF export needs llama-cpp-python (its sdist provides the converter and its "
                          "library the quantizer): pip install llama-cpp-python") from None


def quant_ftype(name: str) -> int:
    """The llama_cpp LLAMA_FTYPE_* value for a quantization name such as "q8_0" or "q4_k_m"."""
    import llama_cpp

    valid = [k for k, v in GGUF_QUANTS.items() if hasattr(llama_cpp, v)]
    key = str(name).lower()
    if key not in valid:
        raise ExportError(f"unknown GGUF quantization {name!r}; choose one of {valid}")
    return int(getattr(llama_cpp, GGUF_QUANTS[key]))


def check_quant_name(name: str) -> str:
    """Validate a quantization name without importing llama_cpp (for argument checks)."""
    key = str(name).lower()
    if key not in GGUF_QUANTS:
        raise ExportError(f"unknown GGUF quantization {name!r}; choose one of {list(GGUF_QUANTS)}")
    return key


# -- the converter ------------------------------------------------------------------------------

_WANTED = ("vendor/llama.cpp/convert_hf_to_gguf.py", "vendor/llama.cpp/conversion/", "vendor/llama.cpp/gguf-py/")


def converter_dir(version: str | None = None, sdist: str | Path | None = None) -> Path:
    """The folder holding llama.cpp's ``convert_hf_to_gguf.py`` for this llama-cpp-python version,
    unpacked from its sdist on first use (``pip download``; ``sdist`` may name a local tarball)."""
    version = version or llama_cpp_version()
    target = cache_home() / f"llama.cpp-{version}"
    if (target / "convert_hf_to_gguf.py").is_file() and (target / ".complete").is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="magicselector-llama-sdist-") as tmp:
        if sdist is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   f"llama-cpp-python=={version}", "-d", tmp, "--quiet"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            found = sorted(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
            if proc.returncode != 0 or not found:
                raise ExportError(f"could not fetch the llama-cpp-python {version} sdist for llama.cpp's converter "
                                  f"({' '.join(cmd)}): {proc.stderr.strip()[-500:]}; pass a local sdist tarball")
            sdist = found[0]
        with staged_dir(target) as root:
            _extract_converter(Path(sdist), root)
            (root / ".complete").write_text(json.dumps({"llama-cpp-python": version, "sdist": Path(sdist).name}))
    return target


def _extract_converter(sdist: Path, root: Path) -> None:
    n = 0
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) != 2 or not member.isfile():
                continue
            rel = parts[1]
            if not any(rel == w or (w.endswith("/") and rel.startswith(w)) for w in _WANTED):
                continue
            rel = rel[len("vendor/llama.cpp/"):]
            if rel.startswith("/") or ".." in Path(rel).parts:
                raise ExportError(f"{sdist}: unsafe path in the archive: {member.name}")
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            assert src is not None
            dest.write_bytes(src.read())
            n += 1
    if not (root / "convert_hf_to_gguf.py").is_file():
        raise ExportError(f"{sdist}: no vendor/llama.cpp/convert_hf_to_gguf.py in this sdist")


def supported_architectures(conv: Path) -> list[str]:
    """The Hugging Face architectures the converter registers (read, not imported)."""
    init = conv / "conversion" / "__init__.py"
    if init.is_file():
        tree = ast.parse(init.read_text(encoding="utf-8"))
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id == "TEXT_MODEL_MAP" and isinstance(node.value, ast.Dict):
                return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    # older single-file converters register with @Model.register("...")
    import re

    text = (conv / "convert_hf_to_gguf.py").read_text(encoding="utf-8")
    return sorted(set(re.findall(r'"([A-Za-z0-9]+ForCausalLM)"', text)))


def check_causal_lm(checkpoint: Path) -> dict[str, Any]:
    if not (checkpoint / "config.json").is_file():
        raise ExportError(f"{checkpoint}: not a Hugging Face checkpoint (no config.json)")
    if not ((checkpoint / "tokenizer.json").is_file() or (checkpoint / "tokenizer.model").is_file()):
        raise ExportError(f"{checkpoint}: the checkpoint has no tokenizer (tokenizer.json or tokenizer.model); "
                          "save it next to the weights with tokenizer.save_pretrained(dir)")
    config = json.loads((checkpoint / "config.json").read_text())
    archs = config.get("architectures") or []
    if not archs or not any(a.endswith("ForCausalLM") for a in archs):
        raise ExportError(f"{checkpoint}: architectures {archs} is not a causal LM; the decomposer must be a "
                          "*ForCausalLM checkpoint (e.g. Qwen2ForCausalLM, LlamaForCausalLM)")
    return config


def convert_hf_to_gguf(checkpoint: str | Path, output: str | Path, outtype: str = "f16",
                       timeout: float = 3600) -> GgufReport:
    """Convert a causal-LM checkpoint to GGUF with llama.cpp's converter (run in a subprocess, so
    its bundled gguf-py never mixes with an installed gguf)."""
    checkpoint, output = Path(checkpoint), Path(output)
    config = check_causal_lm(checkpoint)
    conv = converter_dir()
    supported = supported_architectures(conv)
    arch = [a for a in config.get("architectures", []) if a.endswith("ForCausalLM")][0]
    if supported and arch not in supported:
        raise ExportError(f"{checkpoint}: architecture {arch} is not supported by llama.cpp's converter "
                          f"(llama-cpp-python {llama_cpp_version()}); supported causal LMs include "
                          f"{', '.join(a for a in supported if 'Qwen' in a or 'Llama' in a or 'Phi' in a or 'Gemma' in a)}")
    output.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cmd = [sys.executable, str(conv / "convert_hf_to_gguf.py"), str(checkpoint), "--outfile", str(output),
           "--outtype", outtype]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(conv), str(conv / "gguf-py")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0 or not output.is_file():
        tail = (proc.stderr or proc.stdout).strip()[-800:]
        hint = ""
        if "not supported" in tail or "not recognized" in tail:
            hint = " (the architecture or tokenizer is not supported by this llama.cpp revision)"
        raise ExportError(f"llama.cpp's convert_hf_to_gguf.py failed on {checkpoint}{hint}: {tail}")
    return GgufReport(str(checkpoint), str(output), outtype, time.perf_counter() - t0, output.stat().st_size,
                      extra={"architecture": arch, "converter": f"llama.cpp from llama-cpp-python {llama_cpp_version()}"})


def quantize_gguf(source: str | Path, output: str | Path, quant: str = "q8_0", threads: int = 0) -> GgufReport:
    """Quantize a GGUF (f16/f32) with llama.cpp's quantizer to ``quant`` (see GGUF_QUANTS)."""
    ftype = quant_ftype(quant)
    import llama_cpp

    source, output = Path(source), Path(output)
    if not source.is_file():
        raise ExportError(f"{source}: no such GGUF file to quantize")
    output.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = int(threads)
    t0 = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(output).encode(), ctypes.byref(params))
    if rc != 0 or not output.is_file():
        raise ExportError(f"llama.cpp could not quantize {source} to {quant} (code {rc})")
    return GgufReport(str(source), str(output), quant.lower(), time.perf_counter() - t0, output.stat().st_size,
                      extra={"source_size_bytes": source.stat().st_size})


# -- parity -------------------------------------------------------------------------------------

def load_gguf(path: str | Path, n_ctx: int = 512, threads: int = 2):
    from magicselector.backends.llama import load_llama

    return load_llama(path, n_ctx=n_ctx, threads=threads)


def gguf_greedy(llm: Any, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
    from magicselector.backends.llama import greedy

    return greedy(llm, prompt_ids, max_new_tokens)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def decomposer_parity(checkpoint: str | Path, gguf: str | Path, prompts: Sequence[str] = PROBE_PROMPTS,
                      max_new_tokens: int = 8) -> dict[str, Any]:
    """Greedy continuations of the PyTorch model (transformers ``generate``) and of the GGUF
    (llama_cpp, temperature 0) on the same prompt token ids: the share of identical first tokens
    and the mean length of the common prefix."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    checkpoint = Path(checkpoint)
    tok = AutoTokenizer.from_pretrained(str(checkpoint))
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    llm = load_gguf(gguf)
    firsts, prefixes, cases = [], [], []
    for prompt in prompts:
        ids = tok(prompt).input_ids
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                 repetition_penalty=1.0, pad_token_id=tok.pad_token_id or tok.eos_token_id)
        ref = gen[0, len(ids):].tolist()
        got = gguf_greedy(llm, ids, max_new_tokens)
        n = min(len(ref), len(got))
        firsts.append(bool(ref and got and ref[0] == got[0]))
        prefixes.append(common_prefix(ref, got))
        cases.append({"prompt": prompt, "input_ids": list(map(int, ids)), "expected": got, "pytorch": ref,
                      "common_prefix": prefixes[-1], "compared": n})
    del llm
    return {
        "first_token_agreement": sum(firsts) / max(1, len(firsts)),
        "mean_common_prefix": sum(prefixes) / max(1, len(prefixes)),
        "max_new_tokens": max_new_tokens,
        "prompts": len(prompts),
        "cases": cases,
    }


def export_decomposer(source: str | Path, workdir: str | Path, quant: str = "q8_0",
                      prompts: Sequence[str] = PROBE_PROMPTS, min_first_token: float | None = None,
                      max_new_tokens: int = 8, log=print) -> dict[str, Any]:
    """A causal-LM checkpoint (or a ready ``.gguf``) -> quantized GGUF with a parity report.

    Returns ``{"gguf": path, "meta": manifest section fields, "golden": probe cases}``. Raises
    ExportError (saying what to do) when the parity floor is not met."""
    quant = check_quant_name(quant)
    source, workdir = Path(source), Path(workdir)
    if source.is_file() and source.suffix == ".gguf":
        llm = load_gguf(source)
        cases = []
        for prompt in prompts:
            ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True)
            cases.append({"prompt": prompt, "input_ids": ids, "expected": gguf_greedy(llm, ids, max_new_tokens)})
        del llm
        return {"gguf": str(source), "golden": cases,
                "meta": {"format": "gguf", "quantization": {"type": "prebuilt"}, "size_bytes": source.stat().st_size,
                         "parity": {"against": "none (prebuilt GGUF)"}, "llama_cpp_python": llama_cpp_version()}}
    if not source.is_dir():
        raise ExportError(f"{source}: the decomposer must be a Hugging Face causal-LM folder or a .gguf file")
    config = check_causal_lm(source)
    quant_ftype(quant)  # fail on an unusable name before any conversion work
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"converting {source.name} to GGUF (f16) with llama.cpp's converter")
    f16 = convert_hf_to_gguf(source, workdir / "decomposer.f16.gguf", "f16")
    if quant == "f16":
        q = GgufReport(f16.output, f16.output, "f16", 0.0, f16.size_bytes, {"source_size_bytes": f16.size_bytes})
    else:
        log(f"quantizing to {quant}")
        q = quantize_gguf(f16.output, workdir / f"decomposer.{quant}.gguf", quant)
    log(f"parity against the PyTorch model on {len(prompts)} prompts")
    parity = decomposer_parity(source, q.output, prompts, max_new_tokens)
    floor = min_first_token if min_first_token is not None else MIN_FIRST_TOKEN_AGREEMENT.get(
        quant, DEFAULT_MIN_FIRST_TOKEN_AGREEMENT)
    if parity["first_token_agreement"] < floor:
        raise ExportError(f"GGUF {quant} decomposer parity too low: first greedy tokens agree on "
                          f"{parity['first_token_agreement']:.2f} of the prompts < {floor}; use a wider "
                          "quantization (q8_0, or f16) or check the converter's tokenizer handling")
    golden = parity.pop("cases")
    return {
        "gguf": q.output,
        "golden": golden,
        "meta": {"format": "gguf", "architecture": f16.extra["architecture"],
                 "model_type": config.get("model_type"), "layers": config.get("num_hidden_layers"),
                 "tokenizer": "embedded in the GGUF",
                 "quantization": {"type": q.quantization, "method": "llama_model_quantize",
                                  "ftype": GGUF_QUANTS[quant]},
                 "parity": {"against": "pytorch-fp32 greedy (transformers generate)", "min_first_token": floor,
                            **parity},
                 "size_bytes": q.size_bytes, "f16_size_bytes": f16.size_bytes,
                 "export_seconds": round(f16.seconds + q.seconds, 2),
                 "converter": f16.extra["converter"], "llama_cpp_python": llama_cpp_version(),
                 # the runtime prompt the checkpoint was trained with (Selector.from_bundle reads it)
                 "prompt": checkpoint_prompt_style(source)},
    }


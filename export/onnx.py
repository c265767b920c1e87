"""Encoders (embedder, cross-encoder reranker) from Hugging Face checkpoints to ONNX, FP32 and INT8.

Free functions from artifact to artifact, each returning a report. Heavy imports (torch,
transformers, onnx) happen inside the functions.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from magicselector.errors import MagicSelectorError
from magicselector.ranks import spearman


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
    """The preset for the machine this runs on (its CPU target's, ``magicselector.targets``)."""
    from magicselector.targets import TARGETS, host_target

    return TARGETS[host_target()].preset


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
                        opset: int = 17, cost_passes: bool = True) -> OnnxExportReport:
    """Export an encoder checkpoint to FP32 ONNX.

    kind="embedder": output 0 is the last hidden state [batch, seq, hidden] (pooling is done by the
    runtime, so a port sees the same numbers). kind="reranker": output 0 is one logit per pair
    [batch] from a sequence-classification head, and the graph's last layer computes the first
    token only (``graph_passes.first_token_last_layer``; ``cost_passes=False`` keeps the full graph,
    for comparisons); the report's ``extra["graph_passes"]`` lists the passes applied,
    ``extra["graph_passes_skipped"]`` why one was not.
    """
    import torch

    checkpoint, output = Path(checkpoint), Path(output)
    _check_checkpoint(checkpoint)
    t0 = time.perf_counter()
    if kind == "embedder":
        from transformers import AutoModel

        model = AutoModel.from_pretrained(str(checkpoint)).eval()
        pick = lambda out: out.last_hidden_state  # noqa: E731
        out_name, out_axes = "last_hidden_state", {0: "batch", 1: "seq"}
    elif kind == "reranker":
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval()
        pick = lambda out: out.logits[:, 0]  # noqa: E731
        out_name, out_axes = "logits", {0: "batch"}
    else:
        raise ExportError(f"kind must be 'embedder' or 'reranker', got {kind!r}")

    class Wrapped(torch.nn.Module):
        """Positional inputs for the exporter; output 0 is the hidden state or the pair logit."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return pick(self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids))
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
    extra: dict[str, Any] = {}
    if kind == "reranker" and cost_passes:
        extra = apply_reranker_passes(output)
    return OnnxExportReport(str(checkpoint), str(output), kind, opset, time.perf_counter() - t0,
                            output.stat().st_size, extra=extra)


def apply_embedder_passes(path: str | Path) -> dict[str, Any]:
    """Rewrite an embedder ONNX file in place with ``graph_passes.EMBEDDER_PASSES``
    (``fuse_attention``). Applied to the INT8 file, after quantization: onnxruntime's quantizer
    cannot type the contrib op's output. Returns ``graph_passes.apply_passes``'s record."""
    from .graph_passes import EMBEDDER_PASSES, apply_passes

    return apply_passes(Path(path), EMBEDDER_PASSES)


def apply_reranker_passes(path: str | Path) -> dict[str, Any]:
    """Rewrite a cross-encoder ONNX file (FP32 or dynamic INT8) in place with
    ``graph_passes.RERANKER_PASSES`` (``first_token_last_layer``). Returns
    ``graph_passes.apply_passes``'s record."""
    from .graph_passes import RERANKER_PASSES, apply_passes

    return apply_passes(Path(path), RERANKER_PASSES)


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

    from magicselector.stages.embed import TextEmbedder, TextTokenizer, mean_pool_normalize

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
    got = TextEmbedder(onnx_model, tok, dim=ref_v.shape[1], threads=1).embed(list(probe_texts))  # .onnx or .pte
    cos = (ref_v * got).sum(axis=1)
    return {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()), "probes": len(probe_texts)}


# -- rerankers ------------------------------------------------------------------------------------

def group_pairs(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """(query, text) pairs -> {query: [texts]} in first-seen order."""
    groups: dict[str, list[str]] = {}
    for q, t in pairs:
        groups.setdefault(q, []).append(t)
    return groups


def checkpoint_pair_window(checkpoint: str | Path, max_length: int | None = None) -> dict[str, Any]:
    """How a cross-encoder checkpoint cuts its pairs: the ``tokenization`` that
    ``magicselector train reranker`` recorded in ``train_config.json`` (max_length, truncation,
    min_tool_tokens); a checkpoint without one is taken as longest-first. ``max_length`` overrides."""
    import json

    info_path = Path(checkpoint) / "train_config.json"
    tok: dict[str, Any] = {}
    if info_path.is_file():
        info = json.loads(info_path.read_text(encoding="utf-8"))
        tok = dict(info.get("tokenization") or {})
        tok.setdefault("min_tool_tokens", (info.get("config") or {}).get("min_tool_tokens", 32))
    window = {"max_length": int(tok.get("max_length", 96)), "truncation": str(tok.get("truncation", "longest_first")),
              "min_tool_tokens": int(tok.get("min_tool_tokens", 32))}
    if max_length is not None:
        window["max_length"] = int(max_length)
    return window


def reranker_scores_torch(checkpoint: str | Path, groups: dict[str, list[str]], max_length: int | None = None):
    """The PyTorch cross-encoder's logit per (query, text), per query list, with the checkpoint's
    own pair window (``checkpoint_pair_window``)."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification

    from magicselector.data.cross_encoder import PairTokenizer

    checkpoint = Path(checkpoint)
    tok = PairTokenizer(checkpoint / "tokenizer.json", **checkpoint_pair_window(checkpoint, max_length))
    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval()
    out = {}
    with torch.no_grad():
        for q, texts in groups.items():
            batch = tok.encode_pairs([(q, t or " ") for t in texts])
            logits = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits[:, 0]
            out[q] = np.asarray(logits.numpy(), dtype=np.float32)
    return out


def compare_rerank_scores(ref: dict[str, Any], got: dict[str, Any]) -> dict[str, float]:
    """Spearman per query list (mean and worst) and overall, top-1 agreement, max |diff|."""
    import numpy as np

    per_list, top1, diffs = [], [], []
    for q, r in ref.items():
        g = np.asarray(got[q], dtype=np.float32)
        r = np.asarray(r, dtype=np.float32)
        diffs.append(float(np.abs(r - g).max()) if len(r) else 0.0)
        if len(r) > 1:
            per_list.append(spearman(r, g))
        if len(r):
            top1.append(int(np.argmax(r)) == int(np.argmax(g)))
    all_r = np.concatenate([np.asarray(v, dtype=np.float32) for v in ref.values()])
    all_g = np.concatenate([np.asarray(got[q], dtype=np.float32) for q in ref])
    return {
        "spearman": spearman(all_r, all_g),
        "spearman_per_list_mean": float(np.mean(per_list)) if per_list else 1.0,
        "spearman_per_list_min": float(np.min(per_list)) if per_list else 1.0,
        "top1_agreement": float(np.mean(top1)) if top1 else 1.0,
        "max_abs_diff": float(max(diffs)) if diffs else 0.0,
        "lists": len(ref),
        "probes": int(len(all_r)),
    }


def reranker_parity(checkpoint: str | Path, onnx_model: str | Path, pairs: Sequence[tuple[str, str]],
                    max_length: int | None = None) -> dict[str, float]:
    """Scores of the PyTorch cross-encoder against the exported one (``.onnx`` or ``.pte``) on
    (query, text) pairs: Spearman overall and per query list, top-1 agreement over the query lists,
    the largest absolute logit difference."""
    from magicselector.data.cross_encoder import CrossEncoder, PairTokenizer

    checkpoint = Path(checkpoint)
    groups = group_pairs(pairs)
    if not groups:
        raise ExportError("reranker parity needs at least one (query, text) pair")
    ref = reranker_scores_torch(checkpoint, groups, max_length)
    window = checkpoint_pair_window(checkpoint, max_length)
    scorer = CrossEncoder(onnx_model, PairTokenizer(checkpoint / "tokenizer.json", **window), threads=1)
    got = {q: scorer.score(q, texts) for q, texts in groups.items()}
    return compare_rerank_scores(ref, got)


# -- static (QDQ) quantization --------------------------------------------------------------------

def quantize_onnx_static(fp32: str | Path, output: str | Path, calibration_texts: Sequence[Any],
                         tokenizer_file: str | Path, preset: str | None = None, max_length: int = 128,
                         limit: int = 128) -> OnnxExportReport:
    """Static INT8 in QDQ form: weights and activations quantized, activation ranges calibrated
    (MinMax) on ``calibration_texts`` (strings for an embedder, (query, text) pairs for a
    reranker; typically catalog tool texts). Needs no run-time range computation, so it is the
    form NPU / DSP delegates expect; on CPUs dynamic INT8 is usually at least as accurate."""
    import numpy as np
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    from magicselector.stages.embed import TextTokenizer

    qp = get_preset(preset or host_preset())
    fp32, output = Path(fp32), Path(output)
    if not fp32.is_file():
        raise ExportError(f"{fp32}: no such ONNX file to quantize")
    texts = list(calibration_texts)[:limit]
    if not texts:
        raise ExportError("static quantization needs calibration texts (e.g. the catalog's tool texts)")
    tok = TextTokenizer(tokenizer_file, max_length)
    names = {i.name for i in onnx.load(str(fp32), load_external_data=False).graph.input}

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(texts)

        def get_next(self):
            item = next(self._it, None)
            if item is None:
                return None
            enc = tok.encode_pairs([tuple(item)]) if isinstance(item, (tuple, list)) else tok.encode([item])
            return {k: np.ascontiguousarray(v) for k, v in enc.items() if k in names}

    t0 = time.perf_counter()
    output.parent.mkdir(parents=True, exist_ok=True)
    quantize_static(str(fp32), str(output), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=qp.per_channel, reduce_range=qp.reduce_range,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul", "Gemm", "Gather"], calibrate_method=CalibrationMethod.MinMax)
    return OnnxExportReport(str(fp32), str(output), "int8-static-qdq", 0, time.perf_counter() - t0,
                            output.stat().st_size,
                            extra={"preset": qp.name, "per_channel": qp.per_channel, "reduce_range": qp.reduce_range,
                                   "calibration_texts": len(texts), "format": "QDQ",
                                   "fp32_size_bytes": fp32.stat().st_size})

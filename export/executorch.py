"""Encoders (embedder, cross-encoder reranker) to ExecuTorch ``.pte`` programs lowered to XNNPACK.

``torch.export`` with inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64), then
``to_edge_transform_and_lower`` with the XNNPACK partitioner. INT8 is PT2E with
``XNNPACKQuantizer`` (symmetric, per-channel weights, dynamic activations): the Linear layers are
quantized, the embedding tables stay FP32 (XNNPACK has no quantized gather).

Batch and sequence length are dynamic (``torch.export.Dim``) by default; ``dynamic=False`` (or a
failure to export dynamically) gives fixed shapes ``[max_batch, max_length]`` that the runtime
pads to. The program carries its shape facts as constant methods (``max_seq_len``, ``max_batch``,
``fixed_shapes``) so that ``magicselector.backends.executorch`` needs no side file.

executorch is imported inside the functions: it is installed with ``--no-deps``
(``tools/install_release_deps.sh``), not through the ``export`` extra.
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .onnx import ExportError, _check_checkpoint

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
MIN_PTE_COSINE = {"fp32": 0.999, "int8": 0.97}


@dataclass(frozen=True)
class PteExportReport:
    source: str
    output: str
    kind: str
    quantization: str
    shapes: str  # "dynamic" | "fixed"
    max_length: int
    max_batch: int
    seconds: float
    size_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def executorch_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("executorch")
    except Exception:
        return None


def _require_executorch() -> None:
    try:
        import executorch  # noqa: F401
        from executorch.exir import to_edge_transform_and_lower  # noqa: F401
    except ImportError as e:
        raise ExportError("ExecuTorch export needs the executorch package, installed without its pinned "
                          "dependencies: bash tools/install_release_deps.sh (or pip install executorch==1.5.1 "
                          f"--no-deps ruamel.yaml tabulate torchao==0.18.0) ({e})") from None


def _quiet() -> None:
    # torchao tries to load CUDA kernels at import and logs each failure; harmless on CPU.
    for name in ("torchao", "torch._dynamo", "torch.utils._pytree", "torch.export"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def encoder_module(checkpoint: str | Path, kind: str):
    """The checkpoint as a torch Module ``(input_ids, attention_mask, token_type_ids) -> output``;
    a BERT cross-encoder as ``first_token_cross_encoder`` (its last layer for the first token only).

    The padding mask is turned into the additive [batch, 1, 1, seq] float mask here, so the graph
    holds no index-based mask construction (which PT2E's prepared graph cannot run) and the
    attention is the plain (eager) matmul-softmax-matmul that XNNPACK takes whole.
    """
    import torch

    checkpoint = Path(checkpoint)
    _check_checkpoint(checkpoint)
    if kind == "embedder":
        from transformers import AutoModel

        model = AutoModel.from_pretrained(str(checkpoint), attn_implementation="eager").eval()
    elif kind == "reranker":
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint), attn_implementation="eager").eval()
    else:
        raise ExportError(f"kind must be 'embedder' or 'reranker', got {kind!r}")

    class Encoder(torch.nn.Module):
        def __init__(self, m: torch.nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            neg = torch.finfo(torch.float32).min
            mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * neg
            out = self.m(input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids)
            return out.last_hidden_state if kind == "embedder" else out.logits[:, 0]

    if kind == "reranker" and first_token_only_supported(model):
        return first_token_cross_encoder(model).eval()
    return Encoder(model).eval()


def first_token_only_supported(model: Any) -> bool:
    """Whether ``first_token_cross_encoder`` knows this sequence classifier: BERT with absolute
    positions, a pooler and a classifier head."""
    config = getattr(model, "config", None)
    bert = getattr(model, "bert", None)
    return (config is not None and getattr(config, "model_type", None) == "bert" and bert is not None
            and getattr(bert, "pooler", None) is not None and hasattr(model, "classifier")
            and getattr(config, "position_embedding_type", "absolute") == "absolute"
            and not getattr(config, "is_decoder", False))


def first_token_cross_encoder(model: Any):
    """A BERT cross-encoder as a torch Module whose last layer computes the first token only, the
    program ``graph_passes.first_token_last_layer`` makes of an ONNX export: the head reads that
    token, so only the last layer's keys and values need the others. Same inputs and the additive
    mask as ``encoder_module``'s; output one logit per pair."""
    import torch

    class FirstTokenCrossEncoder(torch.nn.Module):
        def __init__(self, m: torch.nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            bert = self.m.bert
            neg = torch.finfo(torch.float32).min
            mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * neg
            hidden = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
            *body, last = bert.encoder.layer
            for layer in body:
                out = layer(hidden, mask)
                hidden = out[0] if isinstance(out, tuple) else out
            att = last.attention.self
            batch, seq = hidden.shape[0], hidden.shape[1]
            heads, size = att.num_attention_heads, att.attention_head_size
            first = hidden[:, :1]
            q = att.query(first).view(batch, 1, heads, size).transpose(1, 2)
            k = att.key(hidden).view(batch, seq, heads, size).transpose(1, 2)
            v = att.value(hidden).view(batch, seq, heads, size).transpose(1, 2)
            weights = torch.softmax(q @ k.transpose(-1, -2) * size ** -0.5 + mask, dim=-1)
            context = (weights @ v).transpose(1, 2).reshape(batch, 1, heads * size)
            attended = last.attention.output(context, first)
            top = last.output(last.intermediate(attended), attended)
            return self.m.classifier(bert.pooler(top))[:, 0]

    return FirstTokenCrossEncoder(model)


def _export(module, example, dynamic_shapes):
    import torch

    return torch.export.export(module, example, dynamic_shapes=dynamic_shapes, strict=False)


def export_encoder_pte(checkpoint: str | Path, output: str | Path, kind: str = "embedder",
                       quantize: str = "int8", max_length: int = 128, max_batch: int = 64,
                       dynamic: bool = True, calibration_texts: Sequence[Any] = ()) -> PteExportReport:
    """Export an encoder checkpoint to an XNNPACK ``.pte`` (``quantize``: "fp32" or "int8").

    Returns a report whose ``shapes`` says whether the program takes dynamic shapes or needs
    padding to ``[max_batch, max_length]``. Dynamic INT8 quantization computes activation ranges at
    run time; ``calibration_texts`` (strings, or (query, text) pairs) only drive the observers'
    one pass, which PT2E requires.
    """
    _quiet()  # before executorch imports torchao, which logs at import
    _require_executorch()
    import torch

    if quantize not in ("fp32", "int8"):
        raise ExportError(f"unknown ExecuTorch quantization {quantize!r}; choose one of ['fp32', 'int8']")
    checkpoint, output = Path(checkpoint), Path(output)
    t0 = time.perf_counter()
    module = encoder_module(checkpoint, kind)
    example = _example_inputs(checkpoint, kind, calibration_texts, max_length)
    shapes, program, error = "dynamic", None, None
    if max_batch < 2:
        example = tuple(t[:1] for t in example)
    if dynamic:
        try:
            program = _lower(module, example, quantize, _dynamic_shapes(max_length, max_batch), max_length, max_batch,
                             fixed=False)
        except Exception as e:  # an op that cannot take symbolic shapes: fall back to fixed shapes
            error = f"{type(e).__name__}: {str(e)[:300]}"
    if program is None:
        shapes = "fixed"
        max_batch = 1 if dynamic else max_batch  # the fallback pads one row at a time
        fixed = tuple(_pad_to(t, max_batch, max_length) for t in example)
        program = _lower(module, fixed, quantize, None, max_length, max_batch, fixed=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(program.buffer)
    extra: dict[str, Any] = {"backend": "xnnpack", "executorch": executorch_version(), "torch": torch.__version__}
    if quantize == "int8":
        extra["scheme"] = "pt2e XNNPACKQuantizer symmetric per-channel weights, dynamic activations (Linear)"
    if error:
        extra["dynamic_export_error"] = error
    return PteExportReport(str(checkpoint), str(output), kind, quantize, shapes, int(max_length), int(max_batch),
                           time.perf_counter() - t0, output.stat().st_size, extra)


def _dynamic_shapes(max_length: int, max_batch: int):
    import torch

    seq = torch.export.Dim("seq", min=2, max=max_length)
    if max_batch < 2:  # a batch of one is a static dimension
        return {n: {1: seq} for n in INPUT_NAMES}
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    return {n: {0: batch, 1: seq} for n in INPUT_NAMES}


def _example_inputs(checkpoint: Path, kind: str, texts: Sequence[Any], max_length: int):
    import torch

    from magicselector.stages.embed import TextTokenizer

    tok = TextTokenizer(checkpoint / "tokenizer.json", max_length)
    sample = list(texts)[:8]
    if not sample:
        sample = ["turn on bluetooth", "set an alarm for seven"] if kind == "embedder" else \
            [("turn on bluetooth", "bluetooth toggle: Turn Bluetooth on or off."),
             ("turn on bluetooth", "set alarm: Set an alarm that rings at a clock time.")]
    if isinstance(sample[0], (tuple, list)):
        enc = tok.encode_pairs([tuple(p) for p in sample])
    else:
        enc = tok.encode(sample)
    if enc["input_ids"].shape[0] < 2:  # a batch of one would be specialised as static
        enc = {k: v.repeat(2, axis=0) for k, v in enc.items()}
    return tuple(torch.from_numpy(enc[n]) for n in INPUT_NAMES)


def _pad_to(t, batch: int, length: int):
    import torch

    out = torch.zeros((batch, length), dtype=t.dtype)
    b, w = min(batch, t.shape[0]), min(length, t.shape[1])
    out[:b, :w] = t[:b, :w]
    return out


def _lower(module, example, quantize: str, dynamic_shapes, max_length: int, max_batch: int, fixed: bool):
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        if quantize == "int8":
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
                XNNPACKQuantizer, get_symmetric_quantization_config)
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            quantizer = XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
            graph = _export(module, example, dynamic_shapes).module()
            graph = prepare_pt2e(graph, quantizer)
            graph(*example)  # one observer pass (ranges are dynamic at run time)
            graph = convert_pt2e(graph)
            exported = _export(graph, example, dynamic_shapes)
        else:
            exported = _export(module, example, dynamic_shapes)
        edge = to_edge_transform_and_lower(
            exported, partitioner=[XnnpackPartitioner()],
            constant_methods={"max_seq_len": int(max_length), "max_batch": int(max_batch),
                              "fixed_shapes": int(fixed)})
        return edge.to_executorch()


def pte_embedder_parity(checkpoint: str | Path, pte: str | Path, probe_texts: Sequence[str],
                        max_length: int = 128) -> dict[str, float]:
    """Mean / worst cosine between the PyTorch model's sentence embeddings and the ``.pte``'s,
    the latter run through ExecuTorch's Python runtime."""
    from .onnx import embedder_parity

    return embedder_parity(checkpoint, pte, probe_texts, max_length=max_length)


def pte_reranker_parity(checkpoint: str | Path, pte: str | Path, pairs: Sequence[tuple[str, str]],
                        max_length: int | None = None) -> dict[str, float]:
    """Spearman / top-1 agreement of the ``.pte`` cross-encoder against the PyTorch model."""
    from .onnx import reranker_parity

    return reranker_parity(checkpoint, pte, pairs, max_length=max_length)

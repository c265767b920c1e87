"""ONNX rewrites of exported encoders that cut their cost and keep their outputs.

``first_token_last_layer``: a cross-encoder's score reads one position of its last hidden state
(the first token, through the pooler), yet the exported graph runs the last layer's query
projection, attention rows, output projection and feed-forward for every token. Only the keys and
values of that layer need every token. The pass slices the last layer to the first token: the query
projection, the attention mask row, the residual and everything after attention see one position,
and the two reshapes that took the sequence length from the full hidden state use 1 instead. In
FP32 the logits are unchanged up to float rounding. In a dynamic-INT8 graph the query row keeps the scale of the full
hidden state (the quantized tensor is sliced), while the output projection and feed-forward quantize
the one row they now see with its own scale, so logits move by quantization noise.

``fuse_attention``: each layer's attention, which the exporter writes as some twenty small nodes
(head reshapes and transposes, two scalings, the score MatMul, the additive mask, Softmax, a NaN
guard, the weighted sum, the merge), becomes one onnxruntime ``com.microsoft.MultiHeadAttention``
node fed by the projected query, key and value and a [batch, seq] key mask cast from the
``attention_mask`` input. The contrib op is in every onnxruntime CPU build (desktop wheels, the
``onnxruntime-android`` AAR). FP32 outputs agree to 1e-5; under dynamic INT8 the next layer's
activation scale can round differently, so embeddings move by quantization noise. What each pass
saves, and where it does not pay (the reranker's attention), is in docs/bench/defaults.md.

The passes read the graph that ``export.onnx.export_encoder_onnx`` writes for BERT-style checkpoints
(node names ``.../encoder/layer.N/attention/self/query/...``) and its dynamic-INT8 quantization; a
graph it does not recognise is left alone and the reason returned.
"""
from __future__ import annotations

import re
from typing import Any

FIRST_TOKEN_LAST_LAYER = "first_token_last_layer"
FUSE_ATTENTION = "fuse_attention"
MASK_INPUT = "attention_mask"


class _NoMatch(Exception):
    """The graph is not one this pass knows; the message says which part was missing."""


def _producer(graph: Any, name: str) -> Any | None:
    return next((n for n in graph.node if name in n.output), None)


def _consumers(graph: Any, name: str) -> list[Any]:
    return [n for n in graph.node if name in n.input]


def _one(nodes: list[Any], what: str) -> Any:
    if len(nodes) != 1:
        raise _NoMatch(f"expected one {what}, found {len(nodes)}")
    return nodes[0]


def _constant(graph: Any, name: str) -> Any | None:
    """The value (a numpy array) of an initializer or a Constant node's output (through the Identity
    nodes the exporter writes for deduplicated initializers), else None."""
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    node = _producer(graph, name)
    if node is not None and node.op_type == "Identity":
        return _constant(graph, node.input[0])
    if node is not None and node.op_type == "Constant":
        for attr in node.attribute:
            if attr.name == "value":
                return numpy_helper.to_array(attr.t)
    return None


def _constant_ints(graph: Any, name: str) -> list[int] | None:
    """The integer value of a Constant node's output or an initializer, else None."""
    value = _constant(graph, name)
    return None if value is None else [int(v) for v in value.reshape(-1)]


def _heads(graph: Any, shape: str) -> tuple[int, int]:
    """(heads, head size) from the query Reshape's target shape [batch, seq, heads, head size]: a
    constant, or the Concat the exporter builds from the input's shape and two constants (one of
    them may be -1)."""
    whole = _constant_ints(graph, shape)
    if whole is not None and len(whole) == 4:
        return whole[2], whole[3]
    concat = _producer(graph, shape)
    if concat is None or concat.op_type != "Concat" or len(concat.input) != 4:
        raise _NoMatch("the query Reshape's shape is not [batch, seq, heads, head size]")
    tail = [_constant_ints(graph, i) for i in concat.input[2:]]
    if any(v is None or len(v) != 1 for v in tail):
        raise _NoMatch("the query Reshape's head count and head size are not constants")
    return tail[0][0], tail[1][0]


def _check_first_token_read(graph: Any, pre: str) -> None:
    """The last layer's output must be read at the first token only (a pooler's Gather of index 0
    on the sequence axis): an embedder that pools every token must not be sliced."""
    norm = _one([n for n in graph.node if n.op_type == "LayerNormalization" and n.name.startswith("/")
                 and pre + "output/LayerNorm/" in n.name], "last layer's output LayerNorm")
    if any(o.name == norm.output[0] for o in graph.output):
        raise _NoMatch("the last hidden state is a graph output (every token is read)")
    for reader in _consumers(graph, norm.output[0]):
        axis = next((a.i for a in reader.attribute if a.name == "axis"), 0)
        if reader.op_type != "Gather" or axis != 1 or _constant_ints(graph, reader.input[1]) != [0]:
            raise _NoMatch(f"the last hidden state is read beyond its first token (by {reader.op_type} {reader.name})")


def is_first_token_last_layer(model: Any) -> bool:
    """Whether ``model`` (an ``onnx.ModelProto``) already carries the pass."""
    return any(n.name.endswith(f"/{FIRST_TOKEN_LAST_LAYER}/Slice") for n in model.graph.node)


def first_token_last_layer(model: Any) -> str | None:
    """Rewrite ``model`` (an ``onnx.ModelProto``, FP32 or dynamic INT8) in place so its last encoder
    layer computes the first token only (module docstring). Returns None when applied, or the reason
    the graph was left unchanged."""
    from onnx import helper, numpy_helper
    import numpy as np

    if is_first_token_last_layer(model):
        return "already applied"
    graph = model.graph
    layers = {int(m.group(1)) for n in graph.node for m in [re.search(r"/encoder/layer\.(\d+)/", n.name)] if m}
    if not layers:
        return "no /encoder/layer.N/ nodes (not a BERT-style export)"
    pre = f"/encoder/layer.{max(layers)}/"
    tag = f"{pre}{FIRST_TOKEN_LAST_LAYER}/"
    try:
        # the layer's input H: the residual operand of the attention block's Add
        add = _one([n for n in graph.node if n.op_type == "Add" and n.name.endswith(pre + "attention/output/Add")],
                   "attention residual Add")
        hidden = [i for i in add.input if "/attention/output/dense/" not in i]
        hidden_in = _one(hidden, "residual input")
        query = _one([n for n in graph.node if n.op_type in ("MatMul", "MatMulInteger")
                      and pre + "attention/self/query/" in n.name], "query projection")
        query_add = _one([n for n in graph.node if n.op_type == "Add"
                          and n.name.endswith(pre + "attention/self/query/Add")], "query bias Add")
        query_reshape = _one([n for n in _consumers(graph, query_add.output[0]) if n.op_type == "Reshape"],
                             "query Reshape")
        softmax = _one([n for n in graph.node if n.op_type == "Softmax" and pre + "attention/self/" in n.name],
                       "attention Softmax")
        scores = _producer(graph, softmax.input[0])
        if scores is None or scores.op_type != "Add":
            raise _NoMatch("the Softmax does not read an Add of scores and mask")
        masks = [i for i in scores.input if (_producer(graph, i) is None or _producer(graph, i).op_type != "MatMul")]
        mask = _one(masks, "additive attention mask")
        dense = _one([n for n in graph.node if n.op_type in ("MatMul", "MatMulInteger")
                      and pre + "attention/output/dense/" in n.name], "attention output projection")
        merge = _producer(graph, dense.input[0])
        if merge is not None and merge.op_type == "DynamicQuantizeLinear":
            merge = _producer(graph, merge.input[0])
        if merge is None or merge.op_type != "Reshape":
            raise _NoMatch("the attention output projection does not read a Reshape of the heads")
        heads, head_dim = _heads(graph, query_reshape.input[1])
        _check_first_token_read(graph, pre)
    except _NoMatch as e:
        return str(e)

    def const(name: str, values: list[int]) -> str:
        graph.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), tag + name))
        return tag + name

    starts, ends = const("starts", [0]), const("ends", [1])
    seq_axis, row_axis = const("seq_axis", [1]), const("row_axis", [2])
    new: list[Any] = []

    def first_of(tensor: str, axis: str, name: str) -> str:
        out = f"{tensor}{tag}{name}"
        new.append(helper.make_node("Slice", [tensor, starts, ends, axis], [out], name=tag + name))
        return out

    first = first_of(hidden_in, seq_axis, "Slice")
    add.input[list(add.input).index(hidden_in)] = first
    if query.input[0] == hidden_in:
        query.input[0] = first
    else:  # INT8: slice the quantized hidden state, so the query row keeps the full tensor's scale
        query.input[0] = first_of(query.input[0], seq_axis, "SliceQuantized")
    scores.input[list(scores.input).index(mask)] = first_of(mask, row_axis, "SliceMask")
    query_reshape.input[1] = const("query_shape", [0, 1, heads, head_dim])
    merge.input[1] = const("merged_shape", [0, 1, -1])
    # keep the node list topologically sorted: each slice goes right after what it reads
    for node in new:
        source = _producer(graph, node.input[0])
        graph.node.insert(0 if source is None else list(graph.node).index(source) + 1, node)
    # shapes recorded for the old full-length tensors would mislead onnxruntime's buffer reuse
    del graph.value_info[:]
    return None


def is_attention_fused(model: Any) -> bool:
    return any(n.op_type == "MultiHeadAttention" and n.domain == "com.microsoft" for n in model.graph.node)


def _drop_dead_nodes(graph: Any) -> None:
    outputs = {o.name for o in graph.output}
    while True:
        used = {i for n in graph.node for i in n.input} | outputs
        dead = [n for n in graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    read = {i for n in graph.node for i in n.input}
    for init in [t for t in graph.initializer if t.name not in read]:
        graph.initializer.remove(init)


def fuse_attention(model: Any) -> str | None:
    """Rewrite ``model`` (an ``onnx.ModelProto``, FP32 or dynamic INT8) in place so each encoder
    layer's attention is one ``com.microsoft.MultiHeadAttention`` node (module docstring). Returns
    None when applied, or the reason the graph was left unchanged."""
    from onnx import TensorProto, helper

    if is_attention_fused(model):
        return "already applied"
    graph = model.graph
    if MASK_INPUT not in {i.name for i in graph.input}:
        return f"no {MASK_INPUT!r} graph input"
    layers = sorted({int(m.group(1)) for n in graph.node for m in [re.search(r"/encoder/layer\.(\d+)/", n.name)] if m})
    if not layers:
        return "no /encoder/layer.N/ nodes (not a BERT-style export)"
    plans = []
    try:
        for layer in layers:
            pre = f"/encoder/layer.{layer}/attention/"
            qkv = [_one([n for n in graph.node if n.op_type == "Add" and n.name.endswith(f"{pre}self/{k}/Add")],
                        f"layer {layer} {k} bias Add") for k in ("query", "key", "value")]
            bias = next((v for v in (_constant(graph, i) for i in qkv[0].input) if v is not None), None)
            if bias is None:
                raise _NoMatch(f"layer {layer}: the query bias is not a constant")
            hidden = int(bias.size)
            query_reshape = _one([n for n in _consumers(graph, qkv[0].output[0]) if n.op_type == "Reshape"],
                                 f"layer {layer} query Reshape")
            heads, head_dim = _heads(graph, query_reshape.input[1])
            heads = hidden // head_dim if heads < 0 else heads
            if heads <= 0 or heads * (hidden // heads) != hidden:
                raise _NoMatch(f"layer {layer}: {heads} heads do not divide the hidden size {hidden}")
            dense = _one([n for n in graph.node if n.op_type in ("MatMul", "MatMulInteger")
                          and f"{pre}output/dense/" in n.name], f"layer {layer} attention output projection")
            merge = _producer(graph, dense.input[0])
            if merge is not None and merge.op_type == "DynamicQuantizeLinear":
                merge = _producer(graph, merge.input[0])
            if merge is None or merge.op_type != "Reshape":
                raise _NoMatch(f"layer {layer}: the attention output projection does not read a Reshape of the heads")
            plans.append((layer, [n.output[0] for n in qkv], heads, merge))
    except _NoMatch as e:
        return str(e)

    mask = f"/{FUSE_ATTENTION}/{MASK_INPUT}_int32"
    graph.node.insert(0, helper.make_node("Cast", [MASK_INPUT], [mask], to=TensorProto.INT32,
                                          name=f"/{FUSE_ATTENTION}/CastMask"))
    for layer, (q, k, v), heads, merge in plans:
        fused = merge.output[0] + f"/{FUSE_ATTENTION}"
        for reader in _consumers(graph, merge.output[0]):
            reader.input[:] = [fused if x == merge.output[0] else x for x in reader.input]
        node = helper.make_node("MultiHeadAttention", [q, k, v, "", mask], [fused], domain="com.microsoft",
                                name=f"/encoder/layer.{layer}/attention/self/{FUSE_ATTENTION}/MultiHeadAttention",
                                num_heads=heads)
        # after the last of its inputs (the value bias Add), which precedes the old subgraph's end
        at = max(list(graph.node).index(_producer(graph, x)) for x in (q, k, v)) + 1
        graph.node.insert(at, node)
    _drop_dead_nodes(graph)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    del graph.value_info[:]
    return None


EMBEDDER_PASSES = (FUSE_ATTENTION,)
# fuse_attention gains nothing on rerank batches (docs/bench/defaults.md)
RERANKER_PASSES = (FIRST_TOKEN_LAST_LAYER,)


def apply_passes(path: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Rewrite the ONNX file at ``path`` in place with the passes ``names``, in order (a pass the
    file already carries counts as applied); returns ``{"graph_passes": [applied...]}`` plus
    ``"graph_passes_skipped": {name: why}`` for a graph a pass did not recognise."""
    import onnx

    passes = {FIRST_TOKEN_LAST_LAYER: (first_token_last_layer, is_first_token_last_layer),
              FUSE_ATTENTION: (fuse_attention, is_attention_fused)}
    model = onnx.load(str(path))
    applied: list[str] = []
    skipped: dict[str, str] = {}
    changed = False
    for name in names:
        rewrite, carried = passes[name]
        if carried(model):
            applied.append(name)
            continue
        why = rewrite(model)
        if why is None:
            applied.append(name)
            changed = True
        else:
            skipped[name] = why
    if changed:
        onnx.checker.check_model(model)
        onnx.save(model, str(path))
    return {"graph_passes": applied, **({"graph_passes_skipped": skipped} if skipped else {})}

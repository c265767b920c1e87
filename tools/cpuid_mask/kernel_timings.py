"""Which kernels this process's CPU features select, and how long they take: run it once plainly and
once under ``tools/run_as_cpu.sh avx2 --`` to see the AVX2 kernels against this host's own.

    OPENBLAS_NUM_THREADS=1 python3 tools/cpuid_mask/kernel_timings.py
    OPENBLAS_NUM_THREADS=1 tools/run_as_cpu.sh avx2 -- python3 tools/cpuid_mask/kernel_timings.py

Prints one JSON line: numpy's view of AVX-512F/VNNI, OpenBLAS's and torch's kernel choice, the
median milliseconds of a 256x384 @ 384x1536 FP32 matmul in numpy and in onnxruntime (1 thread),
of one query through each shipped INT8 embedder file and of the experiment's cross-encoder
(bench/experiments/reranker, where the checkout has it) on 20 tool texts.
Needs the ``onnx`` package (export extra); torch and threadpoolctl are reported where installed.
"""
from __future__ import annotations

import json
import time

import numpy as np


def median_ms(fn, calls: int) -> float:
    fn()
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return round(float(np.median(samples)) * 1e3, 3)


def main() -> None:
    import onnxruntime as ort
    from numpy._core._multiarray_umath import __cpu_features__ as features
    from onnx import TensorProto, helper, numpy_helper

    out: dict = {"numpy_avx512f": features["AVX512F"], "numpy_avx512vnni": features["AVX512VNNI"]}
    try:
        from threadpoolctl import threadpool_info

        out["openblas_core"] = [i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"]
    except ImportError:
        pass
    try:
        import torch

        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        pass

    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 384), dtype=np.float32)
    b = rng.standard_normal((384, 1536), dtype=np.float32)
    out["numpy_fp32_matmul_ms"] = median_ms(lambda: a @ b, 30)
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "matmul",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(a.shape))],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [a.shape[0], b.shape[1]])],
                              [numpy_helper.from_array(b, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    out["ort_fp32_matmul_ms"] = median_ms(lambda: session.run(None, {"X": a}), 30)

    from magicselector.catalog import load_phone_catalog, tool_text
    from magicselector.data.cross_encoder import EXPERIMENT_RERANKER_DIR, RERANKER_META, CrossEncoder
    from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR
    from magicselector.stages.embed import TextEmbedder, TextTokenizer

    meta = json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text(encoding="utf-8"))
    tokenizer = TextTokenizer(SHIPPED_EMBEDDER_DIR / "tokenizer.json", meta["max_length"])
    query = "navigate to the nearest gas station and share my ETA with Tom"
    for name in sorted(meta["files"]):
        embedder = TextEmbedder(SHIPPED_EMBEDDER_DIR / name, tokenizer, dim=meta["dim"], threads=1)
        out[f"ort_int8_embed_ms[{name}]"] = median_ms(lambda: embedder.embed([query]), 50)
    if (EXPERIMENT_RERANKER_DIR / RERANKER_META).is_file():
        scorer = CrossEncoder.from_dir(EXPERIMENT_RERANKER_DIR, threads=1)
        texts = [tool_text(t) for t in list(load_phone_catalog())[:20]]
        out["ort_int8_rerank_20_pairs_ms"] = median_ms(lambda: scorer.score(query, texts), 10)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

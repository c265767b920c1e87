"""Another embedder in the shipped pipeline, config and cut (fold_eval's metrics), every part's index built by that embedder.

    python3 -m magicselector.bench.experiments.embedder_eval --model MODEL.onnx|CKPT_DIR [--tokenizer T.json]
        [NAME=]DIR... [--dev WORK] [fold_eval's options]

MODEL.onnx runs as the runtime runs an embedder (``TextEmbedder``, with ``--tokenizer``); a checkpoint
folder (``train embedder``'s output) runs in FP32 torch (``encoders.TorchMeanPool``, the export extra).
The index is f16 and nothing is cached: an embedder opened by hand has no ``vectors_key``. The
retrained and distilled embedders in docs/bench/training.md were measured with it.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from magicselector.catalog import Catalog
from magicselector.selector import Selector
from magicselector.stages.embed import TextEmbedder
from magicselector.stages.index import ToolIndex

from . import fold_eval


def embedder(model: str, tokenizer: str | None, batch: int | None = None) -> Any:
    """The embedder under test: an ONNX file with its tokenizer, or a checkpoint folder in torch."""
    if os.path.isdir(model):
        from .encoders import TorchMeanPool

        return TorchMeanPool(model)
    if not tokenizer:
        raise SystemExit("an ONNX model needs --tokenizer TOKENIZER.json")
    emb = TextEmbedder.from_path(model, tokenizer)
    if batch:
        emb.batch_size = batch  # 1: each text alone (dynamic INT8 scales are set per run)
    return emb


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = fold_eval.parser()
    p.prog = "python3 -m magicselector.bench.experiments.embedder_eval"
    p.add_argument("--model", required=True, help="an ONNX embedder or a checkpoint folder")
    p.add_argument("--tokenizer", help="the ONNX embedder's tokenizer.json")
    p.add_argument("--batch", type=int, help="texts per model call of an ONNX embedder")
    args = p.parse_args(argv)
    emb = embedder(args.model, args.tokenizer, args.batch)
    built: dict[tuple[str, ...], Selector] = {}

    def over(base: Selector, catalog: Catalog) -> Selector:
        """The base Selector's settings and head with ``emb``, over ``catalog`` as ``with_catalog``
        builds it (the index by ``emb``, BM25 as the bundle's), once per catalog."""
        key = tuple(catalog.ids)
        if key not in built:
            empty = Selector(Catalog([]), emb, ToolIndex(emb.dim, base.index.dtype), config=base.config,
                             head=base.head)
            built[key] = empty.with_catalog(catalog)
        return built[key]
    return fold_eval.run(args, over=over)


if __name__ == "__main__":
    main()

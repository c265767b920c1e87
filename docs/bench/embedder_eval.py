"""docs/bench/budget.md, "MPNet's knowledge distilled into MiniLM-L6": another embedder (an ONNX file, or a checkpoint folder run in FP32 torch) in the shipped pipeline, config and cut, with the shipped head or another, on fold_eval.py's parts, every catalog's index built from that embedder (f16, nothing cached: an embedder opened by hand has no ``vectors_key``).

python3 docs/bench/embedder_eval.py MODEL.onnx|CKPT_DIR TOKENIZER.json|- HEAD.json|shipped OUT.json [CUT_JSON]
PARTS=echo,bfcl (environment) keeps only the parts whose name starts so, as fold_eval.py.
"""
import os
import sys

import fold_eval
from magicselector import Selector
from magicselector.catalog import Catalog
from magicselector.stages.embed import TextEmbedder
from magicselector.stages.head import HeadModel
from magicselector.stages.index import ToolIndex


def embedder(model, tokenizer):
    if os.path.isdir(model):
        from ranking_probes import TorchMeanPool
        return TorchMeanPool(model)
    emb = TextEmbedder.from_path(model, tokenizer)
    emb.batch_size = int(os.environ.get("BATCH", emb.batch_size))  # BATCH=1: each text alone (dynamic INT8 scales per run)
    return emb


def main(model, tokenizer, head_file, out, cut="{}"):
    emb = embedder(model, tokenizer)
    head = None if head_file == "shipped" else HeadModel.from_bytes(open(head_file, "rb").read())
    built = {}

    def over(base, catalog):
        """The base Selector's settings and head with ``emb``, over ``catalog`` as ``with_catalog``
        builds it (its index by ``emb``, BM25 as the bundle's), once per catalog."""
        key = tuple(catalog.ids)
        if key not in built:
            empty = Selector(Catalog([]), emb, ToolIndex(emb.dim, base.index.dtype), config=base.config,
                             head=head or base.head)
            built[key] = empty.with_catalog(catalog)
        return built[key]
    fold_eval.main("default", "questions", out, 500, cut, over=over)


if __name__ == "__main__":
    main(*sys.argv[1:6])

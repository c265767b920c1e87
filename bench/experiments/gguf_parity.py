"""The bundle's GGUF embedder (llama.cpp, what the native core runs) against its INT8 ONNX embedder on every text a part's turns embed: cosine min / p1 / mean.

    python3 -m magicselector.bench.experiments.gguf_parity [NAME=]DIR... [--dev WORK] [--bundle DIR]
        [--n 500] [--quality] [--rebuild] [--out OUT.json]

The texts: each sampled turn's retrieval texts as the shipped pipeline makes them
(``Selector.retrieval_texts``: the folded utterance and the rules decomposer's sub-tasks) and the
part's tool texts. Both models get the bundle tokenizer's ids. The ONNX embedder quantizes its
activations per run, so a text's ONNX vector depends on what it is run with: it is taken one text
per run (``onnx``) and as the runtime batches it (``onnx_batched``: a turn's texts together, the
catalog as one embed call), and the two are compared with each other too.

``--quality`` also runs the shipped pipeline on each sampled turn with the ONNX embedder (as
``fold_eval`` does), with the GGUF one in its place (each part's index built from its tool
vectors, as the native core's embedder would give them) and, for scale, with the same ONNX model
with its index rebuilt (``with_catalog``: the tool texts embedded in other batches) and run one
text at a time: the share of turns whose kept set, kept order and K are the ONNX pipeline's, and
fold_eval's metrics for each. ``--rebuild`` checks the GGUF's source on every distinct text of the
parts (``export.gguf.reconstruction_parity``: the FP32 rebuild of the INT8 weights against the
ONNX model, with and without its activation quantization emulated, and the GGUF against the
rebuild; the export extra too). Needs the llm extra (llama-cpp-python).
docs/bench/gguf-embedder.md reports it.
"""
from __future__ import annotations

import argparse
from typing import Any, Sequence

import numpy as np

from magicselector.catalog import Catalog, tool_text
from magicselector.errors import InputError
from magicselector.sections import EmbedderSection
from magicselector.selector import Selector
from magicselector.stages.embed import TextEmbedder
from magicselector.stages.index import ToolIndex

from .common import (add_part_args, load_part, open_bundle, over_catalog, parts_from, show, summarize, token_cost,
                     turn_metrics, write_json)


def cosine_stats(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    cos = (a * b).sum(axis=1)
    return {"n": int(len(cos)), "min": round(float(cos.min()), 5), "p1": round(float(np.percentile(cos, 1)), 5),
            "mean": round(float(cos.mean()), 5)}


def compare(selector: Any, gguf: Any, groups: Sequence[Sequence[str]]) -> dict[str, dict[str, float]]:
    """GGUF, ONNX one text per run and ONNX batched by ``groups`` (each group one ``embed`` call)."""
    texts = [t for g in groups for t in g]
    enc = selector.embedder.tokenizer.encode(texts)
    ids = [row[mask == 1].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]
    got = gguf.embed_ids(ids)
    single = np.stack([selector.embedder.embed([t])[0] for t in texts])
    batched = np.concatenate([selector.embedder.embed(list(g)) for g in groups])
    return {"gguf_vs_onnx": cosine_stats(got, single), "gguf_vs_onnx_batched": cosine_stats(got, batched),
            "onnx_vs_onnx_batched": cosine_stats(single, batched)}


def quality(base: Selector, gguf: Any, alone: Any, bench: Any) -> dict[str, Any]:
    """The shipped pipeline on each turn of ``bench``: as ``fold_eval`` runs it (``onnx``: the
    bundle's index for the bundle's catalog), and with each part's index built by ``with_catalog``
    from the ONNX embedder (``onnx_rebuilt``: the same model, its tool vectors embedded in other
    batches), from ``gguf``, and from ``alone`` (the ONNX model one text per run), each then
    embedding the turn's texts; how often each keeps ``onnx``'s tools, and every side's metrics."""
    def swapped(emb: Any) -> Selector:
        empty = Selector(Catalog([]), emb, ToolIndex(emb.dim, base.index.dtype), config=base.config, head=base.head,
                         lexical=base.live.lexical)  # BM25 with the bundle's parameters
        return empty.with_catalog(bench.catalog)

    sels = {"onnx": over_catalog(base, bench.catalog), "onnx_rebuilt": swapped(base.embedder), "gguf": swapped(gguf),
            "onnx_alone": swapped(alone)}
    cost = token_cost(sels["onnx"])
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in sels}
    same = {name: {"kept_set": 0, "kept_order": 0, "K": 0} for name in sels if name != "onnx"}
    turns = 0
    for q in bench.queries:
        try:
            got = {name: sel.select(q.query, q.history) for name, sel in sels.items()}
        except InputError:
            continue
        turns += 1
        for name, selection in got.items():
            rows[name].append(turn_metrics(q.gold, selection, cost))
        for name, counts in same.items():
            counts["kept_set"] += set(got[name].ids) == set(got["onnx"].ids)
            counts["kept_order"] += list(got[name].ids) == list(got["onnx"].ids)
            counts["K"] += got[name].k == got["onnx"].k
    summary = {name: summarize(r) for name, r in rows.items()}
    return {"turns": turns, **summary,
            "same_as_onnx": {name: {k: round(v / max(1, turns), 4) for k, v in counts.items()}
                             for name, counts in same.items()},
            "minus_onnx": {name: {k: round(summary[name][k] - summary["onnx"][k], 4) for k in summary["onnx"]}
                           for name in same}}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.gguf_parity",
                                description=__doc__.split("\n")[0])
    add_part_args(p)
    p.add_argument("--bundle", help="the bundle (default: the default bundle)")
    p.add_argument("--threads", type=int, default=1, help="llama.cpp threads (default 1)")
    p.add_argument("--quality", action="store_true", help="also the pipeline's selections with each embedder")
    p.add_argument("--rebuild", action="store_true", help="also the FP32 rebuild of the INT8 weights on every text")
    p.add_argument("--out", help="write the results here (JSON)")
    args = p.parse_args(argv)
    from magicselector.export.gguf import GgufEmbedder  # llama_cpp: only when the experiment runs

    base = open_bundle(args.bundle)
    section = EmbedderSection.parse(base.bundle.manifest["embedder"])
    if section.gguf is None:
        raise SystemExit(f"{base.bundle.path}: the bundle holds no GGUF embedder (manifest embedder.gguf)")
    gguf = GgufEmbedder(base.bundle.file(section.gguf), threads=args.threads, tokenizer=base.embedder.tokenizer)
    alone = TextEmbedder.from_path(base.bundle.file(section.file), base.bundle.file(section.tokenizer),
                                   max_length=section.max_length)
    alone.batch_size = 1  # each text its own run: the ONNX model's activation scales are set per run
    out: dict[str, Any] = {"bundle": str(base.bundle.path), "gguf": section.gguf, "onnx": section.file, "parts": {}}
    every_text: dict[str, None] = {}  # distinct, in order
    for name, folder in parts_from(args):
        bench = load_part(folder, args.n, args.seed)
        turns, skipped = [], 0
        for q in bench.queries:
            try:
                turns.append(base.retrieval_texts(q.query, q.history))
            except InputError:  # over the input limits: the runtime refuses the turn
                skipped += 1
        tools = [tool_text(t) for t in bench.catalog]
        every_text.update(dict.fromkeys([t for turn in turns for t in turn] + tools))
        row = {"turns": len(turns), "skipped": skipped,
               "queries": compare(base, gguf, turns),
               "tools": compare(base, gguf, [tools])}  # the catalog in one embed call, batched as the runtime does
        out["parts"][name] = row
        for kind in ("queries", "tools"):
            show(f"{name} {kind}", {k: f"{v['min']:.4f}/{v['p1']:.4f}/{v['mean']:.4f} (n {v['n']})"
                                    for k, v in row[kind].items()})
        if args.quality:
            row["quality"] = quality(base, gguf, alone, bench)
            for side in ("onnx_rebuilt", "gguf", "onnx_alone"):
                show(f"{name} {side} same", row["quality"]["same_as_onnx"][side])
                show(f"{name} {side}-onnx", row["quality"]["minus_onnx"][side])
    if args.rebuild:
        from magicselector.export.gguf import reconstruction_parity  # torch: only when asked

        out["rebuild"] = reconstruction_parity(base.bundle.file(section.file), base.bundle.file(section.tokenizer),
                                               list(every_text), gguf=base.bundle.file(section.gguf),
                                               max_length=section.max_length)
        for key, stats in out["rebuild"].items():
            if isinstance(stats, dict):
                show(key, stats)
    write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()

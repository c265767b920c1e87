"""Tool embeddings for a whole catalog, cached on disk by embedder file hash and tool texts."""
from __future__ import annotations

import hashlib
import os
import threading
from typing import TYPE_CHECKING

import numpy as np

from .files import cache_home
from .catalog import Catalog, tool_text

if TYPE_CHECKING:
    from .stages.embed import Embedder


def catalog_vectors(embedder: "Embedder", catalog: Catalog, model_sha: str = "", cache: bool = True) -> np.ndarray:
    """One row per tool of ``catalog``; reused from ``<cache>/embeddings`` when the same embedder
    (``model_sha``) has embedded the same texts before. Without a ``model_sha`` nothing is cached."""
    texts = [tool_text(t) for t in catalog]
    cache = cache and bool(model_sha)
    key = hashlib.sha256((model_sha + "\x00" + "\x00".join(texts)).encode()).hexdigest()[:24]
    path = cache_home() / "embeddings" / f"{key}.npy"
    if cache and path.is_file():
        vecs: np.ndarray | None
        try:
            vecs = np.load(path)
        except (OSError, ValueError):
            vecs = None  # a torn or foreign file: embed again and replace it
        if vecs is not None and vecs.shape == (len(texts), embedder.dim):
            return vecs
    order = np.argsort([len(t) for t in texts])  # similar lengths batch with little padding
    vecs = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    batch = 64
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        vecs[idx] = embedder.embed([texts[i] for i in idx])
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp.npy")  # writers never share a temp file
        np.save(tmp, vecs)
        tmp.replace(path)
    return vecs


"""Tool embeddings for a whole catalog, cached on disk by embedder file hash and tool texts, and the
catalog's tool index built from them in batches."""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

import numpy as np

from .errors import BundleError
from .files import cache_home, npy_header, trim_heap
from .catalog import Catalog, tool_text
from .stages.index import ToolIndex

if TYPE_CHECKING:
    from .stages.embed import Embedder

# Texts per embed call. The vectors depend on which texts share a call (the INT8 model scales by
# the batch's value range), so every path batches alike: the length-sorted order cut in 64s.
EMBED_BATCH = 64
INDEX_CHUNK = 4096  # rows read back from the vector file per add to the index
# Every this many embed calls (and the last), the embedder gives its activations back: batches of
# ever new shapes otherwise grow ONNX Runtime's arena without bound (+130 MB over 5,000 MCP tools),
# and a release makes its call about 10 % slower, so it comes every 16th call, which bounds the arena
# as well (docs/bench/scaling-100k-mcp.md).
RELEASE_EVERY = 16
_F4 = np.dtype("<f4")


def give_back(embedder: "Embedder") -> None:
    """Hand what bulk embedding grew back to the system: one tiny run with release (ONNX Runtime
    keeps the blocks of the last large run otherwise, +48 MB after a batch of 64 long tool texts),
    then the C heap's free pages. The vectors of no text change."""
    embedder.embed(["."], release=True)
    trim_heap()


def catalog_index(embedder: "Embedder", catalog: Catalog, model_sha: str = "", dtype: str = "f16",
                  cache: bool = True, progress: Callable[[int, int], None] | None = None) -> ToolIndex:
    """The catalog's tool index, the same as ``ToolIndex.add`` of every tool's vector at once,
    without all the vectors in memory at once: the tools are embedded ``EMBED_BATCH`` at a time
    into the vector file (the cache's, or a temporary one), then added to the index from it in
    catalog order, ``INDEX_CHUNK`` rows at a time (the order ties among equal vectors keep).
    ``progress(done, total)`` is called after each embed batch."""
    index = ToolIndex(embedder.dim, dtype)
    ids = catalog.ids
    with _vector_file(embedder, catalog, model_sha, cache, progress) as vf:
        for start in range(0, len(ids), INDEX_CHUNK):
            stop = min(start + INDEX_CHUNK, len(ids))
            index.add(ids[start:stop], vf.rows(start, stop))
    if len(ids) >= INDEX_CHUNK:
        trim_heap()  # the chunks read back, given back
    return index


def _texts_key_lengths(catalog: Catalog, model_sha: str) -> tuple[str, list[int]]:
    """The cache key (sha256 of the embedder hash and the texts joined by NULs, hashed as it goes)
    and each tool text's length, one text in memory at a time."""
    digest = hashlib.sha256((model_sha + "\x00").encode())
    lengths = []
    for i, tool in enumerate(catalog):
        text = tool_text(tool)
        if i:
            digest.update(b"\x00")
        digest.update(text.encode())
        lengths.append(len(text))
    return digest.hexdigest()[:24], lengths


class _VectorFile:
    """A float32 (n, dim) ``.npy`` file read and written by rows, never mapped whole."""

    def __init__(self, f: BinaryIO, offset: int, n: int, dim: int, path: Path, temporary: bool) -> None:
        self.f, self.offset, self.n, self.dim, self.path, self.temporary = f, offset, n, dim, path, temporary

    def __enter__(self) -> "_VectorFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()
        if self.temporary:
            self.path.unlink(missing_ok=True)

    def rows(self, start: int, stop: int) -> np.ndarray:
        size = (stop - start) * self.dim * _F4.itemsize
        data = os.pread(self.f.fileno(), size, self.offset + start * self.dim * _F4.itemsize)
        if len(data) != size:  # the file shrank under us: nothing sound to index from
            raise OSError(f"{self.path}: vector file truncated")
        return np.frombuffer(data, dtype=_F4).reshape(stop - start, self.dim).astype(np.float32)

    def write(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=_F4)
        step = self.dim * _F4.itemsize
        fd = self.f.fileno()
        for row, vector in zip(rows.tolist(), vectors):
            os.pwrite(fd, vector.tobytes(), self.offset + row * step)


def _open_cached(path: Path, n: int, dim: int) -> _VectorFile | None:
    """The cached vectors at ``path`` when they are a whole float32 (n, dim) array, else None (a
    torn or foreign file is embedded again and replaced)."""
    try:
        f = open(path, "rb")
    except OSError:
        return None
    try:
        shape, fortran, dtype = npy_header(f)
        offset = f.tell()
        whole = os.fstat(f.fileno()).st_size == offset + n * dim * _F4.itemsize
        if shape == (n, dim) and not fortran and dtype == _F4 and whole:
            return _VectorFile(f, offset, n, dim, path, temporary=False)
    except (OSError, ValueError):
        pass
    f.close()
    return None


def _new_vector_file(path: Path, cache: bool) -> Path:
    """Where the vectors are written: a temporary file next to the cache entry ``path`` (renamed to
    it once whole), or a temporary file of the system's where nothing is cached."""
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp.npy")  # writers never share a temp file
    fd, name = tempfile.mkstemp(prefix="magicselector-vectors-", suffix=".npy")
    os.close(fd)
    return Path(name)


def _embed_into(vf: _VectorFile, embedder: "Embedder", catalog: Catalog, lengths: list[int],
                progress: Callable[[int, int], None] | None) -> None:
    """Every tool's vector written into ``vf``, embedded in batches of similar text lengths."""
    n, dim = vf.n, vf.dim
    order = np.argsort(lengths)  # similar lengths batch with little padding
    for batch, start in enumerate(range(0, n, EMBED_BATCH)):
        rows = order[start:start + EMBED_BATCH]
        release = batch % RELEASE_EVERY == RELEASE_EVERY - 1 or start + EMBED_BATCH >= n
        vectors = embedder.embed([tool_text(catalog[int(i)]) for i in rows], release=release)
        if release:
            trim_heap()
        if vectors.shape != (len(rows), dim):
            raise BundleError(f"the embedder gave vectors of shape {vectors.shape} for {len(rows)} texts; "
                              f"its dimension is {dim}")
        vf.write(rows, vectors)
        if progress is not None:
            progress(min(start + EMBED_BATCH, n), n)
    if n:
        give_back(embedder)


def _vector_file(embedder: "Embedder", catalog: Catalog, model_sha: str, cache: bool,
                 progress: Callable[[int, int], None] | None = None) -> _VectorFile:
    """The catalog's vectors as a file: the cached one, or one embedded now (into the cache, or a
    temporary file deleted on close where nothing is cached)."""
    cache = cache and bool(model_sha)
    key, lengths = _texts_key_lengths(catalog, model_sha)
    n, dim = len(lengths), int(embedder.dim)
    path = cache_home() / "embeddings" / f"{key}.npy"
    if cache:
        cached = _open_cached(path, n, dim)
        if cached is not None:
            return cached
    tmp = _new_vector_file(path, cache)
    f = open(tmp, "w+b")
    try:
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(_F4),
                                                 "fortran_order": False, "shape": (n, dim)})
        vf = _VectorFile(f, f.tell(), n, dim, tmp, temporary=True)
        f.truncate(vf.offset + n * dim * _F4.itemsize)
        _embed_into(vf, embedder, catalog, lengths, progress)
        if cache:
            f.flush()
            tmp.replace(path)  # a whole file, under its key, in one step
            vf.path, vf.temporary = path, False
        return vf
    except BaseException:
        f.close()
        tmp.unlink(missing_ok=True)
        raise

"""The tool index: a usearch index over tool embeddings, one file, memory-mapped on load.

Keys are a stable 63-bit hash of the tool id, so the index file needs no side table: the catalog
gives the ids, and loading checks that the index holds exactly those ids. A viewed (memory-mapped)
index is immutable; the first add or remove copies it into memory (copy-on-write).

Search is exact (a scan of every tool vector) up to ``EXACT_SEARCH_MAX`` tools, and above it the
HNSW graph built and searched with ``GRAPH``: the graph is neither exact nor the same from one
build to the next. What these values rest on: docs/bench/tool-index.md.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence, TypedDict, cast

import numpy as np

from ..errors import BundleError, InputError, UnknownToolError

if TYPE_CHECKING:
    from usearch.index import Index as UsearchIndex

DTYPES = ("f32", "f16", "i8")
EXACT_SEARCH_MAX = 50_000


class _Graph(TypedDict):
    """usearch's HNSW parameters (typed by name, so ``**GRAPH`` reaches Index's int parameters)."""
    connectivity: int
    expansion_add: int
    expansion_search: int


GRAPH: _Graph = {"connectivity": 16, "expansion_add": 160, "expansion_search": 128}  # docs/bench/tool-index.md


def usearch_index_class() -> type[UsearchIndex]:
    """usearch's ``Index``, imported after onnxruntime: onnxruntime 1.32 crashes (SIGSEGV) when it is
    first imported after usearch 2.26 has loaded its SIMD library, and a process that searches may
    embed later."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:  # a process without onnxruntime has nothing to crash
        pass
    from usearch.index import Index

    return Index


def tool_key(tool_id: str) -> int:
    """Stable uint64 key of a tool id (blake2b, top bit cleared)."""
    digest = hashlib.blake2b(tool_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


class ToolIndex:
    """Cosine nearest-neighbour search over tool vectors, addressed by tool id."""

    def __init__(self, ndim: int, dtype: str = "f16", *, _index: UsearchIndex | None = None,
                 _path: Path | None = None) -> None:
        Index = usearch_index_class()

        if dtype not in DTYPES:
            raise InputError(f"index dtype must be one of {DTYPES}, got {dtype!r}")
        self.ndim = int(ndim)
        self.dtype = dtype
        self._index = _index if _index is not None else Index(ndim=self.ndim, metric="cos", dtype=dtype, **GRAPH)
        # a restored file keeps the build's, not this (the ignore: usearch defines this property's setter
        # apart from its getter, which mypy reads as read-only)
        self._index.expansion_search = GRAPH["expansion_search"]  # type: ignore[misc]
        self._path = _path
        self._viewed = _index is not None and _path is not None
        self._id_by_key: dict[int, str] = {}
        self._key_by_id: dict[str, int] = {}  # saves re-hashing ids on every vectors() call

    # -- persistence ---------------------------------------------------------------------------
    @classmethod
    def view(cls, path: str | Path, ids: Sequence[str]) -> "ToolIndex":
        """Memory-map an index file and bind it to the catalog's ids (which must match exactly)."""
        return cls._open(path, ids, view=True)

    @classmethod
    def load(cls, path: str | Path, ids: Sequence[str]) -> "ToolIndex":
        return cls._open(path, ids, view=False)

    @classmethod
    def _open(cls, path: str | Path, ids: Sequence[str], view: bool) -> "ToolIndex":
        Index = usearch_index_class()

        path = Path(path)
        if not path.is_file():
            raise BundleError(f"index file not found: {path}")
        try:
            raw = Index.restore(str(path), view=view)
        except Exception as e:  # usearch raises plain RuntimeError/ValueError on bad files
            raise BundleError(f"{path}: not a readable usearch index ({e})") from None
        if raw is None:
            raise BundleError(f"{path}: not a readable usearch index")
        dtype = str(raw.dtype).split(".")[-1].lower()
        index = cls(raw.ndim, dtype if dtype in DTYPES else "f32", _index=raw, _path=path)
        index._viewed = view
        index._bind(ids, str(path))
        return index

    @classmethod
    def from_bytes(cls, data: bytes, ids: Sequence[str], name: str = "index") -> "ToolIndex":
        """An index from a file's bytes (already checked against a bundle's manifest; the file is not
        opened again), held in memory and bound to the catalog's ids; a damaged one is a BundleError
        naming ``name``."""
        Index = usearch_index_class()

        try:
            meta = Index.metadata(data) if len(data) else None
            if not meta:
                raise ValueError("no usearch header")
            raw = Index(ndim=meta["dimensions"], dtype=meta["kind_scalar"], metric=meta["kind_metric"])
            raw.load(data)
        except Exception:  # usearch raises plain RuntimeError/ValueError on bad bytes
            raise BundleError(f"{name}: not a readable usearch index (truncated, damaged or not an index); "
                              "rebuild the bundle") from None
        dtype = str(raw.dtype).split(".")[-1].lower()
        index = cls(raw.ndim, dtype if dtype in DTYPES else "f32", _index=raw, _path=None)
        index._viewed = False
        index._bind(ids, name)
        return index

    def _bind(self, ids: Sequence[str], name: str = "index") -> None:
        keys = {tool_key(i): i for i in ids}
        if len(keys) != len(ids):
            raise BundleError(f"{name}: tool ids collide on their index keys (or repeat)")
        if len(self._index) != len(keys):
            raise BundleError(f"{name}: index holds {len(self._index)} tools but the catalog has {len(keys)}: "
                              "the index and catalog are out of step; rebuild the bundle")
        missing = [i for k, i in keys.items() if not self._index.contains(k)]
        if missing:
            raise BundleError(f"{name}: index lacks {len(missing)} catalog tools, e.g. {missing[:3]}; rebuild the bundle")
        self._id_by_key = keys
        self._key_by_id = {i: k for k, i in keys.items()}

    def save(self, path: str | Path) -> None:
        self._index.save(str(path))

    # -- mutation ------------------------------------------------------------------------------
    def _writable(self) -> UsearchIndex:
        if self._viewed:  # copy-on-write: a memory-mapped index cannot change in place
            Index = usearch_index_class()

            copy = Index(ndim=self.ndim, metric="cos", dtype=self.dtype, **GRAPH)
            keys = np.array(list(self._id_by_key), dtype=np.uint64)
            if len(keys):
                copy.add(keys, self._get_raw(keys))
            self._index, self._viewed = copy, False
        return self._index

    def add(self, ids: Sequence[str], vectors: np.ndarray, threads: int = 0) -> None:
        """Add tools; an id already present is replaced. ``threads``: usearch's (0: every core); a
        graph built on one thread is the same bytes from build to build (a bundle's index is).
        All or nothing: everything is checked before the index changes, and a refused add (an
        InputError naming the id) leaves it exactly as it was."""
        vectors = self._checked_add(ids, vectors, threads)
        keys = [tool_key(i) for i in ids]
        replaced = self._replaced_keys(keys, ids)  # refuses a key collision before anything changes
        self._put(keys, vectors, replaced, threads)
        self._id_by_key.update(zip(keys, ids))
        self._key_by_id.update(zip(ids, keys))

    def _checked_add(self, ids: Sequence[str], vectors: np.ndarray, threads: int) -> np.ndarray:
        """``add``'s input checked before anything changes: the vectors as float32, or an InputError
        naming what is wrong (shape, a non-string or repeated id, a non-finite vector, threads)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape != (len(ids), self.ndim):
            raise InputError(f"expected vectors of shape ({len(ids)}, {self.ndim}), got {vectors.shape}")
        not_text = next((i for i in ids if not isinstance(i, str)), None)
        if not_text is not None:
            raise InputError(f"add(): a tool id must be a string, got {type(not_text).__name__} {not_text!r:.80}")
        if len(set(ids)) != len(ids):
            raise InputError("add(): the same tool id appears twice")
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise InputError(f"add(): the vector of tool {ids[bad]!r} is not finite (NaN or infinity)")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise InputError(f"add(): threads must be an integer >= 0, got {threads!r}")
        return vectors

    def _put(self, keys: list[int], vectors: np.ndarray, replaced: list[int], threads: int) -> None:
        """Swap the ``replaced`` keys' vectors for the new ones in the usearch index; where usearch
        fails half-way (e.g. out of memory), what was there is put back before the error goes on."""
        index = self._writable()
        kept = self._get_raw(np.array(replaced, dtype=np.uint64)) if replaced else None
        for k in replaced:
            index.remove(k)
        try:
            if keys:
                index.add(np.array(keys, dtype=np.uint64), vectors, threads=threads)
        except BaseException:
            for k in keys:
                if index.contains(k):
                    index.remove(k)
            if kept is not None:
                index.add(np.array(replaced, dtype=np.uint64), kept, threads=threads)
            raise

    def _replaced_keys(self, keys: list[int], ids: Sequence[str]) -> list[int]:
        """The keys of these tools the index holds already (to replace), in order; an InputError
        naming both ids when one collides with another tool's key."""
        replaced = []
        batch: dict[int, str] = {}
        for k, i in zip(keys, ids):
            other = self._id_by_key.get(k) or batch.get(k)
            batch[k] = i
            if other is not None and other != i:
                raise InputError(f"tool ids {i!r} and {other!r} collide on their index key; "
                                 f"rename {i!r} (the index is unchanged)")
            if other is not None:
                replaced.append(k)
        return replaced

    def remove(self, tool_id: str) -> None:
        if not isinstance(tool_id, str):
            raise InputError(f"remove(): a tool id must be a string, got {type(tool_id).__name__} {tool_id!r:.80}")
        key = tool_key(tool_id)
        if key not in self._id_by_key:
            raise UnknownToolError(f"unknown tool id {tool_id!r} (not in the index)")
        self._writable().remove(key)
        del self._id_by_key[key]
        del self._key_by_id[tool_id]

    # -- queries -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._id_by_key)

    def __contains__(self, tool_id: object) -> bool:
        return isinstance(tool_id, str) and tool_key(tool_id) in self._id_by_key

    @property
    def ids(self) -> list[str]:
        return list(self._id_by_key.values())

    def search(self, queries: np.ndarray, count: int) -> list[tuple[list[str], np.ndarray]]:
        """For each query vector, the ``count`` nearest tools as (ids, cosine similarities), best first."""
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        count = min(int(count), len(self))
        if count <= 0 or len(queries) == 0:
            return [([], np.zeros(0, np.float32)) for _ in range(len(queries))]
        matches = self._index.search(queries, count, exact=len(self) <= EXACT_SEARCH_MAX)
        keys = np.atleast_2d(matches.keys)
        dists = np.atleast_2d(matches.distances)
        counts = np.atleast_1d(matches.counts) if hasattr(matches, "counts") else [keys.shape[1]] * len(keys)
        out = []
        for row_keys, row_d, n in zip(keys, dists, counts):
            n = int(n)
            ids = [self._id_by_key[int(k)] for k in row_keys[:n]]
            out.append((ids, (1.0 - row_d[:n]).astype(np.float32)))
        return out

    def vectors(self, ids: Iterable[str]) -> np.ndarray:
        """The stored vectors of these tools, as float32 unit vectors (for the adaptive cut's K_sim)."""
        ids = list(ids)
        try:
            keys = [self._key_by_id[i] for i in ids]
        except KeyError as e:
            raise UnknownToolError(f"unknown tool id {e.args[0]!r} (not in the index)") from None
        if not keys:
            return np.zeros((0, self.ndim), dtype=np.float32)
        vecs = self._get_raw(np.array(keys, dtype=np.uint64))
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        unit: np.ndarray = vecs / np.clip(norms, 1e-12, None)  # numpy types this Any (dtype-generic arrays)
        return unit.astype(np.float32)

    def _get_raw(self, keys: np.ndarray) -> np.ndarray:
        # usearch's annotations: dtype takes only names (numpy types work too), and a missing key would
        # be None (every key here is one of the index's own, read from _key_by_id / _id_by_key)
        got = cast("np.ndarray | tuple[np.ndarray, ...]",
                   self._index.get(keys, dtype=np.float32))  # type: ignore[arg-type]
        return np.stack(got) if isinstance(got, (tuple, list)) else np.atleast_2d(got)

"""The lexical channel: an Okapi BM25 index of the tool texts (numpy only), and its fusion with dense lists.

Tokens (``lexical_tokens``): the text's words (runs of letters and digits, any script) with
identifiers split at snake_case, kebab-case and camelCase boundaries, lowercased, then, with
``stem``, reduced by Harman's S-stemmer (plural endings only: "alarms" -> "alarm", "queries" ->
"query"; it never merges words that differ in more than their plural).

Scores (Robertson's BM25): for a query of tokens q_1..q_m (repeats count again) and a tool d,
  score(d) = sum_j idf(q_j) * tf(q_j, d) * (k1 + 1) / (tf(q_j, d) + k1 * (1 - b + b * |d| / avgdl))
with idf ``lucene`` = ln(1 + (N - df + 0.5) / (df + 0.5)) (always positive), or ``okapi`` =
ln((N - df + 0.5) / (df + 0.5)) with negative values raised to epsilon * the mean idf (rank_bm25's
BM25Okapi, epsilon = 0.25). Only tools that share a token with the query are returned.

The index is a term -> postings CSR matrix (``indptr``, tool rows ``docs``, term frequencies
``tf``) plus each tool's length; the per-posting BM25 weights are computed from them once, so a
query is a gather of its terms' postings and one ``bincount``. ``save`` writes one uncompressed
``.npz`` (format ``magicselector-bm25/1``: ``meta``, ``vocab`` and ``ids`` as UTF-8 JSON bytes,
``indptr`` int64, ``docs`` int32, ``tf`` uint16, ``doc_len`` int32); ``load`` reads it without
pickle. ``add`` / ``remove`` edit the postings in place of a rebuild: each is one vectorised pass
over all postings (O(total postings)); the weights, which N and avgdl change for every tool, are
recomputed once by the next query (also O(total postings)), so a batch of changes pays it once
(docs/bench/lexical.md measures both). Each is all or nothing: its input is checked and the new
postings computed before any is assigned, so a refused change leaves the index as it was.

``fuse_lexical`` merges each dense retrieval list with the lexical list of the same text by a
weighted sum of per-list z-scores of the cosine and BM25 scores, both computed exactly for every
candidate of either list.
"""
from __future__ import annotations

import io
import json
import re
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypedDict

import numpy as np

from ..errors import BundleError, InputError, UnknownToolError
from ..files import npy_header, trim_heap
from .fuse import RankedList

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11 only

    from ..bundle import Bundle
    from ..catalog import Catalog
    from .index import ToolIndex

FORMAT = "magicselector-bm25/1"
IDF_MODES = ("lucene", "okapi")
_OKAPI_EPSILON = 0.25
_BUILD_CHUNK = 4096  # texts per step of build: the Python lists of a step, then numpy arrays
_TRIM_AT = 10_000  # a build over this many tools hands the C heap's free memory back at its end
_WEIGH_CHUNK = 1 << 18  # postings per step of _reweigh: its float64 temporaries stay a few MB
_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")  # not after a digit: "ZR4QX7" is one code


@lru_cache(maxsize=1 << 16)
def s_stem(word: str) -> str:
    """Harman's S-stemmer (1991): strips English plural endings, nothing else."""
    for ending, unless, longer_than, drop, add in _S_RULES:
        if len(word) > longer_than and word.endswith(ending) and not word.endswith(unless):
            return word[:-drop] + add
    return word


# Harman's rules, the first that applies wins: (ending, not after these endings, the word longer
# than, characters dropped, what replaces them)
_S_RULES = (("ies", ("eies", "aies"), 3, 3, "y"), ("es", ("aes", "ees", "oes"), 3, 1, ""),
            ("s", ("us", "ss"), 2, 1, ""))


def lexical_tokens(text: str, stem: bool = True) -> list[str]:
    """The BM25 tokens of a text (see the module docstring)."""
    words = _WORD.findall(_CAMEL.sub(" ", text).lower())
    return [s_stem(w) for w in words] if stem else words


class LexicalParams(TypedDict, total=False):
    """LexicalIndex's keyword parameters (what ``build`` and ``from_catalog`` pass on)."""
    k1: float
    b: float
    idf: str
    stem: bool


class LexicalIndex:
    """BM25 over tool texts, addressed by tool id; ``search`` ranks tools for a batch of texts."""

    def __init__(self, k1: float = 1.2, b: float = 0.75, idf: str = "lucene", stem: bool = True) -> None:
        if not k1 >= 0.0:
            raise InputError(f"lexical k1 must be >= 0, got {k1!r}")
        if not 0.0 <= b <= 1.0:
            raise InputError(f"lexical b must be within [0, 1], got {b!r}")
        if idf not in IDF_MODES:
            raise InputError(f"lexical idf must be one of {IDF_MODES}, got {idf!r}")
        self.k1, self.b, self.idf_mode, self.stem = float(k1), float(b), idf, bool(stem)
        self._vocab: list[str] = []
        self._term_id: dict[str, int] = {}
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        self._indptr = np.zeros(1, dtype=np.int64)
        self._docs = np.zeros(0, dtype=np.int32)
        self._tf = np.zeros(0, dtype=np.uint16)
        self._doc_len = np.zeros(0, dtype=np.int32)
        self._weights = np.zeros(0, dtype=np.float32)
        self._stale = False  # weights out of date after add/remove; recomputed by the next query

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def build(cls, ids: Sequence[str], texts: Iterable[str], **params: Unpack[LexicalParams]) -> "LexicalIndex":
        """An index of these tools (the i-th text is the text of ``ids[i]``). ``texts`` may be a
        generator: it is read once, ``_BUILD_CHUNK`` texts at a time, and only the postings (numpy
        arrays) are kept, so a catalog's texts never need to be in memory together."""
        index = cls(**params)
        for tool_id in ids:
            _check_id(tool_id, "build")
        if len(set(ids)) != len(ids):
            raise InputError("lexical build: the same tool id appears twice")
        postings = index._postings(texts, len(ids))
        lengths = postings.lengths
        if len(lengths) != len(ids):
            raise InputError(f"lexical build: {len(ids)} ids but {len(lengths)} texts")
        postings.flush()
        index._ids = list(ids)
        index._row = {i: r for r, i in enumerate(index._ids)}
        index._set_postings(*postings.parts, lengths)
        if len(ids) >= _TRIM_AT:
            s_stem.cache_clear()  # a large catalog's words (12 MB over 100,000 tools); queries refill it
            trim_heap()  # what the build's lists and temporaries took, back to the system
        return index

    def _postings(self, texts: Iterable[str], most: int) -> "_Postings":
        """The postings of at most ``most`` texts, read once, ``_BUILD_CHUNK`` at a time."""
        postings = _Postings()
        for row, text in enumerate(texts):
            if row >= most:
                raise InputError(f"lexical build: {most} ids but more texts")
            if not isinstance(text, str):
                raise InputError(f"lexical build(): text {row} must be a string, got {type(text).__name__}")
            counts = self._counts(text)
            postings.add([self._intern(t) for t in counts], counts)
            if (row + 1) % _BUILD_CHUNK == 0:
                postings.flush()
        return postings

    @classmethod
    def from_catalog(cls, catalog: Catalog, **params: Unpack[LexicalParams]) -> "LexicalIndex":
        """An index of a catalog's tool texts (``catalog.tool_text``), made one tool at a time."""
        from ..catalog import tool_text

        return cls.build(catalog.ids, (tool_text(t) for t in catalog), **params)

    def _counts(self, text: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for tok in lexical_tokens(text, self.stem):
            counts[tok] = counts.get(tok, 0) + 1
        return counts

    def _intern(self, term: str) -> int:
        tid = self._term_id.get(term)
        if tid is None:
            tid = self._term_id[term] = len(self._vocab)
            self._vocab.append(term)
        return tid

    def _set_postings(self, terms: list[np.ndarray], tfs: list[np.ndarray], per_tool: list[np.ndarray],
                      doc_len: Sequence[int]) -> None:
        """The postings from build's steps (ascending tool rows; each step's postings tool by tool,
        ``per_tool[k][j]`` of them for its j-th tool): term-major, and within a term in row order
        (the order ``np.lexsort((docs, terms))`` gives). Each step is placed straight into the
        final arrays at its terms' next free slots and let go, so no array of all postings is made
        beside them but the steps' own term ids and tfs."""
        vocab = len(self._vocab)
        counts = np.zeros(vocab, dtype=np.int64)
        for step_terms in terms:
            counts += np.bincount(step_terms, minlength=vocab)
        self._indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        total = int(self._indptr[-1])
        docs = np.empty(total, dtype=np.int32)
        tf = np.empty(total, dtype=np.uint16)
        free = self._indptr[:-1].copy()  # each term's next free slot
        first_row = 0
        while terms:
            step_terms, step_tf, step_counts = terms.pop(0), tfs.pop(0), per_tool.pop(0)
            rows = np.repeat(np.arange(first_row, first_row + len(step_counts), dtype=np.int32), step_counts)
            first_row += len(step_counts)
            if not len(step_terms):
                continue
            order = np.argsort(step_terms, kind="stable")  # by term; within a term, rows ascend
            sorted_terms = step_terms[order]
            run_start = np.flatnonzero(np.concatenate([[True], sorted_terms[1:] != sorted_terms[:-1]]))
            run_length = np.diff(np.append(run_start, len(sorted_terms)))
            rank = np.arange(len(sorted_terms)) - np.repeat(run_start, run_length)  # place within its term's run
            slots = free[sorted_terms] + rank
            docs[slots] = rows[order]
            tf[slots] = step_tf[order]
            free[sorted_terms[run_start]] += run_length
        self._docs, self._tf = docs, tf  # tf was clipped to uint16 when its step was made
        self._doc_len = np.asarray(doc_len, dtype=np.int32).reshape(-1)
        self._reweigh()

    def _reweigh(self) -> None:
        """The per-posting BM25 weights from tf, df, N and avgdl."""
        self._stale = False
        n = len(self._ids)
        idf = _idf(np.diff(self._indptr).astype(np.float64), n, self.idf_mode)
        avgdl = float(self._doc_len.mean()) if n else 1.0
        avgdl = avgdl if avgdl > 0 else 1.0
        if len(self._docs) == 0:
            self._weights = np.zeros(0, dtype=np.float32)
            return
        # in steps of postings: each weight depends on its own posting only, so the steps give the
        # same floats as one pass, without float64 temporaries the size of all postings
        weights = np.empty(len(self._docs), dtype=np.float32)
        for start in range(0, len(self._docs), _WEIGH_CHUNK):
            stop = min(start + _WEIGH_CHUNK, len(self._docs))
            tf = self._tf[start:stop].astype(np.float64)
            norm = self.k1 * (1.0 - self.b + self.b * self._doc_len[self._docs[start:stop]] / avgdl)
            term_of = np.searchsorted(self._indptr, np.arange(start, stop), side="right") - 1
            weights[start:stop] = idf[term_of] * tf * (self.k1 + 1.0) / (tf + norm)
        self._weights = weights

    # -- persistence ----------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """The index's format, parameters and size (the bundle manifest's ``lexical`` section)."""
        return {"format": FORMAT, **self.params, "text": "catalog.tool_text",
                "tokens": "words split at snake/kebab/camelCase, lowercased" + (", S-stemmed" if self.stem else ""),
                "tools": len(self._ids), "terms": len(self._vocab), "postings": int(len(self._docs))}

    def save(self, path: str | Path) -> None:
        """One uncompressed .npz (``FORMAT``), loadable without pickle."""
        meta = self.describe()
        with open(path, "wb") as f:  # a file object: np.savez would append .npz to a bare path
            np.savez(f, meta=_json_bytes(meta), vocab=_json_bytes(self._vocab), ids=_json_bytes(self._ids),
                     indptr=self._indptr, docs=self._docs, tf=self._tf, doc_len=self._doc_len)

    @classmethod
    def load(cls, path: str | Path, ids: Sequence[str] | None = None, data: bytes | None = None) -> "LexicalIndex":
        """Read a saved index (from ``data``, the file's bytes, when given: the file is not opened);
        with ``ids``, check that it holds exactly those tools. A damaged file is a BundleError."""
        path = Path(path)
        if data is None and not path.is_file():
            raise BundleError(f"lexical index file not found: {path}")
        try:
            _check_members(io.BytesIO(data) if data is not None else path, path)
            with np.load(io.BytesIO(data) if data is not None else path, allow_pickle=False) as z:
                index = cls._from_arrays(z, path)
        except BundleError:
            raise
        # NotImplementedError: zipfile's answer to a header naming a zip version or compression it lacks
        except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile,
                NotImplementedError, RecursionError) as e:
            raise BundleError(f"{path}: not a readable lexical index ({type(e).__name__}: {str(e)[:200]})") from None
        index._check_arrays(path)
        index._bind(ids, path)
        return index

    def _bind(self, ids: Sequence[str] | None, path: Path) -> None:
        """A loaded index's lookups and weights; with ``ids``, checked to hold exactly those tools."""
        self._term_id = {t: i for i, t in enumerate(self._vocab)}
        self._row = {i: r for r, i in enumerate(self._ids)}
        if ids is not None and (set(ids) != set(self._row) or len(ids) != len(self._ids)):
            missing = [i for i in ids if i not in self._row][:3]
            raise BundleError(f"{path}: the lexical index holds {len(self._ids)} tools, the catalog {len(ids)} "
                              f"(e.g. {missing} not indexed); rebuild the bundle")
        self._reweigh()

    @classmethod
    def _from_arrays(cls, z: Any, path: Path) -> "LexicalIndex":
        """An index of a saved file's members (``np.load``'s archive), its format checked."""
        meta = json.loads(bytes(z["meta"]).decode("utf-8"))
        if meta.get("format") != FORMAT:
            raise BundleError(f"{path}: lexical index format {meta.get('format')!r}, expected {FORMAT!r}")
        index = cls(k1=meta["k1"], b=meta["b"], idf=meta["idf"], stem=meta["stem"])
        index._vocab = json.loads(bytes(z["vocab"]).decode("utf-8"))
        index._ids = json.loads(bytes(z["ids"]).decode("utf-8"))
        index._indptr = z["indptr"].astype(np.int64)
        index._docs = z["docs"].astype(np.int32)
        index._tf = z["tf"].astype(np.uint16)
        index._doc_len = z["doc_len"].astype(np.int32)
        return index

    def _check_arrays(self, path: Path) -> None:
        """A loaded index's arrays agree with each other (terms, postings, tools)."""
        n, v = len(self._ids), len(self._vocab)
        if (len(self._indptr) != v + 1 or self._indptr[-1] != len(self._docs) or len(self._tf) != len(self._docs)
                or len(self._doc_len) != n or (len(self._docs) and not 0 <= self._docs.min() <= self._docs.max() < n)):
            raise BundleError(f"{path}: lexical index arrays disagree (tools {n}, terms {v}, "
                              f"postings {len(self._docs)})")

    # -- catalog changes -------------------------------------------------------------------------
    # All or nothing: add and remove check their input, then compute the new postings into locals
    # and only then assign them, so a refusal (or a MemoryError part-way) leaves the index as it was.
    def add(self, tool_id: str, text: str) -> None:
        """Add a tool, or replace the tool with the same id (O(total postings), see the module docstring).
        A tool id or text that is not a string is an InputError naming it; the index is then unchanged."""
        counts, length = self._checked_counts(tool_id, text)
        new_terms = [t for t in counts if t not in self._term_id]  # new terms, numbered after the vocabulary
        new_term_id = {t: len(self._vocab) + k for k, t in enumerate(new_terms)}
        terms = np.asarray([self._term_id[t] if t in self._term_id else new_term_id[t] for t in counts],
                           dtype=np.int64)
        vocab = len(self._vocab) + len(new_terms)
        indptr, docs, tf, doc_len = self._indptr, self._docs, self._tf, self._doc_len
        replaced = self._row.get(tool_id)
        ids: list[str] | None = None  # the ids after a replacement (a plain add appends at the end)
        if replaced is not None:
            indptr, docs, tf, doc_len = self._without_row(replaced)
            ids = self._ids[:replaced] + self._ids[replaced + 1:] + [tool_id]
        row = len(self._ids) - (replaced is not None)
        doc_len = np.append(doc_len, np.int32(length))
        if len(indptr) < vocab + 1:  # new terms get empty posting lists
            indptr = np.concatenate([indptr, np.full(vocab + 1 - len(indptr), indptr[-1], dtype=np.int64)])
        if len(terms):
            indptr, docs, tf = _with_row(indptr, docs, tf, terms, np.fromiter(counts.values(), dtype=np.int64),
                                         row, vocab)
        row_of = {i: r for r, i in enumerate(ids)} if ids is not None else None
        # from here on nothing can fail: the new state is assigned
        self._vocab.extend(new_terms)
        self._term_id.update(new_term_id)
        if ids is None or row_of is None:
            self._ids.append(tool_id)
            self._row[tool_id] = row
        else:
            self._ids, self._row = ids, row_of
        self._indptr, self._docs, self._tf, self._doc_len = indptr, docs, tf, doc_len
        self._stale = True

    def _checked_counts(self, tool_id: str, text: str) -> tuple[dict[str, int], int]:
        """``add``'s input checked before anything changes: the text's term counts and length, or an
        InputError naming the tool (an id or text that is not a string, a length past int32)."""
        _check_id(tool_id, "add")
        if not isinstance(text, str):
            raise InputError(f"lexical add(): the text of tool {tool_id!r:.80} must be a string, "
                             f"got {type(text).__name__} (the index is unchanged)")
        counts = self._counts(text)
        length = sum(counts.values())
        if length > np.iinfo(np.int32).max:
            raise InputError(f"lexical add(): the text of tool {tool_id!r:.80} has {length:,} tokens, more "
                             f"than a tool's length can hold ({np.iinfo(np.int32).max:,}; the index is unchanged)")
        return counts, length

    def remove(self, tool_id: str) -> None:
        """Remove the tool with this id: an InputError when the id is not a string, an
        UnknownToolError naming it when the index does not hold it (the index is then unchanged)."""
        _check_id(tool_id, "remove")
        row = self._row.get(tool_id)
        if row is None:
            raise UnknownToolError(f"unknown tool id {tool_id!r} (not in the lexical index)")
        self._drop(row)

    def _drop(self, row: int) -> None:
        """Remove the tool at this row (all or nothing, as ``remove``)."""
        indptr, docs, tf, doc_len = self._without_row(row)
        ids = self._ids[:row] + self._ids[row + 1:]
        row_of = {i: r for r, i in enumerate(ids)}
        self._ids, self._row = ids, row_of
        self._indptr, self._docs, self._tf, self._doc_len = indptr, docs, tf, doc_len
        self._stale = True

    def _without_row(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The postings (indptr, docs, tf, doc_len) without the tool at ``row``, later rows one lower;
        the index itself is not changed."""
        keep = self._docs != row
        removed = np.repeat(np.arange(len(self._vocab)), np.diff(self._indptr))[~keep]
        indptr = self._indptr - np.concatenate([[0], np.cumsum(np.bincount(removed, minlength=len(self._vocab)))])
        docs = self._docs[keep]
        docs = np.where(docs > row, docs - 1, docs).astype(np.int32)
        return indptr, docs, self._tf[keep], np.delete(self._doc_len, row)

    # -- queries -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._row

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    @property
    def params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "idf": self.idf_mode, "stem": self.stem}

    def tokens(self, text: str) -> list[str]:
        return lexical_tokens(text, self.stem)

    def scores(self, text: str) -> np.ndarray:
        """BM25 of every tool for one text, in index row order (``ids``)."""
        if self._stale:
            self._reweigh()
        term_id = self._term_id
        tids = np.fromiter((term_id[t] for t in lexical_tokens(text, self.stem) if t in term_id), dtype=np.int64)
        if not len(tids):
            return np.zeros(len(self._ids), dtype=np.float32)
        # every posting of every query token, in query order (one gather: a long query has
        # thousands of tokens, and the summation order stays that of the postings concatenated)
        starts, stops = self._indptr[tids], self._indptr[tids + 1]
        sizes = stops - starts
        at = np.repeat(starts - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes) + np.arange(int(sizes.sum()))
        return np.bincount(self._docs[at], weights=self._weights[at], minlength=len(self._ids)).astype(np.float32)

    def search(self, texts: Iterable[str], count: int) -> list[tuple[list[str], np.ndarray]]:
        """For each text, up to ``count`` tools that share a token with it, as (ids, BM25 scores),
        best first; ties go to the tool indexed first."""
        return [self.top(self.scores(text), count) for text in texts]

    def score_of(self, scores: np.ndarray, ids: Sequence[str]) -> np.ndarray:
        """The entries of ``scores`` (one text's ``scores``) for ``ids``; 0 for a tool not indexed."""
        return np.asarray([scores[self._row[t]] if t in self._row else 0.0 for t in ids], dtype=np.float32)

    def top(self, scores: np.ndarray, count: int) -> tuple[list[str], np.ndarray]:
        """Up to ``count`` tools with a score > 0 in ``scores`` (one text's ``scores``), best first."""
        hit = np.flatnonzero(scores > 0)
        s = scores[hit]
        if count <= 0 or not len(hit):
            return [], np.zeros(0, dtype=np.float32)
        if len(hit) > count:  # keep every tool tied with the count-th, so the tie order is exact
            kth = -np.partition(-s, count - 1)[count - 1]
            keep = s >= kth
            hit, s = hit[keep], s[keep]
        order = np.lexsort((hit, -s))[:count]
        return [self._ids[i] for i in hit[order]], s[order]


def _idf(df: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Each term's idf from its document frequency over ``n`` tools: Lucene's, or rank_bm25's
    BM25Okapi (idf of the terms that occur, negatives raised to eps * their mean)."""
    if mode == "lucene":
        return np.asarray(np.log1p((n - df + 0.5) / (df + 0.5)))
    idf = np.log(np.maximum(n - df + 0.5, 1e-12) / (df + 0.5))
    present = df > 0
    floor = _OKAPI_EPSILON * (idf[present].mean() if present.any() else 0.0)
    return np.asarray(np.where(idf < 0, floor, idf))


def _check_id(tool_id: object, method: str) -> None:
    """A tool id as add and remove take it: a string; else an InputError naming it."""
    if not isinstance(tool_id, str):
        after = "" if method == "build" else " (the index is unchanged)"
        raise InputError(f"lexical {method}(): a tool id must be a string, got {type(tool_id).__name__} "
                         f"{tool_id!r:.80}{after}")

class _Postings:
    """What ``LexicalIndex.build`` keeps of the texts it reads: per chunk, each posting's term id and
    tf and each tool's number of postings (its rows follow from those, so they are never stored),
    as numpy arrays; per tool, its length in terms."""

    def __init__(self) -> None:
        self.parts: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
        self.lengths: list[int] = []
        self.terms: list[int] = []
        self.tfs: list[int] = []
        self.per_tool: list[int] = []

    def add(self, term_ids: list[int], counts: dict[str, int]) -> None:
        """One tool's postings: its terms' ids and counts."""
        self.terms.extend(term_ids)
        self.tfs.extend(counts.values())
        self.per_tool.append(len(counts))
        self.lengths.append(sum(counts.values()))

    def flush(self) -> None:
        """The chunk read so far, as arrays."""
        # uint16 as _set_postings stores it (the clip there is the same clip, done earlier)
        tf = np.minimum(np.asarray(self.tfs, dtype=np.int64), np.iinfo(np.uint16).max).astype(np.uint16)
        self.parts[0].append(np.asarray(self.terms, dtype=np.int32))
        self.parts[1].append(tf)
        self.parts[2].append(np.asarray(self.per_tool, dtype=np.int32))
        del self.terms[:], self.tfs[:], self.per_tool[:]


def _check_members(source: Any, path: Path) -> None:
    """Refuse a lexical file that would inflate or allocate beyond its own size, before any array is
    read: ``save`` stores every member uncompressed, so a compressed member (a zip bomb: 1.5 MB
    inflating to 1.5 GB) is refused, and each member's ``.npy`` header must declare no more bytes
    of array than the member holds (a header shape of 10^12 would otherwise be allocated)."""
    with zipfile.ZipFile(source) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise BundleError(f"{path}: member {info.filename!r:.80} is compressed; a lexical index is stored "
                                  "uncompressed (LexicalIndex.save), so its size bounds what loading it takes")
            with archive.open(info) as member:
                shape, _, dtype = npy_header(member)
                need = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if dtype.hasobject or need > info.file_size:
                    raise BundleError(f"{path}: member {info.filename!r:.80} declares {need:,} bytes of array in "
                                      f"{info.file_size:,}; the file is damaged or crafted")


def bundle_lexical(bundle: Bundle, ids: Sequence[str], verify: bool = True) -> "LexicalIndex | None":
    """The bundle's lexical index (its ``lexical`` manifest section), read once from the file's
    checked bytes (``Bundle.read``) and bound to the catalog's ids; None when the bundle has none."""
    section = bundle.section("lexical")
    if not section:
        return None
    return LexicalIndex.load(bundle.file(section["file"]), ids, data=bundle.read(section["file"], verify))


def _json_bytes(value: object) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)


# -- fusion with the dense lists ---------------------------------------------------------------------
def fuse_lexical(lists: Sequence[RankedList], texts: Sequence[str], vectors: np.ndarray, index: ToolIndex,
                 lexical: LexicalIndex, *, weight: float, lexical_candidates: int, candidates: int) -> list[RankedList]:
    """Each dense list fused with the lexical list of its text (its ``lexical_candidates`` best BM25
    hits), cut to ``candidates`` tools: score = (1 - weight) * z(cosine) + weight * z(BM25) over
    the union of both lists, with the cosine from the index's vectors (``index.vectors``) and the
    BM25 of every candidate (0 where it shares no token), so a text that matches no tool lexically
    keeps its dense order."""
    out = []
    for lst, text, vec in zip(lists, texts, vectors):
        bm25 = lexical.scores(text)
        lex_ids, _ = lexical.top(bm25, lexical_candidates)
        if not lex_ids or weight <= 0.0:
            dense = np.asarray(lst.scores, dtype=np.float32)[:candidates]
            ids = list(lst.ids)[:candidates]
            out.append(RankedList(ids, dense, dense=dense, lexical=lexical.score_of(bm25, ids)))
            continue
        union = list(dict.fromkeys([*lst.ids, *lex_ids]))
        cos = index.vectors(union) @ np.asarray(vec, dtype=np.float32)
        lex = lexical.score_of(bm25, union)
        fused = (1.0 - weight) * _z(cos) + weight * _z(lex)
        order = np.argsort(-fused, kind="stable")[:candidates]
        out.append(RankedList([union[i] for i in order], fused[order].astype(np.float32),
                              dense=cos[order].astype(np.float32), lexical=lex[order]))
    return out


def _z(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros_like(x)


def _with_row(indptr: np.ndarray, docs: np.ndarray, tf: np.ndarray, terms: np.ndarray, counts: np.ndarray,
              row: int, vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New CSR postings (indptr, docs, tf) with ``row`` appended to each of ``terms``' lists, its
    term frequencies ``counts`` (in ``terms``' order) capped at uint16; the inputs are not changed."""
    order = np.argsort(terms, kind="stable")
    terms = terms[order]
    tfs = np.minimum(counts[order], np.iinfo(np.uint16).max)
    at = indptr[terms + 1]  # the end of each term's postings: the new row is the highest
    docs = np.insert(docs, at, np.int32(row))
    tf = np.insert(tf, at, tfs.astype(np.uint16))
    indptr = indptr + np.concatenate([[0], np.cumsum(np.bincount(terms, minlength=vocab))])
    return indptr, docs, tf

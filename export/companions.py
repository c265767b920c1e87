"""Companions through a catalog's own structure, an experiment (docs/bench/companions.md: it did not win, so no bundle carries it): the pair features of two tools, the learned pair model over them (logistic regression in numpy), the companion table a bundle build would write, and the lift a select would apply.

A turn that needs one tool often needs another that the catalog itself links to it: one server or
API group, a resource one returns that the other takes as a parameter (``movie_id`` beside a movie
search), shared parameter names, paired verbs (search/book, create/update). Every feature here is
read off the tools' names, descriptions and parameters (and, where given, their embeddings), never
off a tool's identity, so a model fitted on the train parts' multi-tool gold sets applies to any
catalog, the evaluation parts' tools included (they never occur in training).

``CatalogFacts`` holds what the features need of one catalog (token matrices, groups, verbs);
``feature_block`` gives the features of some tools against every tool (matrix products over the
shared vocabulary, so a 5,000-tool catalog is a few seconds of numpy); ``PairModel`` scores them;
``companion_table`` keeps each tool's few best companions (``CompanionTable``: a lookup, not a graph
walk); ``lift_companions`` moves the companions of a turn's first kept tools into the cut.

The lift: a turn that needs two tools often ranks one of them high and the other below the cut (the
search before the booking, the endpoint that takes the found id). It reads the table rows of the
ranking's first ``hits`` kept tools and moves each companion whose pair score clears ``min_score``
and that the turn ranked at all (within ``depth``) to just after those hits, into the kept set (K
grows by it, never past ``k_max``; a caller's budget would be spent afterwards).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from magicselector.catalog import Catalog, Tool
from magicselector.errors import BundleError, InputError

TABLE_SCHEMA = "magicselector-companions/1"
FEATURES = ("same_group", "same_server", "name_overlap", "id_link", "mention", "shared_params", "paired_verbs",
            "same_verb", "description_cosine", "embedding_cosine")
HTTP_VERBS = {"get": "get", "post": "create", "put": "update", "patch": "update", "delete": "delete"}
# verbs a turn tends to chain: find a thing, then act on it or read it in detail (unordered pairs)
PAIRED_VERBS = frozenset(frozenset(p) for p in (
    ("search", "book"), ("search", "reserve"), ("search", "buy"), ("search", "get"), ("search", "create"),
    ("find", "book"), ("find", "reserve"), ("find", "buy"), ("find", "get"), ("lookup", "get"),
    ("list", "get"), ("list", "update"), ("list", "delete"), ("get", "update"), ("get", "create"),
    ("create", "update"), ("create", "delete"), ("create", "add"), ("search", "add"), ("search", "play"),
    ("find", "play"), ("get", "send"), ("search", "send"), ("get", "add"), ("check", "book"),
    ("check", "reserve"), ("search", "list"), ("find", "list"),
))
VERB_ALIASES = {"fetch": "get", "retrieve": "get", "read": "get", "show": "get", "query": "search",
                "lookup": "lookup", "look": "lookup", "locate": "find", "make": "create", "new": "create",
                "add": "add", "insert": "add", "set": "update", "edit": "update", "modify": "update",
                "change": "update", "remove": "delete", "cancel": "delete", "purchase": "buy", "order": "buy",
                "reservation": "reserve", "schedule": "book", "obtain": "get", "calculate": "get",
                "compute": "get", "transfer": "send", "post": "send", "share": "send", "start": "play"}
KNOWN_VERBS = set(VERB_ALIASES.values()) | {v for pair in PAIRED_VERBS for v in pair} | {"check"}
STOP = frozenset("a an the of for to in on by and or with from at is are be this that it its as api get post put "
                 "patch delete id ids v1 v2 v3 data info details".split())
ID_SUFFIX = re.compile(r"(?:_?(?:id|ids|key|code|uri|url|token|slug|name)|(?:Id|Ids|Key|Code|Uri|Url|Token|Name))$")


def tokens(text: str) -> list[str]:
    """Lower-case word tokens of an identifier or a sentence: snake_case, camelCase, paths and
    dotted names split into words, numbers kept."""
    return [t.lower() for t in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", text)]


def content(words: Iterable[str]) -> list[str]:
    return [w for w in words if w not in STOP and w not in KNOWN_VERBS and len(w) > 1]


def tool_verb(tool: Tool) -> str:
    """The action a tool's name leads with (an HTTP method read as one; a path with a search
    segment is a search), mapped onto a small set of verbs; "" when the name leads with none."""
    name = tool.name.rsplit(".", 1)[-1] or tool.name  # a dotted name's last part names the action
    words = tokens(name)
    if not words:
        return ""
    if words[0] in HTTP_VERBS and name[: len(words[0])].isupper():
        return "search" if "search" in words[1:] else HTTP_VERBS[words[0]]
    for w in words[:2]:  # CamelCase API names put the service first: SkyScrapperSearchAirport
        verb = VERB_ALIASES.get(w, w)
        if verb in KNOWN_VERBS:
            return verb
    return ""


def tool_group(tool: Tool) -> str:
    """The API group a tool's name or description puts it in: the part before the last dot of a
    dotted name (``Alarm_1.GetAlarms``), an "X API" description prefix, or the leading word of a
    CamelCase name that starts with a service (``TripadvisorSearchHotels``); "" where none."""
    if "." in tool.name.strip("."):
        return str(tool.name.rsplit(".", 1)[0]).lower()
    match = re.match(r"\s*([^,:.()]{1,40}?)\s+API\b", tool.description)
    if match:
        return match.group(1).lower()
    words = re.findall(r"[A-Z][a-z0-9]+", tool.name)
    if len(words) >= 2 and tool.name[:1].isupper() and "_" not in tool.name and words[0].lower() not in KNOWN_VERBS:
        return str(words[0]).lower()
    return ""


def _properties(tool: Tool) -> dict[str, Any]:
    props = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    return {str(k): v for k, v in props.items()} if isinstance(props, dict) else {}


def _binary(rows: Sequence[Iterable[int]], width: int) -> np.ndarray:
    out = np.zeros((len(rows), width), dtype=np.float32)
    for i, cols in enumerate(rows):
        out[i, list(cols)] = 1.0
    return out


def _group_ids(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each tool's group as an int (-1: none) and each group's specificity, 1 - (size-1)/(n-1): a
    group that holds the whole catalog says nothing."""
    names = sorted({k for k in keys if k})
    at = {k: i for i, k in enumerate(names)}
    ids = np.array([at.get(k, -1) for k in keys], dtype=np.int64)
    sizes = np.bincount(ids[ids >= 0], minlength=len(names)).astype(np.float32)
    spec = 1.0 - (sizes - 1.0) / max(1.0, len(keys) - 1.0)
    return ids, np.append(spec, 0.0).astype(np.float32)  # index -1 reads the trailing 0


@dataclass(frozen=True)
class CatalogFacts:
    """What the pair features read of one catalog, as matrices over its tools (row i: ``ids[i]``)."""

    ids: list[str]
    names: np.ndarray        # n x V: the name's content words
    name_sizes: np.ndarray   # n: how many content words each name has
    stems: np.ndarray        # n x V: words of id-like parameters (movie_id -> movie)
    param_text: np.ndarray   # n x V: words of the parameter names and descriptions
    params: np.ndarray       # n x P: parameter names, idf-weighted
    param_weight: np.ndarray  # n: the idf mass of each tool's parameters
    description: np.ndarray  # n x D: the description's tf-idf, unit rows
    group: np.ndarray        # n: API group id (-1: none)
    group_spec: np.ndarray   # groups + 1: the specificity of each group, then 0 for none
    server: np.ndarray
    server_spec: np.ndarray
    verb: np.ndarray         # n: verb id (-1: none)
    verb_pairs: np.ndarray   # verbs x verbs: 1 where the two verbs chain
    vectors: np.ndarray | None  # n x d unit embeddings, where given

    @property
    def n(self) -> int:
        return len(self.ids)


def catalog_facts(catalog: Catalog | Sequence[Tool], vectors: np.ndarray | None = None) -> CatalogFacts:
    """The facts of a catalog's tools; ``vectors`` (n x d, the index's tool embeddings in catalog
    order) adds the embedding cosine, else that feature is 0."""
    tools = list(catalog)
    if not tools:
        raise InputError("companions: the catalog has no tools")
    if vectors is not None and len(vectors) != len(tools):
        raise InputError(f"companions: vectors has {len(vectors)} rows for {len(tools)} tools")
    name_words = [set(content(tokens(t.name))) for t in tools]
    props = [_properties(t) for t in tools]
    stem_words = [{w for p in ps if ID_SUFFIX.search(p) for w in content(tokens(ID_SUFFIX.sub("", p)))} for ps in props]
    ptext_words = [set(content(w for p, spec in ps.items()
                               for w in tokens(p) + tokens(str(spec.get("description", "")) if isinstance(spec, dict)
                                                           else ""))) for ps in props]
    vocab = {w: i for i, w in enumerate(sorted(set().union(*name_words, *stem_words, *ptext_words)))}
    names = _binary([[vocab[w] for w in s] for s in name_words], len(vocab))
    stems = _binary([[vocab[w] for w in s] for s in stem_words], len(vocab))
    param_text = _binary([[vocab[w] for w in s] for s in ptext_words], len(vocab))

    pnames = [{re.sub(r"[^a-z0-9]", "", p.lower()) for p in ps} - {""} for ps in props]
    pvocab = {p: i for i, p in enumerate(sorted(set().union(*pnames)))}
    df = np.bincount([pvocab[p] for s in pnames for p in s], minlength=len(pvocab)).astype(np.float32)
    idf = np.log((len(tools) + 1.0) / (df + 1.0)).astype(np.float32)
    params = _binary([[pvocab[p] for p in s] for s in pnames], len(pvocab)) * idf[None, :]

    dwords = [content(tokens(t.description)) for t in tools]
    dvocab = {w: i for i, w in enumerate(sorted(set().union(*map(set, dwords))))}
    tf = np.zeros((len(tools), len(dvocab)), dtype=np.float32)
    for i, ws in enumerate(dwords):
        for w in ws:
            tf[i, dvocab[w]] += 1.0
    ddf = (tf > 0).sum(0).astype(np.float32)
    desc = np.log1p(tf) * np.log((len(tools) + 1.0) / (ddf + 1.0))[None, :]
    desc /= np.maximum(np.linalg.norm(desc, axis=1, keepdims=True), 1e-9)

    group, group_spec = _group_ids([tool_group(t) for t in tools])
    server, server_spec = _group_ids([(t.server or t.domain or "").lower() for t in tools])
    verbs = [tool_verb(t) for t in tools]
    vnames = sorted({v for v in verbs if v})
    vat = {v: i for i, v in enumerate(vnames)}
    pairs = np.array([[1.0 if frozenset((a, b)) in PAIRED_VERBS else 0.0 for b in vnames] for a in vnames],
                     dtype=np.float32).reshape(len(vnames), len(vnames))
    unit = None
    if vectors is not None:
        v = np.asarray(vectors, dtype=np.float32)
        unit = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)
    return CatalogFacts(ids=[t.id for t in tools], names=names, name_sizes=names.sum(1), stems=stems,
                        param_text=param_text, params=params, param_weight=params.sum(1), description=desc,
                        group=group, group_spec=group_spec, server=server, server_spec=server_spec,
                        verb=np.array([vat.get(v, -1) for v in verbs], dtype=np.int64), verb_pairs=pairs,
                        vectors=unit)


def _same(ids: np.ndarray, spec: np.ndarray, rows: np.ndarray) -> np.ndarray:
    a, b = ids[rows][:, None], ids[None, :]
    return np.where((a == b) & (a >= 0), spec[a], 0.0).astype(np.float32)


def feature_block(facts: CatalogFacts, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """The pair features (``FEATURES``, each in [0, 1]) of the tools at ``rows`` against every tool:
    (len(rows), n, len(FEATURES)). Every feature is symmetric in the two tools."""
    rows = np.asarray(rows, dtype=np.int64)
    nr, n = len(rows), facts.n
    out = np.zeros((nr, n, len(FEATURES)), dtype=np.float32)
    out[..., 0] = _same(facts.group, facts.group_spec, rows)
    out[..., 1] = _same(facts.server, facts.server_spec, rows)
    names = facts.names
    inter = names[rows] @ names.T
    union = facts.name_sizes[rows][:, None] + facts.name_sizes[None, :] - inter
    out[..., 2] = np.where(union > 0, inter / np.maximum(union, 1.0), 0.0)
    # one tool takes, as an id-like parameter, the thing the other is named for (person_id / search person)
    link = np.maximum(names[rows] @ facts.stems.T, facts.stems[rows] @ names.T)
    out[..., 3] = (link > 0).astype(np.float32)
    # the share of one tool's name words that the other's parameters speak of ("from the Search Airport API")
    size = np.maximum(facts.name_sizes, 1.0)
    mention_ab = (names[rows] @ facts.param_text.T) / size[rows][:, None]
    mention_ba = (facts.param_text[rows] @ names.T) / size[None, :]
    out[..., 4] = np.maximum(mention_ab, mention_ba)
    pin = facts.params[rows] @ (facts.params > 0).T.astype(np.float32)
    punion = facts.param_weight[rows][:, None] + facts.param_weight[None, :] - pin
    out[..., 5] = np.where(punion > 0, pin / np.maximum(punion, 1e-9), 0.0)
    va, vb = facts.verb[rows][:, None], facts.verb[None, :]
    has = (va >= 0) & (vb >= 0)
    if facts.verb_pairs.size:
        out[..., 6] = np.where(has, facts.verb_pairs[np.maximum(va, 0), np.maximum(vb, 0)], 0.0)
    out[..., 7] = (has & (va == vb)).astype(np.float32)
    out[..., 8] = facts.description[rows] @ facts.description.T
    if facts.vectors is not None:
        out[..., 9] = np.clip(facts.vectors[rows] @ facts.vectors.T, 0.0, 1.0)
    out[np.arange(nr), rows] = 0.0  # a tool is not its own companion
    return np.clip(out, 0.0, 1.0)


@dataclass(frozen=True)
class PairModel:
    """Logistic regression over ``FEATURES``: P(a turn needing one tool needs the other too)."""

    weights: tuple[float, ...]
    bias: float
    features: tuple[str, ...] = FEATURES

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.features):
            raise InputError(f"companions: {len(self.weights)} weights for {len(self.features)} features")

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        z = x @ np.asarray(self.weights, dtype=np.float32) + np.float32(self.bias)
        return (1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        return {"features": list(self.features), "weights": [round(w, 6) for w in self.weights],
                "bias": round(self.bias, 6)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "PairModel":
        try:
            features = tuple(str(f) for f in obj["features"])
            if features != FEATURES:
                raise InputError(f"companions: the pair model's features {features} are not this version's {FEATURES}")
            return cls(tuple(float(w) for w in obj["weights"]), float(obj["bias"]), features)
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"companions: not a pair model ({e})") from None


def fit_pair_model(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iterations: int = 50) -> PairModel:
    """Logistic regression by Newton steps with an L2 penalty on the weights (not the bias); the
    two classes weighted to equal mass, since a turn's non-companions far outnumber its companions."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or not (0 < y.sum() < len(y)):
        raise InputError("companions: fitting needs pairs of both classes")
    pos = y.sum()
    sample = np.where(y > 0, 0.5 / pos, 0.5 / (len(y) - pos)) * len(y)
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    reg = np.full(xb.shape[1], l2)
    reg[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -30, 30)))
        grad = xb.T @ (sample * (p - y)) + reg * w
        hess = (xb * (sample * p * (1 - p))[:, None]).T @ xb + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-7:
            break
    return PairModel(tuple(float(v) for v in w[:-1]), float(w[-1]))


def companion_table(facts: CatalogFacts, model: PairModel, per_tool: int = 4, floor: float = 0.5,
                    block: int = 128) -> CompanionTable:
    """Each tool's ``per_tool`` likeliest companions whose pair probability is at least ``floor``,
    computed ``block`` tools at a time (memory: block x n x features floats)."""
    if per_tool < 1:
        raise InputError(f"companions: per_tool must be >= 1, got {per_tool}")
    n = facts.n
    m = min(per_tool, max(1, n - 1))
    companions = np.full((n, m), -1, dtype=np.int32)
    scores = np.zeros((n, m), dtype=np.float32)
    for start in range(0, n, block):
        rows = np.arange(start, min(n, start + block))
        prob = model.probabilities(feature_block(facts, rows))
        prob[np.arange(len(rows)), rows] = 0.0
        top = np.argsort(-prob, axis=1, kind="stable")[:, :m]
        best = np.take_along_axis(prob, top, axis=1)
        keep = best >= floor
        companions[rows] = np.where(keep, top, -1)
        scores[rows] = np.where(keep, best, 0.0)
    return CompanionTable(list(facts.ids), companions, scores)


def gold_pairs(facts: CatalogFacts, turns: Iterable[tuple[Sequence[str], Sequence[str]]], depth: int = 30
               ) -> tuple[np.ndarray, np.ndarray]:
    """Training pairs from turns (gold ids, the turn's ranked ids): for each gold tool, every other
    gold tool is a companion (1) and every tool the turn ranked in its first ``depth`` that is not
    gold is not (0): the pairs a lift at select time has to tell apart. Gold tools outside the
    catalog are skipped. Returns (features, labels)."""
    at = {t: i for i, t in enumerate(facts.ids)}
    wanted: dict[int, list[tuple[int, float]]] = {}
    for gold, ranked in turns:
        g = [at[t] for t in dict.fromkeys(gold) if t in at]
        others = [at[t] for t in ranked[:depth] if t in at and t not in set(gold)]
        for a in g:
            cols = wanted.setdefault(a, [])
            cols += [(b, 1.0) for b in g if b != a]
            cols += [(b, 0.0) for b in others]
    if not wanted:
        return np.zeros((0, len(FEATURES)), dtype=np.float32), np.zeros(0, dtype=np.float32)
    rows = sorted(wanted)
    xs, ys = [], []
    for start in range(0, len(rows), 128):
        chunk = rows[start:start + 128]
        block = feature_block(facts, chunk)
        for j, a in enumerate(chunk):
            partners = np.array([b for b, _ in wanted[a]], dtype=np.int64)
            xs.append(block[j, partners])
            ys.append(np.array([label for _, label in wanted[a]], dtype=np.float32))
    return np.vstack(xs), np.concatenate(ys)


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """Average precision of a scoring of labelled pairs (a check on the pair model, held out)."""
    order = np.argsort(-scores, kind="stable")
    hits = labels[order] > 0
    if not hits.any():
        return math.nan
    precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float(precision[hits].mean())



@dataclass(frozen=True)
class CompanionConfig:
    """How the lift reads the table: the first ``hits`` kept tools bring their companions whose
    pair score is at least ``min_score``, at most ``max_lifted`` a turn, each from within the
    turn's first ``depth`` ranked tools (0: anywhere in the ranked list); a lifted companion that
    was below the cut is added (K grows, at most to ``k_max``)."""

    hits: int = 2
    min_score: float = 0.6
    max_lifted: int = 2
    depth: int = 0
    k_max: int = 10

    def __post_init__(self) -> None:
        for name in ("hits", "max_lifted", "k_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"companions.{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 0:
            raise InputError(f"companions.depth must be an integer >= 0, got {self.depth!r}")
        if not isinstance(self.min_score, (int, float)) or not 0.0 <= float(self.min_score) <= 1.0:
            raise InputError(f"companions.min_score must be within [0, 1], got {self.min_score!r}")


@dataclass(frozen=True)
class CompanionTable:
    """Row i: the companions of ``ids[i]`` (positions in ``ids``, -1: none) and their pair scores,
    best first."""

    ids: list[str]
    companions: np.ndarray  # n x m int32
    scores: np.ndarray      # n x m float32
    row: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.ids)
        if self.companions.ndim != 2 or self.companions.shape != self.scores.shape or len(self.companions) != n:
            raise BundleError(f"companions: table shapes {self.companions.shape} and {self.scores.shape} do not "
                              f"match {n} tools")
        if n and (self.companions.min(initial=-1) < -1 or self.companions.max(initial=-1) >= n):
            raise BundleError("companions: a companion points outside the table's tools")
        object.__setattr__(self, "row", {t: i for i, t in enumerate(self.ids)})

    def of(self, tool_id: str) -> list[tuple[str, float]]:
        """The companions of a tool, best first (none for a tool the table does not hold)."""
        i = self.row.get(tool_id)
        if i is None:
            return []
        return [(self.ids[c], float(s)) for c, s in zip(self.companions[i], self.scores[i]) if c >= 0]

    def to_json(self) -> dict[str, Any]:
        return {"schema": TABLE_SCHEMA, "ids": list(self.ids),
                "companions": self.companions.astype(int).tolist(),
                "scores": np.round(self.scores.astype(float), 4).tolist()}

    @classmethod
    def from_json(cls, obj: Any) -> "CompanionTable":
        if not isinstance(obj, dict) or obj.get("schema") != TABLE_SCHEMA:
            raise BundleError(f"companions: not a companion table (schema is not {TABLE_SCHEMA!r})")
        try:
            ids = [str(t) for t in obj["ids"]]
            companions = np.asarray(obj["companions"], dtype=np.int32).reshape(len(ids), -1)
            scores = np.asarray(obj["scores"], dtype=np.float32).reshape(len(ids), -1)
        except (KeyError, TypeError, ValueError) as e:
            raise BundleError(f"companions: unreadable companion table ({e})") from None
        return cls(ids, companions, scores)


@dataclass(frozen=True)
class Lift:
    """What the lift did: ``order`` (positions in the ranked list it was given, the new order), the
    new ``k``, and each lifted companion's hit and pair score."""

    order: list[int]
    k: int
    lifted: dict[str, tuple[str, float]]


def lift_companions(table: CompanionTable, config: CompanionConfig, ids: Sequence[str], k: int) -> Lift:
    """Lift the companions of the first ``config.hits`` of the ``k`` kept tools of ``ids`` (the
    ranked list, kept first) to just after those hits; see the module docstring."""
    order = list(range(len(ids)))
    hits = list(ids[: min(config.hits, k)])
    if not hits:
        return Lift(order, k, {})
    at = {t: i for i, t in enumerate(ids)}
    slot = len(hits)
    limit = config.depth or len(ids)
    best: dict[str, tuple[float, str]] = {}
    for hit in hits:
        for companion, score in table.of(hit):
            pos = at.get(companion)
            if score < config.min_score or pos is None or pos < slot or pos >= limit:
                continue
            if companion not in best or score > best[companion][0]:
                best[companion] = (score, hit)
    if not best:
        return Lift(order, k, {})
    chosen = sorted(best, key=lambda c: (-best[c][0], at[c]))[: config.max_lifted]
    moved = [at[c] for c in sorted(chosen, key=lambda c: at[c])]  # the lifted keep their ranked order
    rest = [i for i in order[slot:] if i not in set(moved)]
    added = sum(1 for i in moved if i >= k)
    new_k = min(max(k, config.k_max), k + added) if added else k
    return Lift(order[:slot] + moved + rest, new_k, {c: (best[c][1], best[c][0]) for c in chosen})

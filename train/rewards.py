"""Rewards for training the decomposer with GRPO (MagicSelector paper, sections 3.2-3.4, eq. 4-7).

For one turn x with gold tools G, the policy samples a group of decompositions y_1..y_B; each one
is scored by

* the counterfactual reward (eq. 4 and section 3.2.2): the retrieval quality of the decomposition's
  fused ranking T_atom against the ranking of the undecomposed utterance T_raw (the baseline that
  would have happened without decomposing)::

      R_cf = l_ndcg * max(0, N_atom - N_raw) + l_full * (1[G in top-k of T_atom] - 1[G in top-k of T_raw])

  where N = NDCG@k. The first term only pays for gains; the second pays for gaining full coverage
  and costs as much for losing it.
* the preference reward (eq. 5): R_pref = sigmoid(s(x, y) - s(x, y*)) against the annotated
  reference decomposition y*. The paper's s is a process reward model; the hook here takes any
  object with ``score(candidate, reference) -> float`` and ships ``SimilarityScorer`` (embedding
  similarity to the reference, minus penalties for duplicated and empty tasks, the shortcuts a pure
  retrieval reward invites).
* the joint reward (eq. 6): R = alpha * R_pref + beta * R_cf,

and the group's rewards become advantages by eq. 7, A_i = (R_i - mean(R)) / (std(R) + eps).

Everything here works on plain Python and numpy values (no torch): the retriever and the embedder
are injected callables, so the trainer can pass the runtime's own retrieval (sub-task lists fused
by peak rank) and the bundle's embedder.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from magicselector.data.metrics import completeness_at_k, ndcg_at_k
from magicselector.errors import InputError

Retrieve = Callable[[list[str]], Sequence[str]]
Embed = Callable[[list[str]], np.ndarray]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def normalize_task(text: str) -> str:
    """A sub-task as compared for duplicates: case-folded, whitespace collapsed and stripped."""
    if not isinstance(text, str):
        raise InputError(f"a sub-task must be a string, got {type(text).__name__}")
    return " ".join(text.split()).casefold()


def _task_list(tasks: Sequence[str], what: str) -> list[str]:
    if isinstance(tasks, str):
        raise InputError(f"{what}: expected a list of sub-task strings, got a single string")
    return [t for t in tasks]


def _ranking(ranked: Sequence[str], what: str) -> list[str]:
    """A ranking with repeated ids dropped (first occurrence kept): a tool listed twice must not
    count twice in DCG (that would lift NDCG above 1 and could be gamed)."""
    if isinstance(ranked, str):
        raise InputError(f"{what}: expected a list of tool ids, got a single string")
    out = list(dict.fromkeys(ranked))
    for t in out:
        if not isinstance(t, str):
            raise InputError(f"{what}: tool ids must be strings, got {type(t).__name__}")
    return out


def _gold(gold: Sequence[str] | set[str], what: str) -> set[str]:
    if isinstance(gold, str):
        raise InputError(f"{what}: expected a collection of gold tool ids, got a single string")
    g = set(gold)
    if not g:
        raise InputError(f"{what}: the gold tool set is empty")
    return g


def _check_k(k: int, what: str) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"{what}: k must be an integer >= 1, got {k!r}")


def _finite(value: float, name: str, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what}: {name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise InputError(f"{what}: {name} must be finite, got {v}")
    return v


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


# ---------------------------------------------------------------------------------------------
# retrieval rewards (eq. 4 and section 3.2.2)
# ---------------------------------------------------------------------------------------------
def ndcg_reward(ranked_ids: Sequence[str], gold: Sequence[str] | set[str], k: int = 10) -> float:
    """Eq. 4: NDCG@k of a ranking against the gold tools (binary gains, so 2^rel - 1 = rel).
    Repeated ids in the ranking count once."""
    _check_k(k, "ndcg_reward")
    return ndcg_at_k(_ranking(ranked_ids, "ndcg_reward"), _gold(gold, "ndcg_reward"), int(k))


def counterfactual_reward(atom_ranked: Sequence[str], raw_ranked: Sequence[str], gold: Sequence[str] | set[str],
                          k: int = 10, l_ndcg: float = 1.0, l_full: float = 1.0) -> float:
    """Section 3.2.2: R_cf = l_ndcg * max(0, N_atom - N_raw) + l_full * (C_atom - C_raw).

    ``atom_ranked`` is the fused ranking of the decomposition's sub-tasks, ``raw_ranked`` the
    ranking of the undecomposed utterance; N is NDCG@k and C is 1 when every gold tool is within the
    top k (``completeness_at_k``). So: no gain gives 0, an NDCG loss alone gives 0 (the first term
    is one-sided), gaining full coverage adds l_full and losing it costs l_full.
    """
    what = "counterfactual_reward"
    _check_k(k, what)
    l_ndcg = _finite(l_ndcg, "l_ndcg", what)
    l_full = _finite(l_full, "l_full", what)
    g = _gold(gold, what)
    atom = _ranking(atom_ranked, f"{what} (atom ranking)")
    raw = _ranking(raw_ranked, f"{what} (raw ranking)")
    k = int(k)
    gain = ndcg_at_k(atom, g, k) - ndcg_at_k(raw, g, k)
    coverage = completeness_at_k(atom, g, k) - completeness_at_k(raw, g, k)
    return l_ndcg * max(0.0, gain) + l_full * coverage


@dataclass(frozen=True)
class CounterfactualOutcome:
    """The parts of one counterfactual reward, for logging."""

    reward: float
    ndcg_atom: float
    ndcg_raw: float
    complete_atom: bool
    complete_raw: bool
    decomposed: bool  # False when the sub-task list was empty (reward 0 by definition)


@dataclass(frozen=True)
class CounterfactualReward:
    """R_cf with the retriever injected.

    retrieve: ``retrieve(texts) -> ranked tool ids`` for one decomposition: the caller's retrieval
      of a list of texts, e.g. one dense search per sub-task fused by peak rank, as the runtime
      does. The raw baseline is ``retrieve([utterance])``, the atomised ranking
      ``retrieve(subtasks)``.
    k / l_ndcg / l_full: the cut-off and the weights of the two terms.

    A decomposition with no sub-tasks (after dropping blank ones) is treated as no decomposition:
    the atomised ranking would be the raw one, so the reward is 0 and the retriever is not called.
    """

    retrieve: Retrieve
    k: int = 10
    l_ndcg: float = 1.0
    l_full: float = 1.0

    def __post_init__(self) -> None:
        if not callable(self.retrieve):
            raise InputError("CounterfactualReward: retrieve must be callable")
        _check_k(self.k, "CounterfactualReward")
        _finite(self.l_ndcg, "l_ndcg", "CounterfactualReward")
        _finite(self.l_full, "l_full", "CounterfactualReward")

    def _retrieve(self, texts: list[str], what: str) -> list[str]:
        ranked = self.retrieve(texts)
        if ranked is None:
            raise InputError(f"CounterfactualReward: retrieve returned None for the {what}")
        return _ranking(ranked, f"CounterfactualReward ({what} ranking)")

    def outcome(self, subtasks: Sequence[str], utterance: str, gold: Sequence[str] | set[str],
                raw_ranked: Sequence[str] | None = None) -> CounterfactualOutcome:
        """The reward with its parts. ``raw_ranked`` may pass the utterance's ranking when the
        caller already has it (it is the same for every sample of a GRPO group)."""
        g = _gold(gold, "CounterfactualReward")
        tasks = [t for t in _task_list(subtasks, "CounterfactualReward") if normalize_task(t)]
        if not isinstance(utterance, str) or not utterance.strip():
            raise InputError("CounterfactualReward: the utterance must be a non-empty string")
        if not tasks:
            return CounterfactualOutcome(0.0, float("nan"), float("nan"), False, False, decomposed=False)
        raw = (self._retrieve([utterance], "utterance") if raw_ranked is None
               else _ranking(raw_ranked, "CounterfactualReward (raw ranking)"))
        atom = self._retrieve(list(tasks), "sub-task")
        k = int(self.k)
        reward = counterfactual_reward(atom, raw, g, k, self.l_ndcg, self.l_full)
        return CounterfactualOutcome(reward, ndcg_at_k(atom, g, k), ndcg_at_k(raw, g, k),
                                     bool(completeness_at_k(atom, g, k)), bool(completeness_at_k(raw, g, k)),
                                     decomposed=True)

    def __call__(self, subtasks: Sequence[str], utterance: str, gold: Sequence[str] | set[str],
                 raw_ranked: Sequence[str] | None = None) -> float:
        return self.outcome(subtasks, utterance, gold, raw_ranked).reward


# ---------------------------------------------------------------------------------------------
# preference reward (eq. 5)
# ---------------------------------------------------------------------------------------------
def duplicate_task_rate(tasks: Sequence[str]) -> float:
    """Share of the tasks that repeat an earlier task (compared case- and space-normalised), the
    reward-hacking signal of the paper's section 6.6. Blank tasks are not duplicates (they are a
    failure of their own, see ``empty_task_rate``); an empty list gives 0."""
    tasks = _task_list(tasks, "duplicate_task_rate")
    if not tasks:
        return 0.0
    seen: set[str] = set()
    repeats = 0
    for t in tasks:
        n = normalize_task(t)
        if not n:
            continue
        if n in seen:
            repeats += 1
        seen.add(n)
    return repeats / len(tasks)


def empty_task_rate(tasks: Sequence[str]) -> float:
    """Share of the tasks that are blank (empty or whitespace only); an empty list gives 0."""
    tasks = _task_list(tasks, "empty_task_rate")
    if not tasks:
        return 0.0
    return sum(1 for t in tasks if not normalize_task(t)) / len(tasks)


def char_ngram_embed(texts: list[str], dim: int = 512, n: int = 3) -> np.ndarray:
    """A lexical embedding without a model: hashed character n-gram counts of the normalised text
    (crc32, so stable across runs and machines), L2-normalised. It is the default of
    ``SimilarityScorer`` so the preference reward works anywhere; training should inject the
    bundle's embedder, which also matches paraphrases."""
    if dim < 1 or n < 1:
        raise InputError("char_ngram_embed: dim and n must be >= 1")
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        s = f" {normalize_task(text)} "
        if not s.strip():
            continue
        grams = [s[j:j + n] for j in range(max(1, len(s) - n + 1))]
        for gram in grams:
            out[i, zlib.crc32(gram.encode("utf-8")) % dim] += 1.0
        norm = float(np.linalg.norm(out[i]))
        if norm > 0:
            out[i] /= norm
    return out


def _distinct(tasks: list[str]) -> list[str]:
    """The non-blank tasks, each normalised form once (first occurrence, stripped), in order."""
    out: dict[str, str] = {}
    for t in tasks:
        n = normalize_task(t)
        if n and n not in out:
            out[n] = t.strip()
    return list(out.values())


@runtime_checkable
class PreferenceScorer(Protocol):
    """s(x, y) of eq. 5: a score of a candidate decomposition given the reference."""

    def score(self, candidate: Sequence[str], reference: Sequence[str]) -> float: ...


@dataclass(frozen=True)
class SimilarityScorer:
    """s(x, y) from embeddings: how close the candidate's tasks are to the reference's, minus
    penalties for the shortcuts.

    similarity: the mean best-match cosine between the candidate's tasks and the reference's,
      taken both ways and averaged: candidate -> reference (every task it wrote matches one the
      annotator wrote: accuracy) and reference -> candidate (every annotated task is matched:
      completeness). Blank tasks take no part; repeated tasks take part once. A candidate without
      any non-blank task has similarity 0.
    score = similarity - duplicate_penalty * duplicate_task_rate - empty_penalty * empty_task_rate.

    embed: ``embed(texts) -> [len(texts), dim]`` array (need not be normalised).
    """

    embed: Embed = field(default=char_ngram_embed)
    duplicate_penalty: float = 1.0
    empty_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not callable(self.embed):
            raise InputError("SimilarityScorer: embed must be callable")
        for name in ("duplicate_penalty", "empty_penalty"):
            if _finite(getattr(self, name), name, "SimilarityScorer") < 0:
                raise InputError(f"SimilarityScorer: {name} must be >= 0")

    def similarity(self, candidate: Sequence[str], reference: Sequence[str]) -> float:
        cand = _distinct(_task_list(candidate, "SimilarityScorer (candidate)"))
        ref = _distinct(_task_list(reference, "SimilarityScorer (reference)"))
        if not ref:
            raise InputError("SimilarityScorer: the reference decomposition has no non-blank task")
        if not cand:
            return 0.0
        vecs = np.asarray(self.embed(cand + ref), dtype=np.float64)
        if vecs.ndim != 2 or vecs.shape[0] != len(cand) + len(ref):
            raise InputError(f"SimilarityScorer: embed returned shape {vecs.shape} for {len(cand) + len(ref)} texts")
        if not np.isfinite(vecs).all():
            raise InputError("SimilarityScorer: embed returned non-finite values")
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
        sims = vecs[:len(cand)] @ vecs[len(cand):].T  # [candidate, reference]
        return float(0.5 * (sims.max(axis=1).mean() + sims.max(axis=0).mean()))

    def score(self, candidate: Sequence[str], reference: Sequence[str]) -> float:
        return (self.similarity(candidate, reference)
                - self.duplicate_penalty * duplicate_task_rate(candidate)
                - self.empty_penalty * empty_task_rate(candidate))


def preference_reward(candidate_tasks: Sequence[str], reference_tasks: Sequence[str],
                      scorer: PreferenceScorer | None = None) -> float:
    """Eq. 5: sigmoid(s(x, y) - s(x, y*)), the candidate's score against the reference's own score
    under the same scorer (``SimilarityScorer()`` by default). A candidate as good as the reference
    gets 0.5."""
    scorer = SimilarityScorer() if scorer is None else scorer
    if not callable(getattr(scorer, "score", None)):
        raise InputError("preference_reward: the scorer needs a score(candidate, reference) method")
    reference = _task_list(reference_tasks, "preference_reward (reference)")
    candidate = _task_list(candidate_tasks, "preference_reward (candidate)")
    s_cand = _finite(scorer.score(candidate, reference), "the candidate's score", "preference_reward")
    s_ref = _finite(scorer.score(reference, reference), "the reference's score", "preference_reward")
    return _sigmoid(s_cand - s_ref)


# ---------------------------------------------------------------------------------------------
# joint reward (eq. 6) and group-relative advantages (eq. 7)
# ---------------------------------------------------------------------------------------------
def joint_reward(r_pref: float, r_cf: float, alpha: float = 0.5, beta: float = 1.0) -> float:
    """Eq. 6: R = alpha * R_pref + beta * R_cf."""
    what = "joint_reward"
    return (_finite(alpha, "alpha", what) * _finite(r_pref, "r_pref", what)
            + _finite(beta, "beta", what) * _finite(r_cf, "r_cf", what))


def _rewards_array(rewards: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    try:
        r = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{what}: rewards must be numbers") from None
    if r.ndim != 1:
        raise InputError(f"{what}: rewards must be a flat sequence, got shape {r.shape}")
    if r.size == 0:
        raise InputError(f"{what}: no rewards")
    if not np.isfinite(r).all():
        raise InputError(f"{what}: rewards must be finite")
    return r


def grpo_advantages(rewards: Sequence[float] | np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Eq. 7 for one group: (R_i - mean(R)) / (std(R) + eps), with the population std (ddof=0, so a
    group of one is defined). A group whose rewards are all equal carries no signal and gets exact
    zeros (not rounding noise divided by eps)."""
    r = _rewards_array(rewards, "grpo_advantages")
    eps = _finite(eps, "eps", "grpo_advantages")
    if eps <= 0:
        raise InputError("grpo_advantages: eps must be > 0")
    if np.all(r == r[0]):
        return np.zeros_like(r)
    return (r - r.mean()) / (r.std() + eps)


def grouped_advantages(rewards: Sequence[float] | np.ndarray, group_size: int, eps: float = 1e-6) -> np.ndarray:
    """Eq. 7 over a flat batch of consecutive groups of ``group_size`` samples (the layout of a GRPO
    batch: the B samples of prompt 0, then of prompt 1, ...); returns a flat array."""
    r = _rewards_array(rewards, "grouped_advantages")
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise InputError(f"grouped_advantages: group_size must be an integer >= 1, got {group_size!r}")
    if r.size % group_size:
        raise InputError(f"grouped_advantages: {r.size} rewards do not split into groups of {group_size}")
    groups = r.reshape(-1, int(group_size))
    return np.concatenate([grpo_advantages(g, eps) for g in groups])

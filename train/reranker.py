"""Training the cross-encoder reranker, an experiment (MagicSelector paper, section 4.2-4.3 and Algorithm 1).

The runtime carries no cross-encoder: it never earned its place (docs/bench/reranker.md); what this
trains is scored on top of the shipped ranking by ``bench/experiments/rerank.py``.

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
(``PairEncoder``), decided here and recorded in ``train_config.json`` so the scorer can match it:

* ``query_capped`` (default): the query keeps at most ``max_length - specials - m`` tokens, where
  ``m = min(min_tool_tokens, (max_length - specials) // 2)`` (32 tool tokens at the default window
  of 96, i.e. queries up to 61 tokens); the tool text fills the rest of the window and is cut at
  its end (``only_second``). A long query therefore loses its tail, which ``retrieval_text`` fills
  with the oldest history, and never pushes the tool side under ``m`` tokens. Tool texts put the
  name first, so the part that survives is the most telling one.
* ``longest_first``: the ``tokenizers`` default.

The rule lives in the data layer (``magicselector.data.cross_encoder.PairTokenizer``), which the
export and the bench use too; training uses it as is.

The same code trains on one process or many (``torchrun`` / ``accelerate launch``; see
``toolkit``): every rank draws the same seeded order and takes its slice of each batch of pairs or
lists, DDP averages the gradients, teacher scoring is split over the ranks.

The losses are written here rather than taken from sentence-transformers' cross-encoder losses
(``BinaryCrossEntropyLoss``, ``ListNetLoss``, ``CrossEntropyLoss``): those tokenize the pairs inside
the loss with the model's tokenizer, so they cannot keep the scorer's query-capped pair window,
and its ``CrossEncoderTrainer`` owns the batching and shuffling that the mining rounds and the
per-stage checkpoints need to control. Eq. 16 is ``binary_cross_entropy_with_logits``; eq. 18-19
is a masked log-softmax.

Heavy imports (torch, transformers) are at module level here; ``magicselector.cli.train`` imports
this module only when a command runs.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from magicselector.catalog import Catalog
from magicselector.data.datasets import Benchmark, load_benchmark
from magicselector.data.mobile import GeneratorConfig
from magicselector.dialogue import retrieval_text, validate_history
from magicselector.errors import InputError
from magicselector.data.cross_encoder import TRUNCATIONS, PairTokenizer

from .losses import (  # noqa: F401 - the loss functions: public here too
    ListwiseCELoss,
    PointwiseBCELoss,
    distilled_labels,
    distilled_list_targets,
    listwise_ce,
    pointwise_bce,
)
from .queries import (  # noqa: F401 - TrainQuery, build_training_queries, mine_hard_negatives: public here too
    TrainQuery,
    build_training_queries,
    mine_hard_negatives,
    prepare_training_data,
    query_counts,
    tool_texts,
)
from .toolkit import (  # noqa: F401 - training_versions: public here too
    adamw, data_record, linear_schedule, load_encoder, loss_summary, Processes, Progress,
    save_checkpoint, training_versions,
)
from .training import (
    EncoderTrainConfig, EncoderTrainer, check_at_least, finish_run, load_encoder_run, run_context, run_summary,
    write_json,
)

Retriever = Callable[[Sequence[str], Catalog], Sequence[Sequence[str]]]


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RerankerTrainConfig(EncoderTrainConfig):
    """Settings of one reranker training run (all recorded in ``train_config.json``).

    The fields every trainer has (seed, lr, weight_decay, warmup_ratio, grad_clip, threads,
    device) are ``TrainConfig``'s, those both encoder trainers have ``EncoderTrainConfig``'s (their
    meaning for the reranker is said here).

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
      held-out domains' tools too, and with ``all`` the cross-encoder buries them on the
      out-of-domain split (measured in docs/bench/reranker.md).
    max_queries: a seeded sample of at most this many training queries (turns and tasks together).
    max_queries_per_folder: first, a seeded sample of at most this many per data folder (a mix
      of sets of very different sizes stays balanced).
    teacher: a trained cross-encoder checkpoint to distil from (None: hard labels only). It scores
      every pair the student trains on, in its own pair window (its ``train_config.json``'s
      tokenization, else this run's), and its scores become soft targets: point-wise
      ``(1 - w) y + w sigmoid(t)``, list-wise ``(1 - w) P* + w softmax(t)`` over the list's items.
      The teacher also orders the negatives among themselves, which the 0/1 labels do not (a
      2-layer student of the shipped model trained so is measured in docs/bench/defaults.md).
    distill_weight: w above, in [0, 1]; used only with ``teacher``.
    """

    epochs_pointwise: int = 1
    epochs_listwise: int = 1
    mining_epochs_listwise: int | None = None
    save_stages: bool = False
    list_size: int = 8
    lr: float = 1e-4
    max_length: int = 96
    min_tool_tokens: int = 32
    truncation: str = "query_capped"
    score_batch_size: int = 64
    probe_pairs: int = 256
    teacher: str | None = None
    distill_weight: float = 0.5

    def check(self, need) -> None:
        need(self.truncation in TRUNCATIONS, f"truncation must be one of {TRUNCATIONS}, got {self.truncation!r}")
        check_at_least(self, need, 0, "epochs_pointwise", "epochs_listwise", "mining_epochs_listwise")
        need(self.epochs_pointwise + self.epochs_listwise >= 1, "at least one point-wise or list-wise epoch is needed")
        need(self.list_size >= 2, "list_size must be >= 2 (one gold and at least one negative)")
        need(self.max_length >= 16, "max_length must be >= 16 tokens")
        check_at_least(self, need, 1, "min_tool_tokens", "score_batch_size")
        need(0.0 <= self.distill_weight <= 1.0, f"distill_weight must be in [0, 1], got {self.distill_weight}")


# The recipe of the reranker that ships in the package (see its MODEL_CARD.md): the generated
# mobile train split of ``SHIPPED_DATA`` (``magicselector generate --seed 1 --dialogues 5000``),
# 10k sampled queries, MiniLM's first 3 layers, a 64-token pair window, one hard-negative round.
SHIPPED_DATA = GeneratorConfig(seed=1, dialogues=5000)
SHIPPED_RECIPE = RerankerTrainConfig(
    seed=0, layers=3, epochs_pointwise=1, epochs_listwise=1, mining_epochs_listwise=0, rounds=1,
    negatives=3, list_size=4, pool=20, batch_size=16, lr=5e-5, max_length=64, max_queries=10_000,
    threads=2, save_stages=True)


# ---------------------------------------------------------------------------------------------
# tokenization
# ---------------------------------------------------------------------------------------------
class PairEncoder(PairTokenizer):
    """(query, tool text) pairs -> padded int64 arrays, with the truncation rule of the module
    docstring: ``data.cross_encoder.PairTokenizer`` (so training and the scorer cut pairs identically),
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
def load_cross_encoder(base_model: str | Path, layers: int | None = None, progress: bool = False):
    """A BERT-style checkpoint as ``AutoModelForSequenceClassification`` with one logit; with
    ``layers=N`` only the first N encoder layers are kept (their pre-trained weights are loaded, the
    rest are dropped). The head is freshly initialised from torch's RNG (seed before calling)."""
    return load_encoder(base_model, layers, head="score", progress=progress)


@torch.no_grad()
def score_pairs(model, encoder: PairEncoder, queries: Sequence[str], texts: Sequence[str],
                batch_size: int = 64) -> np.ndarray:
    """The model's logit for each (query, tool text) pair, in eval mode (restores the mode after)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    try:
        for start in range(0, len(queries), batch_size):
            batch = encoder.encode(queries[start:start + batch_size], texts[start:start + batch_size])
            logits = model(**{k: torch.from_numpy(v).to(device) for k, v in batch.items()}).logits[:, 0]
            out.append(logits.float().cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class Teacher:
    """A trained cross-encoder that scores the student's pairs, in its own pair window."""

    model: Any
    encoder: PairEncoder
    path: str

    def score(self, queries: Sequence[str], texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        return torch.from_numpy(score_pairs(self.model, self.encoder, queries, texts, batch_size))

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "layers": int(self.model.config.num_hidden_layers),
                "tokenization": self.encoder.describe()}


def check_teacher(path: str | Path) -> Path:
    path = Path(path)
    if not (path / "config.json").is_file() or not (path / "tokenizer.json").is_file():
        raise InputError(f"teacher: {path} is not a cross-encoder checkpoint (config.json and tokenizer.json)")
    return path


def load_teacher(path: str | Path, config: RerankerTrainConfig, device: torch.device) -> Teacher:
    """The checkpoint at ``path`` as a teacher; its pair window is the one it was trained with
    (``train_config.json``), else ``config``'s."""
    from transformers import AutoModelForSequenceClassification

    path = check_teacher(path)
    tok = {}
    if (path / "train_config.json").is_file():
        tok = json.loads((path / "train_config.json").read_text(encoding="utf-8")).get("tokenization", {})
    encoder = PairEncoder(path / "tokenizer.json", int(tok.get("max_length", config.max_length)),
                          int(tok.get("min_tool_tokens", config.min_tool_tokens)),
                          tok.get("truncation", config.truncation))
    model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return Teacher(model, encoder, str(path))


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
class _Trainer(EncoderTrainer):
    """The state of one run: model, data, negatives, log. Not part of the public API."""

    def __init__(self, config: RerankerTrainConfig, model, encoder: PairEncoder, benches: list[Benchmark],
                 queries: list[TrainQuery], pools: dict[str, list[str]], log_path: Path, progress: bool,
                 procs: Processes = Processes(), device: torch.device = torch.device("cpu"),
                 teacher: Teacher | None = None) -> None:
        super().__init__(config, model, benches, queries, log_path, ["stage", "round", "loss", "lr"], progress,
                         procs, device)
        self.teacher = teacher
        weight = config.distill_weight if teacher is not None else None
        self.pointwise_loss = PointwiseBCELoss(weight)
        self.listwise_loss = ListwiseCELoss(weight)
        self.encoder = encoder
        self.pools = pools

    # -- negatives ------------------------------------------------------------------------------

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
        pairs = [(q.text, self.texts[q.bench][t]) for q in self.queries for t in self.pools[q.id]]
        bs = self.c.score_batch_size
        bar = Progress(len(pairs), f"mine round {r}", self.progress)

        def score(part: Sequence[tuple[str, str]]) -> np.ndarray:
            scores = []
            for start in range(0, len(part), bs):
                chunk = part[start:start + bs]
                scores.append(score_pairs(self.model, self.encoder, [p[0] for p in chunk], [p[1] for p in chunk], bs))
                bar.update(len(scores[-1]) * self.procs.world)
            return np.concatenate(scores) if scores else np.zeros(0, dtype=np.float32)

        flat = self.procs.map_concat(pairs, score)
        bar.close()
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

    def _forward(self, queries: list[str], texts: list[str]) -> torch.Tensor:
        batch = self.encoder.encode(queries, texts)
        return self.net(**{k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}).logits[:, 0]

    def _teacher_logits(self, qs: list[str], ts: list[str]) -> torch.Tensor | None:
        return None if self.teacher is None else self.teacher.score(qs, ts, self.c.score_batch_size)

    def _pointwise_step(self, chunk: list[tuple[int, str, float]], share: float, r: int, opt, sched, bar) -> None:
        qs = [self.queries[qi].text for qi, _, _ in chunk]
        ts = [self.texts[self.queries[qi].bench][t] for qi, t, _ in chunk]
        logits = self._forward(qs, ts)
        labels = {"labels": torch.tensor([y for _, _, y in chunk], device=logits.device),
                  "teacher_logits": self._teacher_logits(qs, ts)}
        lr, value = self._update(self.pointwise_loss({"logits": logits}, labels), share, opt, sched)
        self._record(stage="pointwise", round=r, loss=value, lr=lr)
        bar.update(1, loss=f"{value:.4f}")

    def _list_batch(self, chunk: list[tuple[int, list[str]]]):
        """The pairs of a batch of lists, each padded to the widest with its gold (masked out), with
        the gold indicators and the mask."""
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
        return qs, ts, targets, mask, width

    def _listwise_step(self, chunk: list[tuple[int, list[str]]], share: float, r: int, opt, sched, bar) -> None:
        qs, ts, targets, mask, width = self._list_batch(chunk)
        logits = self._forward(qs, ts).reshape(len(chunk), width)
        teacher = self._teacher_logits(qs, ts)
        labels = {"targets": targets, "mask": mask,
                  "teacher_logits": None if teacher is None else teacher.reshape(len(chunk), width)}
        lr, value = self._update(self.listwise_loss({"logits": logits}, labels), share, opt, sched)
        self._record(stage="listwise", round=r, loss=value, lr=lr)
        bar.update(1, loss=f"{value:.4f}")

    def _epochs(self, items: list, per_step: int, epochs: int, resample: Callable[[], list] | None, step) -> None:
        """``epochs`` seeded passes over ``items`` in batches of ``per_step``, each batch's slice of
        this rank given to ``step(chunk, share)``; with ``resample``, fresh items every epoch after
        the first."""
        for epoch in range(epochs):
            if resample is not None and epoch > 0:
                items = resample()
            order = self.rng.permutation(len(items))
            for start in range(0, len(order), per_step):
                step(*self.procs.shard([items[int(i)] for i in order[start:start + per_step]]))

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
        opt = adamw(self.model, c.lr, c.weight_decay, fused=True)
        sched = linear_schedule(opt, int(round(c.warmup_ratio * total)), total)
        self.model.train()
        bar = Progress(total, f"round {r}", self.progress)
        stats: dict[str, Any] = {"steps": total, "pointwise_pairs": len(p_items), "listwise_lists": len(l_items)}
        self._epochs(p_items, c.batch_size, c.epochs_pointwise,  # fresh random negatives each epoch of round 0
                     (lambda: self.pointwise_items(self.random_negatives(c.negatives))) if resample else None,
                     lambda chunk, share: self._pointwise_step(chunk, share, r, opt, sched, bar))
        if save is not None and c.epochs_pointwise and (r == 0 or not epochs_listwise):
            save(f"r{r}-pointwise" if r == 0 else f"r{r}")
        self._epochs(l_items, lists_per_step, epochs_listwise,
                     (lambda: self.listwise_items(self.random_negatives(c.list_size - 1))) if resample else None,
                     lambda chunk, share: self._listwise_step(chunk, share, r, opt, sched, bar))
        if save is not None and epochs_listwise:
            save(f"r{r}-listwise" if r == 0 else f"r{r}")
        bar.close()
        self.log.flush()
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


def _pools_with_stats(queries: list[TrainQuery], benches: list[Benchmark], retrieve: Retriever, pool: int
                      ) -> tuple[dict[str, list[str]], dict[str, float]]:
    t_pool = time.perf_counter()
    pools = _candidate_pools(queries, benches, retrieve, pool)
    pool_seconds = time.perf_counter() - t_pool
    pool_recall = float(np.mean([len(set(q.gold) & set(pools[q.id])) / len(q.gold) for q in queries]))
    return pools, {"pool_recall": pool_recall, "pool_seconds": round(pool_seconds, 2)}


def _stage_saver(trainer: "_Trainer", tokenizer, base: str, out_dir: Path, t_start: float,
                 progress: bool) -> Callable[[str], None]:
    """``save(stage)``: the checkpoint and a short ``train_config.json`` under ``stages/<stage>``."""
    config, model = trainer.c, trainer.model

    def save(stage: str) -> None:
        save_checkpoint(model, tokenizer, out_dir / "stages" / stage, progress)
        write_json(out_dir / "stages" / stage / "train_config.json",
                   {"kind": "reranker", "stage": stage, "config": asdict(config), "base_model": str(base),
                    "layers": int(model.config.num_hidden_layers), "seed": config.seed,
                    "tokenization": trainer.encoder.describe(), "step": trainer.step,
                    "seconds": round(time.perf_counter() - t_start, 2)})

    return save


def _train_rounds(trainer: "_Trainer", negatives: dict[str, list[str]], save) -> list[dict[str, Any]]:
    """Round 0 on random negatives, then ``rounds`` rounds on mined ones (Algorithm 1)."""
    rounds = [{"round": 0, "negatives": "random (pool first)",
               **trainer.train_round(0, negatives, resample=True, save=save)}]
    for r in range(1, trainer.c.rounds + 1):
        negatives, mined = trainer.mine(r)
        rounds.append({"round": r, "negatives": "hard (self-distillation)", "mining": mined,
                       **trainer.train_round(r, negatives, resample=False, save=save)})
    return rounds


def _reranker_summary(trainer: "_Trainer", base: str, available: int, pool_stats: dict[str, float],
                      rounds: list, probe: list, probe_before: float, probe_after: float, device: torch.device,
                      t_start: float, out_dir: Path) -> dict[str, Any]:
    config, queries, teacher = trainer.c, trainer.queries, trainer.teacher
    counts = {**query_counts(available, queries), "steps": trainer.step, **pool_stats}
    return run_summary(
        "reranker", config, base, trainer.procs, device, t_start, out_dir,
        layers=int(trainer.model.config.num_hidden_layers),
        data=data_record(trainer.benches, tools_trained_on=lambda _, b: len(b.catalog)),
        seed=config.seed,
        tokenization={**trainer.encoder.describe(), "query_text": f"retrieval_text(history={config.history!r}, "
                      f"turns={config.history_turns})", "tool_text": "magicselector.catalog.tool_text"},
        counts=counts,
        distillation=None if teacher is None else {**teacher.describe(), "weight": config.distill_weight},
        rounds=rounds,
        loss_summary=loss_summary(trainer.losses),
        final_loss=trainer.losses[-1]["loss"] if trainer.losses else float("nan"),
        probe_loss_before=probe_before,
        probe_loss_after=probe_after,
        probe_pairs=len(probe),
    )


def train_reranker(data_dirs: str | Path | Sequence[str | Path], out_dir: str | Path,
                   config: RerankerTrainConfig = RerankerTrainConfig(), retrieve: Retriever | None = None,
                   bundle: str | Path | None = None, progress: bool = True, overwrite: bool = False) -> dict[str, Any]:
    """Train a cross-encoder reranker on benchmark folders; write a Hugging Face checkpoint.

    ``retrieve(texts, catalog) -> list of tool-id lists`` gives each query's candidate pool (its
    first ``config.pool`` ids are used); by default the bundle's dense retriever. ``out_dir``
    receives the checkpoint (``save_pretrained`` of model and fast tokenizer), ``training_log.csv``
    and ``train_config.json``; the returned summary is ``train_config.json``'s content. Under a
    launcher every process calls this; rank 0 writes the files.
    """
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    if config.teacher:  # before anything is written
        check_teacher(config.teacher)
    benches, queries, available, rng = prepare_training_data(data_dirs, out_dir, config, overwrite, "train_reranker")
    with run_context(config) as (device, procs):
        trainer = None
        try:
            if retrieve is None:
                with procs.main_first():  # rank 0 builds the default bundle if it is missing
                    retrieve = dense_retriever(bundle, config.pool)
            pools, pool_stats = _pools_with_stats(queries, benches, retrieve, config.pool)
            base, model, tokenizer, tok_file = load_encoder_run(config, out_dir, procs, device, "score", progress)
            encoder = PairEncoder(tok_file, config.max_length, config.min_tool_tokens, config.truncation)
            teacher = load_teacher(config.teacher, config, device) if config.teacher else None
            trainer = _Trainer(config, model, encoder, benches, queries, pools, out_dir / "training_log.csv",
                               progress, procs, device, teacher)

            negatives = trainer.random_negatives(max(config.negatives, config.list_size - 1))
            probe = trainer.pointwise_items(negatives)
            probe = [probe[int(i)] for i in sorted(rng.permutation(len(probe))[: config.probe_pairs])]
            probe_before = trainer.probe_loss(probe)
            save = _stage_saver(trainer, tokenizer, base, out_dir, t_start, progress) if (
                config.save_stages and procs.main) else None
            rounds = _train_rounds(trainer, negatives, save)
            probe_after = trainer.probe_loss(probe)
            summary = _reranker_summary(trainer, base, available, pool_stats, rounds, probe, probe_before,
                                        probe_after, device, t_start, out_dir)
            return finish_run(procs, out_dir, summary, lambda: save_checkpoint(model, tokenizer, out_dir, progress))
        finally:
            if trainer is not None:
                trainer.close()


def retrain_shipped(workdir: str | Path, train_data: str | Path | None = None, progress: bool = True,
                    log: Callable[[str], None] = print) -> Path:
    """Train the experiment's reranker again with the recipe of its model card (``SHIPPED_RECIPE``
    on ``SHIPPED_DATA``'s train split, generated into ``workdir/mobile`` unless ``train_data`` names
    a benchmark folder); returns the checkpoint folder ``workdir/checkpoint``, which
    ``magicselector.export.shipped_reranker`` exports."""
    from magicselector.data.mobile import generate_benchmark

    workdir = Path(workdir)
    if train_data is None:
        data_root = workdir / "mobile"
        log(f"generating the training data ({SHIPPED_DATA}) in {data_root}")
        generate_benchmark(data_root, SHIPPED_DATA)
        train_data = data_root / "train"
    log(f"training the reranker on {train_data} (progress bars below; about an hour on 2 cores)")
    train_reranker(train_data, workdir / "checkpoint", SHIPPED_RECIPE, progress=progress)
    return workdir / "checkpoint"


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
        sel = Selector.from_bundle(bundle, progress=True).with_catalog(bench.catalog,
                                   SelectorConfig(history=history, history_turns=turns, candidates=pool))
        lists = [sel.rank(q.query, q.history).ids[:pool] for q in qs]
    else:
        lists = [list(dict.fromkeys(x))[:pool] for x in retrieve(texts, bench.catalog)]
    tt = tool_texts(bench.catalog)
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

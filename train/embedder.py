"""Training the dense embedder (MagicSelector paper, section 4.1 eq. 11-13, section 4.3 and
Algorithm 1 applied to the retriever).

Pipeline of one training run::

    benchmark folders ──▶ training queries (turns with history folded in, plus the gold sub-tasks;
                          ``build_training_queries``, the same queries the reranker trains on)
    round 0:  the base model embeds every query and tool; each query's negatives are a random
              pick among the non-gold tools of its top ``pool`` (fresh picks every epoch)
              InfoNCE (eq. 13) over (query, gold tool, negatives)                  -> E_psi_0
    round r:  the current model embeds queries and tools again (teacher, eq. 21 with
              s = cos), the ``negatives`` highest-scoring non-gold tools of each query's top
              ``pool`` become its negatives (eq. 22, ``mine_embedder_negatives``), and the model
              is trained again on those tuples (eq. 23)                            -> E_psi_r+1

Every gold tool of a query is a positive of its own item (a multi-tool turn gives one item per
tool; its negatives are shared). With ``in_batch`` the other items' positives are extra negatives,
except those that are gold for the query (``info_nce``'s ``pos_ids``/``gold`` masking). A query
with fewer non-gold tools than ``negatives`` in its catalog repeats its negatives to fill the
batch (only tiny catalogs).

Like the reranker trainer, the student of each round continues from the teacher's weights with a
fresh AdamW and a fresh linear warm-up/decay schedule. Embeddings are computed exactly as the
runtime does: the ``tokenizers`` tokenizer of the checkpoint (``TextTokenizer``, window
``max_length``, 128 at run time), mean pooling over the last hidden state and L2 normalisation.
Query texts are ``retrieval_text`` under the history mode; tool texts are ``catalog.tool_text``.

The output folder is a Hugging Face ``AutoModel`` checkpoint with its fast tokenizer
(``tokenizer.json``) plus the sentence-transformers module files (mean pooling, normalisation),
``training_log.csv`` and ``train_config.json``; ``magicselector bundle build --embedder OUT`` takes it as it is.

Measuring a trained embedder: export it into a bundle and evaluate retrieval only, e.g.::

    magicselector bundle build --embedder OUT --catalog DATA/test/tools.jsonl --out /tmp/emb-bundle
    magicselector eval DATA/test --bundle /tmp/emb-bundle --history-mode user

or in Python::

    from magicselector.export.bundle import build_bundle, export_embedder
    emb = export_embedder(OUT, workdir, probe_texts=[...])          # FP32 -> INT8 ONNX + parity
    build_bundle(B, embedder_onnx=emb["onnx"], tokenizer_file=OUT / "tokenizer.json",
                 catalog=load_benchmark(DIR).catalog, embedder_meta=emb["meta"])

then ``magicselector eval DIR --bundle B`` (compare against ``magicselector eval DIR`` with the
default bundle; ``eval`` embeds the dataset's own tools with the bundle's embedder, so any
catalog works for the bundle itself).

Heavy imports (torch, transformers) are at module level here; ``magicselector.cli.train`` imports
this module only when a command runs.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from magicselector.data.datasets import Benchmark, load_benchmark  # noqa: F401 - load_benchmark: public here too
from magicselector.errors import InputError
from magicselector.stages.embed import TextTokenizer

from .embedder_losses import info_nce, mine_embedder_negatives  # noqa: F401 - info_nce: public here too
from .losses import InfoNCELoss
from .queries import TrainQuery, prepare_training_data, query_counts
from .toolkit import (  # noqa: F401 - training_versions: public here too
    adamw, data_record, linear_schedule, load_encoder, loss_summary, Processes, Progress,
    save_checkpoint, training_versions,
)
from .training import EncoderTrainConfig, EncoderTrainer, finish_run, load_encoder_run, run_context, run_summary


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EmbedderTrainConfig(EncoderTrainConfig):
    """Settings of one embedder training run (all recorded in ``train_config.json``).

    The fields every trainer has (seed, lr, weight_decay, warmup_ratio, grad_clip, threads,
    device) are ``TrainConfig``'s, those both encoder trainers have ``EncoderTrainConfig``'s (their
    meaning for the embedder is said here).

    epochs: epochs per round (round 0 and every mining round).
    rounds: hard-negative mining rounds after the random-negative round (Algorithm 1's R).
    negatives: N, negatives per (query, gold tool) item, random in round 0 and mined afterwards.
    pool: the current model's top tools per query that negatives are drawn from (random pick in
      round 0, best non-gold in the mining rounds).
    batch_size: (query, positive) items per optimizer step.
    temperature: tau of eq. 13 (0.05: the sentence-transformers default scale of 20).
    in_batch: the batch's other positives are extra negatives (minus the query's own gold tools).
    max_length: tokens per text (the runtime embeds with 128).
    layers: keep only the first N encoder layers of the base model (None: all).
    history / history_turns: how a turn's query text is built (``retrieval_text``).
    include_tasks: add the gold sub-tasks (``tasks`` of generated sets) as extra queries.
    catalog_scope: ``gold`` (default) trains against the tools that are gold for at least one
      training query only; ``all`` uses each folder's whole catalog (the generated train split
      lists the held-out domains' tools too, and a tool that is only ever a negative is pushed
      away from every query).
    max_queries: a seeded sample of at most this many training queries (turns and tasks together).
    max_queries_per_folder: first, a seeded sample of at most this many per data folder (a mix
      of sets of very different sizes stays balanced).
    base_model: a BERT-style checkpoint folder (None: the packaged all-MiniLM-L6-v2).
    encode_batch_size: texts per forward pass when embedding for mining and the probe.
    probe_items: size of the fixed probe (items of the round-0 negatives) whose InfoNCE is
      reported before and after training.
    freeze_embeddings: keep the word-embedding table (half of MiniLM's weights) as it is: words
      the training data never shows keep their pre-trained vectors, which matters out of domain.
    """

    epochs: int = 1
    lr: float = 2e-5
    temperature: float = 0.05
    in_batch: bool = False
    encode_batch_size: int = 64
    probe_items: int = 256
    freeze_embeddings: bool = False

    def check(self, need) -> None:
        need(self.epochs >= 1, "epochs must be >= 1")
        need(self.temperature > 0, "temperature must be > 0")
        need(self.max_length >= 8, "max_length must be >= 8 tokens")
        need(self.encode_batch_size >= 1, "encode_batch_size must be >= 1")
        need(self.probe_items >= 0, "probe_items must be >= 0")

# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------
def load_embedder(base_model: str | Path, layers: int | None = None, progress: bool = False):
    """A BERT-style checkpoint as ``AutoModel`` (the bare encoder); with ``layers=N`` only the
    first N encoder layers are kept (their pre-trained weights are loaded, the rest dropped)."""
    return load_encoder(base_model, layers, head="bare", progress=progress)


def mean_pool_normalize_torch(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The runtime's ``mean_pool_normalize`` in torch (differentiable): mean of the token vectors
    where the mask is 1, then L2 normalisation."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    return F.normalize(pooled, dim=-1, eps=1e-12)


def _forward(model, tokenizer: TextTokenizer, texts: Sequence[str]) -> torch.Tensor:
    batch = tokenizer.encode(list(texts))
    device = next(model.parameters()).device
    feeds = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
    hidden = model(**feeds).last_hidden_state
    return mean_pool_normalize_torch(hidden, feeds["attention_mask"])


@torch.no_grad()
def embed_texts(model, tokenizer: TextTokenizer, texts: Sequence[str], batch_size: int = 64,
                bar: Progress | None = None) -> np.ndarray:
    """Unit vectors [len(texts), D] in eval mode (restores the mode after)."""
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(texts), batch_size):
            out.append(_forward(model, tokenizer, texts[start:start + batch_size]).float().cpu().numpy())
            if bar is not None:
                bar.update(len(out[-1]))
    finally:
        model.train(was_training)
    dim = int(getattr(model.config, "hidden_size", 0))
    return np.concatenate(out) if out else np.zeros((0, dim), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------
Item = tuple[int, str]  # (query index, positive tool id)


class _Trainer(EncoderTrainer):
    """The state of one run: model, data, negatives, log. Not part of the public API."""

    def __init__(self, config: EmbedderTrainConfig, model, tokenizer: TextTokenizer, benches: list[Benchmark],
                 queries: list[TrainQuery], log_path: Path, progress: bool, procs: Processes = Processes(),
                 device: torch.device = torch.device("cpu"), loss: InfoNCELoss | None = None) -> None:
        self.loss = loss if loss is not None else InfoNCELoss(config.temperature, config.in_batch)
        if self.loss.in_batch and procs.distributed:
            raise InputError("EmbedderTrainConfig: in_batch negatives span the whole batch, which one process "
                             "of several does not see; train with in_batch=False (--in-batch off) or one process")
        super().__init__(config, model, benches, queries, log_path, ["round", "loss", "lr"], progress, procs, device)
        self.tokenizer = tokenizer
        self.items: list[Item] = [(qi, t) for qi, q in enumerate(queries) for t in q.gold]

    def _embed(self, texts: Sequence[str], bar: Progress) -> np.ndarray:
        """Unit vectors of ``texts`` by the current model, the work split over the processes."""
        def part(chunk: Sequence[str]) -> np.ndarray:
            return embed_texts(self.model, self.tokenizer, chunk, self.c.encode_batch_size, bar)

        return self.procs.map_concat(list(texts), part)

    # -- teacher --------------------------------------------------------------------------------
    def teacher(self, desc: str, k: int) -> tuple[dict[str, list[str]], dict[str, float]]:
        """The current model's view: per query, the ``k`` highest-scoring non-gold tools of its
        top ``pool`` (``mine_embedder_negatives``), plus top-1 and recall@pool on the training
        queries (how well the model already retrieves them)."""
        c = self.c
        n_texts = len(self.queries) + sum(len(ids) for b, ids in enumerate(self.ids)
                                          if any(q.bench == b for q in self.queries))
        bar = Progress(n_texts, desc, self.progress)
        out: dict[str, list[str]] = {}
        top1, recall = [], []
        for b, ids in enumerate(self.ids):
            qs = [q for q in self.queries if q.bench == b]
            if not qs:
                continue
            tool_vecs = self._embed([self.texts[b][t] for t in ids], bar)
            query_vecs = self._embed([q.text for q in qs], bar)
            gold = [q.gold for q in qs]
            mined = mine_embedder_negatives(query_vecs, tool_vecs, ids, gold, k=k, pool=c.pool)
            for q, negs in zip(qs, mined):
                out[q.id] = list(negs)
            width = min(c.pool, len(ids))
            for start in range(0, len(qs), 1024):
                sims = query_vecs[start:start + 1024] @ tool_vecs.T
                order = np.argsort(-sims, axis=1, kind="stable")[:, :width]
                for r, q in enumerate(qs[start:start + 1024]):
                    top = [ids[int(j)] for j in order[r]]
                    top1.append(float(top[0] in q.gold))
                    recall.append(len(set(top) & set(q.gold)) / len(q.gold))
        bar.close()
        return out, {"teacher_top1": float(np.mean(top1)), f"teacher_recall@{c.pool}": float(np.mean(recall))}

    # -- negatives ------------------------------------------------------------------------------
    def random_negatives(self, pools: dict[str, list[str]]) -> dict[str, list[str]]:
        """Algorithm 1 line 2: per query, a random pick of ``negatives`` non-gold tools of its pool."""
        n = self.c.negatives
        out = {}
        for q in self.queries:
            pool = pools[q.id]
            pick = [pool[int(i)] for i in self.rng.permutation(len(pool))[:n]]
            out[q.id] = self._fill(q, pick, n)
        return out

    def mine(self, r: int) -> tuple[dict[str, list[str]], dict[str, Any]]:
        """Algorithm 1 lines 5-13 with s(q, t) = cos(e_q, e_t)."""
        mined, stats = self.teacher(f"mine round {r}", self.c.negatives)
        stats["mean_hard_negatives"] = float(np.mean([len(v) for v in mined.values()]))
        stats["seconds"] = round(time.perf_counter() - self.t0, 2)
        return {q.id: self._fill(q, mined[q.id], self.c.negatives) for q in self.queries}, stats

    # -- batches --------------------------------------------------------------------------------
    def _loss(self, chunk: Sequence[Item], negatives: dict[str, list[str]], in_batch: bool | None = None,
              model=None) -> torch.Tensor:
        """The loss (eq. 13) on a batch of items; each distinct tool text is embedded once per batch
        (by ``model``, default the training one). ``in_batch`` None: the loss's own setting."""
        model = self.net if model is None else model
        qs = [self.queries[qi] for qi, _ in chunk]
        width = max(len(negatives[q.id]) for q in qs)
        keys: dict[tuple[int, str], int] = {}

        def slot(b: int, t: str) -> int:
            return keys.setdefault((b, t), len(keys))

        pos_idx = [slot(q.bench, t) for q, (_, t) in zip(qs, chunk)]
        neg_ids = [[negatives[q.id][j % len(negatives[q.id])] for j in range(width)] for q in qs]  # cycle short lists
        neg_idx = [[slot(q.bench, t) for t in row] for q, row in zip(qs, neg_ids)]
        tool_texts = [self.texts[b][t] for b, t in keys]
        query_texts = [q.text for q in qs]
        tool_emb = _forward(model, self.tokenizer, tool_texts)
        query_emb = _forward(model, self.tokenizer, query_texts)
        pos_emb = tool_emb[torch.tensor(pos_idx, device=tool_emb.device)]
        neg_emb = tool_emb[torch.tensor(neg_idx, device=tool_emb.device).reshape(-1)].reshape(len(qs), width, -1)
        texts = {"query_texts": query_texts,  # for a loss with a teacher, which embeds texts
                 "positive_texts": [tool_texts[i] for i in pos_idx],
                 "negative_texts": [[tool_texts[i] for i in row] for row in neg_idx]}
        return self.loss({"query": query_emb, "positive": pos_emb, "negatives": neg_emb},
                         {"pos_ids": [t for _, t in chunk], "gold": [q.gold for q in qs], **texts}, in_batch=in_batch)

    def train_round(self, r: int, negatives: dict[str, list[str]],
                    pools: dict[str, list[str]] | None = None) -> dict[str, Any]:
        """One model: ``epochs`` passes over the items, one AdamW + linear schedule. With ``pools``
        (round 0) every epoch after the first draws fresh random negatives from them."""
        c = self.c
        per_epoch = math.ceil(len(self.items) / c.batch_size)
        total = c.epochs * per_epoch
        opt = adamw(self.model, c.lr, c.weight_decay, fused=True)
        sched = linear_schedule(opt, int(round(c.warmup_ratio * total)), total)
        self.model.train()
        bar = Progress(total, f"round {r}", self.progress)
        losses = []
        for epoch in range(c.epochs):
            if pools is not None and epoch > 0:
                negatives = self.random_negatives(pools)
            order = self.rng.permutation(len(self.items))
            for start in range(0, len(order), c.batch_size):
                chunk, share = self.procs.shard([self.items[int(i)] for i in order[start:start + c.batch_size]])
                lr, value = self._update(self._loss(chunk, negatives), share, opt, sched)
                self._record(round=r, loss=value, lr=lr)
                losses.append(value)
                bar.update(1, loss=f"{value:.4f}")
        bar.close()
        self.log.flush()
        n = max(1, len(losses) // 10)
        return {"steps": total, "items": len(self.items), "first_10pct_loss": float(np.mean(losses[:n])),
                "last_10pct_loss": float(np.mean(losses[-n:]))}

    @torch.no_grad()
    def probe_loss(self, probe: list[Item], negatives: dict[str, list[str]]) -> float:
        """Eq. 13 (explicit negatives only) on a fixed probe, in eval mode (comparable before and after)."""
        if not probe:
            return float("nan")
        was_training = self.model.training
        self.model.eval()
        try:
            total = 0.0
            bs = self.c.encode_batch_size
            for start in range(0, len(probe), bs):
                chunk = probe[start:start + bs]
                total += float(self._loss(chunk, negatives, in_batch=False, model=self.model)) * len(chunk)
        finally:
            self.model.train(was_training)
        return total / len(probe)


def _write_sentence_transformers_files(out_dir: Path, dim: int, max_length: int) -> None:
    """modules.json + 1_Pooling + sentence_bert_config.json: the runtime's recipe (mean pooling,
    L2 normalisation) for ``SentenceTransformer(out_dir)``."""
    import transformers

    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out_dir / "modules.json").write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
    (out_dir / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_length, "do_lower_case": False}, indent=2) + "\n", encoding="utf-8")
    (out_dir / "1_Pooling").mkdir(exist_ok=True)
    (out_dir / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": dim, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, indent=2) + "\n",
        encoding="utf-8")
    (out_dir / "2_Normalize").mkdir(exist_ok=True)
    (out_dir / "config_sentence_transformers.json").write_text(json.dumps(
        {"__version__": {"transformers": transformers.__version__, "pytorch": torch.__version__},
         "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"}, indent=2) + "\n",
        encoding="utf-8")


def _embedder_rounds(trainer: _Trainer, rng: np.random.Generator) -> dict[str, Any]:
    """Round 0 on random negatives of the base model's pools, then the mining rounds; the fixed
    probe's loss before and after, and the model's retrieval of the training queries after."""
    config = trainer.c
    # round 0: random non-gold tools of the base model's top ``pool``
    pools, base_stats = trainer.teacher("base model pools", config.pool)
    negatives = trainer.random_negatives(pools)
    probe = [trainer.items[int(i)] for i in sorted(rng.permutation(len(trainer.items))[: config.probe_items])]
    probe_negatives = negatives
    probe_before = trainer.probe_loss(probe, probe_negatives)
    rounds = [{"round": 0, "negatives": f"random (non-gold of the base model's top {config.pool})",
               "teacher": base_stats, **trainer.train_round(0, negatives, pools=pools)}]
    for r in range(1, config.rounds + 1):
        negatives, mined = trainer.mine(r)
        rounds.append({"round": r, "negatives": "hard (self-distillation)", "mining": mined,
                       **trainer.train_round(r, negatives)})
    return {"rounds": rounds, "probe": probe, "probe_before": probe_before,
            "probe_after": trainer.probe_loss(probe, probe_negatives), "base_stats": base_stats,
            "final_teacher": trainer.teacher("final model", 1)[1]}


def _embedder_summary(trainer: _Trainer, base: str, available: int, run: dict[str, Any], device: torch.device,
                      t_start: float, out_dir: Path) -> dict[str, Any]:
    config, queries, model = trainer.c, trainer.queries, trainer.model
    counts = {**query_counts(available, queries), "items": len(trainer.items), "steps": trainer.step}
    return run_summary(
        "embedder", config, base, trainer.procs, device, t_start, out_dir,
        layers=int(model.config.num_hidden_layers),
        dim=int(model.config.hidden_size),
        data=data_record(trainer.benches, tools_trained_on=lambda _, b: len(b.catalog)),
        seed=config.seed,
        tokenization={"max_length": config.max_length, "pooling": "mean", "normalize": True,
                      "query_text": f"retrieval_text(history={config.history!r}, turns={config.history_turns})",
                      "tool_text": "magicselector.catalog.tool_text"},
        loss=trainer.loss.describe(),
        counts=counts,
        rounds=run["rounds"],
        loss_summary=loss_summary(trainer.losses, by=("round",)),
        final_loss=trainer.losses[-1]["loss"] if trainer.losses else float("nan"),
        probe_loss_before=run["probe_before"],
        probe_loss_after=run["probe_after"],
        probe_items=len(run["probe"]),
        train_retrieval_before=run["base_stats"],
        train_retrieval_after=run["final_teacher"],
    )


def train_embedder(data_dirs: str | Path | Sequence[str | Path], out_dir: str | Path,
                   config: EmbedderTrainConfig = EmbedderTrainConfig(), progress: bool = True,
                   overwrite: bool = False, loss: InfoNCELoss | None = None) -> dict[str, Any]:
    """Train the dense embedder on benchmark folders; write a Hugging Face / sentence-transformers
    checkpoint.

    ``out_dir`` receives the checkpoint (``save_pretrained`` of the ``AutoModel`` and its fast
    tokenizer, plus the sentence-transformers module files), ``training_log.csv`` (step, round,
    loss, lr, seconds) and ``train_config.json``; the returned summary is ``train_config.json``'s
    content. ``loss``: the training loss (None: ``InfoNCELoss`` with the config's temperature and
    in-batch setting). See the module docstring for how to measure the result.
    """
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    benches, queries, available, rng = prepare_training_data(data_dirs, out_dir, config, overwrite, "train_embedder")
    with run_context(config) as (device, procs):
        trainer = None
        try:
            base, model, tokenizer, tok_file = load_encoder_run(config, out_dir, procs, device, "bare", progress)
            if config.freeze_embeddings:
                model.get_input_embeddings().weight.requires_grad_(False)
            text_tok = TextTokenizer(tok_file, config.max_length)
            trainer = _Trainer(config, model, text_tok, benches, queries, out_dir / "training_log.csv", progress,
                               procs, device, loss)
            summary = _embedder_summary(trainer, base, available, _embedder_rounds(trainer, rng), device, t_start,
                                        out_dir)

            def save() -> None:
                save_checkpoint(model.to("cpu"), tokenizer, out_dir, progress)
                _write_sentence_transformers_files(out_dir, summary["dim"], config.max_length)

            return finish_run(procs, out_dir, summary, save)
        finally:
            if trainer is not None:
                trainer.close()

"""The trainer skeleton every trainer shares: the common training config and its checks, the run's
setup (threads, device, processes), the encoder trainers' model loading, and the one finish step
(save on rank 0, write ``train_config.json``, wait for every rank).

The shape follows sentence-transformers' trainer: a ``TrainConfig`` holds the fields every run
has (``SentenceTransformerTrainingArguments``), the losses are objects a trainer takes
(``train/losses.py``), and every trainer ends in ``finish_run``.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from magicselector.errors import InputError

from .queries import check_negatives_exist, fill_negatives, tool_texts
from .toolkit import (
    DEVICES, CsvLog, Processes, clip_and_step, default_base_model, fast_tokenizer, load_encoder, processes,
    run_record, seed_all, torch_device, torch_threads,
)

Need = Callable[[bool, str], None]


@dataclass(frozen=True)
class TrainConfig:
    """The fields every trainer's config has (each trainer's config subclasses this one and may
    change the defaults). All are recorded in ``train_config.json``.

    seed: seeds torch, numpy and random; the same seed, data and threads give the same run.
    lr / weight_decay / warmup_ratio / grad_clip: AdamW, its warm-up share of the steps and the
      gradient-norm clip (0: none).
    threads: ``torch.set_num_threads`` for the run (None: leave torch's default).
    device: ``cpu``, ``cuda`` or ``auto`` (cuda when torch sees one; under a launcher, this
      process's GPU).
    """

    seed: int = 0
    lr: float = 5e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    grad_clip: float = 1.0
    threads: int | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        need = self._need
        need(self.lr > 0, "lr must be > 0")
        need(self.weight_decay >= 0, "weight_decay must be >= 0")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)")
        need(self.grad_clip >= 0, "grad_clip must be >= 0")
        need(self.threads is None or self.threads >= 1, "threads must be >= 1")
        need(self.device in DEVICES, f"device must be one of {DEVICES}, got {self.device!r}")
        self.check(need)

    def _need(self, cond: bool, msg: str) -> None:
        if not cond:
            raise InputError(f"{type(self).__name__}: {msg}")

    def check(self, need: Need) -> None:
        """The trainer's own checks of its own fields (``need(condition, message)``)."""


@dataclass(frozen=True)
class EncoderTrainConfig(TrainConfig):
    """The fields the two encoder trainers (embedder, reranker) share on top of ``TrainConfig``.

    rounds: hard-negative mining rounds after the first round (Algorithm 1's R).
    negatives: negatives per gold tool (and hard negatives mined per query).
    pool: the candidates per query that negatives are drawn from and that the teacher scores.
    batch_size: items per optimizer step.
    max_length: tokens per text (embedder) or per pair (reranker).
    layers: keep only the first N encoder layers of the base model (None: all).
    history / history_turns: how a turn's query text is built (``retrieval_text``).
    include_tasks: add the gold sub-tasks (``tasks`` of generated sets) as extra queries.
    catalog_scope: ``gold`` (default) trains against the tools that are gold for at least one
      training query only; ``all`` uses each folder's whole catalog.
    max_queries: a seeded sample of at most this many training queries (turns and tasks together).
    max_queries_per_folder: first, a seeded sample of at most this many per data folder (a mix
      of sets of very different sizes stays balanced).
    base_model: a BERT-style checkpoint folder (None: the packaged all-MiniLM-L6-v2).
    """

    weight_decay: float = 0.01
    rounds: int = 1
    negatives: int = 7
    pool: int = 20
    batch_size: int = 32
    max_length: int = 128
    layers: int | None = None
    history: str = "user"
    history_turns: int = 4
    include_tasks: bool = True
    catalog_scope: str = "gold"
    max_queries: int | None = None
    max_queries_per_folder: int | None = None
    base_model: str | None = None

    def __post_init__(self) -> None:
        from magicselector.config import HISTORY_MODES

        need = self._need
        need(self.history in HISTORY_MODES, f"history must be one of {HISTORY_MODES}, got {self.history!r}")
        need(self.catalog_scope in ("gold", "all"),
             f"catalog_scope must be 'gold' or 'all', got {self.catalog_scope!r}")
        need(self.rounds >= 0, "rounds must be >= 0")
        check_at_least(self, need, 1, "negatives", "pool", "batch_size", "layers", "max_queries",
                       "max_queries_per_folder")
        need(self.history_turns >= 0, "history_turns must be >= 0")
        super().__post_init__()


def check_at_least(config: Any, need: Need, minimum: int, *names: str) -> None:
    """``need(field >= minimum)`` for each named field; a field that may be None is checked when set."""
    for name in names:
        value = getattr(config, name)
        need(value is None or value >= minimum, f"{name} must be >= {minimum}")


@contextmanager
def run_context(config: TrainConfig) -> Iterator[tuple[torch.device, Processes]]:
    """The run's device and processes, with ``config.threads`` torch threads, once every rank has
    checked the output folder (the barrier before rank 0 writes into it)."""
    device = torch_device(config.device)
    with torch_threads(config.threads), processes(device) as procs:
        procs.barrier()
        yield device, procs


def load_encoder_run(config: Any, out_dir: Path, procs: Processes, device: torch.device, head: str,
                     progress: bool):
    """The encoder trainers' start: the base checkpoint (``config.base_model`` or the packaged
    MiniLM), seeded, loaded with ``head`` and ``config.layers`` onto ``device``, the output folder
    made by rank 0 and the fast tokenizer saved there if the base has no ``tokenizer.json``.
    Returns (base, model, tokenizer, tokenizer file)."""
    base = config.base_model or default_base_model()
    seed_all(config.seed)
    model = load_encoder(base, config.layers, head=head, progress=progress).to(device)
    if procs.main:
        out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, tok_file = fast_tokenizer(base, out_dir, write=procs.main)
    procs.barrier()
    return base, model, tokenizer, tok_file


class EncoderTrainer:
    """The state both encoder trainers' runs share: the config, the model (kept as it is for
    scoring and saving) and the one trained through (DDP with several processes), the data and
    its tool texts, the seeded generator, the step count, the loss rows and the CSV log with
    ``log_columns`` (``step`` first, ``seconds`` last). Not part of the public API."""

    def __init__(self, config: Any, model, benches: list, queries: list, log_path: Path,
                 log_columns: list[str], progress: bool, procs: Processes, device: torch.device) -> None:
        check_negatives_exist(queries, benches)
        self.c = config
        self.model = model
        self.net = procs.wrap(model, device)
        self.device = device
        self.procs = procs
        self.benches = benches
        self.queries = queries
        self.texts = [tool_texts(b.catalog) for b in benches]
        self.ids = [b.catalog.ids for b in benches]
        self.rng = np.random.default_rng(config.seed)
        self.progress = progress and procs.main
        self.step = 0
        self.t0 = time.perf_counter()
        self.losses: list[dict[str, Any]] = []
        self.log = CsvLog(log_path, ["step", *log_columns, "seconds"], enabled=procs.main,
                          formats={"loss": "{:.6f}", "lr": "{:.3e}", "seconds": "{:.3f}"}, flush_every=20)

    def close(self) -> None:
        self.log.close()

    def _fill(self, q, chosen: list[str], n: int) -> list[str]:
        return fill_negatives(q, chosen, n, self.ids[q.bench], self.rng)

    def _record(self, **fields: Any) -> None:
        """One log row: this step, ``fields`` in the log's column order, the seconds since the start."""
        row = {"step": self.step, **fields, "seconds": round(time.perf_counter() - self.t0, 3)}
        self.losses.append(row)
        self.log.write(row)

    def _update(self, loss: torch.Tensor, share: float, opt, sched) -> tuple[float, float]:
        """One optimizer step on this rank's slice loss; (the lr used, the whole batch's loss)."""
        backprop, value = self.procs.weighted(loss, share)
        opt.zero_grad(set_to_none=True)
        backprop.backward()
        lr = clip_and_step(self.model, opt, sched, self.c.grad_clip)
        self.step += 1
        return lr, value


def write_json(path: Path, content: Any) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def run_summary(kind: str, config: Any, base_model: Any, procs: Processes, device: torch.device, t_start: float,
                out_dir: Path, *, stage: str | None = None, config_record: dict[str, Any] | None = None,
                **fields: Any) -> dict[str, Any]:
    """A run's ``train_config.json``: its kind (and stage), its config, its base model, the
    trainer's own ``fields`` in order, then where and how it ran (``run_record``)."""
    head: dict[str, Any] = {"kind": kind}
    if stage is not None:
        head["stage"] = stage
    head["config"] = asdict(config) if config_record is None else config_record
    head["base_model"] = str(base_model)
    return {**head, **fields, **run_record(procs, device, t_start, out_dir)}


def finish_run(procs: Processes, out_dir: Path, summary: dict[str, Any], save: Callable[[], None]) -> dict[str, Any]:
    """The end of every run: rank 0 saves the trained model (``save()``) and writes the summary as
    ``train_config.json``; every rank waits for it and returns the summary."""
    if procs.main:
        save()
        write_json(out_dir / "train_config.json", summary)
    procs.barrier()
    return summary

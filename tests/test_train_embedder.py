"""The embedder trainer: a tiny real run (1 layer, 32 tokens, a handful of steps, one thread) on
the 6-tool benchmark that learns, mines gold-free hard negatives, writes its files, reproduces
itself and exports to an INT8 ONNX embedder with unit-norm vectors."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
pytest.importorskip("transformers", reason="needs the train extra: pip install -e .[train]")

from magicselector.errors import InputError  # noqa: E402
from magicselector.train import embedder as emb_mod  # noqa: E402
from magicselector.train.embedder import EmbedderTrainConfig, train_embedder  # noqa: E402

TINY = dict(layers=1, max_length=32, negatives=2, pool=4, batch_size=4, epochs=3, rounds=1, lr=1e-4,
            threads=1, probe_items=64)


def _with_tasks(folder: Path) -> Path:
    """The tiny benchmark plus gold sub-tasks on the multi-tool turn (6 queries, 7 items)."""
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines() if line.strip()]
    for r in rows:
        if r["id"] == "q2":
            r["tasks"] = [{"text": "turn on bluetooth", "tool": "bluetooth_toggle"},
                          {"text": "play some jazz", "tool": "play_music"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _log(path: Path) -> list[list[str]]:
    with open(path / "training_log.csv", newline="") as f:
        return list(csv.reader(f))


def test_tiny_run_learns_mines_gold_free_negatives_and_exports(tiny_benchmark, tmp_path, monkeypatch):
    from transformers import AutoModel

    from magicselector.export.bundle import export_embedder
    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.stages.embed import TextEmbedder, TextTokenizer

    data = _with_tasks(tiny_benchmark)
    seen: list[tuple[int, dict[str, list[str]], dict[str, tuple[str, ...]]]] = []
    original = emb_mod._Trainer.train_round

    def recording(self, r, negatives, pools=None):
        seen.append((r, {k: list(v) for k, v in negatives.items()}, {q.id: q.gold for q in self.queries}))
        return original(self, r, negatives, pools)

    monkeypatch.setattr(emb_mod._Trainer, "train_round", recording)
    out = tmp_path / "ckpt"
    summary = train_embedder(data, out, EmbedderTrainConfig(**TINY), progress=False)

    # eq. 13 on a fixed probe (the round-0 tuples), eval mode
    print("probe loss", summary["probe_loss_before"], "->", summary["probe_loss_after"])
    assert summary["probe_loss_after"] < 0.8 * summary["probe_loss_before"]
    assert summary["counts"] == {**summary["counts"], "queries": 6, "task_queries": 2, "items": 7}
    assert summary["layers"] == 1 and summary["dim"] == 384

    # round 0 random, round 1 mined: never a gold tool, never outside the gold-scoped catalog
    assert [r for r, _, _ in seen] == [0, 1]
    scoped = {"set_alarm", "start_timer", "bluetooth_toggle", "play_music", "get_weather"}  # send_email: never gold
    for r, negatives, gold in seen:
        assert set(negatives) == set(gold)
        for qid, negs in negatives.items():
            assert len(negs) == 2 and len(set(negs)) == 2
            assert not set(negs) & set(gold[qid]), (r, qid, negs)
            assert set(negs) <= scoped
    assert summary["rounds"][1]["mining"]["mean_hard_negatives"] == 2

    # files, log
    for f in ("config.json", "model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json",
              "sentence_bert_config.json", "training_log.csv", "train_config.json"):
        assert (out / f).is_file(), f
    rows = _log(out)
    assert rows[0] == ["step", "round", "loss", "lr", "seconds"]
    rows = rows[1:]
    assert len(rows) == summary["counts"]["steps"] == 2 * 3 * 2  # rounds x epochs x ceil(7 / 4)
    assert {r[1] for r in rows} == {"0", "1"}
    assert all(math.isfinite(float(r[2])) and float(r[3]) > 0 for r in rows)
    info = json.loads((out / "train_config.json").read_text())
    assert info["kind"] == "embedder" and info["config"]["seed"] == 0 and info["config"]["temperature"] == 0.05
    assert len(info["data"][0]["queries_sha256"]) == 64 and info["data"][0]["tools_trained_on"] == 5
    assert info["wall_seconds"] > 0

    # the weights moved away from the (1-layer) base model
    trained = AutoModel.from_pretrained(str(out)).eval()
    base = emb_mod.load_embedder(minilm_checkpoint(), layers=1).eval()
    a = dict(trained.named_parameters())
    moved = [n for n, p in base.named_parameters() if n in a and not torch.equal(p, a[n])]
    assert any("encoder.layer.0" in n for n in moved) and any("embeddings" in n for n in moved)

    # export as it is: INT8 ONNX, unit-norm vectors matching the PyTorch checkpoint
    texts = ["wake me up at 7", "turn on bluetooth", "Set an alarm that rings at a clock time.", "what's the weather?"]
    exported = export_embedder(out, tmp_path / "export", probe_texts=texts, log=lambda m: None)
    assert exported["meta"]["layers"] == 1 and exported["meta"]["parity"]["min_cosine"] >= 0.97
    tok = TextTokenizer(out / "tokenizer.json", 128)
    vecs = TextEmbedder(exported["onnx"], tok, dim=384, threads=1).embed(texts)
    assert vecs.shape == (4, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    ref = emb_mod.embed_texts(trained, tok, texts)
    assert (ref * vecs).sum(axis=1).min() > 0.97

    try:  # the folder is also a sentence-transformers model with the runtime's pooling
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return
    st = SentenceTransformer(str(out), device="cpu").encode(texts)
    assert np.allclose(st, ref, atol=1e-4)


def test_same_seed_same_log(tiny_benchmark, tmp_path):
    cfg = EmbedderTrainConfig(**{**TINY, "epochs": 1, "in_batch": True})
    a = train_embedder(tiny_benchmark, tmp_path / "a", cfg, progress=False)
    b = train_embedder(tiny_benchmark, tmp_path / "b", cfg, progress=False)
    assert a["final_loss"] == b["final_loss"] and a["probe_loss_after"] == b["probe_loss_after"]
    strip = lambda rows: [r[:4] for r in rows]  # noqa: E731  (seconds differ)
    assert strip(_log(tmp_path / "a")) == strip(_log(tmp_path / "b"))
    assert len(_log(tmp_path / "a")) == 1 + 2 * 2  # header + 2 rounds x ceil(5 / 4) steps


def test_freeze_embeddings_keeps_the_word_table_and_trains_the_rest(tiny_benchmark, tmp_path):
    from safetensors.torch import load_file

    cfg = EmbedderTrainConfig(**{**TINY, "epochs": 1, "rounds": 0, "lr": 1e-3, "freeze_embeddings": True})
    summary = train_embedder(tiny_benchmark, tmp_path / "f", cfg, progress=False)
    assert summary["device"] == "cpu"
    base = emb_mod.load_embedder(summary["base_model"], layers=1).state_dict()
    after = load_file(str(tmp_path / "f" / "model.safetensors"))
    key = next(k for k in after if k.endswith("word_embeddings.weight"))
    assert torch.equal(after[key], base[key.removeprefix("bert.")] if key.startswith("bert.") else base[key])
    moved = [k for k in after if "encoder.layer.0" in k and k.endswith("weight") and k in base
             and not torch.equal(after[k], base[k])]
    assert moved  # the encoder did train


def test_bad_inputs_are_clear_errors(tiny_benchmark, tmp_path):
    cfg = EmbedderTrainConfig(**TINY)
    out = tmp_path / "out"
    with pytest.raises(InputError, match="no such data folder"):
        train_embedder(tmp_path / "missing", out, cfg, progress=False)
    with pytest.raises(InputError, match="no data folders"):
        train_embedder([], out, cfg, progress=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "tools.jsonl").write_text((tiny_benchmark / "tools.jsonl").read_text())
    with pytest.raises(InputError, match="no queries.jsonl"):
        train_embedder(empty, out, cfg, progress=False)
    (empty / "queries.jsonl").write_text("\n")
    with pytest.raises(InputError, match="no queries"):
        train_embedder(empty, out, cfg, progress=False)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(InputError, match="not empty"):
        train_embedder(tiny_benchmark, tmp_path / "full", cfg, progress=False)
    assert not out.exists()
    for bad in ({"history": "everything"}, {"negatives": 0}, {"pool": 0}, {"layers": 0}, {"epochs": 0},
                {"temperature": 0.0}, {"rounds": -1}, {"catalog_scope": "some"}):
        with pytest.raises(InputError):
            EmbedderTrainConfig(**bad)


def test_cli_parses_without_importing_torch():
    import subprocess
    import sys

    code = ("import sys; from magicselector.cli import build_parser; "
            "a = build_parser().parse_args(['train', 'embedder', '--data', 'd1', 'd2', '--out', 'o', '--rounds', '2', "
            "'--temperature', '0.1', '--in-batch', '--max-queries', '10', '--catalog-scope', 'all', '--quiet']); "
            "print(a.data, a.rounds, a.temperature, a.in_batch, a.max_queries, a.catalog_scope, a.func.__name__, "
            "any(m.split('.')[0] == 'torch' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "['d1', 'd2'] 2 0.1 True 10 all cmd_train_embedder False"


def test_the_teacher_term_is_zero_when_the_teacher_agrees_and_pulls_when_it_does_not():
    from magicselector.train.embedder_losses import info_nce
    from magicselector.train.losses import TeacherKLInfoNCELoss

    g = torch.Generator().manual_seed(0)
    q, p, n = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g), torch.randn(4, 2, 8, generator=g)
    texts = {f"q{i}": q[i] for i in range(4)} | {f"p{i}": p[i] for i in range(4)}
    texts |= {f"n{i}{j}": n[i, j] for i in range(4) for j in range(2)}
    labels = {"pos_ids": ["a", "b", "c", "d"], "gold": [["a"], ["b"], ["c"], ["d"]],
              "query_texts": [f"q{i}" for i in range(4)], "positive_texts": [f"p{i}" for i in range(4)],
              "negative_texts": [[f"n{i}{j}" for j in range(2)] for i in range(4)]}
    agrees = lambda batch: torch.stack([texts[t] for t in batch])  # noqa: E731  (the student's own vectors)
    outputs = {"query": q.clone().requires_grad_(), "positive": p, "negatives": n}
    nce = info_nce(q, p, n, 0.05, in_batch=True, pos_ids=labels["pos_ids"], gold=labels["gold"])
    same = TeacherKLInfoNCELoss(agrees, 1.0)(outputs, labels)
    assert torch.allclose(same, nce, atol=1e-5)
    flipped = lambda batch: -agrees(batch) if batch[0].startswith("q") else agrees(batch)  # noqa: E731
    pulled = TeacherKLInfoNCELoss(flipped, 1.0)(outputs, labels)
    assert pulled > nce + 0.1
    pulled.backward()
    assert torch.isfinite(outputs["query"].grad).all() and outputs["query"].grad.abs().sum() > 0
    # the trainer's probe (in_batch=False) stays eq. 13 alone; texts are required otherwise
    assert torch.allclose(TeacherKLInfoNCELoss(flipped, 1.0)(outputs, labels, in_batch=False),
                          info_nce(q, p, n, 0.05), atol=1e-5)
    with pytest.raises(InputError, match="query_texts"):
        TeacherKLInfoNCELoss(agrees, 1.0)(outputs, {"pos_ids": labels["pos_ids"], "gold": labels["gold"]})


def test_teacher_parts_are_checked():
    from magicselector.train.teacher import parse_teacher_parts

    assert parse_teacher_parts(["0.7=bundle", "0.3=/models/mpnet"]) == [(0.7, "bundle"), (0.3, "/models/mpnet")]
    for bad in (["bundle"], ["x=bundle"], ["0=bundle"], ["-1=bundle", "2=b"], ["0.5=bundle"], ["1="], []):
        with pytest.raises(InputError, match="--teacher"):
            parse_teacher_parts(bad)


def test_a_tiny_run_with_a_teacher_records_it_and_embeds_each_text_once(tiny_benchmark, tmp_path):
    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.train.losses import TeacherKLInfoNCELoss
    from magicselector.train.teacher import EmbeddingTeacher

    teacher = EmbeddingTeacher.from_specs([f"1={minilm_checkpoint()}"], max_length=32)
    calls = []
    part_scale, embed = teacher.parts[0]
    teacher.parts = [(part_scale, lambda texts: calls.append(list(texts)) or embed(texts))]
    cfg = EmbedderTrainConfig(**{**TINY, "epochs": 2, "rounds": 0, "in_batch": True})
    summary = train_embedder(tiny_benchmark, tmp_path / "t", cfg, progress=False,
                             loss=TeacherKLInfoNCELoss(teacher, 1.0, cfg.temperature, cfg.in_batch))
    assert summary["loss"]["name"] == "InfoNCE (eq. 13) + KL to a teacher" and summary["loss"]["weight"] == 1.0
    assert summary["loss"]["teacher"]["parts"] == [{"weight": 1.0, "source": str(minilm_checkpoint())}]
    assert math.isfinite(summary["final_loss"])
    seen = [t for batch in calls for t in batch]
    assert seen and len(seen) == len(set(seen))  # two epochs, every text embedded by the teacher once


def test_cli_refuses_a_bad_teacher_before_loading_anything(tiny_benchmark, tmp_path, capsys):
    from magicselector.cli import main

    rc = main(["train", "embedder", "--data", str(tiny_benchmark), "--out", str(tmp_path / "o"),
               "--teacher", "0.5=bundle", "--quiet"])
    assert rc != 0 and "--teacher" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()

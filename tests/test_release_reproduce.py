"""Continuing from what ships (issue 48, item 6): the shipped embedder's FP32 checkpoint is remade by
one pinned command, ``python3 -m magicselector.export.reproduce --out DIR``. Its dry path remakes
the training data and holds it to the sha256 the shipped record names, and its training command is
the recorded recipe, flag for flag (the training itself takes about an hour on two cores)."""
from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from conftest import needs

from magicselector.data.splits import default_shared_data
from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR


def _recorded() -> dict:
    return json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text())["source"]


def test_the_training_command_is_the_recorded_recipe(monkeypatch):
    pytest.importorskip("torch", reason=needs("train"))
    from magicselector.cli import build_parser
    from magicselector.export.reproduce import shipped_train_command
    from magicselector.train import embedder as trainer

    class Captured(Exception):
        pass

    seen = []

    def fake_train(data, out, config, **kw):  # takes what the command would train with, trains nothing
        seen.append((data, out, config))
        raise Captured

    monkeypatch.setattr(trainer, "train_embedder", fake_train)
    command = shipped_train_command(["/d/mobile/train", "/d/bfcl/train"], "/d/ckpt")
    args = build_parser().parse_args(command[1:])
    with pytest.raises(Captured):
        args.func(args)
    (data, out, config), = seen
    assert list(map(str, data)) == ["/d/mobile/train", "/d/bfcl/train"] and str(out) == "/d/ckpt"
    assert asdict(config) == _recorded()["recipe"]


@pytest.mark.slow
def test_the_dry_path_remakes_the_shipped_training_data(tmp_path, capsys):
    from magicselector.export.reproduce import main

    shared = default_shared_data()
    needed = [d["path"].rstrip("/").split("/")[-2] for d in _recorded()["data"]][1:]  # after mobile/train
    if not all((shared / name / "queries.jsonl").is_file() for name in needed):
        pytest.skip(f"the public sets {needed} are not all in {shared}")
    assert main(["--out", str(tmp_path), "--dry-run", "--shared-data", str(shared)]) == 0
    report = json.loads(capsys.readouterr().out)
    recorded = _recorded()
    assert [r["recorded_path"] for r in report["data"]] == [d["path"] for d in recorded["data"]]
    assert [(r["queries_sha256"], r["tools_sha256"]) for r in report["data"]] == [
        (d["queries_sha256"], d["tools_sha256"]) for d in recorded["data"]]
    assert report["data_reproduced"] is True and "weights_sha256" not in report  # dry: nothing trained
    assert report["command"].startswith("magicselector train embedder --data ") and "--freeze-embeddings" in \
        report["command"]
    assert report["weights_sha256_recorded"] == recorded["weights_sha256"]


def test_a_missing_public_set_is_a_clear_error(tmp_path, capsys):
    from magicselector.export.reproduce import main

    assert main(["--out", str(tmp_path / "o"), "--dry-run", "--shared-data", str(tmp_path / "none")]) == 2
    assert "is not there (--shared-data DIR)" in capsys.readouterr().err


def test_a_recorded_training_folder_is_known_by_its_path():
    from magicselector.export.reproduce import data_source

    assert data_source("/tmp/s3/mobile/train") == ("mobile", None)
    assert data_source("/tmp/splits/sgd/train") == ("sgd", "train")
    assert data_source("/x/splits/gorilla_apibench/eval") == ("gorilla_apibench", "eval")
    assert data_source("/tmp/mobile/test") is None and data_source("/tmp/splits/unknown_set/train") is None
    assert all(data_source(d["path"]) is not None for d in _recorded()["data"])  # the shipped record: all remade


def test_the_fp32_probes_belong_to_the_shipped_weights():
    """A long CPU run agrees with the shipped weights to float round-off, not bit for bit; the
    reproduction is then held to the shipped FP32 vectors of the probe queries."""
    import numpy as np

    from magicselector.bundle_writer import PROBE_QUERIES
    from magicselector.export.reproduce import FP32_PROBES_FILE, probe_agreement

    probes = json.loads(FP32_PROBES_FILE.read_text())
    assert probes["weights_sha256"] == _recorded()["weights_sha256"] and probes["texts"] == list(PROBE_QUERIES)
    vectors = np.asarray(probes["vectors"])
    assert vectors.shape == (len(PROBE_QUERIES), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    same = probe_agreement(probes, vectors)
    assert same["equivalent"] and same["probe_min_cosine"] > 1 - 1e-9
    nudged = vectors + np.random.default_rng(0).normal(0, 0.01, vectors.shape)  # about cosine 0.98
    assert not probe_agreement(probes, nudged)["equivalent"]


@pytest.mark.slow
def test_the_base_model_is_not_taken_for_the_shipped_weights():
    pytest.importorskip("sentence_transformers", reason=needs("export"))
    from magicselector.export.checkpoints import minilm_checkpoint
    from magicselector.export.reproduce import FP32_PROBES_FILE, checkpoint_probe_vectors, probe_agreement

    probes = json.loads(FP32_PROBES_FILE.read_text())
    base = probe_agreement(probes, checkpoint_probe_vectors(minilm_checkpoint(), probes["texts"]))
    assert not base["equivalent"] and base["probe_min_cosine"] < 0.95  # 0.83: the fine-tune moved every probe

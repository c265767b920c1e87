"""A .pte bundle from a freshly trained tiny embedder: built and verified (the verify step runs in a
child process, so a crash there is an error, not a dead builder), then selected with, in-process."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs

pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
pytest.importorskip("transformers", reason="needs the train extra: pip install -e .[train]")
pytest.importorskip("executorch", reason=needs("release"))

from magicselector.train.embedder import EmbedderTrainConfig, train_embedder  # noqa: E402

TINY = dict(layers=1, max_length=32, negatives=2, pool=4, batch_size=4, epochs=1, rounds=1, lr=1e-4,
            threads=1, probe_items=64)


def test_pte_bundle_of_a_fresh_checkpoint_builds_verifies_and_selects(tiny_benchmark, tmp_path):
    from magicselector import Selector
    from magicselector.bundle_check import verify_bundle
    from magicselector.export.bundle import export_bundle

    checkpoint = tmp_path / "ckpt"
    train_embedder(tiny_benchmark, checkpoint, EmbedderTrainConfig(**TINY), progress=False)
    out = tmp_path / "bundles" / "pte"
    manifest = export_bundle(out, embedder=checkpoint, catalog=tiny_benchmark / "tools.jsonl", fmt="pte",
                             gguf=False, log=lambda m: None)
    assert (out / manifest["embedder"]["file"]).suffix == ".pte"
    assert [p.name for p in out.parent.iterdir()] == ["pte"]  # no staging folder beside it
    verify_bundle(out)  # loads the program from the bundle's bytes, in this process
    selector = Selector.from_bundle(out)
    for _ in range(2):  # the second call runs on the same loaded program
        result = selector.select("wake me up at seven tomorrow")
        assert "set_alarm" in result.ranked_ids[:3]


def test_a_verify_that_crashes_its_process_is_a_bundle_error(tmp_path, monkeypatch):
    import sys

    from magicselector.errors import BundleError
    from magicselector.export.bundle import verify_in_child

    crashing = tmp_path / "python"  # stands in for the interpreter: dies as a segfaulting runtime would
    crashing.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crashing.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(crashing))
    with pytest.raises(BundleError, match=r"b: verifying the bundle crashed the model runtime \(SIGSEGV\)"):
        verify_in_child(tmp_path / "b")


def test_a_failed_verify_in_the_child_names_what_failed(tmp_path):
    from magicselector.errors import BundleError
    from magicselector.export.bundle import verify_in_child

    with pytest.raises(BundleError, match=r"missing: no such bundle folder"):
        verify_in_child(tmp_path / "missing")

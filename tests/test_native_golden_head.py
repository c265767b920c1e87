"""The head stage of the golden check on a freshly trained tiny checkpoint (issue 48): its bundle, with a
head, passes the native core's check and Python's, both computing the head from the written lists and
fused list; a feature or probability moved past the tolerance, or two features swapped, still fails both."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import host_native_binary

from conftest import needs

pytest.importorskip("torch", reason=needs("train"))
pytest.importorskip("transformers", reason=needs("train"))
pytest.importorskip("onnx", reason=needs("export"))
pytest.importorskip("llama_cpp", reason=needs("llm"))  # the native core runs the bundle's GGUF embedder

pytestmark = pytest.mark.slow

# test_release.py's tiny recipe: one layer, a few steps; its scores lie close together, the case
# where the head re-run from the native core's own scores missed the tolerance (1.5e-5 on a feature)
TINY = dict(layers=1, max_length=32, negatives=2, pool=4, batch_size=4, epochs=1, rounds=1, lr=1e-4,
            threads=1, probe_items=64)


@pytest.fixture(scope="module")
def binary() -> Path:
    return host_native_binary()


@pytest.fixture(scope="module")
def fresh_bundle(tmp_path_factory) -> Path:
    """A bundle of a freshly trained one-layer checkpoint with the shipped head, over the phone catalog."""
    from conftest import tiny_benchmark

    from magicselector.catalog import load_phone_catalog
    from magicselector.default_bundle import SHIPPED_HEAD
    from magicselector.export.bundle import export_bundle
    from magicselector.train.embedder import EmbedderTrainConfig, train_embedder

    root = tmp_path_factory.mktemp("fresh")
    data = root / "data"
    data.mkdir()
    tiny_benchmark.__wrapped__(data)
    train_embedder(data, root / "ckpt", EmbedderTrainConfig(**TINY), progress=False)
    export_bundle(root / "bundle", embedder=root / "ckpt", catalog=load_phone_catalog(), head=SHIPPED_HEAD,
                  target="host", log=lambda m: None)
    return root / "bundle"


def _native_verify(binary: Path, bundle: Path) -> tuple[int, dict[str, Any]]:
    run = subprocess.run([str(binary), "verify", str(bundle)], capture_output=True, text=True, timeout=600)
    return run.returncode, json.loads(run.stdout)


def _python_check(bundle: Path) -> dict[str, Any]:
    from magicselector import Selector
    from magicselector.golden import check_pipeline

    golden = json.loads((bundle / "golden.json").read_text())
    return check_pipeline(Selector.from_bundle(bundle, verify=False), golden["pipeline"])


def _with_golden(bundle: Path, out: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``bundle`` whose golden.json ``change`` rewrote (its manifest rehashed, unsigned)."""
    from magicselector.bundle import write_manifest

    shutil.copytree(bundle, out)
    golden = json.loads((out / "golden.json").read_text())
    change(golden["pipeline"])
    (out / "golden.json").write_text(json.dumps(golden) + "\n")
    (out / "manifest.sig").unlink(missing_ok=True)
    write_manifest(out, json.loads((out / "manifest.json").read_text()))
    return out


def _head_turn(pipeline: dict[str, Any]) -> dict[str, Any]:
    """The first probe turn the head ran on with two distinct features in its second row."""
    return next(c for c in pipeline["turns"] if c["head"] and len(c["head"]["features"]) > 1)


def test_a_freshly_trained_checkpoints_bundle_with_a_head_passes_the_native_and_python_checks(binary, fresh_bundle):
    tolerances = json.loads((fresh_bundle / "golden.json").read_text())["pipeline"]["tolerances"]
    rc, report = _native_verify(binary, fresh_bundle)
    assert rc == 0 and report["ok"], report.get("first_mismatch")
    heads = {k: v for k, v in report["stages"].items() if k.startswith("head.")}
    assert set(heads) == {"head.ran", "head.inputs", "head.features", "head.probabilities", "head.order"}
    assert all(v["checked"] == report["turns"] and v["mismatches"] == 0 for v in heads.values()), heads
    # the head on the written lists: the same arithmetic, far inside the bound
    assert report["max_feature_diff"] <= tolerances["feature_abs"] / 100
    assert report["max_probability_diff"] <= tolerances["probability_abs"] / 100
    # the end-to-end drift, from this build's own float32 scores, is reported beside it
    assert set(report["head_replayed"]) >= {"max_feature_diff", "max_probability_diff"}
    assert _python_check(fresh_bundle)["golden_pipeline_turns"] == report["turns"]


@pytest.mark.parametrize("what", ["feature", "swapped features", "probability"])
def test_a_head_value_past_the_tolerance_fails_both_checks(binary, fresh_bundle, tmp_path, what):
    from magicselector.errors import BundleError

    def change(pipeline: dict[str, Any]) -> None:
        tol = pipeline["tolerances"]
        head = _head_turn(pipeline)["head"]
        row = head["features"][1]
        if what == "feature":  # the fused gap (column 2): ten times its bound off
            row[2] += 10 * (tol["feature_abs"] + tol["feature_rel"] * abs(row[2]))
        elif what == "swapped features":  # fused_rank and log_fused_rank: 1 and log(2)
            row[0], row[1] = row[1], row[0]
        else:
            head["probabilities"][1] += 10 * tol["probability_abs"]

    bad = _with_golden(fresh_bundle, tmp_path / "bad", change)
    stage = "head.probabilities" if what == "probability" else "head.features"
    rc, report = _native_verify(binary, bad)
    assert rc == 1 and not report["ok"]
    assert report["stages"][stage]["mismatches"] == 1 and report["first_mismatch"].endswith(f"{stage} differs")
    with pytest.raises(BundleError, match=stage.replace(".", r"\.")):
        _python_check(bad)

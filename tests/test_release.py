"""Releasing a new checkpoint (issue 48): the same inputs built twice give the same bytes, the
training record travels into the manifest and a model card, ``bundle verify --against CKPT``
shows where a bundle came from, ``bundle compare`` reports with a verdict per metric, and
``magicselector release`` runs end to end on a tiny freshly trained checkpoint."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import needs

pytest.importorskip("torch", reason=needs("train"))
pytest.importorskip("transformers", reason=needs("train"))
pytest.importorskip("onnx", reason=needs("export"))

from magicselector.train.embedder import EmbedderTrainConfig, train_embedder  # noqa: E402

TINY = dict(layers=1, max_length=32, negatives=2, pool=4, batch_size=4, epochs=1, rounds=1, lr=1e-4,
            threads=1, probe_items=64)
VOLATILE = ("build", "release", "content_sha256", "rewritten_from")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """The conftest tiny benchmark, for module-scoped fixtures (its function fixture cannot be)."""
    from conftest import tiny_benchmark

    return tiny_benchmark.__wrapped__(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def checkpoint(tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ckpt") / "ckpt"
    train_embedder(tiny_data, out, EmbedderTrainConfig(**TINY), progress=False)
    return out


def _build(out: Path, checkpoint: Path, catalog: Path, **kw):
    from magicselector.export.bundle import export_bundle

    return export_bundle(out, embedder=checkpoint, catalog=catalog, log=lambda m: None, **kw)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def twice(checkpoint, tiny_data, tmp_path_factory) -> tuple[Path, Path]:
    """The same checkpoint, catalog and head built twice (no release number given: each build takes
    its own), with the GGUF where llama-cpp-python is installed."""
    from magicselector.default_bundle import SHIPPED_HEAD

    root = tmp_path_factory.mktemp("twice")
    tools = [json.loads(line) for line in (tiny_data / "tools.jsonl").read_text().splitlines()]
    # parameters out of key order: the bundle's catalog.jsonl sorts them, and a rebuild from it must
    # still give the same index (tool texts name the parameters in order)
    tools[0]["parameters"]["properties"] = {"time": {"type": "string"}, "label": {"type": "string"}}
    catalog = root / "tools.jsonl"
    catalog.write_text("".join(json.dumps(t) + "\n" for t in tools))
    for name in ("a", "b"):
        _build(root / name, checkpoint, catalog, head=SHIPPED_HEAD)
    return root / "a", root / "b"


def test_the_same_inputs_built_twice_give_the_same_bytes(twice):
    a, b = twice
    files = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert files == sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert {"index.usearch", "golden.json", "embedder/model.onnx", "embedder/tokenizer.json", "catalog.jsonl",
            "head.json", "embedder/MODEL_CARD.md"} <= set(files)
    assert [f for f in files if _sha(a / f) != _sha(b / f)] == []
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    assert ma["content_sha256"] == mb["content_sha256"]
    assert {k: v for k, v in ma.items() if k not in VOLATILE} == {k: v for k, v in mb.items() if k not in VOLATILE}
    assert set(ma["build"]) >= {"created", "host", "catalog_source", "seconds"}


def test_the_digest_catches_an_edited_manifest(twice, tmp_path):
    from magicselector.bundle_check import verify_bundle
    from magicselector.errors import BundleError

    copy = tmp_path / "edited"
    shutil.copytree(twice[0], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["embedder"]["record"]["seed"] = 7  # a claim about training that no file hash covers
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    with pytest.raises(BundleError, match="content_sha256 .* is not the digest of the manifest's content"):
        verify_bundle(copy)
    manifest["release"] += 1  # volatile fields are outside the digest
    manifest["embedder"]["record"]["seed"] = json.loads((twice[0] / "manifest.json").read_text())["embedder"][
        "record"]["seed"]
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    assert verify_bundle(copy)["content_sha256"] == manifest["content_sha256"]


def test_the_training_record_travels_with_each_model(twice, checkpoint):
    from magicselector.default_bundle import SHIPPED_HEAD
    from magicselector.export.checkpoints import minilm_checkpoint

    manifest = json.loads((twice[0] / "manifest.json").read_text())
    trained = json.loads((checkpoint / "train_config.json").read_text())
    record = manifest["embedder"]["record"]
    assert record["recipe"] == trained["config"] and record["data"] == trained["data"]
    assert record["seed"] == trained["seed"] == 0 and record["steps"] == trained["counts"]["steps"] > 0
    assert record["versions"] == trained["versions"]
    assert record["weights_sha256"] == _sha(checkpoint / "model.safetensors") == manifest["embedder"]["weights_sha256"]
    assert record["base_model"]["sha256"] == _sha(minilm_checkpoint() / "model.safetensors")
    assert record["base_model"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    card = (twice[0] / "embedder" / "MODEL_CARD.md").read_text()
    assert record["weights_sha256"] in card and trained["data"][0]["queries_sha256"] in card
    head = manifest["head"]["record"]
    assert head["weights_sha256"] == _sha(SHIPPED_HEAD)
    assert head["data"] == json.loads(SHIPPED_HEAD.read_text())["meta"]["data"]
    assert head["weights_sha256"] in (twice[0] / "head" / "MODEL_CARD.md").read_text()


def test_a_checkpoint_without_a_record_says_so(checkpoint, tiny_data, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(checkpoint, bare)
    (bare / "train_config.json").unlink()
    manifest = _build(tmp_path / "b", bare, tiny_data / "tools.jsonl", gguf=False, verify=False)
    assert manifest["embedder"]["record"] is None
    assert "has no train_config.json" in manifest["embedder"]["record_reason"]
    assert manifest["embedder"]["weights_sha256"] == _sha(checkpoint / "model.safetensors")
    assert "## Training record\n\nNone: checkpoint bare has no train_config.json" in (
        tmp_path / "b" / "embedder" / "MODEL_CARD.md").read_text()


def test_bundle_verify_against_its_checkpoint(twice, checkpoint, tiny_data, tmp_path, capsys):
    from magicselector.cli import main

    assert main(["bundle", "verify", str(twice[0]), "--against", str(checkpoint)]) == 0
    against = json.loads(capsys.readouterr().out)["against"]
    assert against["reproduced"] is True and against["files_differ"] == []
    # the same weights without their record: found, rebuilt, and the difference named
    other = tmp_path / "other"
    shutil.copytree(checkpoint, other)
    (other / "train_config.json").unlink()
    assert main(["bundle", "verify", str(twice[0]), "--against", str(other)]) == 2
    assert "it differs in embedder/MODEL_CARD.md" in capsys.readouterr().err  # the card says there is no record
    # other weights: refused before any rebuild
    (other / "model.safetensors").write_bytes(b"not these weights")
    assert main(["bundle", "verify", str(twice[0]), "--against", str(other)]) == 2
    assert "not built from" in capsys.readouterr().err


def test_bundle_compare_gives_a_verdict_per_metric(twice, bundle_dir, tiny_data, tmp_path):
    from magicselector.bench.bundle_compare import (QUALITY_METRICS, CompareConfig, compare_bundles,
                                                    format_markdown, verdict)

    assert verdict("ndcg", 0.800, 0.804, True) == "same" and verdict("ndcg", 0.800, 0.81, True) == "better"
    assert verdict("tokens", 500, 520, False) == "worse" and verdict("p50_ms", 10.0, 10.5, False) == "same"
    config = CompareConfig(limit=None, runs=1, warmup=0, peers=False)  # the peers: test_bundle_compare_peer_rows_*
    report = compare_bundles(bundle_dir, twice[0], sets=[("tiny", tiny_data)], config=config)
    keys = [v["key"] for v in report["verdicts"]]
    assert keys == [k for k, _, _ in QUALITY_METRICS] + ["p50_ms", "p90_ms", "peak_rss_mb"]
    assert all(v["verdict"] in ("better", "worse", "same") for v in report["verdicts"])
    assert report["a"]["quality"]["tiny"]["queries"] == 4 and report["b"]["host"]["peak_rss_mb"] > 0
    text = format_markdown(report)
    assert "| NDCG@10 |" in text and "| latency p50 (ms) |" in text and "| tiny |" in text
    # a bundle against itself: every quality verdict is "same" (a seeded sample, the same numbers)
    same = compare_bundles(twice[0], twice[1], sets=[("tiny", tiny_data)],
                           config=CompareConfig(limit=None, latency=False, peers=False))
    assert [v["verdict"] for v in same["verdicts"]] == ["same"] * len(QUALITY_METRICS)
    assert same["a"]["quality"] == same["b"]["quality"]


@pytest.mark.extra("peers")
@pytest.mark.extra("bench", "export")
def test_bundle_compare_peer_rows_run_once_per_report_and_name_a_missing_package(bundle_dir, tiny_data,
                                                                                  monkeypatch):
    """The peers' rows (``bench quality``'s) on every part, computed once for both bundles, on the
    bundles' own sample; a peer whose package is not installed (toolpicker, hidden from find_spec as
    the export-extra test below hides onnx) is skipped with a line naming it; where each bundle stands
    against the best peer per metric; none of it with ``peers=False``."""
    import importlib.util

    from magicselector.bench import quality
    from magicselector.bench.bundle_compare import (QUALITY_METRICS, STANDING, CompareConfig, compare_bundles,
                                                    format_markdown)
    from magicselector.bench.peers import PEERS

    real_find_spec, real_evaluate_peer = importlib.util.find_spec, quality.evaluate_peer
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "toolpicker" else real_find_spec(name, *a))
    calls: list[str] = []

    def counted(peer, *a, **kw):
        calls.append(peer.name)
        return real_evaluate_peer(peer, *a, **kw)

    monkeypatch.setattr(quality, "evaluate_peer", counted)
    parts = [("tiny", tiny_data), ("tiny again", tiny_data)]
    notes: list[str] = []
    report = compare_bundles(bundle_dir, bundle_dir, sets=parts, note=notes.append,
                             config=CompareConfig(limit=None, latency=False))
    peers = report["peers"]
    ran = [p for p in PEERS if p.package != "toolpicker"]
    assert list(peers["rows"]) == [p.name for p in ran]
    assert sorted(calls) == sorted(p.name for p in ran for _ in parts)  # once per part, not once per bundle
    assert [(s["peer"], s["package"]) for s in peers["skipped"]] == [("toolpicker", "toolpicker"),
                                                                     ("toolpicker + MiniLM", "toolpicker")]
    assert notes == [f"note: no {name!r} peer row: the toolpicker package is not installed (pip install toolpicker)"
                     for name in ("toolpicker", "toolpicker + MiniLM")]
    for p in ran:
        row = peers["rows"][p.name]
        assert row["k"] == p.k and row["package"].startswith(p.package + " ") and row["embeds"] == p.embeds
        for part, _ in parts:  # the bundles' own seeded, screened sample
            assert row["quality"][part]["queries"] == report["a"]["quality"][part]["queries"] == 4, p.name
            assert row["quality"][part]["mean_k"] == p.k and "curve" not in row["quality"][part]
        # a peer that embeds ranks all 6 tools; a BM25 one only those sharing a word with the turn
        assert row["mean"]["completeness@10"] >= (1.0 if p.embeds else 0.75), (p.name, row["mean"])
    assert [st["key"] for st in peers["standing"]] == [k for k, _, _ in QUALITY_METRICS]
    for st in peers["standing"]:
        hi = next(h for k, _, h in QUALITY_METRICS if k == st["key"])
        means = {name: r["mean"][st["key"]] for name, r in peers["rows"].items()}
        assert st["best_peer_mean"] == (max if hi else min)(means.values()) == means[st["best_peer"]]
        for tag in ("a", "b"):
            d = st[tag]
            assert d["parts"] == 2 and d["parts_ahead"] + d["parts_level"] + d["parts_behind"] == 2
            assert d["standing"] in STANDING.values() and d["mean"] == report[tag]["mean"][st["key"]]
    mean_k = next(st for st in peers["standing"] if st["key"] == "mean_k")
    assert (mean_k["best_peer"], mean_k["best_peer_mean"]) == ("ratel-ai", 5.0)  # the lowest default K left
    assert mean_k["a"]["standing"] == ("ahead" if report["a"]["mean"]["mean_k"] < 4.9 else "level")
    json.dumps(report)  # --json prints it
    text = format_markdown(report)
    assert "## Peers (reference rows, no verdict)" in text and "| tiny again | graph-tool-call + MiniLM | 4 |" in text
    assert ("- Skipped: `toolpicker`, `toolpicker + MiniLM`: the toolpicker package is not installed "
            "(pip install toolpicker).") in text
    assert f"| mean K | ratel-ai 5.00 | {mean_k['a']['standing']} (" in text
    assert sum(1 for line in text.splitlines() if "| graph-tool-call |" in line) == 3  # the mean and 2 parts
    calls.clear()
    without = compare_bundles(bundle_dir, bundle_dir, sets=parts, note=notes.append,
                              config=CompareConfig(limit=None, latency=False, peers=False))
    assert without["peers"] is None and without["config"]["peers"] is False and not calls
    text = format_markdown(without)
    assert "Peer rows were left out (--no-peers)." in text and "## Peers" not in text


def test_no_peers_flags_reach_the_compare(monkeypatch, tmp_path, capsys):
    """``bundle compare --no-peers`` and ``release --no-peers`` (the CLI's wiring; the rows: above)."""
    from magicselector.bench import bundle_compare
    from magicselector.cli import release
    from magicselector.cli.main import build_parser

    seen: dict = {}

    def fake_compare(a, b, config, **kw):
        seen["compare"] = config
        return {"config": {}}

    monkeypatch.setattr(bundle_compare, "compare_bundles", fake_compare)
    monkeypatch.setattr(bundle_compare, "format_markdown", lambda report, command=None: "")
    for argv, peers in (([], True), (["--no-peers"], False)):
        args = build_parser().parse_args(["bundle", "compare", "A", "B", *argv])
        assert args.func(args) == 0 and seen["compare"].peers is peers

    def fake_release(config, log):
        seen["release"] = config
        return {"release": 1, "key_fingerprint": "", "compared": {}, "seconds": 0, "bundles": {}}

    monkeypatch.setattr(release, "run_release", fake_release)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "k.key").write_text("")
    for argv, peers in (([], True), (["--no-peers"], False)):
        args = build_parser().parse_args(["release", "--embedder", str(tmp_path / "ckpt"), "--out", str(tmp_path / "o"),
                                          "--signing-key", str(tmp_path / "k.key"), *argv])
        assert args.func(args) == 0 and seen["release"].peers is peers
    capsys.readouterr()


@pytest.mark.slow
def test_release_end_to_end_on_a_fresh_checkpoint(checkpoint, tiny_data, bundle_dir, tmp_path, capsys):
    """From a checkpoint: a head trained on its rankings, signed bundles per target (ONNX; the .pte
    where executorch is installed), each verified and signed, the ARM64 check skipped with the
    reason, and the report against another bundle."""
    import importlib.util

    from magicselector.cli import main
    from magicselector.cli.release import ReleaseConfig, run_release
    from magicselector.signing import generate_keypair

    keys = generate_keypair(tmp_path / "release")
    pte = importlib.util.find_spec("executorch") is not None
    config = ReleaseConfig(embedder=checkpoint, out=tmp_path / "out", signing_key=Path(keys["private_key"]),
                           pte=pte, train_head=(tiny_data,), catalog=tiny_data / "tools.jsonl", against=bundle_dir,
                           parts=(("tiny", tiny_data),), limit=None, latency=False, release=4242,
                           # the ARM64 build's check is test_the_arm64_check_...'s; here it is skipped: a head
                           # fitted on four turns of a 1-layer model misses the native core's head tolerance
                           # by about 1e-6 (docs/bench/release.md)
                           native_arm64=tmp_path / "no-native-build")
    summary = run_release(config, log=lambda m: None)
    names = ["x86-avx2", "x86-vnni", "arm64"] + (["pte"] if pte else [])
    assert list(summary["bundles"]) == names
    for name in names:
        out = tmp_path / "out" / "bundles" / name
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["release"] == 4242 and manifest["head"]["record"]["trainer"] == "magicselector train head"
        assert manifest["target"] == (None if name == "pte" else name)
        assert summary["bundles"][name]["signature"]["signed"] is True
        assert main(["bundle", "verify", str(out), "--public-key", keys["public_key"]]) == 0
        capsys.readouterr()
    native = summary["bundles"]["arm64"]["arm64_native"]
    assert native["status"] == "skipped" and ("no native ARM64 build at" in native["why"]
                                              or "no GGUF embedder" in native["why"])
    assert not (tmp_path / "out" / "work").exists()  # the head-less bundle the head was fitted on is gone
    report = (tmp_path / "out" / "compare.md").read_text()
    assert "| NDCG@10 |" in report and "| C@K |" in report
    assert "## Peers (reference rows, no verdict)" in report  # the peers' rows, or the line naming what is missing
    compared = json.loads((tmp_path / "out" / "release.json").read_text())["compared"]
    assert compared["verdicts"]["NDCG@10"] in ("better", "worse", "same")
    from magicselector.bench.bundle_compare import QUALITY_METRICS
    from magicselector.bench.peers import PEERS, installed

    assert set(compared["against_best_peer"]) == ({label for _, label, _ in QUALITY_METRICS}
                                                  if any(installed(p) for p in PEERS) else set())
    assert set(compared["against_best_peer"].values()) <= {"ahead", "level", "behind"}


def test_release_refuses_bad_input_naming_the_flag(checkpoint, tmp_path, capsys):
    from magicselector.cli import main
    from magicselector.signing import generate_keypair

    key = generate_keypair(tmp_path / "k")["private_key"]
    out = tmp_path / "o"
    for argv, said in ((["--embedder", str(checkpoint), "--signing-key", str(tmp_path / "none.key")], "--signing-key"),
                       (["--embedder", str(checkpoint), "--signing-key", key, "--targets", "x86-avx2,riscv"],
                        "--targets: riscv"),
                       (["--embedder", str(tmp_path / "nowhere"), "--signing-key", key], "--embedder"),
                       (["--embedder", str(checkpoint), "--signing-key", key, "--limit", "-1"], "--limit")):
        assert main(["release", "--out", str(out), *argv]) == 2
        assert said in capsys.readouterr().err
    assert not out.exists()


def test_the_arm64_check_runs_the_native_build_under_qemu_and_reports_a_mismatch(tmp_path, monkeypatch):
    """``arm64_parity`` runs ``QEMU BIN verify BUNDLE`` and reads its JSON: a mismatch is a failed
    check naming the first stage that differs; no GGUF or no build is a skip that says why."""
    from magicselector.cli import release

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(json.dumps({"embedder": {"gguf": {"file": "embedder/model.gguf"}}}))
    exe = tmp_path / "magicselector-native"
    exe.write_text("")
    qemu = tmp_path / "qemu"  # stands in for qemu-aarch64-static running the ARM64 build's verify
    qemu.write_text('#!/bin/sh\n[ "$2" = verify ] || exit 9\necho \'{"ok": false, "first_mismatch": "turn 8: '
                    'head.probabilities differs", "embedder": {"gguf_vectors_min_cosine": 0.99998}}\'\nexit 1\n')
    qemu.chmod(0o755)
    monkeypatch.setattr(release.shutil, "which", lambda name: str(qemu) if name.startswith("qemu-aarch64") else None)
    config = release.ReleaseConfig.__new__(release.ReleaseConfig)  # only native_arm64 is read
    object.__setattr__(config, "native_arm64", exe)
    got = release.arm64_parity(bundle, config)
    assert got["status"] == "failed" and got["first_mismatch"] == "turn 8: head.probabilities differs"
    assert got["embedder"]["gguf_vectors_min_cosine"] == 0.99998
    object.__setattr__(config, "native_arm64", tmp_path / "none")
    assert "no native ARM64 build at" in release.arm64_parity(bundle, config)["why"]
    (bundle / "manifest.json").write_text(json.dumps({"embedder": {}}))
    assert "no GGUF embedder" in release.arm64_parity(bundle, config)["why"]


def test_release_without_the_export_extra_names_it(checkpoint, tmp_path, capsys, monkeypatch):
    import importlib.util

    from magicselector.cli import main
    from magicselector.signing import generate_keypair

    key = generate_keypair(tmp_path / "k")["private_key"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else real(name, *a))
    assert main(["release", "--embedder", str(checkpoint), "--out", str(tmp_path / "o"), "--signing-key", key]) == 2
    assert "needs the export extra (onnx missing): pip install 'magicselector[export]'" in capsys.readouterr().err

"""A custom bundle carries a learned head only when given one (``bundle build --head FILE``), and the
reports say what the bundle holds: ``eval --json``'s config ``head`` and bench quality's header."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from magicselector.default_bundle import SHIPPED_HEAD

pytest.importorskip("onnx", reason="bundle build of a custom bundle needs the export extra: pip install -e .[export]")


def _build(bundle_dir: Path, catalog: Path, out: Path, *extra: str) -> int:
    from magicselector.cli import main

    return main(["bundle", "build", "--embedder", str(bundle_dir / "embedder" / "model.onnx"), "--catalog",
                 str(catalog), "--out", str(out), *extra])


def _eval_head(data: Path, bundle: Path, out: Path) -> bool:
    from magicselector.cli import main

    assert main(["eval", str(data), "--bundle", str(bundle), "--json", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())["config"]["head"]


@pytest.mark.slow
def test_head_goes_into_a_custom_bundle_and_the_reports_say_what_it_holds(bundle_dir, tiny_benchmark, tmp_path,
                                                                          capsys):
    from magicselector import Selector
    from magicselector.bench.quality import QualityConfig, format_markdown, run_quality

    tools = tiny_benchmark / "tools.jsonl"
    with_head, without = tmp_path / "with-head", tmp_path / "no-head"
    assert _build(bundle_dir, tools, with_head, "--head", str(SHIPPED_HEAD)) == 0
    assert json.loads(capsys.readouterr().out)["head"]["depth"] == json.loads(SHIPPED_HEAD.read_text())["depth"]
    assert (with_head / "head.json").read_bytes() == SHIPPED_HEAD.read_bytes()
    assert Selector.from_bundle(with_head).head is not None
    assert _build(bundle_dir, tools, without) == 0
    assert json.loads(capsys.readouterr().out)["head"] is None
    assert Selector.from_bundle(without).head is None

    assert _eval_head(tiny_benchmark, with_head, tmp_path / "a.json") is True
    assert _eval_head(tiny_benchmark, without, tmp_path / "b.json") is False

    config = QualityConfig(limit=None, reference=False, peers=False)
    for bundle, held in ((with_head, True), (without, False)):
        report = run_quality([("tiny", tiny_benchmark)], bundle=bundle, config=config, progress=False,
                             note=lambda m: None)
        assert report["bundle"]["head"] is held
        text = format_markdown(report)
        assert ("learned head: yes" if held else "learned head: none") in text
        assert ("The bundle has no learned head" in text) is not held


def test_a_bad_head_fails_before_any_export_and_leaves_nothing(bundle_dir, tiny_benchmark, tmp_path, capsys):
    bad = tmp_path / "head.json"
    bad.write_text(json.dumps({"format": "something else"}))
    out = tmp_path / "out"
    assert _build(bundle_dir, tiny_benchmark / "tools.jsonl", out, "--head", str(bad)) == 2
    assert f"--head {bad}: not a" in capsys.readouterr().err
    assert _build(bundle_dir, tiny_benchmark / "tools.jsonl", out, "--head", str(tmp_path / "none.json")) == 2
    assert "no such head file" in capsys.readouterr().err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_head_alone_asks_for_a_custom_bundle():
    from magicselector.cli import build_parser
    from magicselector.errors import InputError

    args = build_parser().parse_args(["bundle", "build", "--head", str(SHIPPED_HEAD)])
    with pytest.raises(InputError, match=r"a custom bundle \(--head\) needs --embedder, --catalog, --out"):
        args.func(args)

"""``split --shared-data DIR``: the public sets from a folder the user names, as bench quality takes it."""
from __future__ import annotations

import json
import shutil

from magicselector.cli import main
from magicselector.data.splits import SHARED_SETS


def test_split_takes_the_public_sets_from_shared_data(tiny_benchmark, tmp_path, capsys):
    shared = tmp_path / "elsewhere"
    for name in SHARED_SETS:  # a stand-in for each public set: the tiny benchmark under its name
        shutil.copytree(tiny_benchmark, shared / name, ignore=shutil.ignore_patterns("elsewhere"))
    assert main(["split", "--shared-data", str(shared), "--out", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(summary["sets"]) == sorted(SHARED_SETS)
    for name in SHARED_SETS:
        assert (tmp_path / "out" / name / "eval" / "tools.jsonl").is_file()


def test_split_names_the_missing_set_under_shared_data(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["split", "--shared-data", str(empty), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{empty / SHARED_SETS[0]}: --shared-data needs the public set" in err
    assert not (tmp_path / "out").exists()

"""``--dev WORK`` names the same development parts on the run that writes them and on every run
after it that finds them written (not only the first four)."""
from __future__ import annotations

import argparse
import shutil

from magicselector.bench.experiments.common import add_part_args, parts_from


def _public_set(benchmark, shared, name):
    (shared / name).mkdir(parents=True)
    for file in ("tools.jsonl", "queries.jsonl"):
        shutil.copy(benchmark / file, shared / name / file)


def test_dev_parts_are_the_same_when_read_back_from_the_work_folder(tiny_benchmark, tmp_path):
    shared = tmp_path / "shared"
    for name in ("bfcl", "metatool", "nestful"):  # the other public sets are absent: skipped
        _public_set(tiny_benchmark, shared, name)
    parser = argparse.ArgumentParser()
    add_part_args(parser)
    args = parser.parse_args(["--dev", str(tmp_path / "work"), "--shared-data", str(shared)])
    first = parts_from(args)
    assert [name for name, _ in first] == ["mobile test", "mobile test_ood", "bfcl eval", "metatool eval",
                                           "nestful eval"]
    written = {path: path.joinpath("queries.jsonl").stat().st_mtime_ns for _, path in first}
    again = parts_from(args)
    assert again == first  # it used to drop every part after metatool's
    assert {path: path.joinpath("queries.jsonl").stat().st_mtime_ns for _, path in again} == written  # not rewritten
    # a public set added to the shared data since is split on the next run
    _public_set(tiny_benchmark, shared, "sgd")
    assert [name for name, _ in parts_from(args)][-1] == "sgd eval"

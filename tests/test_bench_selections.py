"""``bench selections``: a turn-by-turn dump of what the Selector keeps, and its comparison."""
from __future__ import annotations

import json

from magicselector.cli.main import main


def test_selections_dump_is_reproducible_and_a_change_is_listed(bundle_dir, tiny_benchmark, tmp_path, capsys):
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    assert main(["bench", "selections", str(tiny_benchmark), "--bundle", str(bundle_dir), "--out", str(first)]) == 0
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2", "q3", "q4"]
    assert rows[0]["ids"][0] == "set_alarm" and rows[0]["k"] == len(rows[0]["ids"]) == len(rows[0]["scores"])
    argv = ["bench", "selections", str(tiny_benchmark), "--bundle", str(bundle_dir), "--out", str(second),
            "--against", str(first)]
    assert main(argv) == 0
    assert "every turn selected the same" in capsys.readouterr().out

    rows[1]["ids"] = list(reversed(rows[1]["ids"]))
    first.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "q2" in out and "q1" not in out

"""The native text stages (native/src: unicode, dialogue, rules, tokenizer) match the Python runtime on every
development turn and on a seeded fuzz (bench/native_text_parity.py writes what Python gives; the native
test_text_parity reads it), and the two Python rules bugs the port found stay fixed."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from magicselector.decompose import RuleDecomposer
from magicselector.dialogue import Turn

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "native"
TEXT_SOURCES = [NATIVE / "src" / f for f in ("unicode.cpp", "tokenizer.cpp", "dialogue.cpp", "rules.cpp")]
TEST_SOURCE = NATIVE / "tests" / "test_text_parity.cpp"


def test_rules_fixed_phrase_after_a_dotted_capital_i_terminates():
    # U+0130 lowers to two code points: the phrase index in the lowered text ran past the phrase in the
    # text, so _protect hid the wrong span and found the phrase again without end
    query = "\u0130" * 20 + " play rock and roll and turn off the lights"
    tasks = RuleDecomposer().decompose(query, []).tasks
    assert tasks == (query,)  # one request (the "İ..." clause is read as context), rock and roll kept whole
    split = RuleDecomposer().decompose("play rock and roll by \u0130zmir Band and turn off the lights", []).tasks
    assert split == ("play rock and roll by \u0130zmir Band", "turn off the lights")


@pytest.mark.parametrize("previous, expected", [
    ("play C:\\dmusic", "turn C:\\dmusic off"),     # was re.error: bad escape \d
    ("open the file a\\1b", "turn file a\\1b off"),  # was a group reference: "turn file aitb off"
    ("open the file a\\nb", "turn file a\\nb off"),  # was a newline
])
def test_rules_pronoun_subject_is_text_not_a_template(previous, expected):
    assert RuleDecomposer().decompose("turn it off", [Turn("user", previous)]).tasks == (expected,)


@pytest.mark.slow
def test_unicode_tables_are_this_python_and_tokenizers(tmp_path):
    # the tables are generated from this Python's unicodedata and checked against the installed
    # tokenizers on every code point: another Python or tokenizers release means regenerating them
    out = tmp_path / "unicode_tables.inc"
    proc = subprocess.run([sys.executable, str(NATIVE / "tools" / "gen_unicode.py"), str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_bytes() == (NATIVE / "src" / "unicode_tables.inc").read_bytes(), \
        "native/src/unicode_tables.inc is stale: python3 native/tools/gen_unicode.py"


def _nlohmann_include() -> Path:
    """The folder holding nlohmann/json.hpp: llama.cpp's vendored copy from the pinned sdist."""
    from magicselector.export.native import llama_source

    return llama_source(log=lambda m: None) / "vendor"


def _text_parity_binary(tmp_root: Path) -> Path:
    """test_text_parity built from the text stages alone with the host compiler (no llama.cpp, no
    usearch: these stages need neither), cached by the sources' hash."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    sources = [*TEXT_SOURCES, TEST_SOURCE]
    headers = sorted((NATIVE / "src").glob("*.h")) + [NATIVE / "src" / "unicode_tables.inc", NATIVE / "include" / "magicselector.h"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in [*sources, *headers])).hexdigest()[:16]
    from magicselector.files import cache_home

    out = cache_home() / "native" / "text-parity" / digest / "test_text_parity"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        staged = out.with_suffix(".partial")
        cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE / 'include'}", f"-I{NATIVE / 'src'}",
               "-isystem", str(_nlohmann_include()), *map(str, sources), "-o", str(staged)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        staged.replace(out)
    return out


@pytest.mark.slow
def test_native_text_stages_match_python_on_development_parts_and_fuzz(tmp_path):
    binary = _text_parity_binary(tmp_path)
    parity = tmp_path / "text_parity.jsonl"
    proc = subprocess.run([sys.executable, "-m", "magicselector.bench.native_text_parity", str(parity), "--limit", "500",
                           "--fuzz", "3000", "--work", str(tmp_path / "work")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = json.loads(proc.stdout.strip().splitlines()[-1])["lines"]
    from magicselector.bench.native_text_parity import shipped_tokenizer_file

    run = subprocess.run([str(binary), str(shipped_tokenizer_file()), str(parity)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout)
    assert report["mismatches"] == 0
    parts = report["parts"]
    # the generated parts always; the public sets' eval parts where ../shared/data sits beside the
    # checkout (a clone elsewhere has only the generated ones: every part written is checked)
    public = [p for p in written if p.endswith(" eval")]
    shared = ROOT.parent / "shared" / "data"
    assert bool(public) == shared.is_dir(), (public, shared)
    for part in ("mobile test", "mobile test_ood", *public):
        # 500 seeded turns a part (the generated ones hold more; a small public eval part is taken whole)
        assert parts[part]["turns"] == written[part]["turns"] > 0, part
        assert written[part]["turns"] == 500 or part in public, part
        assert parts[part]["texts"] >= parts[part]["turns"], part  # every retrieval text of every turn was tokenized
        assert parts[part + " tools"]["texts"] == written[part]["tool texts"] > 0
    assert parts["hostile"]["turns"] == written["hostile"]["turns"] > 10  # utterances at the 16,000 limit
    assert parts["fuzz"]["turns"] == 3000 and parts["fuzz"]["byte_strings"] == 3000
    assert parts["fuzz"]["lowered"] == written["fuzz"]["lowered"] > 3000
    assert 0 < parts["fuzz"]["refusals"] < 3000  # both refused turns and answered ones were compared


def test_native_text_parity_fails_on_a_changed_line(tmp_path):
    # the checker reads what it is given: one changed token id is a mismatch, a missing file a skip (77)
    binary = _text_parity_binary(tmp_path)
    from magicselector.bench.native_text_parity import TextOracle, shipped_tokenizer_file

    oracle = TextOracle(shipped_tokenizer_file())
    header = {"kind": "header", "max_length": 128,
              "config": {"history": "questions", "history_turns": 4, "decompose": "rules", "max_query_chars": 16000,
                         "max_history_turns": 32, "max_history_chars": 16000, "max_subtasks": 8}}
    turn = {"part": "probe", **oracle.turn("turn on the lights and play jazz", [])}
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(r) for r in (header, turn)) + "\n")
    ok = subprocess.run([str(binary), str(shipped_tokenizer_file()), str(good)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["parts"]["probe"] == {"turns": 1, "refusals": 0, "texts": 3, "lowered": 0,
                                                      "byte_strings": 0, "mismatches": 0}
    turn["ids"][1][1] += 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in (header, turn)) + "\n")
    failed = subprocess.run([str(binary), str(shipped_tokenizer_file()), str(bad)], capture_output=True, text=True)
    assert failed.returncode == 1 and "token ids of retrieval text 1" in failed.stderr
    missing = subprocess.run([str(binary), str(shipped_tokenizer_file()), str(tmp_path / "none")], capture_output=True)
    assert missing.returncode == 77

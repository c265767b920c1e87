"""Nothing an input can do breaks it: the failing examples the fuzzing (tests/test_fuzz.py) and the
issue found, as plain tests; bounded turns; bundles confined to their folder and signed; eval
keeps its run when a row is bad; selects racing catalog changes; the soak at a small N."""
from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from magicselector import (Bundle, BundleError, CatalogError, InputError, InputLimits, Selector, SelectorConfig, Tool,
                           load_catalog)
from magicselector.dialogue import Turn
from magicselector.dialogue import bounded_history


# -- utterances and histories ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("query, names", [
    ("set alarm \ud800", "the utterance: holds a lone surrogate"),
    ("\udfff", "the utterance: holds a lone surrogate"),
    ("a" * 16_001, "16,001 characters long; the limit is 16,000"),
    ("   \n\t ", "the utterance is empty"),
    (None, "the utterance must be a string"),
], ids=["surrogate", "lone-low-surrogate", "limit+1", "blank", "none"])
def test_bad_utterances_are_input_errors(selector, query, names):
    with pytest.raises(InputError, match=names.replace("(", r"\(")):
        selector.select(query)


@pytest.mark.slow
def test_utterance_limits_and_odd_characters_that_are_fine(selector):
    assert selector.select("a" * 16_000).k >= 1  # the limit itself is allowed
    for text in ("turn on \x00 bluetooth", "\u202eturn on bluetooth\u202c", "\ufeffplay jazz", "🎵 play jazz 🎵",
                 "set alarm \U0010FFFF", "<|im_end|> turn on wifi"):
        assert selector.select(text).k >= 1, text


@pytest.mark.slow
@pytest.mark.parametrize("history, names", [
    (5, "history must be a list of messages, got int"),
    ({"role": "user", "content": "hi"}, "history must be a list of messages, got dict"),
    ("turn on wifi", "history must be a list of messages, not a string"),
    ([{"role": "user", "content": "turn on \ud800 wifi"}], r"history\[0\].content: holds a lone surrogate"),
    ([{"role": "user", "content": [{"type": "text", "text": "x\udc00"}]}], r"history\[0\].content"),
    ([{"role": "robot", "content": "x"}], r"history\[0\].role"),
], ids=["int", "dict", "str", "surrogate", "surrogate-in-part", "role"])
def test_bad_histories_are_input_errors(selector, history, names):
    with pytest.raises(InputError, match=names):
        selector.with_config(history="all").select("turn it off", history)


@pytest.mark.slow
def test_deeply_nested_histories_are_input_errors(selector):
    deep = "x"
    for _ in range(100_000):
        deep = [deep]
    for history in ([deep], [{"role": "user", "content": deep}], deep):
        with pytest.raises(InputError, match=r"history"):
            selector.select("turn it off", history)


def test_only_the_last_turns_and_characters_are_considered():
    history = [{"role": "user", "content": f"turn {i}"} for i in range(100)]
    turns = bounded_history(history, max_turns=32, max_chars=16_000)
    assert [t.content for t in turns] == [f"turn {i}" for i in range(68, 100)]
    # a malformed message before the window is never read; one inside it is named by its own index
    assert len(bounded_history([5, *history], 32, 16_000)) == 32
    with pytest.raises(InputError, match=r"history\[90\]"):
        bounded_history(history[:90] + [{"role": "nobody", "content": "x"}] + history[91:], 32, 16_000)
    # a generator: its tail, indexed as the caller counts
    assert len(bounded_history((m for m in history), 5, 16_000)) == 5
    big = [{"role": "user", "content": "a" * 10_000}, {"role": "assistant", "content": "b" * 10_000},
           {"role": "user", "content": "c" * 10_000}]
    turns = bounded_history(big, 32, 16_000)
    assert [len(t.content) for t in turns] == [6_000, 10_000] and turns[0].content == "b" * 6_000
    assert bounded_history([Turn("user", "x")], 1, 1) == [Turn("user", "x")]
    # one enormous message is read only as far as it can count: its last characters and parts
    parts = [{"type": "text", "text": f"part{i}"} for i in range(10_000)]
    huge = [{"role": "user", "content": "x" * 5_000_000 + " tail"}, {"role": "user", "content": parts}]
    turns = bounded_history(huge, 32, 100)
    assert len(turns) == 1 and len(turns[0].content) == 100 and turns[0].content.endswith("part9999")
    turns = bounded_history(huge, 32, 16_000)
    assert turns[0].content.endswith("x tail") and len(turns[0].content) + len(turns[1].content) <= 16_000
    assert turns[1].content.startswith("part9936 ")  # the last 64 parts


def test_bounds_are_validated():
    for field in ("max_history_turns", "max_history_chars", "max_subtasks", "max_query_chars"):
        with pytest.raises(InputError, match=f"InputLimits.{field}"):
            InputLimits(**{field: 0})
        with pytest.raises(InputError, match=f"InputLimits.{field}"):
            InputLimits(**{field: "8"})
    for bad in (0, "8"):
        with pytest.raises(InputError, match="history_turns"):
            SelectorConfig(history_turns=bad)
    with pytest.raises(InputError, match="limits must be an InputLimits"):
        SelectorConfig(limits={"max_subtasks": 2})


@pytest.mark.slow
def test_subtasks_are_bounded(selector):
    many = "turn on bluetooth, set an alarm for 7, play some jazz, call mom and send an email to Ann"
    sel = selector.with_config(decompose="rules").select(many)
    assert len(sel.subtasks) >= 3
    capped = selector.with_config(decompose="rules", limits=replace(selector.config.limits, max_subtasks=2))
    capped = capped.select(many)
    assert capped.subtasks == sel.subtasks[:2]


@pytest.mark.slow
def test_the_worst_history_is_bounded_work(selector):
    """A history far past every bound selects like its considered tail alone."""
    tail = [{"role": "user", "content": "what's the weather in Paris"}, {"role": "assistant", "content": "Sunny."}]
    flood = [{"role": "user", "content": "blah " * 50_000}] * 200 + tail
    s = selector.with_config(history="all", limits=replace(selector.config.limits, max_history_turns=2))
    assert s.select("and tomorrow?", flood).ids == s.select("and tomorrow?", tail).ids


# -- catalogs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, names", [
    (b'[{"name": "set_alarm", "description": "Set an \\ud800 alarm"}]', "lone surrogate"),
    (b'[{"name": "\\udfffx", "description": "d"}]', "name"),
    (b'[{"name": "ok", "inputSchema": {"type": "object", "properties": {"\\ud800": {}}}}]', "surrogate"),
    (b'[{"name": "caf\xe9"}]', "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
    (b'{"tools": "nope"}', "'tools' must be a list"),
    (b'[{"name": ""}]', "name"),
    (b'[{"name": "a"}, {"name": "a"}]', "duplicate tool name 'a'"),
    (b'[{"name": "a", "inputSchema": "not an object"}]', "inputSchema"),
], ids=["surrogate-description", "surrogate-name", "surrogate-schema", "not-utf8", "deep", "tools-not-list",
        "empty-name", "duplicate-name", "schema-not-object"])
def test_bad_catalog_files_are_catalog_errors(tmp_path, raw, names):
    path = tmp_path / "tools.json"
    path.write_bytes(raw)
    with pytest.raises(CatalogError, match=names) as err:
        load_catalog(path)
    assert str(path) in str(err.value)


def test_catalog_files_with_a_byte_order_mark_load(tmp_path):
    path = tmp_path / "tools.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"name": "set_alarm", "description": "Set an alarm.",
                                                     "inputSchema": {"type": "object"}}]).encode())
    assert load_catalog(path).ids == ["set_alarm"]
    jsonl = tmp_path / "tools.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "name": "a", "description": "d"}).encode() + b"\n")
    assert load_catalog(jsonl).ids == ["a"]


@pytest.mark.parametrize("raw, names", [
    (b'{"id": "a", "name": "a", "description": "\\ud800"}\n', r"tools.jsonl:1"),
    (b'{"id": "a", "name": "a"}\n\xff\n', "tools.jsonl:2: not UTF-8"),
    (b"[" * 100_000 + b"\n", r"tools.jsonl:1"),
], ids=["surrogate", "not-utf8", "deep"])
def test_bad_jsonl_catalogs_are_catalog_errors(tmp_path, raw, names):
    path = tmp_path / "tools.jsonl"
    path.write_bytes(raw)
    with pytest.raises(CatalogError, match=names):
        load_catalog(path)


@pytest.mark.slow
def test_a_tool_added_at_run_time_with_a_lone_surrogate_is_refused(selector):
    s = selector.with_config()
    with pytest.raises(InputError, match="description"):
        s.add_tool(Tool(id="bad", name="bad", description="x\ud800"))
    assert "bad" not in s.catalog


# -- bundles stay in their folder -----------------------------------------------------------------
def _tiny_bundle(root: Path) -> Path:
    from magicselector.bundle import write_manifest

    root.mkdir(parents=True)
    (root / "catalog.jsonl").write_text('{"id": "a", "name": "a", "description": "d"}\n')
    write_manifest(root, {"catalog": {"file": "catalog.jsonl"}})
    return root


def _point_catalog_at(root: Path, rel: str, size: int = 6) -> None:
    m = json.loads((root / "manifest.json").read_text())
    m["catalog"]["file"] = rel
    m["files"][rel] = {"size": size, "sha256": "0" * 64}
    (root / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("rel", ["../secret.txt", "/etc/passwd", "embedder/../../secret.txt", "C:/secret.txt",
                                 "..\\secret.txt", "a\x00b"])
def test_a_manifest_path_outside_the_bundle_is_refused(tmp_path, rel):
    root = _tiny_bundle(tmp_path / "b")
    (tmp_path / "secret.txt").write_text("secret")
    _point_catalog_at(root, rel)
    for verify in (True, False):
        with pytest.raises(BundleError, match="leaves the bundle folder") as err:
            b = Bundle.open(root, verify=verify)
            b.file(b.section("catalog")["file"])
        assert "manifest.json" in str(err.value) and repr(rel)[1:-1][:8] in str(err.value)


def test_a_symlink_out_of_the_bundle_is_refused_and_one_inside_is_followed(tmp_path):
    root = _tiny_bundle(tmp_path / "b")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", root / "out.jsonl")
    _point_catalog_at(root, "out.jsonl")
    with pytest.raises(BundleError, match="'out.jsonl' resolves to .*outside the bundle folder"):
        Bundle.open(root)
    with pytest.raises(BundleError, match="outside the bundle folder"):
        Bundle.open(root, verify=False).section("catalog")
    root2 = _tiny_bundle(tmp_path / "c")
    os.symlink(root2 / "catalog.jsonl", root2 / "in.jsonl")
    from magicselector.bundle import write_manifest

    write_manifest(root2, {"catalog": {"file": "in.jsonl"}})
    b = Bundle.open(root2)
    assert load_catalog(b.file(b.section("catalog")["file"])).ids == ["a"]


@pytest.mark.parametrize("manifest, names", [
    (b"[]", "not a magicselector bundle manifest"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[" * 100_000, "nested too deeply"),
    (json.dumps({"format": "magicselector-bundle", "format_version": 1, "files": {"a": 5}}).encode(), r"files\['a'\]"),
    (json.dumps({"format": "magicselector-bundle", "format_version": 1, "files": {"a": {}},
                 "catalog": {"file": 5}}).encode(), "catalog.file"),
], ids=["list", "not-utf8", "deep", "entry-not-object", "file-not-string"])
def test_malformed_manifests_are_bundle_errors(tmp_path, manifest, names):
    (tmp_path / "a").write_text("x")
    (tmp_path / "manifest.json").write_bytes(manifest)
    with pytest.raises(BundleError, match=names):
        b = Bundle.open(tmp_path, verify="catalog" not in manifest.decode("latin-1"))
        b.section("catalog")


def test_a_section_without_a_file_and_unreadable_paths_are_bundle_errors(tmp_path):
    root = _tiny_bundle(tmp_path / "b")
    m = json.loads((root / "manifest.json").read_text())
    m["index"] = {"dtype": "f16"}
    (root / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="the index section names no file"):
        Bundle.open(root).section("index")
    m.pop("index")
    m["files"]["a" * 5000] = {"size": 1, "sha256": "0" * 64}
    (root / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="cannot be read"):
        Bundle.open(root)


@pytest.mark.slow
def test_the_issues_escape_is_refused_by_the_selector(bundle_dir, tmp_path):
    """The issue's case: a manifest naming ../secret.txt as its catalog, listed with its hash."""
    from magicselector.files import sha256_file

    root = tmp_path / "b"
    shutil.copytree(bundle_dir, root)
    secret = tmp_path / "secret.txt"
    secret.write_text(json.dumps({"id": "x", "name": "x", "description": "stolen"}) + "\n")
    m = json.loads((root / "manifest.json").read_text())
    m["catalog"]["file"] = "../secret.txt"
    m["files"]["../secret.txt"] = {"size": secret.stat().st_size, "sha256": sha256_file(secret)}
    (root / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=r"files\['../secret.txt'\].*leaves the bundle folder"):
        Selector.from_bundle(root)
    with pytest.raises(BundleError, match="leaves the bundle folder"):
        Selector.from_bundle(root, verify=False)


# -- signed bundles -------------------------------------------------------------------------------
@pytest.fixture()
def keys(tmp_path):
    from magicselector.signing import generate_keypair

    return generate_keypair(tmp_path / "keys" / "release"), generate_keypair(tmp_path / "keys" / "other")


@pytest.mark.extra("sign")
def test_sign_and_verify_a_bundle(tmp_path, keys):
    from magicselector.bundle_writer import sign_bundle
    from magicselector.signing import verify_bundle_signature

    mine, other = keys
    root = _tiny_bundle(tmp_path / "b")
    assert oct(Path(mine["private_key"]).stat().st_mode & 0o777) == "0o600"
    with pytest.raises(BundleError, match="not signed"):
        Bundle.open(root, public_key=mine["public_key"])
    signed = sign_bundle(root, mine["private_key"])
    assert (root / "manifest.sig").stat().st_size == 64 and signed["fingerprint"] == mine["fingerprint"]
    for key in (mine["public_key"], mine["public_key_base64"], Path(mine["public_key"]).read_bytes()):
        assert Bundle.open(root, public_key=key).manifest["catalog"]["file"] == "catalog.jsonl"
    assert verify_bundle_signature(root, mine["public_key"])["fingerprint"] == mine["fingerprint"]
    with pytest.raises(BundleError, match="signature does not match"):
        Bundle.open(root, public_key=other["public_key"])
    # whoever changes a file and its hash in the manifest cannot sign the new manifest
    (root / "catalog.jsonl").write_text('{"id": "b", "name": "b", "description": "evil"}\n')
    from magicselector.bundle import write_manifest

    write_manifest(root, {"catalog": {"file": "catalog.jsonl"}})
    assert Bundle.open(root).manifest  # hashes alone still pass
    with pytest.raises(BundleError, match="signature does not match"):
        Bundle.open(root, public_key=mine["public_key"])
    (root / "manifest.sig").write_bytes(b"short")
    with pytest.raises(BundleError, match="not an Ed25519 signature"):
        Bundle.open(root, public_key=mine["public_key"])


@pytest.mark.extra("sign")
def test_bad_keys_are_clear_errors(tmp_path, keys):
    from magicselector.bundle_writer import sign_bundle
    from magicselector.signing import generate_keypair, load_public_key

    mine, _ = keys
    root = _tiny_bundle(tmp_path / "b")
    with pytest.raises(InputError, match="no such key file"):
        Bundle.open(root, public_key=str(tmp_path / "nope.pub"))
    (tmp_path / "junk.pub").write_bytes(b"\x00" * 7)
    with pytest.raises(InputError, match="not an Ed25519 public key"):
        load_public_key(tmp_path / "junk.pub")
    with pytest.raises(InputError, match="not an unencrypted PEM private key"):
        sign_bundle(root, mine["public_key"])
    with pytest.raises(InputError, match="already exists"):
        generate_keypair(Path(mine["private_key"]).with_suffix(""))


@pytest.mark.slow
@pytest.mark.extra("sign")
def test_selector_refuses_unsigned_and_wrongly_signed_bundles(bundle_dir, tmp_path, keys):
    from magicselector.cli import main

    mine, other = keys
    root = tmp_path / "b"
    shutil.copytree(bundle_dir, root)
    with pytest.raises(BundleError, match="not signed"):
        Selector.from_bundle(root, public_key=mine["public_key"])
    assert main(["bundle", "sign", str(root), "--key", mine["private_key"]]) == 0
    assert Selector.from_bundle(root, public_key=mine["public_key"]).select("turn on bluetooth").k >= 1
    with pytest.raises(BundleError, match="signature does not match"):
        Selector.from_bundle(root, public_key=other["public_key"])
    assert main(["bundle", "verify", str(root), "--public-key", mine["public_key"]]) == 0
    assert main(["bundle", "verify", str(root), "--public-key", other["public_key"]]) == 2
    assert main(["bundle", "keygen", "--out", str(tmp_path / "k2")]) == 0
    assert (tmp_path / "k2.key").is_file() and (tmp_path / "k2.pub").is_file()


@pytest.mark.slow
@pytest.mark.extra("sign")
def test_the_release_path_signs_when_a_key_is_given(bundle_dir, tmp_path, keys):
    from magicselector.export.bundle import export_bundle
    from magicselector.signing import verify_bundle_signature

    mine, other = keys
    with pytest.raises(InputError, match="not an unencrypted PEM private key"):
        export_bundle(tmp_path / "bad", embedder=bundle_dir / "embedder" / "model.onnx",
                      catalog=bundle_dir / "catalog.jsonl", signing_key=mine["public_key"], log=lambda m: None)
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "signed"
    export_bundle(out, embedder=bundle_dir / "embedder" / "model.onnx", catalog=bundle_dir / "catalog.jsonl",
                  signing_key=mine["private_key"], log=lambda m: None)
    assert verify_bundle_signature(out, mine["public_key"])["fingerprint"] == mine["fingerprint"]
    assert Selector.from_bundle(out, public_key=mine["public_key"]).select("turn on bluetooth").k >= 1
    with pytest.raises(BundleError, match="signature does not match"):
        Selector.from_bundle(out, public_key=other["public_key"])


# -- eval keeps its run ---------------------------------------------------------------------------
@pytest.mark.slow
def test_eval_skips_or_truncates_bad_queries(bundle_dir, tiny_benchmark, tmp_path):
    from magicselector.bench.evaluate import EvalConfig, evaluate, format_report

    rows = [json.loads(line) for line in (tiny_benchmark / "queries.jsonl").read_text().splitlines()]
    rows.append({"id": "huge", "query": "wake me up at seven " * 935, "gold": ["set_alarm"], "category": "single"})
    rows.append({"id": "surrogate", "query": "set alarm \ud800", "gold": ["set_alarm"], "category": "single"})
    (tiny_benchmark / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = evaluate(tiny_benchmark, EvalConfig(), bundle=bundle_dir, progress=False)
    bad = report["bad_queries"]
    assert report["overall"]["queries"] == 4 and bad["count"] == 2 and bad["skipped"] == 2
    assert bad["ids"] == ["huge", "surrogate"] and "18,699 characters" in bad["rows"][0]["reason"]
    assert "bad queries: 2 (2 skipped, 0 truncated" in format_report(report)
    report = evaluate(tiny_benchmark, EvalConfig(on_bad_query="truncate"), bundle=bundle_dir, progress=False)
    bad = report["bad_queries"]
    assert report["overall"]["queries"] == 5 and bad["truncated"] == 1 and bad["skipped"] == 1
    assert [r["action"] for r in bad["rows"]] == ["truncated", "skipped"]
    with pytest.raises(InputError, match="on_bad_query"):
        EvalConfig(on_bad_query="explode")


@pytest.mark.slow
@pytest.mark.parametrize("raw, names", [
    (b"\x80[]", "not UTF-8"),
    (b"[" * 100_000, "nested too deeply"),
    (b"5", "expected a JSON list of messages"),
    (b'[{"role": "user", "content": "\\ud800"}]', "lone surrogate"),
], ids=["not-utf8", "deep", "not-a-list", "surrogate"])
def test_cli_history_files_that_are_not_histories_exit_2(bundle_dir, tmp_path, capsys, raw, names):
    from magicselector.cli import main

    path = tmp_path / "h.json"
    path.write_bytes(raw)
    assert main(["select", "turn it off", "--history-file", str(path), "--bundle", str(bundle_dir)]) == 2
    err = capsys.readouterr().err
    assert "magicselector: error:" in err and names in err
    assert main(["select", "turn it off", "--history-file", str(tmp_path), "--bundle", str(bundle_dir)]) == 2
    assert "cannot read the history file" in capsys.readouterr().err


@pytest.mark.parametrize("row, names", [("null", "a query is a JSON object"), ("[" * 100_000, "JSON nested too deeply"),
                                        ("\udcff", "not UTF-8")], ids=["null", "deep", "not-utf8"])
def test_eval_datasets_with_broken_rows_are_input_errors(tmp_path, row, names):
    from magicselector.data.datasets import load_benchmark

    (tmp_path / "tools.jsonl").write_text('{"id": "a", "name": "a", "description": "d"}\n')
    body = row.encode("utf-8", "surrogateescape") if row == "\udcff" else row.encode()
    (tmp_path / "queries.jsonl").write_bytes(b'{"id": "q", "query": "x", "gold": ["a"]}\n' + body + b"\n")
    with pytest.raises(InputError, match=f"queries.jsonl:2: {names}"):
        load_benchmark(tmp_path)


@pytest.mark.parametrize("row, names", [("null", "a query is a JSON object"), ("[" * 100_000, "JSON nested too deeply"),
                                        ("\udcff", "not UTF-8")], ids=["null", "deep", "not-utf8"])
def test_skip_bad_rows_lists_broken_rows_and_keeps_the_rest(tmp_path, row, names):
    from magicselector.data.datasets import load_benchmark

    (tmp_path / "tools.jsonl").write_text('{"id": "a", "name": "a", "description": "d"}\n')
    body = row.encode("utf-8", "surrogateescape") if row == "\udcff" else row.encode()
    (tmp_path / "queries.jsonl").write_bytes(b'{"id": "q", "query": "x", "gold": ["a"]}\n' + body + b"\n"
                                             + b'{"id": "r", "query": "y", "gold": ["a"]}\n')
    bench = load_benchmark(tmp_path, skip_bad_rows=True)
    assert [q.id for q in bench.queries] == ["q", "r"]
    assert len(bench.rejected) == 1 and bench.rejected[0]["line"] == 2 and names in bench.rejected[0]["error"]


@pytest.mark.slow
def test_eval_runs_past_malformed_rows(bundle_dir, tiny_benchmark):
    """A row that is not a query at all (not JSON, unknown gold tool) costs that row, not the run."""
    from magicselector.bench.evaluate import EvalConfig, evaluate

    good = (tiny_benchmark / "queries.jsonl").read_text()
    n_good = len(good.splitlines())
    broken = '{"id": "ghost", "query": "call mom", "gold": ["no_such_tool"]}\n{not json\n'
    (tiny_benchmark / "queries.jsonl").write_text(good + broken)
    report = evaluate(tiny_benchmark, EvalConfig(), bundle=bundle_dir, progress=False)
    bad = report["bad_queries"]
    assert report["overall"]["queries"] == n_good
    assert bad["malformed_rows"] == 2 and bad["ids"][:2] == ["ghost", f"line {n_good + 2}"]
    assert "no_such_tool" in bad["rows"][0]["reason"] and "not valid JSON" in bad["rows"][1]["reason"]


# -- selects racing catalog changes ---------------------------------------------------------------
@pytest.mark.slow
def test_selects_racing_a_thread_that_removes_every_tool(bundle_dir):
    """The issue's race: decomposed selects (the per-sub-task cut reads index vectors) while one
    thread removes every tool and puts them back; nothing raises, every selection is consistent."""
    s = Selector.from_bundle(bundle_dir, config=SelectorConfig(decompose="rules"))
    tools = list(s.catalog)
    errors: list[BaseException] = []
    stop = threading.Event()

    def churn() -> None:
        try:
            for _ in range(2):
                for t in tools:
                    s.remove_tool(t.id)
                for t in tools:
                    s.add_tool(t)
        except BaseException as e:  # noqa: BLE001 - the test's finding
            errors.append(e)
        finally:
            stop.set()

    def select() -> None:
        n = 0
        while not stop.is_set() or n < 5:
            try:
                sel = s.select("turn on bluetooth, set an alarm for 7 and play some jazz")
                assert len(sel.tools) == sel.k <= len(sel.ranked_ids)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return
            n += 1

    threads = [threading.Thread(target=churn)] + [threading.Thread(target=select) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert len(s.catalog) == len(tools) and s.catalog_version == 4 * len(tools)


@pytest.mark.slow
def test_soak_small(bundle_dir, tmp_path):
    from magicselector.bench.soak import SoakConfig, format_soak, run_soak, write_soak

    report = run_soak(bundle_dir, SoakConfig(selects=400, threads=4, churn_interval_ms=5, rss_interval_s=0.05))
    assert report["errors"] == 0, report["error_examples"]
    assert report["mismatches"] == 0, report["mismatch_examples"]
    assert report["selects"] == 400 and report["catalog_changes"] > 5 and report["versions_seen"] > 1
    assert "result:" in format_soak(report)
    assert json.loads(write_soak(report, tmp_path).read_text())["selects"] == 400

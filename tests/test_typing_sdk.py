"""Typing for integrators: code that hands ToolSearch the Anthropic and OpenAI SDKs' own response
objects type-checks under ``mypy --strict``, and mypy finds ``magicselector`` after an editable
install in setuptools' strict mode (``--config-settings editable_mode=strict``; the default editable
mode installs an import hook that type checkers cannot follow)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SNIPPET = """
from typing import Any

from anthropic.types import Message
from openai.types.responses import Response

from magicselector import Selector
from magicselector.tool_search import ToolSearch, next_openai_input


def answer(search: ToolSearch, request: dict[str, Any], message: Message, response: Response) -> None:
    reply: dict[str, Any] = search.answer_anthropic(request, message)
    outputs: list[dict[str, Any]] = search.answer_openai(request, response)
    follow_up: list[Any] = next_openai_input(request, response, outputs)
    print(reply, follow_up)


def plain(search: ToolSearch, request: dict[str, Any]) -> None:
    search.answer_anthropic(request, {"content": []})  # a plain dict still type-checks
"""


def _link_tree(into: Path) -> Path:
    """What setuptools' strict editable mode builds: the package as folders of links, mapped from
    pyproject's package-dir (runtime/ is magicselector, cli/ is magicselector.cli, ...)."""
    import tomllib

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = into / "magicselector"
    top.mkdir(parents=True)
    for entry in (ROOT / mapping["magicselector"]).iterdir():
        (top / entry.name).symlink_to(entry)
    for package, folder in mapping.items():
        if package != "magicselector":
            link = into / Path(*package.split("."))
            if link.is_symlink():
                link.unlink()
            link.symlink_to(ROOT / folder)
    return into


@pytest.mark.slow
@pytest.mark.extra("dev", modules=("mypy", "anthropic", "openai"))
def test_the_sdks_response_objects_type_check_under_mypy_strict(tmp_path):
    (tmp_path / "client.py").write_text(textwrap.dedent(SNIPPET))
    tree = _link_tree(tmp_path / "tree")
    # the runtime's own check is test_typing's; here only what the client's file is told counts
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--no-incremental",
                           "client.py"], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "MYPYPATH": str(tree)})
    client_errors = [line for line in proc.stdout.splitlines() if line.startswith("client.py:") and ": error:" in line]
    assert ("Success" in proc.stdout or "Found" in proc.stdout) and not client_errors, proc.stdout[-6000:]


@pytest.mark.slow
@pytest.mark.extra("dev", modules=("mypy",))
def test_mypy_finds_magicselector_after_a_strict_editable_install(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT),
                              "--config-settings", "editable_mode=strict"], capture_output=True, text=True,
                             timeout=600)
    if install.returncode != 0 and "Could not" in install.stderr:  # no package index reachable for the build
        pytest.skip(f"pip could not fetch the build backend: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr[-3000:]
    (tmp_path / "use.py").write_text("import magicselector\n\nselector: magicselector.Selector | None = None\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
                           str(python), "use.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "Success" in proc.stdout, proc.stdout[-4000:]

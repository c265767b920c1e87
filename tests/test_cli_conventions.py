"""Command-line conventions, through a real subprocess: ``--version``, a quiet exit 0 when the reader
of stdout goes away (``| head -1``), and ``--json`` together with ``--format``; and the package's:
``py.typed`` shipped, the LICENSE pyproject declares, a CHANGELOG, the README's ``mcp_catalog``."""
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import magicselector


def _magicselector(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "magicselector", *args], capture_output=True, text=True,
                          timeout=300, **kwargs)


def test_version_prints_the_version_and_exits_0():
    done = _magicselector("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"magicselector {magicselector.__version__}\n"


def _with_closed_stdout(*args):
    """Run ``magicselector ARGS`` with a stdout pipe whose reader is already gone, as after
    ``| head -1`` has read its line: every write the command makes meets a closed pipe."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "magicselector", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("args", [("demo",), ("select", "turn on bluetooth and play some jazz"),
                                  ("select", "set an alarm for 7", "--json")])
def test_a_closed_pipe_ends_quietly_with_exit_0(args, bundle_dir):
    done = _with_closed_stdout(*args, "--bundle", str(bundle_dir))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


@pytest.mark.slow
def test_head_1_through_a_shell_exits_0_quietly(bundle_dir):
    done = subprocess.run(f"{sys.executable} -m magicselector demo --bundle {bundle_dir} | head -1; "
                          "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_json_with_format_gives_the_selection_with_definitions_in_that_format(fmt, bundle_dir):
    utterance = "text Maria that I'm running late"
    both = _magicselector("select", utterance, "--json", "--format", fmt, "--bundle", str(bundle_dir))
    alone = _magicselector("select", utterance, "--format", fmt, "--bundle", str(bundle_dir))
    plain = _magicselector("select", utterance, "--json", "--bundle", str(bundle_dir))
    assert both.returncode == alone.returncode == plain.returncode == 0, both.stderr
    document, definitions, mcp = json.loads(both.stdout), json.loads(alone.stdout), json.loads(plain.stdout)
    assert document["format"] == fmt and mcp["format"] == "mcp"
    assert document["schemas"] == definitions  # the tools as --format alone renders them
    assert document["schemas"] != mcp["schemas"]
    assert [t["name"] for t in document["tools"]] == [t["name"] for t in mcp["tools"]]
    assert set(document) >= {"tools", "k", "subtasks", "timings_ms"}


ROOT = Path(__file__).resolve().parent.parent


def test_the_package_is_marked_typed_and_ships_the_marker():
    package = Path(magicselector.__file__).resolve().parent
    assert (package / "py.typed").is_file()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["magicselector"]


def test_the_license_pyproject_declares_is_there_in_full():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and text.count("\n") > 150  # the full text, not a pointer


def test_the_changelog_has_this_version():
    assert f"## [{magicselector.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_mcp_catalog_as_the_readme_shows_it():
    from magicselector import mcp_catalog

    github = {"tools": [{"name": "create_issue", "description": "Open an issue.",
                         "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}}}]}
    slack = {"tools": [{"name": "send_message", "description": "Post to a channel.",
                        "inputSchema": {"type": "object"}}]}
    catalog = mcp_catalog({"github": github, "slack": slack})
    assert sorted(t.name for t in catalog) == ["github__create_issue", "slack__send_message"]
    assert "mcp_catalog" in magicselector.__all__ and "mcp_catalog(" in (ROOT / "README.md").read_text()

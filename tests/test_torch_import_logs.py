"""A torch command's stderr holds no torchao kernel-library load failures or _pytree enum warnings
(what importing torchao on a CPU host logs)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import needs

pytest.importorskip("torchao", reason=needs("release"))


def test_the_command_line_quiets_torchao_import_logs():
    # the command line's logging setup, then what a train or export command imports
    code = ("import sys\nfrom magicselector.cli import main\nmain(['split', '--out', sys.argv[1]])\n"
            "import transformers, torchao  # noqa\n")
    proc = subprocess.run([sys.executable, "-c", code, "/nonexistent/out"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "magicselector: error: split: name source folders" in proc.stderr  # the command did run
    assert "Failed to load" not in proc.stderr and "_pytree" not in proc.stderr, proc.stderr


def test_without_it_torchao_logs_on_import():  # the test above can fail: the noise is real
    proc = subprocess.run([sys.executable, "-c", "import torchao  # noqa"], capture_output=True, text=True)
    assert "Failed to load" in proc.stderr or "_pytree" in proc.stderr

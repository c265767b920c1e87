"""The runtime (which ships ``py.typed``) type-checks clean under ``mypy --strict``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["-m", "mypy", "--strict", "--ignore-missing-imports", "runtime"]


@pytest.mark.extra("dev", modules=("mypy",))  # a lean install skips it, naming the extra
def test_the_runtime_is_clean_under_mypy_strict():
    proc = subprocess.run([sys.executable, *COMMAND], cwd=ROOT, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Success: no issues found" in proc.stdout, (
        f"python {' '.join(COMMAND)} (exit {proc.returncode}):\n{output[-12000:]}")

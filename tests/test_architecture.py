"""The layer contracts of pyproject.toml hold, and they name every runtime module."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UPPER_LAYERS = {"data", "train", "export", "bench", "cli"}


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def _runtime_modules() -> set[str]:
    """magicselector.X for every module or package directly under runtime/ (the entry point aside)."""
    names = set()
    for p in (ROOT / "runtime").iterdir():
        if p.suffix == ".py" and p.stem not in ("__init__", "__main__"):
            names.add(p.stem)
        elif p.is_dir() and (p / "__init__.py").is_file():
            names.add(p.name)
    return {f"magicselector.{n}" for n in names}


def test_runtime_contracts_name_every_runtime_module():
    contracts = _contracts()
    runtime = _runtime_modules()
    assert runtime, "no runtime modules found"
    assert set(contracts["runtime-is-the-floor"]["source_modules"]) == runtime
    assert set(contracts["lean-runtime"]["source_modules"]) == runtime | {"magicselector.data"}
    assert {m.split(".")[1] for m in contracts["runtime-is-the-floor"]["forbidden_modules"]} == UPPER_LAYERS


def _package_tree(tmp: Path) -> Path:
    """The installed layout (runtime/ as magicselector/, the other rooms as its subpackages) made of
    symlinks: import-linter reads packages from the file system, which an editable install maps."""
    pkg = tmp / "magicselector"
    pkg.mkdir()
    for entry in (ROOT / "runtime").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for room in sorted(UPPER_LAYERS):
        (pkg / room).symlink_to(ROOT / room)
    return tmp


def test_import_contracts_hold(tmp_path):
    """lint-imports over the package: a violation (an upward import, even inside a function) fails
    here with the import chain in the message."""
    tree = _package_tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout

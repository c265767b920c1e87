"""Selecting tools must not import torch or transformers: the runtime ships to phones."""
import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_select_imports_neither_torch_nor_transformers(bundle_dir):
    code = (
        "import sys, json\n"
        "from magicselector import Selector\n"
        f"s = Selector.from_bundle({str(bundle_dir)!r})\n"
        "sel = s.select('turn on bluetooth and play some jazz')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'sentence_transformers', 'optimum', 'executorch'))\n"
        "print(json.dumps({'heavy': heavy, 'k': sel.k}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [] and result["k"] >= 1


def test_importing_the_package_and_cli_is_lean():
    code = ("import sys, magicselector, magicselector.cli; "
            "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

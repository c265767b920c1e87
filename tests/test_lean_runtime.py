"""Selecting tools must not import torch or transformers: the runtime ships to phones. The default
bundle builds from the shipped models with torch, transformers, onnx and llama_cpp unimportable."""
import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "sentence_transformers", "optimum", "executorch", "onnx", "llama_cpp")

# A meta-path finder that refuses the heavy packages, as on a lean install where they are absent.
BLOCKER = (
    "import sys\n"
    f"HEAVY = {HEAVY!r}\n"
    "class Blocker:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in HEAVY:\n"
    "            raise ModuleNotFoundError(f'No module named {name!r} (blocked: lean install)', name=name)\n"
    "        return None\n"
    "sys.meta_path.insert(0, Blocker())\n"
)


@pytest.mark.slow
def test_select_imports_neither_torch_nor_transformers(bundle_dir):
    code = (
        "import sys, json\n"
        "from magicselector import Selector\n"
        f"s = Selector.from_bundle({str(bundle_dir)!r})\n"
        "sel = s.select('turn on bluetooth and play some jazz')\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(json.dumps({'heavy': heavy, 'k': sel.k}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [] and result["k"] >= 1


@pytest.mark.slow
def test_default_bundle_builds_and_selects_without_torch_transformers_or_llama_cpp(tmp_path):
    """A fresh MAGICSELECTOR_HOME: Selector.from_bundle() builds the default bundle from the shipped
    INT8 models (for this CPU) and selects, with every heavy package unimportable."""
    code = BLOCKER + (
        "import json, warnings\n"
        "warnings.simplefilter('error')  # a bundle made for this CPU raises no target warning\n"
        "import magicselector\n"
        "from magicselector import Selector\n"
        "from magicselector.targets import host_target\n"
        "s = Selector.from_bundle()\n"
        "sel = s.select('wake me up at 6:30 tomorrow')\n"
        "m = s.bundle.manifest\n"
        "print(json.dumps({'path': str(s.bundle.path), 'target': m['target'], 'host': host_target(),\n"
        "                  'tools': [t.id for t in sel.tools], 'reranker': 'reranker' in m,\n"
        "                  'embedder_sha': m['files']['embedder/model.onnx']['sha256'],\n"
        "                  'heavy': sorted(x for x in sys.modules if x.split('.')[0] in HEAVY)}))\n"
    )
    env = {**os.environ, "MAGICSELECTOR_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["path"].startswith(str(tmp_path / "home"))
    assert result["target"] == result["host"] and not result["reranker"] and result["heavy"] == []
    assert result["tools"] and any("alarm" in t for t in result["tools"][:3]), result["tools"]

    from magicselector.default_bundle import EMBEDDER_META, SHIPPED_EMBEDDER_DIR

    shipped = json.loads((SHIPPED_EMBEDDER_DIR / EMBEDDER_META).read_text())
    name = shipped["targets"][result["host"]]["file"]
    assert result["embedder_sha"] == shipped["files"][name]["sha256"]


def test_blocker_really_blocks():
    """The lean test above proves something only if the blocker makes the heavy packages fail."""
    code = BLOCKER + (
        "failed = []\n"
        "for name in HEAVY:\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ModuleNotFoundError:\n"
        "        failed.append(name)\n"
        "print(failed)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == repr(list(HEAVY))


def test_importing_the_package_and_cli_is_lean():
    code = ("import sys, magicselector, magicselector.cli; "
            "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'llama_cpp')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

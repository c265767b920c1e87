#!/usr/bin/env bash
# The lean lane: the test suite on the bare install (`pip install -e .`) plus the test tools, in a
# fresh virtualenv, so no extra is installed. A test that needs an extra skips and names it
# (tests/conftest.py, EXTRAS); everything else, the runtime's tests among them, must pass.
# Fails when a test fails, when pytest collects nothing (exit 5) and when no test passed.
# Extra arguments go to pytest (e.g. -x). LEAN_VENV=DIR reuses a folder for the virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${LEAN_VENV:-$(mktemp -d)/lean}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q -e . "pytest>=7" "hypothesis>=6"
"$venv/bin/python" -c "
import importlib.util, sys
extra = [m for m in ('torch', 'transformers', 'onnx', 'llama_cpp', 'cryptography', 'mcp', 'importlinter')
         if importlib.util.find_spec(m) is not None]
sys.exit(f'the lean virtualenv is not lean: {extra} import' if extra else 0)"
report="$venv/lean-junit.xml"
rc=0
"$venv/bin/python" -m pytest -p no:cacheprovider -q --junitxml="$report" "$@" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "lean lane: pytest exited $rc (5: no tests collected)" >&2
    exit "$rc"
fi
"$venv/bin/python" - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "skipped", "failures", "errors")}
passed = count["tests"] - count["skipped"] - count["failures"] - count["errors"]
print(f"lean lane: {passed} passed, {count['skipped']} skipped")
sys.exit(0 if passed > 0 else "lean lane: no test passed")
PY

"""CI and the README agree: `.ci/run` runs the lean lane, then the README's test command as written."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    return [line.split("   #")[0].strip() for line in block.splitlines() if line.strip()]


def _ci_steps() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    # the system packages the native tests run on (qemu, kotlin) are installed ahead, not a step
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")
            and not line.startswith(("set ", "cd ", "command -v "))]


def test_ci_runs_the_lean_lane_then_the_readme_test_command():
    setup, full = _readme_commands()
    assert setup.startswith("python3 -m pip install -e . ") and "python3 -m pytest" in full
    assert _ci_steps() == ["bash tools/lean_tests.sh", full]
    assert "bash tools/lean_tests.sh" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_ci_scripts_parse_and_stop_at_the_first_failure():
    for script in (ROOT / ".ci" / "run", ROOT / "tools" / "lean_tests.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True)
        text = script.read_text(encoding="utf-8")
        assert "set -euo pipefail" in text and "|| true" not in text, script

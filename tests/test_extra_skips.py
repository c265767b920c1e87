"""A test that needs an extra skips naming it (issue 28.5), so the lean lane's skips say what to
install: every ``importorskip`` in the suite gives a reason that names an extra of
``tests/conftest.py``'s ``EXTRAS``, through ``needs(extra)`` or in words ("the X extra")."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import EXTRAS, needs

TESTS = Path(__file__).resolve().parent


def _reason_extra(reason: ast.expr | None) -> str | None:
    """The extra a skip reason names, else None."""
    if isinstance(reason, ast.Call) and getattr(reason.func, "id", None) == "needs" and reason.args:
        arg = reason.args[0]
        return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
    if reason is None:
        return None
    found = re.search(r"\bthe ([\w-]+) extra\b", ast.unparse(reason))
    return found.group(1) if found else None


def unnamed_skips(folder: Path = TESTS) -> list[str]:
    """``file:line`` of each ``importorskip`` whose reason names no known extra."""
    out = []
    for path in sorted(p for p in folder.glob("*.py") if p.name != "conftest.py"):  # conftest: import_extra
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and "importorskip" in (getattr(node.func, "attr", None),
                                                                 getattr(node.func, "id", None)):
                reason = next((k.value for k in node.keywords if k.arg == "reason"), None)
                if _reason_extra(reason) not in EXTRAS:
                    out.append(f"{path.name}:{node.lineno}")
    return out


def test_every_importorskip_names_its_extra():
    assert unnamed_skips() == [], "skip with reason=needs('<extra>') (tests/conftest.py)"


def test_the_check_finds_a_skip_without_an_extra(tmp_path):
    (tmp_path / "test_x.py").write_text(
        'import pytest\nfrom conftest import needs\n'
        'pytest.importorskip("a", reason=needs("sign"))\n'
        'pytest.importorskip("b", reason="needs the serve extra: pip install -e .[serve]")\n'
        'pytest.importorskip("c", reason="pip install -e .[sign]")\n'
        'pytest.importorskip("d")\n'
        'pytest.importorskip("e", reason="needs the nosuch extra")\n')
    assert unnamed_skips(tmp_path) == ["test_x.py:5", "test_x.py:6", "test_x.py:7"]
    assert needs("sign").startswith("needs the sign extra")

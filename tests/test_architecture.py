"""The layer contracts of pyproject.toml hold, and they name every runtime module."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


@pytest.mark.extra("dev")
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


# -- no import cycle among the project's modules ----------------------------------------------------
ROOMS = {"runtime": "magicselector", "data": "magicselector.data", "export": "magicselector.export",
         "train": "magicselector.train", "bench": "magicselector.bench", "cli": "magicselector.cli"}


def _module_files() -> dict[str, Path]:
    """magicselector.X.Y -> its file, for every module in the rooms (the installed names)."""
    out: dict[str, Path] = {}
    for room, package in ROOMS.items():
        for p in sorted((ROOT / room).rglob("*.py")):
            rel = p.relative_to(ROOT / room).with_suffix("")
            if room == "runtime" and rel.parts[0] in UPPER_LAYERS:
                continue  # a room's own tree, never under runtime/ in this checkout
            parts = [part for part in rel.parts if part != "__init__"]
            if any(not part.isidentifier() for part in parts):
                continue
            out[".".join([package, *parts])] = p
    return out


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (functions included), relative
    imports resolved; ``from P import x`` counts P.x when that is a module, else P."""
    import ast

    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def project(target: str) -> str | None:
        while target and target not in modules:  # ``import a.b.c`` names a.b.c; keep the module part
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            targets = []
            for alias in node.names:
                sub = f"{base_name}.{alias.name}"
                targets.append(sub if sub in modules else base_name)
        else:
            continue
        for target in targets:
            module = project(target)
            if module is not None and module != name:
                found.add(module)
    return found


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (an iterative walk)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def import_graph() -> dict[str, set[str]]:
    files = _module_files()
    return {name: _imports(name, path, set(files)) for name, path in files.items()}


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete loop through a component, for the message (a breadth-first walk back to its start)."""
    members, start = set(component), component[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    return component


def test_strongly_connected_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert _strongly_connected(graph) == [["a", "b", "c"]]
    assert _a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []


def test_imports_resolve_relative_and_function_level(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("from .bundle import Bundle\n"
                   "def f():\n    from .stages import index\n    import magicselector.signing as s\n"
                   "    from . import data\n")
    modules = {"magicselector.bundle", "magicselector.stages", "magicselector.stages.index",
               "magicselector.signing", "magicselector.x", "magicselector"}
    assert _imports("magicselector.x", src, modules) == {"magicselector.bundle", "magicselector.stages.index",
                                                        "magicselector.signing", "magicselector"}


def test_no_import_cycle_among_the_project_modules():
    """Every room's modules import in one direction, counting imports inside functions: a cycle
    (say bundle -> sections -> bundle) fails here with one loop of it spelled out."""
    graph = import_graph()
    assert "magicselector.bundle" in graph and "magicselector.cli.main" in graph
    cycles = _strongly_connected(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(_a_cycle(graph, c)) for c in cycles)

"""Concurrent and interrupted bundle writers: parallel `bundle rewrite` calls take turns (a lock on the
bundle's parent folder) and every added tool survives; a Selector that would overwrite another
writer's rewrite fails loudly; release numbers are unique and increasing; a kill between the two
renames of a swap is recovered by the next rewrite at its first try; a target that is a symbolic
link to a release folder is rewritten as a link swap, with nothing left behind."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from magicselector import Selector, Tool
from magicselector.bundle import Bundle
from magicselector.errors import BundleError
from magicselector.files import CRASH_ENV, NO_EXCHANGE_ENV, previous_dir, writer_lock

N_TOOLS = 16
WRITERS = 4


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory, home) -> Path:
    from magicselector.catalog import Catalog, load_phone_catalog
    from magicselector.default_bundle import build_default_bundle

    out = tmp_path_factory.mktemp("small") / "b"
    build_default_bundle(out, catalog=Catalog(list(load_phone_catalog())[:N_TOOLS]), progress=False, release=100)
    return out


def _tool_file(folder: Path, name: str) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"tools": [{"name": name, "description": f"Operate the {name.replace('_', ' ')}.",
                                           "inputSchema": {"type": "object"}}]}))
    return path


def _rewrite(target: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "magicselector", "bundle", "rewrite", str(target), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **env})


def _leftovers(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(f".{name}."))


@pytest.mark.slow
def test_parallel_rewrites_take_turns_and_every_added_tool_survives(small_bundle, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(small_bundle, target)
    names = [f"moonbase_valve_{i}" for i in range(WRITERS)]
    procs = [_rewrite(target, "--add-tools", str(_tool_file(tmp_path, n))) for n in names]
    outs = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    assert all(code == 0 for code, _, _ in outs), [err[-1500:] for _, _, err in outs]
    releases = [json.loads(out)["release"] for _, out, _ in outs]
    assert len(set(releases)) == WRITERS  # unique, though written within the same seconds
    bundle = Bundle.open(target)
    assert bundle.release == max(releases) and bundle.manifest["catalog"]["tools"] == N_TOOLS + WRITERS
    assert set(names) <= set(Selector.from_bundle(target).catalog.ids)
    assert _leftovers(tmp_path, "b") == []


def test_a_selector_does_not_overwrite_another_writers_rewrite(small_bundle, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(small_bundle, target)
    first, second = Selector.from_bundle(target), Selector.from_bundle(target)
    first.add_tool(Tool(id="first_tool", name="first_tool", description="The first writer's tool."))
    second.add_tool(Tool(id="second_tool", name="second_tool", description="The second writer's tool."))
    first.save(target)
    with pytest.raises(BundleError, match="rewritten by another writer since this Selector loaded it"):
        second.save(target)
    first.add_tool(Tool(id="first_again", name="first_again", description="The first writer saves again."))
    first.save(target)  # its own earlier save is not another writer's
    assert {"first_tool", "first_again"} <= set(Selector.from_bundle(target).catalog.ids)
    second.save(tmp_path / "elsewhere")  # a fresh folder is always fine


def test_releases_written_in_the_same_second_are_unique_and_increasing(small_bundle, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(small_bundle, target)
    selector = Selector.from_bundle(target)
    releases = []
    for i in range(3):
        selector.add_tool(Tool(id=f"tool_{i}", name=f"tool_{i}", description="A tool."))
        releases.append(selector.save(target)["release"])
    assert releases == sorted(set(releases)) and releases[0] > 100


def test_the_writer_lock_serializes_threads_and_processes(tmp_path):
    target = tmp_path / "b"
    inside, overlaps = [], []

    def hold():
        with writer_lock(target), writer_lock(target):  # re-entrant
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            threading.Event().wait(0.05)
            inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps
    script = ("import sys, fcntl, os; fd = os.open(sys.argv[1], os.O_RDONLY); "
              "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)")
    with writer_lock(target):  # another process cannot take it meanwhile
        held = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True)
    assert held.returncode != 0 and "BlockingIOError" in held.stderr
    assert subprocess.run([sys.executable, "-c", script, str(tmp_path)]).returncode == 0


@pytest.mark.slow
def test_a_kill_between_the_renames_is_recovered_by_the_next_rewrite_at_once(small_bundle, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(small_bundle, target)
    proc = _rewrite(target, "--add-tools", str(_tool_file(tmp_path, "first_valve")),
                    **{CRASH_ENV: "between-renames", NO_EXCHANGE_ENV: "1"})
    assert proc.wait(timeout=300) == 86, proc.communicate()[1][-2000:]
    assert not target.exists() and previous_dir(target).is_dir()
    proc = _rewrite(target, "--add-tools", str(_tool_file(tmp_path, "second_valve")))
    assert proc.wait(timeout=300) == 0, proc.communicate()[1][-2000:]
    ids = set(Selector.from_bundle(target).catalog.ids)
    assert "second_valve" in ids and "first_valve" not in ids  # the killed write never happened
    assert _leftovers(tmp_path, "b") == []


def test_a_symlinked_target_is_rewritten_as_a_link_swap(small_bundle, tmp_path):
    releases = tmp_path / "releases"
    releases.mkdir()
    shutil.copytree(small_bundle, releases / "v1")
    current = tmp_path / "current"
    current.symlink_to("releases/v1")
    selector = Selector.from_bundle(current)
    selector.add_tool(Tool(id="linked_tool", name="linked_tool", description="Added through the link."))
    release = selector.save(current)["release"]
    assert current.is_symlink() and os.readlink(current) == f"releases/release-{release}"  # relative stays relative
    assert "linked_tool" in Selector.from_bundle(current).catalog.ids
    assert "linked_tool" not in Selector.from_bundle(releases / "v1").catalog.ids  # the old release, untouched
    assert _leftovers(tmp_path, "current") == [] and sorted(p.name for p in releases.iterdir()) == \
        sorted(["v1", f"release-{release}"])

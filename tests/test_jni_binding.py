"""The JNI layer and the Kotlin class MagicSelector on the desktop JVM, against the host build of the
native core: native/jni/magicselector_jni.cpp linked with the core's static libraries into
libmagicselector_jni.so, native/kotlin + android_demo/jvm/SelectMain.kt compiled by kotlinc, run by java."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import native_build

REPO = Path(__file__).resolve().parents[1]


def host_build() -> Path | None:
    """The host build folder of ``magicselector native build`` (or $MAGICSELECTOR_NATIVE_BUILD)."""
    env = os.environ.get("MAGICSELECTOR_NATIVE_BUILD")
    build = Path(env) if env else native_build("host")
    return build if (build / "lib" / "libmagicselector_core.a").is_file() else None


def java_home() -> Path | None:
    javac = shutil.which("javac")
    home = Path(os.path.realpath(javac)).parent.parent if javac else None
    return home if home and (home / "include" / "jni.h").is_file() else None


def static_libraries(build: Path) -> list[str]:
    """The core and llama.cpp / ggml, in link order (the core first, ggml's base last)."""
    names = ("libllama.a", "libggml.a", "libggml-cpu.a", "libggml-base.a")
    found = {p.name: p for p in (build / "llama.cpp").rglob("*.a")}
    return [str(build / "lib" / "libmagicselector_core.a")] + [str(found[n]) for n in names if n in found]


@pytest.fixture(scope="module")
def jvm(tmp_path_factory) -> dict[str, Path]:
    """libmagicselector_jni.so and select.jar, built once for the module."""
    build, home = host_build(), java_home()
    if build is None:
        pytest.skip("no native host build: run `magicselector native build --target host` "
                    "or set MAGICSELECTOR_NATIVE_BUILD to a build folder")
    if home is None or not shutil.which("kotlinc") or not shutil.which("java"):
        pytest.skip("needs a JDK (javac, java, jni.h) and kotlinc (Debian: apt-get install kotlin)")
    out = tmp_path_factory.mktemp("jvm")
    cxx = os.environ.get("CXX") or shutil.which("g++") or "c++"
    subprocess.run([cxx, "-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    f"-I{home / 'include'}", f"-I{home / 'include' / 'linux'}", f"-I{REPO / 'native' / 'include'}",
                    str(REPO / "native" / "jni" / "magicselector_jni.cpp"), *static_libraries(build), "-lpthread",
                    "-o", str(out / "libmagicselector_jni.so")], check=True, capture_output=True, text=True)
    subprocess.run(["kotlinc", str(REPO / "native" / "kotlin" / "com" / "magicselector" / "MagicSelector.kt"),
                    str(REPO / "android_demo" / "jvm" / "SelectMain.kt"), "-include-runtime",
                    "-d", str(out / "select.jar")], check=True, capture_output=True, text=True)
    return {"dir": out, "jar": out / "select.jar", "cli": build / "bin" / "magicselector-native"}


def run_main(jvm: dict[str, Path], bundle: Path, stdin: str = "", *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["java", f"-Djava.library.path={jvm['dir']}", "-cp", str(jvm["jar"]), "SelectMainKt",
                           str(bundle), *extra], input=stdin, capture_output=True, text=True, encoding="utf-8",
                          timeout=300)


REQUESTS = [
    {"query": "turn on bluetooth and play some jazz", "history": []},
    {"query": "and in Porto?", "history": [{"role": "user", "content": "what's the weather in Lisbon this weekend?"},
                                           {"role": "assistant", "content": "Sunny, highs of 24."}]},
    {"query": "send 20 euros to Jake and text him 🎉 thanks", "history": [], "max_tools": 2},
    {"query": "réserve une table pour deux", "history": [], "max_schema_tokens": 400, "format": "anthropic"},
]


def test_the_kotlin_class_selects_as_the_c_api_does(jvm, bundle_dir):
    stdin = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in REQUESTS)
    got = run_main(jvm, bundle_dir, stdin)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[-1] == "closed: the selector is closed"  # a call after close is an IllegalStateException
    through_jvm = [json.loads(line) for line in lines[:-1]]
    cli = subprocess.run([str(jvm["cli"]), "select", str(bundle_dir), "--threads", "1"], input=stdin,
                         capture_output=True, text=True, encoding="utf-8", timeout=300)
    direct = [json.loads(line) for line in cli.stdout.splitlines()]
    assert len(through_jvm) == len(direct) == len(REQUESTS)
    for a, b in zip(through_jvm, direct):
        assert [t["id"] for t in a["tools"]] == [t["id"] for t in b["tools"]] and a["k"] == b["k"]
        assert a["subtasks"] == b["subtasks"] and a["retrieved_texts"] == b["retrieved_texts"]
    assert "bluetooth_toggle" in [t["id"] for t in through_jvm[0]["tools"]]
    assert through_jvm[2]["k"] == len(through_jvm[2]["tools"]) <= 2  # the budget
    # text past U+FFFF and accents cross JNI both ways unchanged (UTF-16 <-> UTF-8, not modified UTF-8)
    assert any("🎉" in t for t in through_jvm[2]["retrieved_texts"])
    assert any("réserve" in t for t in through_jvm[3]["retrieved_texts"])
    # no max_tools in the request: the config's default budget (five tools)
    assert through_jvm[3]["budget"] == {"format": "anthropic", "max_schema_tokens": 400, "max_tools": 5}


def test_errors_are_exceptions_with_the_c_apis_status_and_message(jvm, bundle_dir, tmp_path):
    bad = ['{"query": ""}', '{"query": "call mom", "max_tools": 0}', "not json",
           '{"query": "call mom", "history": [{"role": 3, "content": "x"}]}', '{"query": "x", "format": "yaml"}']
    got = run_main(jvm, bundle_dir, "\n".join(bad) + "\n")
    errors = [json.loads(line)["error"] for line in got.stdout.splitlines()[:-1]]
    assert [e["status"] for e in errors] == [2, 2, 1, errors[3]["status"], errors[4]["status"]]
    assert "query" in errors[0]["message"] and "max_tools" in errors[1]["message"]
    assert "not valid JSON" in errors[2]["message"]
    assert errors[3]["status"] in (1, 2) and "history[0].role" in errors[3]["message"]
    assert errors[4]["status"] in (1, 2) and "format" in errors[4]["message"]
    missing = run_main(jvm, tmp_path / "no-bundle")
    assert missing.returncode == 2
    err = json.loads(missing.stdout)["error"]
    assert err["status"] == 3 and "no-bundle" in err["message"]  # MS_ERR_BUNDLE naming the folder


def test_the_typed_select_carries_history_and_a_budget(jvm, bundle_dir):
    got = run_main(jvm, bundle_dir, "", "--dialogue")
    assert got.returncode == 0, got.stderr
    first, second = got.stdout.splitlines()[:2]
    assert first.startswith("turn 1: ") and "play_music" in first
    k = int(second.split("k=")[1].split()[0])
    ids = second.split("ids=")[1].split(",")
    assert 1 <= k == len(ids) <= 2 and "set_volume" in ids  # the follow-up read through the history

"""`bench latency --device adb` and android_demo/run_demo.py with the native runner: the real static
ARM64 executables of `magicselector native build --target arm64` pushed to a fake phone
(tests/fake_adb/adb, which runs them under qemu-aarch64-static) and the real harness; nothing on the
"device" but what the harness pushes. qemu is slow, so the workloads are a few turns."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from magicselector.bench.adb import (DeviceDisconnected, DeviceError, DeviceLatencyOptions, NATIVE_RUNNER,
                                     run_latency_on_device)
from conftest import native_build
from test_adb_harness import FakeDevices, fake  # noqa: F401  (the fake phone and its fixture)

REPO = Path(__file__).resolve().parents[1]
TURNS = [{"query": "turn on bluetooth", "history": []},
         {"query": "and turn it off", "history": [{"role": "user", "content": "turn on bluetooth"},
                                                  {"role": "assistant", "content": "Bluetooth is on."}]},
         {"query": "play some jazz and set a timer for 10 minutes", "history": []}]


def arm64_bin(name: str) -> Path | None:
    """An executable of the arm64 build (``magicselector native build --target arm64``, or the build
    folder in $MAGICSELECTOR_NATIVE_ARM64_BUILD)."""
    env = os.environ.get("MAGICSELECTOR_NATIVE_ARM64_BUILD")
    exe = (Path(env) if env else native_build("arm64")) / "bin" / name
    return exe if exe.is_file() else None


@pytest.fixture(scope="module")
def runner() -> Path:
    exe = arm64_bin(NATIVE_RUNNER)
    if exe is None:
        pytest.skip("no ARM64 build: run `magicselector native build --target arm64` (the native extra) "
                    "or set MAGICSELECTOR_NATIVE_ARM64_BUILD")
    if not (shutil.which("qemu-aarch64-static") or os.path.exists("/proc/sys/fs/binfmt_misc/qemu-aarch64")):
        pytest.skip("qemu-aarch64-static is not installed (apt-get install qemu-user-static)")
    return exe


@pytest.fixture()
def turns_file(tmp_path) -> Path:
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TURNS), encoding="utf-8")
    return path


def runner_starts(fake: FakeDevices) -> int:
    return len([c for c in fake.calls() if c[:1] != ["push"] and "--turns" in json.dumps(c)])


def test_the_arm64_runner_measures_on_the_phone_and_survives_an_unplug(fake, runner, bundle_dir, turns_file,  # noqa: F811
                                                                      tmp_path, monkeypatch):
    from magicselector.bench.latency import STAGE_ORDER, validate_results

    fake.add("R58M30ABCDE")
    monkeypatch.setenv("FAKE_ADB_DISCONNECT_AFTER", "1")  # the second runner start finds no device
    monkeypatch.setenv("FAKE_ADB_DISCONNECT_MATCH", "--turns")
    out = tmp_path / "out"
    opts = dict(runs=2, warmup=1, out_dir=out, native_runner=runner, turns=turns_file, pin_big_cores=True,
                progress=None)
    with pytest.raises(DeviceDisconnected, match="disconnected during run 2 of 2; 1 result kept"):
        run_latency_on_device(bundle_dir, DeviceLatencyOptions(**opts))
    kept = json.loads((out / "partial.json").read_text())
    assert validate_results(kept) == [] and not kept["complete"] and kept["config"]["runs_completed"] == 1
    on_phone = fake.fs("R58M30ABCDE") / "data/local/tmp/magicselector"
    assert (on_phone / "bin" / NATIVE_RUNNER).read_bytes() == runner.read_bytes()
    assert not (on_phone / "python").exists()
    # the cable goes back in: only the missing run runs
    monkeypatch.delenv("FAKE_ADB_DISCONNECT_AFTER")
    monkeypatch.delenv("FAKE_ADB_DISCONNECT_MATCH")
    (fake.root / ".state" / "R58M30ABCDE.json").unlink()
    before = runner_starts(fake)
    res = run_latency_on_device(bundle_dir, DeviceLatencyOptions(**opts))
    assert runner_starts(fake) - before == 1
    assert validate_results(res) == [] and res["complete"] and [r["run"] for r in res["runs"]] == [1, 2]
    assert res["runs"][0] == kept["runs"][0]
    # what the ARM64 core measured, in the schema of a local run
    assert set(res["stages"]) == {"decompose", "embed", "retrieve_and_cut", "total"}
    assert list(res["stages"])[:2] == [s for s in STAGE_ORDER if s in res["stages"]][:2]
    assert all(st["n"] == 2 * len(TURNS) and 0 < st["p50"] <= st["p90"] for st in res["stages"].values()
               if st is not res["stages"]["decompose"])
    assert res["stages"]["total"]["p50"] >= res["stages"]["embed"]["p50"]
    assert res["device"]["machine"] == "aarch64" and res["device"]["runner"] == NATIVE_RUNNER
    assert res["device"]["model"] == "SM-G973U" and res["device"]["big_cores"] == [4, 5, 6, 7]
    assert res["config"]["runner"] == "native" and res["config"]["turns"] == len(TURNS)
    assert res["config"]["workload"]["name"] == str(turns_file) and res["config"]["adb"]["taskset_mask"] == "f0"
    assert res["cold_start_ms"] > 0 and res["peak_rss_mb"] > 10
    assert all(r["cold_start_ms"] > 0 for r in res["runs"])
    ht = res["handed_tokens"]
    assert ht["turns"] == len(TURNS) and ht["cut"]["mean"] < ht["fixed_10"]["mean"] < ht["all"]["mean"]
    raw = json.loads((out / "runs" / "run-1.raw.json").read_text())
    assert "bluetooth_toggle" in raw["first_pass"][0]["ids"]  # the ARM64 core selected, not a stub
    assert res["artifacts"]["total_bytes"] > 0 and res["artifacts"]["tools"] > 100
    # a second session finds the runner and the bundle on the phone and pushes neither
    again = run_latency_on_device(bundle_dir, DeviceLatencyOptions(**{**opts, "runs": 1, "out_dir": tmp_path / "o2"}))
    assert again["config"]["adb"]["push"]["pushed"] == [] and not again["config"]["adb"]["native_runner"]["pushed"]


def test_a_phone_unplugged_while_the_runner_runs(fake, runner, bundle_dir, turns_file, tmp_path,  # noqa: F811
                                                 monkeypatch):
    """The cable comes out while the runner is mid-pass on the phone: adb's shell dies (exit 255, no
    message), the harness finds the device gone and says so, keeping the runs it has."""
    fake.add("R58M30ABCDE")
    monkeypatch.setenv("FAKE_ADB_UNPLUG_DURING_S", "1.5")  # qemu needs seconds to open the bundle
    monkeypatch.setenv("FAKE_ADB_DISCONNECT_MATCH", "--turns")
    out = tmp_path / "out"
    with pytest.raises(DeviceDisconnected, match="disconnected during run 1 of 2; 0 results kept"):
        run_latency_on_device(bundle_dir, DeviceLatencyOptions(runs=2, warmup=0, out_dir=out, native_runner=runner,
                                                               turns=turns_file, progress=None))
    kept = json.loads((out / "partial.json").read_text())
    assert not kept["complete"] and kept["failed_run"] == 1 and kept["runs"] == []
    from magicselector.bench.adb import list_devices

    assert list_devices() == []


def test_the_demo_runs_the_dialogue_with_the_arm64_cli(fake, runner, bundle_dir, capsys):  # noqa: F811
    cli = arm64_bin("magicselector-native")
    if cli is None:
        pytest.skip("the arm64 build has no magicselector-native")
    fake.add("R58M30ABCDE")
    spec = importlib.util.spec_from_file_location("run_demo", REPO / "android_demo" / "run_demo.py")
    run_demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_demo)
    assert run_demo.main(["--bundle", str(bundle_dir), "--native-bin", str(cli), "--history-mode", "user"]) == 0
    out = capsys.readouterr().out
    dialogue = json.loads((REPO / "runtime" / "demo" / "dialogue.json").read_text())
    assert out.count("] user: ") == len(dialogue["turns"]) and out.count("ms on device: ") == len(dialogue["turns"])
    assert "assistant: Message sent to Sam." in out and "K=" in out
    assert "after the bundle is open" in out


def fake_arm64_header(path: Path) -> Path:
    """Bytes that look like an aarch64 ELF: for the tests where the device is refused before anything
    is pushed or run (the harness checks the header only)."""
    path.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 9 + (2).to_bytes(2, "little") + (183).to_bytes(2, "little")
                     + b"\0" * 44)
    return path


def test_an_unauthorized_phone_and_two_phones_without_a_serial_are_refused(fake, bundle_dir, tmp_path):  # noqa: F811
    exe = fake_arm64_header(tmp_path / NATIVE_RUNNER)
    fake.add("0123456789ABCDEF", state="unauthorized")
    opts = DeviceLatencyOptions(runs=1, out_dir=tmp_path / "o", native_runner=exe, progress=None)
    with pytest.raises(DeviceError, match="0123456789ABCDEF is unauthorized: .*Allow USB debugging"):
        run_latency_on_device(bundle_dir, opts)
    fake.add("R58M30ABCDE")
    with pytest.raises(DeviceError, match=r"2 devices are attached \(.*\); pick one with serial=.*adb:SERIAL"):
        run_latency_on_device(bundle_dir, opts)
    assert not [c for c in fake.calls() if "push" in c or "shell" in c]  # nothing reached either phone


def test_what_the_native_runner_cannot_do_is_refused_up_front(fake, bundle_dir, tmp_path):  # noqa: F811
    fake.add("R58M30ABCDE")
    with pytest.raises(DeviceError, match="not an ARM64"):  # a host build pushed to a phone
        run_latency_on_device(bundle_dir, DeviceLatencyOptions(runs=1, out_dir=tmp_path / "o",
                                                               native_runner=sys.executable, progress=None))
    with pytest.raises(DeviceError, match="LLM decomposer"):
        run_latency_on_device(bundle_dir, DeviceLatencyOptions(decompose="llm", out_dir=tmp_path / "o"))
    exe = fake_arm64_header(tmp_path / NATIVE_RUNNER)
    fake.devices[0]["props"] = {**fake.devices[0]["props"], "ro.product.cpu.abi": "x86_64"}
    fake.write()
    with pytest.raises(DeviceError, match="ABI x86_64; the native runner is a static ARM64"):
        run_latency_on_device(bundle_dir, DeviceLatencyOptions(runs=1, out_dir=tmp_path / "o", native_runner=exe,
                                                               progress=None))
    assert not [c for c in fake.calls() if "push" in c]

"""The ADB latency harness and the Android demo, against tests/fake_adb/adb (a fake device in a
folder; its shell runs the real latency runner and the real CLI as local processes)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from magicselector.bench.adb import (Adb, DeviceDisconnected, DeviceError, describe_device, list_devices,
                                     parse_devices, parse_dumpsys_meminfo_mb, parse_vmhwm_mb, pick_device,
                                     push_bundle, read_thermal, run_latency_on_device, wait_for_cool_down,
                                     DeviceLatencyOptions)

Options = DeviceLatencyOptions

FAKE_ADB_DIR = Path(__file__).parent / "fake_adb"
REPO = Path(__file__).resolve().parents[1]
PY = sys.executable  # the "device's" Python: this one, which has magicselector installed
PHONE = {"serial": "R58M30ABCDE", "devpath": "usb:1-1", "product": "beyond1qlteue", "model": "SM-G973U",
         "device": "beyond1q",
         "props": {"ro.product.manufacturer": "samsung", "ro.product.model": "SM-G973U",
                   "ro.soc.manufacturer": "Qualcomm", "ro.soc.model": "SM8150", "ro.board.platform": "msmnile",
                   "ro.hardware": "qcom", "ro.product.cpu.abi": "arm64-v8a", "ro.build.version.release": "12",
                   "ro.build.version.sdk": "31"}}
BIG_LITTLE_KHZ = [1785600] * 4 + [2419200] * 3 + [2841600]


class FakeDevices:
    """Writes $FAKE_ADB_ROOT: devices.json and each device's sysfs (cpufreq, thermal zones)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices: list[dict] = []
        root.mkdir(parents=True, exist_ok=True)
        self.write()

    def add(self, serial: str, state: str = "device", freqs=BIG_LITTLE_KHZ,
            temps=(("cpu-0-0-usr", 38500), ("battery", 31000), ("pa-therm", -273000)), **fields) -> Path:
        dev = {**PHONE, **fields, "serial": serial, "state": state}
        self.devices.append(dev)
        fs = self.fs(serial)
        for c, f in enumerate(freqs):
            d = fs / f"sys/devices/system/cpu/cpu{c}/cpufreq"
            d.mkdir(parents=True, exist_ok=True)
            (d / "cpuinfo_max_freq").write_text(f"{f}\n")
        (fs / "sys/devices/system/cpu/online").write_text(f"0-{len(freqs) - 1}\n")
        for z, (kind, milli) in enumerate(temps):
            self.set_temp(serial, z, milli, kind)
        self.write()
        return fs

    def set_temp(self, serial: str, zone: int, milli: int, kind: str | None = None) -> None:
        d = self.fs(serial) / f"sys/class/thermal/thermal_zone{zone}"
        d.mkdir(parents=True, exist_ok=True)
        if kind:
            (d / "type").write_text(kind + "\n")
        (d / "temp").write_text(f"{milli}\n")

    def fs(self, serial: str) -> Path:
        return self.root / serial

    def write(self) -> None:
        (self.root / "devices.json").write_text(json.dumps({"devices": self.devices}, indent=1))

    def calls(self) -> list[list[str]]:
        log = self.root / "adb.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture()
def fake(tmp_path, monkeypatch) -> FakeDevices:
    """The fake adb first on PATH (so the harness finds it as `adb`), over an empty device folder."""
    monkeypatch.setenv("PATH", f"{FAKE_ADB_DIR}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("ADB", raising=False)
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    for var in ("FAKE_ADB_DISCONNECT_AFTER", "FAKE_ADB_DISCONNECT_MATCH"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "adbroot"
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    return FakeDevices(root)


# -- discovery ---------------------------------------------------------------------------------------
def test_parse_devices_reads_the_real_clients_formats():
    text = ("* daemon not running; starting now at tcp:5037\n* daemon started successfully\n"
            "List of devices attached\n"
            "R58M30ABCDE            device usb:1-1 product:beyond1qlteue model:SM_G973U device:beyond1q "
            "transport_id:3\n"
            "emulator-5554          device product:sdk_gphone64_x86_64 model:sdk_gphone64_x86_64 "
            "device:emu64x transport_id:1\n"
            "192.168.1.20:5555      offline transport_id:4\n"
            "0123456789ABCDEF       unauthorized usb:1-2 transport_id:5\n"
            "HT7A1JT00000           no permissions (user in plugdev group; are your udev rules wrong?); "
            "see [http://developer.android.com/tools/device.html] usb:2-1 transport_id:6\n\n")
    devs = {d.serial: d for d in parse_devices(text)}
    assert list(devs) == ["R58M30ABCDE", "emulator-5554", "192.168.1.20:5555", "0123456789ABCDEF", "HT7A1JT00000"]
    phone = devs["R58M30ABCDE"]
    assert (phone.state, phone.model, phone.product, phone.device, phone.devpath, phone.transport_id,
            phone.transport) == ("device", "SM_G973U", "beyond1qlteue", "beyond1q", "usb:1-1", 3, "usb")
    assert devs["emulator-5554"].transport == "emulator"
    assert (devs["192.168.1.20:5555"].state, devs["192.168.1.20:5555"].transport) == ("offline", "tcp")
    assert devs["0123456789ABCDEF"].state == "unauthorized" and devs["0123456789ABCDEF"].model is None
    assert devs["HT7A1JT00000"].state == "no permissions" and devs["HT7A1JT00000"].devpath == "usb:2-1"
    assert parse_devices("List of devices attached\nR58M30ABCDE\tdevice\n\n")[0].state == "device"


def test_discover_none_one_several_unauthorized(fake):
    with pytest.raises(DeviceError, match="no Android device found"):
        pick_device()
    fake.add("R58M30ABCDE")
    (only,) = list_devices()
    assert (only.serial, only.state, only.model, only.transport) == ("R58M30ABCDE", "device", "SM_G973U", "usb")
    assert pick_device().serial == "R58M30ABCDE"
    fake.add("emulator-5554", devpath=None, model="sdk_gphone64_x86_64")
    with pytest.raises(DeviceError, match=r"2 devices are attached \(R58M30ABCDE .*emulator-5554.*serial="):
        pick_device()
    assert pick_device("emulator-5554").transport == "emulator"
    with pytest.raises(DeviceError, match="device NOPE is not attached; .*R58M30ABCDE"):
        pick_device("NOPE")
    fake.add("0123456789ABCDEF", state="unauthorized")
    with pytest.raises(DeviceError, match="0123456789ABCDEF is unauthorized: .*Allow USB debugging"):
        pick_device("0123456789ABCDEF")
    # adb's own refusal, when one talks to the device anyway, is turned into the same advice
    with pytest.raises(DeviceError, match="unauthorized"):
        Adb("0123456789ABCDEF").shell("true")
    fake.devices = [d for d in fake.devices if d["serial"] == "0123456789ABCDEF"]
    fake.write()
    with pytest.raises(DeviceError, match="is unauthorized"):
        pick_device()  # the only one attached, but not usable


def test_adb_path_parameter_and_missing_client(fake, tmp_path, monkeypatch):
    fake.add("R58M30ABCDE")
    py_only = os.path.dirname(PY)  # python3 for the fake's shebang, but no adb
    if shutil.which("adb", path=py_only):
        pytest.skip(f"{py_only} holds an adb")
    monkeypatch.setenv("PATH", py_only)
    with pytest.raises(DeviceError, match="adb client was not found"):
        list_devices()
    assert [d.serial for d in list_devices(adb_path=FAKE_ADB_DIR / "adb")] == ["R58M30ABCDE"]


# -- describe, thermal -------------------------------------------------------------------------------
def test_describe_device_and_thermal(fake):
    fake.add("R58M30ABCDE")
    adb = Adb("R58M30ABCDE")
    d = describe_device(adb)
    assert (d["model"], d["soc"], d["abi"], d["android_release"], d["sdk"]) == (
        "SM-G973U", "Qualcomm SM8150", "arm64-v8a", "12", 31)
    assert d["cores"] == 8 and d["cpu_max_freq_khz"]["7"] == 2841600
    assert d["big_cores"] == [4, 5, 6, 7] and d["big_cores_mask"] == "f0"
    zones = read_thermal(adb)  # the -273 C zone (disabled sensor) is left out
    assert [(z["type"], z["temp_c"]) for z in zones] == [("cpu-0-0-usr", 38.5), ("battery", 31.0)]

    clock = [0.0]
    naps = []

    def sleep(s):
        naps.append(s)
        clock[0] += s
        if clock[0] >= 4:  # the phone cools down after a while
            fake.set_temp("R58M30ABCDE", 0, 33000)

    cool = wait_for_cool_down(adb, max_wait_s=60, below_c=35, poll_s=2, sleep=sleep, clock=lambda: clock[0])
    assert cool["reached"] and cool["hottest_before_c"] == 38.5 and cool["hottest_after_c"] == 33.0
    assert naps == [2, 2]
    fake.set_temp("R58M30ABCDE", 0, 45000)
    clock[0], naps[:] = 0.0, []
    cool = wait_for_cool_down(adb, max_wait_s=5, below_c=35, poll_s=2, sleep=lambda s: (naps.append(s),
                              clock.__setitem__(0, clock[0] + s)), clock=lambda: clock[0])
    assert not cool["reached"] and cool["waited_s"] == 5 and naps == [2, 2, 1]


# -- push --------------------------------------------------------------------------------------------
def test_push_skips_unchanged_files_and_repushes_changed_ones(fake, bundle_dir):
    fs = fake.add("R58M30ABCDE")
    adb = Adb("R58M30ABCDE")
    remote = "/data/local/tmp/magicselector/bundle"
    files = sorted(json.loads((bundle_dir / "manifest.json").read_text())["files"]) + ["manifest.json"]
    first = push_bundle(adb, bundle_dir, remote)
    assert sorted(first["pushed"]) == sorted(files) and first["skipped"] == [] and first["sha256sum_on_device"]
    assert first["pushed"][-1] == "manifest.json"  # last, so an interrupted push fails verification
    on_device = fs / remote.lstrip("/")
    for rel in files:
        assert (on_device / rel).read_bytes() == (bundle_dir / rel).read_bytes()

    n_calls = len(fake.calls())
    second = push_bundle(adb, bundle_dir, remote)
    assert second["pushed"] == [] and sorted(second["skipped"]) == sorted(files) and second["bytes_pushed"] == 0
    assert not any(c[2:3] == ["push"] for c in fake.calls()[n_calls:])

    (on_device / "catalog.jsonl").write_text("stale\n")  # an older bundle's file
    (on_device / "golden.json").unlink()
    third = push_bundle(adb, bundle_dir, remote)
    assert sorted(third["pushed"]) == ["catalog.jsonl", "golden.json"]
    assert (on_device / "catalog.jsonl").read_bytes() == (bundle_dir / "catalog.jsonl").read_bytes()
    pushes = [c for c in fake.calls() if "push" in c]
    assert len(pushes) == len(files) + 2


# -- runs --------------------------------------------------------------------------------------------
def test_runs_the_real_runner_and_merges_like_a_local_run(fake, bundle_dir, tmp_path):
    from magicselector.bench.latency import measure_latency, validate_results

    fake.add("R58M30ABCDE")
    out = tmp_path / "out"
    res = run_latency_on_device(bundle_dir, Options(runs=2, warmup=0, out_dir=out, python_cmd=PY, pin_big_cores=True,
                                mem_probe="proc", mem_poll_s=0.1, progress=None))
    assert validate_results(res) == []
    local = measure_latency(bundle_dir, runs=1, warmup=0)
    assert set(local) <= set(res) and set(local["stages"]) == set(res["stages"])
    assert set(res) - set(local) == {"runs", "complete", "error", "cold_start_runs"}
    assert res["complete"] and res["error"] is None
    turns = res["config"]["turns"]
    assert res["stages"]["total"]["n"] == 2 * turns and res["config"]["runs"] == 2
    assert res["config"]["passes_per_run"] == 1
    assert res["device"]["model"] == "SM-G973U" and res["device"]["big_cores"] == [4, 5, 6, 7]
    assert res["device"]["adb"]["transport"] == "usb"
    assert [r["run"] for r in res["runs"]] == [1, 2]
    colds = sorted(r["cold_start_ms"] for r in res["runs"])
    assert all(c > 0 for c in colds) and res["cold_start_ms"] == pytest.approx(sum(colds) / 2)
    assert all(r["peak_rss_mb"] > 10 and r["probe_peak_mb"] > 10 for r in res["runs"])
    assert res["config"]["adb"]["taskset_mask"] == "f0"
    assert (fake.root / "taskset.log").read_text().split() == ["f0", "f0"]
    assert json.loads((out / "latency.json").read_text()) == json.loads(json.dumps(res))
    for i in (1, 2):
        assert validate_results(json.loads((out / "runs" / f"run-{i}.json").read_text())) == []
    assert not (out / "partial.json").exists()
    assert res["config"]["adb"]["push"]["skipped"] == []  # the first session pushed everything
    again = run_latency_on_device(bundle_dir, Options(runs=1, warmup=0, out_dir=tmp_path / "out2", python_cmd=PY,
                                  mem_probe="dumpsys", mem_poll_s=0.1, progress=None))
    assert again["config"]["adb"]["push"]["pushed"] == []  # the second pushed nothing
    assert "dumpsys" in again["runs"][0]["probe"] and again["runs"][0]["probe_peak_mb"] > 10


def test_a_turns_file_is_pushed_and_timed_on_the_device(fake, bundle_dir, tmp_path):
    from magicselector.files import sha256_file

    fake.add("R58M30ABCDE")
    turns = tmp_path / "queries.jsonl"
    turns.write_text("".join(json.dumps({"query": q, "history": []}) + "\n"
                             for q in ("call mom", "set a timer for 5 minutes", "turn on wifi")), encoding="utf-8")
    res = run_latency_on_device(bundle_dir, Options(runs=1, warmup=0, out_dir=tmp_path / "out", python_cmd=PY,
                                turns=turns, turns_limit=2, progress=None))
    assert res["config"]["turns"] == 2 and res["stages"]["total"]["n"] == 2
    assert res["config"]["workload"]["sha256"] == sha256_file(turns)
    assert res["config"]["workload"]["name"].endswith("turns.jsonl (2 rows, seed 0)")
    assert res["config"]["adb"]["resume_key"]["turns_sha256"] == sha256_file(turns)
    assert any("push" in c and any(a.endswith("/turns.jsonl") for a in c) for c in fake.calls())


def test_disconnect_mid_run_keeps_partial_results(fake, bundle_dir, tmp_path, monkeypatch):
    from magicselector.bench.latency import validate_results

    fake.add("R58M30ABCDE")
    monkeypatch.setenv("FAKE_ADB_DISCONNECT_AFTER", "2")      # the third runner start finds no device
    monkeypatch.setenv("FAKE_ADB_DISCONNECT_MATCH", "-m magicselector.bench.latency_runner")
    out = tmp_path / "out"
    with pytest.raises(DeviceDisconnected) as err:
        run_latency_on_device(bundle_dir, Options(runs=3, warmup=0, out_dir=out, python_cmd=PY, progress=None))
    partial = out / "partial.json"
    assert str(err.value).startswith(
        f"device R58M30ABCDE disconnected during run 3 of 3; 2 results kept in {partial}")
    assert isinstance(err.value, DeviceError)
    kept = json.loads(partial.read_text())
    assert validate_results(kept) == [] and not kept["complete"] and kept["failed_run"] == 3
    assert [r["run"] for r in kept["runs"]] == [1, 2] and kept["config"]["runs_completed"] == 2
    assert kept["stages"]["total"]["n"] == 2 * kept["config"]["turns"]
    assert not (out / "latency.json").exists()
    assert list_devices() == []  # gone from `adb devices` too
    with pytest.raises(DeviceDisconnected, match="error: device 'R58M30ABCDE' not found"):
        Adb("R58M30ABCDE").shell("true")


def test_a_dropped_device_resumes_where_it_stopped(fake, bundle_dir, tmp_path, monkeypatch):
    """Every finished run is on the host before the next starts (partial.json after each run), and
    the next call into the same folder runs only the runs that are missing."""
    fake.add("R58M30ABCDE")
    monkeypatch.setenv("FAKE_ADB_DISCONNECT_AFTER", "2")
    monkeypatch.setenv("FAKE_ADB_DISCONNECT_MATCH", "-m magicselector.bench.latency_runner")
    out = tmp_path / "out"
    partial = out / "partial.json"
    seen = []

    def progress(line: str) -> None:  # what the host holds when each run starts
        if line.startswith("[adb] run ") and "/" in line and ":" not in line:
            seen.append(len(json.loads(partial.read_text())["runs"]) if partial.exists() else 0)

    with pytest.raises(DeviceDisconnected, match="2 results kept"):
        run_latency_on_device(bundle_dir, Options(runs=3, warmup=0, out_dir=out, python_cmd=PY, progress=progress))
    assert seen == [0, 1, 2]
    first = json.loads(partial.read_text())
    # the cable goes back in
    monkeypatch.delenv("FAKE_ADB_DISCONNECT_AFTER")
    monkeypatch.delenv("FAKE_ADB_DISCONNECT_MATCH")
    (fake.root / ".state" / "R58M30ABCDE.json").unlink()
    runner_calls = len([c for c in fake.calls() if "-m magicselector.bench.latency_runner" in json.dumps(c)])
    lines = []
    res = run_latency_on_device(bundle_dir, Options(runs=3, warmup=0, out_dir=out, python_cmd=PY,
                                                    progress=lines.append))
    assert any("resuming: 2 finished run(s)" in line for line in lines)
    started = [c for c in fake.calls() if "-m magicselector.bench.latency_runner" in json.dumps(c)]
    assert len(started) - runner_calls == 1  # only run 3 ran again
    assert res["complete"] and [r["run"] for r in res["runs"]] == [1, 2, 3]
    assert res["runs"][:2] == first["runs"]  # the kept measurements, unchanged
    assert res["stages"]["total"]["n"] == 3 * res["config"]["turns"]
    assert not partial.exists() and (out / "latency.json").exists()
    # other settings measure something else: nothing is resumed
    fresh = tmp_path / "fresh"
    shutil.copytree(out, fresh)
    (fresh / "partial.json").write_text(json.dumps(first))
    res = run_latency_on_device(bundle_dir, Options(runs=1, warmup=0, threads=2, out_dir=fresh, python_cmd=PY,
                                                    progress=None))
    assert res["complete"] and res["runs"][0]["run"] == 1 and res["config"]["adb"]["resume_key"]["threads"] == 2


def test_a_device_without_python_gets_a_clear_error(fake, bundle_dir, tmp_path):
    fake.add("R58M30ABCDE")
    with pytest.raises(DeviceError, match=r"Python `no-such-python` not found in adb shell's PATH.*python_cmd"):
        run_latency_on_device(bundle_dir, Options(runs=1, out_dir=tmp_path / "o", python_cmd="no-such-python",
                              progress=None))


def test_memory_parsers():
    assert parse_vmhwm_mb("Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t 102400 kB\nVmHWM:\t 1024 kB\n") == 200.0
    assert parse_vmhwm_mb("nothing") is None
    android_12 = ("** MEMINFO in pid 4242 [python3] **\n"
                  "        TOTAL    81920    70000        0        0   163840        0        0        0\n"
                  " App Summary\n"
                  "           TOTAL PSS:    81920            TOTAL RSS:   163840      TOTAL SWAP PSS:  0\n")
    assert parse_dumpsys_meminfo_mb(android_12) == (160.0, "dumpsys TOTAL RSS")
    older = "** MEMINFO in pid 4242 [python3] **\n        TOTAL    51200    40000     1000        0\n"
    assert parse_dumpsys_meminfo_mb(older) == (50.0, "dumpsys TOTAL PSS")
    assert parse_dumpsys_meminfo_mb("No process found for: 4242\n") is None


# -- the Android demo --------------------------------------------------------------------------------
def test_android_demo_runs_the_dialogue_on_the_fake_device(fake, bundle_dir, capsys):
    fake.add("R58M30ABCDE")
    spec = importlib.util.spec_from_file_location("run_demo", REPO / "android_demo" / "run_demo.py")
    run_demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_demo)
    assert run_demo.main(["--bundle", str(bundle_dir), "--python-cmd", PY, "--history-mode", "user"]) == 0
    out = capsys.readouterr().out
    dialogue = json.loads((REPO / "runtime" / "demo" / "dialogue.json").read_text())
    assert out.count("] user: ") == len(dialogue["turns"]) == 8
    assert out.count("ms on device: ") == 8 and "K=" in out and "assistant: Message sent to Sam." in out
    assert "device R58M30ABCDE: samsung SM-G973U, Qualcomm SM8150" in out
    assert "bluetooth_toggle" in out
    # --json passes the device's per-turn selections through
    assert run_demo.main(["--bundle", str(bundle_dir), "--python-cmd", PY, "--json"]) == 0
    captured = capsys.readouterr()
    turns = json.loads(captured.out)  # stdout is only the JSON; status lines go to stderr
    assert [t["turn"] for t in turns] == list(range(1, 9))
    assert all(t["k"] == len(t["tools"]) >= 1 and "total" in t["timings_ms"] for t in turns)
    assert "pushed 0 file(s)" in captured.err  # the second session found the bundle on the device
    # no device: a clear error and exit status 2
    fake.devices = []
    fake.write()
    assert run_demo.main(["--bundle", str(bundle_dir)]) == 2
    assert "no Android device found" in capsys.readouterr().err


def test_the_runner_flags_are_spelled_once_for_the_phone_and_the_local_run():
    """``runner_argv`` (which the phone's command and ``bench latency``'s local run both use) gives
    a command line the runner's own parser reads back as the settings it was given."""
    from magicselector.bench.latency_runner import _parser, runner_argv

    argv = runner_argv("B", "o.json", runs=4, warmup=1, threads=2, cool_down_s=0.5, history_mode="all",
                       decompose="rules", turns="t.jsonl", turns_limit=7,
                       verify=False)
    assert argv[:2] == ["-m", "magicselector.bench.latency_runner"]
    args = _parser().parse_args(argv[2:])
    assert (args.bundle, args.out, args.runs, args.warmup, args.threads) == ("B", "o.json", 4, 1, 2)
    assert args.cool_down_s == 0.5
    assert (args.history_mode, args.decompose) == ("all", "rules")
    assert (args.turns, args.turns_limit, args.no_verify) == ("t.jsonl", 7, True)
    shipped = _parser().parse_args(runner_argv("B", "-", runs=1, warmup=0, threads=1, turns_limit=3)[2:])
    assert shipped.decompose is None and shipped.turns_limit is None  # no --turns
    phone = DeviceLatencyOptions(passes_per_run=3, warmup=2, threads=4, decompose="rules", history_mode="",
                                 turns_limit=0)
    args = _parser().parse_args(phone.runner_argv("/d/bundle", "/d/run-1.json", None)[2:])
    assert (args.runs, args.warmup, args.threads, args.decompose, args.history_mode) == (3, 2, 4, "rules", None)
    assert args.cool_down_s == 0.0  # the harness cools between runs, not the runner


def test_runner_argv_spells_every_flag_the_runner_parses():
    """A flag added to the runner's parser without ``runner_argv`` learning it fails here, so the
    phone's and the local run's command lines never fall behind the runner (issue 28)."""
    from magicselector.bench.latency_runner import _parser, runner_argv

    every = dict(runs=1, warmup=0, threads=1, cool_down_s=0.5, history_mode="all", decompose="rules",
                 turns="t.jsonl", turns_limit=2, verify=False)
    spelled = {a for a in runner_argv("B", "o.json", **every) if a.startswith("--")}
    parsed = {o for action in _parser()._actions for o in action.option_strings if o.startswith("--")}
    assert spelled == parsed - {"--help"}

"""Latency on an Android phone over ADB: find the device, describe it, push the bundle and the
static ARM64 runner, run it there (one process per run, so every run has its own cold start), pull
the results back and merge them into the ``magicselector-latency/1`` schema of a local run.

    from magicselector.bench.adb import DeviceLatencyOptions, run_latency_on_device
    results = run_latency_on_device("path/to/bundle", DeviceLatencyOptions(runs=5, warmup=2, out_dir="bench-out"))

By default the phone needs nothing: the runner is ``magicselector-native-latency`` from
``magicselector native build --target arm64`` (a static aarch64-linux-musl executable, built on
first use when ``native_runner`` names none), pushed to ``REMOTE_DIR/bin`` like the bundle (only
when its sha256 differs). It writes raw per-turn samples; :func:`native_results` turns them into the
schema with the same percentiles and schema-token code as a local run. With ``python_cmd`` set, the
Python runner (``python -m magicselector.bench.latency_runner``) runs instead, on a device whose
Python has the lean runtime (see ``android_demo/README.md``). Only the ``adb`` client
(platform-tools) is needed here.

Layers, each usable alone: :class:`Adb` runs ``adb [-s SERIAL] ...`` with timeouts and turns failures
into :class:`DeviceError`; :func:`list_devices` / :func:`pick_device` parse ``adb devices -l``;
:func:`describe_device` reads ``getprop`` and the cpufreq tables; :func:`push_bundle` pushes only
the files whose sha256 differs on the device; :func:`read_thermal` / :func:`wait_for_cool_down` read
``/sys/class/thermal``; :func:`run_latency_on_device` does the whole run.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from magicselector.errors import MagicSelectorError

DEFAULT_REMOTE_DIR = "/data/local/tmp/magicselector"
RUNNER_MODULE = "magicselector.bench.latency_runner"
NATIVE_RUNNER = "magicselector-native-latency"  # native/cli/latency.cpp
MEM_PROBES = ("runner", "proc", "dumpsys")

# adb's own error lines (never the remote command's output): the device is gone or not usable.
_GONE_RE = re.compile(r"^(?:adb: )?error: (?:failed to get feature set: )?"
                      r"(?:device '[^']*' not found|no devices/emulators found|device offline|closed|"
                      r"protocol fault|device still (?:connecting|authorizing))", re.M)
_UNAUTHORIZED_RE = re.compile(r"^(?:adb: )?error: (?:failed to get feature set: )?device unauthorized", re.M)
_SEVERAL_RE = re.compile(r"^(?:adb: )?error: (?:failed to get feature set: )?more than one device", re.M)


class DeviceError(MagicSelectorError):
    """Something about the phone or the adb link that stops the run (says which device and what to do)."""


class DeviceDisconnected(DeviceError):
    """The device is no longer reachable over adb (cable pulled, adbd restarted, went offline)."""


class RemoteCommandError(DeviceError):
    """A command run with ``adb shell`` exited non-zero while the device stayed connected."""

    def __init__(self, message: str, returncode: int, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _print_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)


# -- the adb client ----------------------------------------------------------------------------------
def find_adb(adb_path: str | os.PathLike | None = None) -> str:
    """The adb executable: ``adb_path``, else $ADB, else ``adb`` on PATH."""
    cand = str(adb_path) if adb_path else os.environ.get("ADB") or shutil.which("adb")
    if not cand or not (os.path.isfile(cand) or shutil.which(cand)):
        raise DeviceError("the adb client was not found: install Android platform-tools (Debian/Ubuntu: "
                          "apt-get install adb) or pass adb_path / set $ADB")
    return cand


class Adb:
    """``adb [-s SERIAL] ...`` through subprocess, with a timeout on every call.

    Failures become :class:`DeviceError` (or :class:`DeviceDisconnected` when the device is gone,
    :class:`RemoteCommandError` when a shell command exits non-zero on a connected device).
    """

    def __init__(self, serial: str | None = None, *, adb_path: str | os.PathLike | None = None,
                 timeout_s: float = 120.0, env: Mapping[str, str] | None = None) -> None:
        self.serial = serial
        self.adb_path = find_adb(adb_path)
        self.timeout_s = float(timeout_s)
        self.env = {**os.environ, **(env or {})}

    @property
    def who(self) -> str:
        return f"device {self.serial}" if self.serial else "the device"

    def run(self, args: Sequence[str], *, timeout_s: float | None = None, check: bool = True,
            serial: bool = True) -> subprocess.CompletedProcess:
        argv = [self.adb_path, *(["-s", self.serial] if serial and self.serial else []), *map(str, args)]
        limit = self.timeout_s if timeout_s is None else float(timeout_s)
        shown = " ".join(shlex.quote(a) for a in argv[1:])
        if len(shown) > 160:
            shown = shown[:157] + "..."
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=limit,
                                  env=self.env, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise DeviceError(f"cannot run the adb client {self.adb_path!r}: not found") from None
        except subprocess.TimeoutExpired:
            raise DeviceError(f"`adb {shown}` did not finish within {limit:.0f} s on {self.who}; "
                              "is the device asleep or the USB link stalled? (raise the timeout for long runs)"
                              ) from None
        if check and proc.returncode != 0:
            raise self.error_for(proc, shown)
        return proc

    def adb_error(self, proc: subprocess.CompletedProcess) -> DeviceError | None:
        """The error adb itself reported (as opposed to the remote command's), if any."""
        text = f"{proc.stderr}\n{proc.stdout}"
        if _UNAUTHORIZED_RE.search(text):
            return DeviceError(f"{self.who} is unauthorized: unlock the phone and accept the 'Allow USB "
                               "debugging?' prompt (tick 'Always allow'), then run again")
        if _SEVERAL_RE.search(text):
            return DeviceError("more than one device is attached: pick one with serial=... (--device adb:SERIAL); "
                               "`adb devices -l` lists them")
        m = _GONE_RE.search(text)
        if m:
            return DeviceDisconnected(f"{self.who} is not reachable over adb ({m.group(0).strip()}); "
                                      "check the cable / `adb devices -l`")
        return None

    def error_for(self, proc: subprocess.CompletedProcess, shown: str) -> DeviceError:
        err = self.adb_error(proc)
        if err is not None:
            return err
        return DeviceError(f"`adb {shown}` failed on {self.who} (exit status {proc.returncode}): "
                           f"{_tail(proc.stderr + proc.stdout) or 'no output'}")

    # -- commands ------------------------------------------------------------------------------
    def devices(self) -> list["DeviceInfo"]:
        return parse_devices(self.run(["devices", "-l"], serial=False, timeout_s=30).stdout)

    def get_state(self) -> str:
        return self.run(["get-state"], timeout_s=30).stdout.strip()

    def is_connected(self) -> bool:
        try:
            return self.get_state() == "device"
        except DeviceError:
            return False

    def shell(self, command: str, *, timeout_s: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run one ``sh -c`` command line on the device (adb passes it to the device's shell as is).

        With ``check``, a non-zero exit raises: :class:`DeviceDisconnected` when adb says the device
        is gone (or ``get-state`` no longer answers ``device``), else :class:`RemoteCommandError`.
        """
        proc = self.run(["shell", command], timeout_s=timeout_s, check=False)
        if proc.returncode == 0 or not check:
            return proc
        err = self.adb_error(proc)
        if err is None and not self.is_connected():
            err = DeviceDisconnected(f"{self.who} disconnected (adb shell exited {proc.returncode}; "
                                     "`adb get-state` no longer answers 'device')")
        if err is not None:
            raise err
        cmd = command if len(command) <= 120 else command[:117] + "..."
        raise RemoteCommandError(f"`{cmd}` exited {proc.returncode} on {self.who}: "
                                 f"{_tail(proc.stderr + proc.stdout) or 'no output'}",
                                 proc.returncode, proc.stdout, proc.stderr)

    def push(self, local: str | os.PathLike, remote: str, *, timeout_s: float | None = None) -> str:
        return self.run(["push", os.fspath(local), remote], timeout_s=timeout_s).stdout.strip()

    def pull(self, remote: str, local: str | os.PathLike, *, timeout_s: float | None = None) -> str:
        return self.run(["pull", remote, os.fspath(local)], timeout_s=timeout_s).stdout.strip()


# -- devices -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceInfo:
    """One line of ``adb devices -l``."""

    serial: str
    state: str                     # device | offline | unauthorized | authorizing | no permissions | ...
    model: str | None = None       # sanitized by adb: non-alphanumerics become '_'
    product: str | None = None
    device: str | None = None
    devpath: str | None = None     # e.g. usb:1-1
    transport_id: int | None = None
    transport: str = "unknown"     # usb | tcp | emulator | unknown

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_TCP_SERIAL = re.compile(r"^[\w.\-\[\]:]+:\d+$|\._adb-tls-connect\._tcp")


def parse_devices(text: str) -> list[DeviceInfo]:
    """Parse ``adb devices -l`` (or plain ``adb devices``) output."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("*") or line.startswith("List of devices") or line.startswith("adb "):
            continue
        parts = line.split()
        serial, rest = parts[0], parts[1:]
        if not rest:
            continue
        if rest[0] == "no" and rest[1:2] == ["permissions"]:
            state = "no permissions"
        else:
            state = rest[0]
        fields: dict[str, str] = {}
        devpath = None
        for tok in rest[1:]:
            key, sep, value = tok.partition(":")
            if not sep:
                continue
            if key in ("product", "model", "device", "transport_id"):
                fields[key] = value
            elif key in ("usb", "pci") or key.startswith("usb"):
                devpath = tok
        if devpath:
            transport = "usb"
        elif serial.startswith("emulator-"):
            transport = "emulator"
        elif _TCP_SERIAL.search(serial):
            transport = "tcp"
        else:
            transport = "unknown"
        tid = fields.get("transport_id")
        out.append(DeviceInfo(serial=serial, state=state, model=fields.get("model"), product=fields.get("product"),
                              device=fields.get("device"), devpath=devpath,
                              transport_id=int(tid) if tid and tid.isdigit() else None, transport=transport))
    return out


def list_devices(adb_path: str | os.PathLike | None = None) -> list[DeviceInfo]:
    """Every device ``adb devices -l`` lists, whatever its state."""
    return Adb(adb_path=adb_path).devices()


def _state_problem(d: DeviceInfo) -> str | None:
    if d.state == "device":
        return None
    if d.state in ("unauthorized", "authorizing"):
        return (f"device {d.serial} is {d.state}: unlock the phone and accept the 'Allow USB debugging?' "
                "prompt (tick 'Always allow'), then run again")
    if d.state == "offline":
        return f"device {d.serial} is offline: replug it or run `adb reconnect`, then check `adb devices -l`"
    if d.state == "no permissions":
        return (f"device {d.serial}: no permissions to open the USB device (udev rules / plugdev group); "
                "see https://developer.android.com/studio/run/device")
    return f"device {d.serial} is in state {d.state!r}, not 'device' (booted with USB debugging on)"


def pick_device(serial: str | None = None, adb_path: str | os.PathLike | None = None) -> DeviceInfo:
    """The device to use: the one with ``serial``, or the only one attached. Raises DeviceError otherwise."""
    devices = list_devices(adb_path)
    listing = ", ".join(f"{d.serial} ({d.state}{', ' + d.model if d.model else ''})" for d in devices)
    if serial:
        match = [d for d in devices if d.serial == serial]
        if not match:
            raise DeviceError(f"device {serial} is not attached; `adb devices -l` lists "
                              f"{listing or 'no devices'}")
        d = match[0]
    else:
        if not devices:
            raise DeviceError("no Android device found by `adb devices -l`: connect one over USB with USB "
                              "debugging on (Settings > Developer options), or `adb connect HOST:PORT`")
        if len(devices) > 1:
            raise DeviceError(f"{len(devices)} devices are attached ({listing}); pick one with serial=... "
                              "(--device adb:SERIAL)")
        d = devices[0]
    problem = _state_problem(d)
    if problem:
        raise DeviceError(problem)
    return d


# -- describing the device ---------------------------------------------------------------------------
PROPS = ("ro.product.manufacturer", "ro.product.model", "ro.product.device", "ro.soc.manufacturer", "ro.soc.model",
         "ro.board.platform", "ro.hardware", "ro.product.cpu.abi", "ro.build.version.release",
         "ro.build.version.sdk", "ro.build.fingerprint")

_DESCRIBE = ("for p in {props}; do echo \"prop:$p=$(getprop $p)\"; done; "
             "for d in /sys/devices/system/cpu/cpu[0-9]*; do "
             "echo \"cpu:${{d##*/cpu}}=$(cat $d/cpufreq/cpuinfo_max_freq 2>/dev/null)\"; done; "
             "echo \"online:$(cat /sys/devices/system/cpu/online 2>/dev/null)\"")


def big_cores(max_freq_khz: Mapping[int, int | None]) -> list[int]:
    """Cores above the slowest cluster's max frequency (big + prime); all cores on a uniform CPU."""
    known = {c: f for c, f in max_freq_khz.items() if f}
    if not known:
        return sorted(max_freq_khz)
    low = min(known.values())
    big = sorted(c for c, f in known.items() if f > low)
    return big or sorted(max_freq_khz)


def cpu_mask(cores: Sequence[int]) -> str:
    """taskset's hex mask for these cores (toybox and util-linux both take it)."""
    return format(sum(1 << int(c) for c in cores), "x")


def describe_device(adb: Adb) -> dict[str, Any]:
    """Model, SoC, ABI, Android version and the CPU layout (max frequency per core, big cores)."""
    text = adb.shell(_DESCRIBE.format(props=" ".join(PROPS)), timeout_s=30).stdout
    props: dict[str, str] = {}
    freqs: dict[int, int | None] = {}
    online = ""
    for line in text.splitlines():
        kind, _, rest = line.partition(":")
        key, _, value = rest.partition("=")
        value = value.strip()
        if kind == "prop":
            props[key] = value
        elif kind == "cpu" and key.isdigit():
            freqs[int(key)] = int(value) if value.isdigit() else None
        elif kind == "online":
            online = rest.strip()
    soc = " ".join(x for x in (props.get("ro.soc.manufacturer"), props.get("ro.soc.model")) if x)
    big = big_cores(freqs)
    sdk = props.get("ro.build.version.sdk", "")
    return {
        "serial": adb.serial,
        "manufacturer": props.get("ro.product.manufacturer") or None,
        "model": props.get("ro.product.model") or None,
        "product_device": props.get("ro.product.device") or None,
        "soc": soc or props.get("ro.board.platform") or props.get("ro.hardware") or None,
        "board_platform": props.get("ro.board.platform") or None,
        "hardware": props.get("ro.hardware") or None,
        "abi": props.get("ro.product.cpu.abi") or None,
        "android_release": props.get("ro.build.version.release") or None,
        "sdk": int(sdk) if sdk.isdigit() else None,
        "fingerprint": props.get("ro.build.fingerprint") or None,
        "cores": len(freqs) or None,
        "cpus_online": online or None,
        "cpu_max_freq_khz": {str(c): f for c, f in sorted(freqs.items())},
        "big_cores": big,
        "big_cores_mask": cpu_mask(big) if big else None,
    }


# -- thermal -----------------------------------------------------------------------------------------
_THERMAL = ("for z in /sys/class/thermal/thermal_zone*; do t=$(cat $z/temp 2>/dev/null) || continue; "
            "echo \"${z##*/} $t $(cat $z/type 2>/dev/null)\"; done; true")


def _celsius(raw: int) -> float | None:
    c = raw / 1000.0 if abs(raw) >= 1000 else float(raw)  # most zones report millidegrees
    return c if -40.0 <= c <= 150.0 else None               # disabled zones report junk


def read_thermal(adb: Adb) -> list[dict[str, Any]]:
    """Every readable thermal zone as {zone, type, temp_c} (unreadable or absurd values left out)."""
    zones = []
    for line in adb.shell(_THERMAL, timeout_s=30).stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 2 or not re.fullmatch(r"-?\d+", parts[1]):
            continue
        c = _celsius(int(parts[1]))
        if c is not None:
            zones.append({"zone": parts[0], "type": parts[2].strip() if len(parts) > 2 else "", "temp_c": c})
    return zones


def hottest(zones: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    return max(zones, key=lambda z: z["temp_c"], default=None)


def wait_for_cool_down(adb: Adb, max_wait_s: float, below_c: float = 40.0, poll_s: float = 2.0, *,
                       sleep: Callable[[float], None] = time.sleep,
                       clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Wait until the hottest thermal zone is below ``below_c`` or ``max_wait_s`` has passed."""
    t0 = clock()
    start = hottest(read_thermal(adb))
    now = start
    while now is not None and now["temp_c"] >= below_c and clock() - t0 < max_wait_s:
        sleep(max(0.0, min(poll_s, max_wait_s - (clock() - t0))))
        now = hottest(read_thermal(adb))
    return {"waited_s": round(clock() - t0, 2), "below_c": below_c,
            "hottest_before_c": start["temp_c"] if start else None,
            "hottest_after_c": now["temp_c"] if now else None,
            "hottest_zone": (now or {}).get("type") or (now or {}).get("zone"),
            "reached": now is None or now["temp_c"] < below_c}


# -- pushing the bundle ------------------------------------------------------------------------------
def remote_sha256(adb: Adb, remote_dir: str, rels: Sequence[str]) -> dict[str, str] | None:
    """sha256 of the files (relative to remote_dir) that exist on the device; None when the device
    has no ``sha256sum`` (toybox has it since Android 6), in which case everything is pushed."""
    if not rels:
        return {}
    quoted = " ".join(shlex.quote(r) for r in rels)
    cmd = (f"command -v sha256sum >/dev/null 2>&1 || {{ echo NO_SHA256SUM; exit 0; }}; "
           f"cd {shlex.quote(remote_dir)} 2>/dev/null || exit 0; sha256sum {quoted} 2>/dev/null; true")
    out = adb.shell(cmd, timeout_s=300).stdout
    if "NO_SHA256SUM" in out:
        return None
    hashes = {}
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]{64})\s+\*?(?:\./)?(.+?)\s*$", line)
        if m:
            hashes[m.group(2)] = m.group(1)
    return hashes


def push_bundle(adb: Adb, bundle_dir: str | os.PathLike, remote_dir: str, *, verify: bool = True,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Push a bundle folder to ``remote_dir``, skipping files whose sha256 already matches there.

    The local bundle is verified against its manifest first; ``manifest.json`` goes last, so an
    interrupted push leaves a bundle that fails verification rather than a silently mixed one.
    With ``verify`` the pushed files are hashed again on the device.
    """
    from magicselector.bundle import MANIFEST, Bundle
    from magicselector.files import sha256_file

    bundle = Bundle.open(bundle_dir, verify=True)
    local = {rel: str(entry["sha256"]) for rel, entry in bundle.manifest["files"].items()}
    local[MANIFEST] = sha256_file(bundle.path / MANIFEST)
    rels = sorted(r for r in local if r != MANIFEST) + [MANIFEST]
    t0 = time.perf_counter()
    remote = remote_sha256(adb, remote_dir, rels)
    has_sha = remote is not None
    remote = remote or {}
    pushed, skipped, nbytes = [], [], 0
    for rel in rels:
        if remote.get(rel) == local[rel]:
            skipped.append(rel)
            continue
        size = (bundle.path / rel).stat().st_size
        if progress:
            progress(f"[adb] push {rel} ({size / 1e6:.1f} MB)")
        try:
            adb.push(bundle.path / rel, posixpath.join(remote_dir, rel), timeout_s=max(120.0, size / 2e6))
        except DeviceDisconnected as e:
            raise DeviceDisconnected(f"{adb.who} disconnected while pushing {rel} ({e})") from None
        pushed.append(rel)
        nbytes += size
    if verify and pushed and has_sha:
        again = remote_sha256(adb, remote_dir, pushed) or {}
        bad = [r for r in pushed if again.get(r) != local[r]]
        if bad:
            raise DeviceError(f"after pushing, {bad} on {adb.who} under {remote_dir} do not match their sha256; "
                              "the device may be out of space (`adb shell df /data`)")
    return {"remote_dir": remote_dir, "pushed": pushed, "skipped": skipped, "bytes_pushed": nbytes,
            "seconds": round(time.perf_counter() - t0, 3), "sha256sum_on_device": has_sha}


# -- memory probes -----------------------------------------------------------------------------------
def parse_vmhwm_mb(text: str) -> float | None:
    """The largest ``VmHWM:  N kB`` in a /proc/PID/status text (or several samples of it), in MB."""
    kb = [int(m.group(1)) for m in re.finditer(r"VmHWM:\s*(\d+)\s*kB", text)]
    return max(kb) / 1024 if kb else None


def parse_dumpsys_meminfo_mb(text: str) -> tuple[float, str] | None:
    """(MB, what) from ``dumpsys meminfo PID``: TOTAL RSS if reported, else TOTAL PSS (App Summary),
    else the first column (Pss Total) of the ``TOTAL`` row of the table."""
    m = re.search(r"TOTAL RSS:\s*(\d+)", text)
    if m:
        return int(m.group(1)) / 1024, "dumpsys TOTAL RSS"
    m = re.search(r"TOTAL PSS:\s*(\d+)", text) or re.search(r"^\s*TOTAL\s+(\d+)", text, re.M)
    if m:
        return int(m.group(1)) / 1024, "dumpsys TOTAL PSS"
    return None


# -- the runner on the device ------------------------------------------------------------------------
@dataclass(frozen=True)
class RemotePython:
    """How to start Python in ``adb shell``: the command (a shell fragment, e.g. ``python`` or
    ``/data/local/tmp/py/bin/python3``), the folder to run in, extra environment variables."""

    command: str = "python"
    workdir: str | None = None
    env: Mapping[str, str] | None = None

    def prefix(self, default_workdir: str) -> str:
        parts = [f"cd {shlex.quote(self.workdir or default_workdir)} || exit 97"]
        for k, v in (self.env or {}).items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise DeviceError(f"bad environment variable name {k!r}")
            parts.append(f"export {k}={shlex.quote(str(v))}")
        return "; ".join(parts)


def _wrap_with_probe(prefix: str, command: str, probe: str, poll_s: float) -> str:
    """Start ``command`` in the background and sample its memory until it exits (zombie-safe)."""
    sample = ('echo "$st" | grep "^VmHWM" | sed "s/^/__MS_S /"' if probe == "proc" else
              'echo "__MS_S ---"; dumpsys meminfo $pid 2>/dev/null | grep TOTAL | sed "s/^/__MS_S /"')
    return (f"{prefix}; {command} & pid=$!; "
            f"while st=$(cat /proc/$pid/status 2>/dev/null); do "
            f'case "$st" in *"(zombie)"*) break;; esac; {sample}; sleep {poll_s:g}; done; '
            f"wait $pid; rc=$?; exit $rc")


def remote_preflight(adb: Adb, python: RemotePython, default_workdir: str,
                     module: str | None = RUNNER_MODULE) -> dict[str, Any]:
    """Check that the device's Python starts and imports magicselector (and ``module``, when given);
    returns the versions found there."""
    code = ("import json, sys, importlib.util as u\n"
            "try:\n import magicselector as m\nexcept Exception as e:\n"
            " print(json.dumps({'error': repr(e)})); sys.exit(0)\n"
            f"print(json.dumps({{'python': sys.version.split()[0], 'magicselector': m.__version__, "
            f"'runner': {module!r} is None or u.find_spec({module!r}) is not None, 'executable': sys.executable}}))")
    cmd = f"{python.prefix(default_workdir)}; {python.command} -c {shlex.quote(code)}"
    try:
        proc = adb.shell(cmd, timeout_s=120)
    except RemoteCommandError as e:
        hint = ("not found in adb shell's PATH" if e.returncode == 127 or "not found" in e.stderr
                else f"failed (exit {e.returncode}): {_tail(e.stderr + e.stdout)}")
        raise DeviceError(f"the device's Python `{python.command}` {hint}. adb shell needs a Python it can run "
                          "(see android_demo/README.md); pass python_cmd=... / --python-cmd") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    info = json.loads(lines[-1]) if lines else {"error": f"no answer ({_tail(proc.stdout + proc.stderr)})"}
    if "error" in info:
        raise DeviceError(f"`{python.command}` on {adb.who} cannot import magicselector ({info['error']}): "
                          "install the lean runtime there (pip install magicselector)")
    if not info.get("runner"):
        raise DeviceError(f"magicselector {info.get('magicselector')} on {adb.who} has no {module}; "
                          "install a version that ships the latency runner")
    return info

# -- the native runner -------------------------------------------------------------------------------
_EM_AARCH64 = 183
# the ARM flags of latency.ISA_FLAGS: under qemu-user /proc/cpuinfo is the x86 host's, which an ARM64 runner never uses
_ARM_ISA = frozenset({"asimd", "asimddp", "i8mm", "sve", "sve2", "bf16"})


def _check_arm64_executable(path: Path) -> None:
    """Refuse anything but an ARM64 ELF executable before it is pushed (a host build would fail on
    the phone with a bare 'not executable: 64-bit ELF file')."""
    try:
        with path.open("rb") as f:
            head = f.read(20)
    except OSError as e:
        raise DeviceError(f"native_runner {path}: cannot read it ({e.strerror})") from None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1 or int.from_bytes(head[18:20], "little") != _EM_AARCH64:
        raise DeviceError(f"native_runner {path}: not an ARM64 (aarch64) ELF executable; build it with "
                          "`magicselector native build --target arm64`")


def find_native_runner(path: str | os.PathLike | None = None, *, name: str = NATIVE_RUNNER,
                       build_if_missing: bool = True, log: Callable[[str], None] | None = _print_stderr) -> Path:
    """A static ARM64 executable of the native build (``name``: the latency runner, or
    ``magicselector-native`` for the demo): ``path``, else the arm64 build's in the cache
    (``magicselector native build --target arm64``), built now when it is not there (the first build
    takes minutes: llama.cpp under zig's clang)."""
    from magicselector.export.native import ExportError, current_build

    if path is not None:
        exe = Path(path)
        if not exe.is_file():
            raise DeviceError(f"native_runner {exe}: no such file")
    else:
        try:
            exe = current_build("arm64", name, build=build_if_missing, log=log or (lambda line: None))
        except ExportError as e:
            raise DeviceError(str(e)) from None
    _check_arm64_executable(exe)
    return exe


def push_runner(adb: Adb, local: str | os.PathLike, remote_dir: str) -> dict[str, Any]:
    """Push an executable to ``remote_dir/bin`` (under its own name) unless the same bytes are there;
    make it executable."""
    from magicselector.files import sha256_file

    rel = f"bin/{Path(local).name}"
    digest = sha256_file(local)
    remote = remote_sha256(adb, remote_dir, [rel]) or {}
    remote_path = posixpath.join(remote_dir, rel)
    pushed = remote.get(rel) != digest
    if pushed:
        adb.shell(f"mkdir -p {shlex.quote(posixpath.dirname(remote_path))}", timeout_s=30)
        adb.push(local, remote_path, timeout_s=max(120.0, Path(local).stat().st_size / 2e6))
    adb.shell(f"chmod 755 {shlex.quote(remote_path)}", timeout_s=30)
    return {"remote": remote_path, "sha256": digest, "pushed": pushed, "bytes": Path(local).stat().st_size}


def workload_requests(turns: str | os.PathLike | None, limit: int | None) -> tuple[list[dict[str, Any]], str, str | None]:
    """(the requests one pass runs, the workload's name, its file's sha256) for the native runner:
    ``latency.WORKLOAD`` or a ``--turns`` file read as the Python runner reads it."""
    from magicselector.bench.latency import WORKLOAD, load_turns
    from magicselector.files import sha256_file

    if turns is None:
        rows, name, digest = WORKLOAD, "phone", None
    else:
        rows = load_turns(turns, limit)
        name = str(turns) + (f" ({limit} rows, seed 0)" if limit else "")
        digest = sha256_file(turns)
    return [{"query": t["utterance"], "history": list(t.get("history") or [])} for t in rows], name, digest


def native_results(raw: Mapping[str, Any], bundle_dir: str | os.PathLike, *, workload_name: str = "phone",
                   workload_sha256: str | None = None, catalog: Any = None) -> dict[str, Any]:
    """One ``magicselector-native-latency`` run's raw samples as a ``magicselector-latency/1`` dict:
    stage percentiles with ``latency.percentiles`` and the schema tokens handed per turn with
    ``handed_tokens.HandedTokens`` over the bundle's catalog, as a local run computes them. The native
    core times ``decompose``, ``embed`` (tokenizer and model), ``retrieve_and_cut`` (search, BM25,
    fusion, cut, head, budget) and ``total``."""
    from types import SimpleNamespace

    from magicselector.bench.handed_tokens import HandedTokens
    from magicselector.bench.latency import ISA_FLAGS, SCHEMA, STAGE_ORDER, artifact_sizes, percentiles
    from magicselector.bundle import Bundle
    from magicselector.config import SelectorConfig

    bundle = Bundle.open(bundle_dir, verify=False)
    if catalog is None:
        from magicselector.sections import read_catalog

        catalog = read_catalog(bundle, bundle.manifest["catalog"]["file"], verify=False)
    samples = raw["samples"]
    stages = {s: percentiles(samples[s]) for s in STAGE_ORDER if s in samples}
    stages.update({s: percentiles(v) for s, v in samples.items() if s not in stages})
    handed = HandedTokens(catalog)
    for turn in raw["first_pass"]:
        handed.add(SimpleNamespace(ids=turn["ids"], ranked_ids=turn["ranked_10"]))
    cpu = raw.get("cpu") or {}
    parts = cpu.get("cpu_parts") or []
    shipped, options = SelectorConfig(), raw.get("options") or {}
    texts = [int(t["texts"]) for t in raw["first_pass"]]
    device = {"platform": "-".join(str(cpu.get(k) or "") for k in ("system", "release", "machine")),
              "system": cpu.get("system"), "release": cpu.get("release"), "machine": cpu.get("machine"),
              "cpu_model": cpu.get("model_name") or cpu.get("hardware")
              or (f"ARM CPU parts {', '.join(parts)}" if parts else "unknown"),
              "isa": sorted(set(str(cpu.get("features") or "").split()) & ISA_FLAGS & (
                  _ARM_ISA if cpu.get("machine") == "aarch64" else ISA_FLAGS)), "runner": NATIVE_RUNNER,
              "int8_target": "arm64" if cpu.get("machine") == "aarch64" else None}
    config = {"bundle": str(bundle_dir), "runs": raw["runs"], "warmup": raw["warmup"], "threads": raw["threads"],
              "cool_down_s": 0.0, "history_mode": options.get("history", shipped.history),
              "candidates": options.get("candidates", shipped.candidates), "cut": "rmargin",
              "decomposer": options.get("decompose", shipped.decompose), "verify": raw["verify"],
              "turns": raw["turns"], "workload": {"name": workload_name, "sha256": workload_sha256},
              "texts_per_turn": (sum(texts) / len(texts)) if texts else None, "tokens": None,
              "fresh_process": True, "runner": "native", "runner_wall_s": raw.get("wall_s")}
    return {"schema": SCHEMA, "device": device, "config": config,
            "cold_start_ms": float(raw["cold_start_ms"]), "cold_start_breakdown": dict(raw["cold_start_breakdown"]),
            "peak_rss_mb": float(raw["peak_rss_mb"]), "rss_mb": float(raw["rss_mb"]),
            "artifacts": artifact_sizes(bundle.manifest), "stages": stages, "handed_tokens": handed.summary()}


def _merge_stage(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One stage over several runs. Runs report percentiles, not samples: p50/p90/p99 are the median
    of the runs' percentiles; mean is weighted by n; min/max are exact; n is the total."""
    n = sum(int(e.get("n", 0)) for e in entries)
    med = {q: float(statistics.median(float(e[q]) for e in entries)) for q in ("p50", "p90", "p99")}
    mean = (sum(float(e["mean"]) * int(e.get("n", 0)) for e in entries) / n) if n else \
        float(statistics.fmean(float(e["mean"]) for e in entries))
    out = {**med, "mean": mean}
    if all("min" in e for e in entries):
        out["min"] = min(float(e["min"]) for e in entries)
    if all("max" in e for e in entries):
        out["max"] = max(float(e["max"]) for e in entries)
    out["n"] = n
    return out


def merge_runs(runs: Sequence[Mapping[str, Any]], run_meta: Sequence[Mapping[str, Any]],
               device: Mapping[str, Any], harness: Mapping[str, Any]) -> dict[str, Any]:
    """Merge per-process runner results into one ``magicselector-latency/1`` dict (plus ``runs``)."""
    from magicselector.bench.latency import SCHEMA, STAGE_ORDER, percentiles

    first = runs[0] if runs else {}
    colds = [float(r["cold_start_ms"]) for r in runs]
    names = [s for s in STAGE_ORDER if any(s in r.get("stages", {}) for r in runs)]
    names += sorted({s for r in runs for s in r.get("stages", {})} - set(names))
    stages = {s: _merge_stage([r["stages"][s] for r in runs if s in r.get("stages", {})]) for s in names}
    breakdown = {}
    for key in ("import_ms", "load_ms", "first_select_ms"):
        vals = [r.get("cold_start_breakdown", {}).get(key) for r in runs]
        vals = [float(v) for v in vals if v is not None]
        breakdown[key] = float(statistics.median(vals)) if vals else None
    peaks = [m["peak_rss_mb"] for m in run_meta if m.get("peak_rss_mb") is not None]
    rss = [float(r["rss_mb"]) for r in runs if r.get("rss_mb") is not None]
    config = dict(first.get("config", {}))
    config.update(runs=harness.get("runs_requested", len(run_meta)), runs_completed=len(runs),
                  passes_per_run=config.get("runs"), adb=dict(harness))
    config.pop("runner_wall_s", None)
    return {
        "schema": SCHEMA,
        "device": {**first.get("device", {}), **device},  # the runner's view, then adb's getprop / sysfs
        "config": config,
        "cold_start_ms": float(statistics.median(colds)) if colds else None,
        "cold_start_breakdown": breakdown,
        "cold_start_runs": percentiles(colds) if colds else None,
        "peak_rss_mb": max(peaks) if peaks else None,
        "rss_mb": float(statistics.median(rss)) if rss else None,
        "artifacts": first.get("artifacts", {}),
        "stages": stages,
        # the same workload every run: the first run's schema tokens handed per turn (None: an older runtime)
        "handed_tokens": first.get("handed_tokens"),
        "runs": list(run_meta),
    }


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _finished_runs(partial: Path, out: Path, key: Mapping[str, Any]
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The finished runs an earlier, interrupted call left in ``partial.json`` (and ``runs/``), if
    that call measured the same thing (same ``resume_key``); else nothing."""
    from magicselector.bench.latency import validate_results

    try:
        kept = json.loads(partial.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], []
    try:
        if kept["config"]["adb"]["resume_key"] != json.loads(json.dumps(key)):  # compared as JSON stores it
            return [], []
    except (KeyError, TypeError):  # not a partial.json this harness wrote
        return [], []
    results, meta = [], []
    for n, entry in enumerate(kept.get("runs", []), 1):
        if not isinstance(entry, dict) or entry.get("run") != n:
            break
        try:
            data = json.loads((out / "runs" / f"run-{n}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            break
        if validate_results(data):
            break
        results.append(data)
        meta.append(entry)
    return results, meta


@dataclass(frozen=True)
class DeviceLatencyOptions:
    """What ``run_latency_on_device`` measures and how (every field has a default).

    serial: the device (None: the only one attached). runs: fresh runner processes; each makes
    ``warmup`` untimed and ``passes_per_run`` timed passes with ``threads`` threads. out_dir: where
    the results go. cool_down_s / cool_down_below_c: before every run but the first, wait until the
    hottest thermal zone is below ``cool_down_below_c`` or ``cool_down_s`` has passed (0: no wait).
    pin_big_cores: start the runner under ``taskset`` on the cores above the slowest cluster.
    native_runner: the static ARM64 ``magicselector-native-latency`` to push (None: the arm64 build's,
    built on first use). python_cmd: None (the default) runs that native runner, which needs nothing
    on the device; a shell fragment that starts Python there runs the Python runner instead.
    python_cmd / workdir / remote_env: how ``adb shell`` starts Python (``RemotePython``).
    remote_dir: the device folder for the bundle and the runs. adb_path: the ``adb`` client.
    runner_module: the module run with ``python -m``. history_mode / decompose / turns /
    turns_limit: the runner's settings (None: the shipped
    configuration, the fixed phone workload). mem_probe / mem_poll_s: the extra peak-memory probe
    (``runner``: none; ``proc``; ``dumpsys``) and its period. run_timeout_s: the longest one run may
    take. resume: keep the finished runs of an earlier, interrupted call into ``out_dir``.
    progress: where progress lines go (None: nowhere).
    """

    serial: str | None = None
    runs: int = 20
    warmup: int = 3
    threads: int = 1
    out_dir: str | os.PathLike = "bench-out"
    cool_down_s: float = 0.0
    pin_big_cores: bool = False
    passes_per_run: int = 1
    python_cmd: str | None = None
    native_runner: str | os.PathLike | None = None
    workdir: str | None = None
    remote_env: Mapping[str, str] | None = None
    remote_dir: str = DEFAULT_REMOTE_DIR
    adb_path: str | os.PathLike | None = None
    runner_module: str = RUNNER_MODULE
    history_mode: str | None = None
    decompose: str | None = None
    turns: str | os.PathLike | None = None
    turns_limit: int | None = None
    cool_down_below_c: float = 40.0
    mem_probe: str = "runner"
    mem_poll_s: float = 0.5
    run_timeout_s: float = 900.0
    resume: bool = True
    progress: Callable[[str], None] | None = _print_stderr

    def check(self) -> None:
        if self.runs < 1 or self.warmup < 0 or self.threads < 1 or self.passes_per_run < 1:
            raise DeviceError("need runs >= 1, warmup >= 0, threads >= 1, passes_per_run >= 1")
        if self.mem_probe not in MEM_PROBES:
            raise DeviceError(f"mem_probe must be one of {MEM_PROBES}, got {self.mem_probe!r}")
        if self.runner == "native" and self.decompose in ("llm", "auto"):
            raise DeviceError(f"decompose {self.decompose!r}: the LLM decomposer runs in the Python runtime only "
                              "(the native runner runs 'rules' and 'none')")

    @property
    def runner(self) -> str:
        """``native`` (nothing needed on the device) or ``python`` (``python_cmd`` given)."""
        return "python" if self.python_cmd else "native"

    def native_options(self) -> dict[str, Any]:
        """The ``--options`` of the native runner: the settings given (None: the shipped ones)."""
        out: dict[str, Any] = {}
        if self.history_mode:
            out["history"] = self.history_mode
        if self.decompose:
            out["decompose"] = self.decompose
        return out

    def native_argv(self, remote_runner: str, remote_bundle: str, remote_out: str, remote_turns: str) -> list[str]:
        """The native runner's command line on the device."""
        argv = [remote_runner, remote_bundle, "--turns", remote_turns, "--out", remote_out,
                "--runs", str(self.passes_per_run), "--warmup", str(self.warmup), "--threads", str(self.threads)]
        opts = self.native_options()
        return argv + (["--options", json.dumps(opts, separators=(",", ":"))] if opts else [])

    def runner_argv(self, remote_bundle: str, remote_out: str, remote_turns: str | None) -> list[str]:
        """The runner's command line on the device (``latency_runner.runner_argv``)."""
        from magicselector.bench.latency_runner import runner_argv

        return runner_argv(remote_bundle, remote_out, runs=self.passes_per_run, warmup=self.warmup,
                           threads=self.threads, history_mode=self.history_mode or None, decompose=self.decompose,
                           turns=remote_turns,
                           turns_limit=self.turns_limit or None, module=self.runner_module)


@dataclass
class _Session:
    """One device prepared for the runs: the bundle and the runner pushed (or the Python checked),
    the harness record."""

    adb: Adb
    info: DeviceInfo
    device: dict[str, Any]
    python: RemotePython | None     # None: the native runner
    remote_bundle: str
    remote_runs: str
    remote_turns: str | None
    mask: str | None
    harness: dict[str, Any]
    remote_runner: str | None = None
    workload_name: str = "phone"
    workload_sha256: str | None = None
    catalog: Any = None


def _say(opts: DeviceLatencyOptions) -> Callable[[str], None]:
    return opts.progress or (lambda line: None)


def _push(adb: Adb, bundle_dir, opts: DeviceLatencyOptions, say) -> tuple[str, str, str | None, dict[str, Any]]:
    """The bundle (and the turns file) on the device; (bundle, runs folder, turns file, what was pushed)."""
    remote_bundle = posixpath.join(opts.remote_dir, "bundle")
    remote_runs = posixpath.join(opts.remote_dir, "runs")
    adb.shell(f"mkdir -p {shlex.quote(remote_runs)}", timeout_s=30)
    pushed = push_bundle(adb, bundle_dir, remote_bundle, progress=say)
    say(f"[adb] bundle at {remote_bundle}: pushed {len(pushed['pushed'])} file(s), "
        f"{len(pushed['skipped'])} unchanged")
    remote_turns = None
    if opts.turns is not None and opts.runner == "python":  # the runner reads the turns file on the device
        remote_turns = posixpath.join(opts.remote_dir, "turns.jsonl")
        adb.push(opts.turns, remote_turns)
    return remote_bundle, remote_runs, remote_turns, pushed


def _push_native(adb: Adb, opts: DeviceLatencyOptions, out: Path, runner: Path, say
                 ) -> tuple[str, str, dict[str, Any], str, str | None]:
    """The runner and the workload's requests on the device; (runner, requests file, what was pushed,
    workload name, its sha256)."""
    got = push_runner(adb, runner, opts.remote_dir)
    say(f"[adb] runner at {got['remote']}: " + ("pushed" if got["pushed"] else "unchanged"))
    requests, name, digest = workload_requests(opts.turns, opts.turns_limit)
    local = out / "requests.jsonl"
    local.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests), encoding="utf-8")
    remote_turns = posixpath.join(opts.remote_dir, "requests.jsonl")
    adb.push(local, remote_turns, timeout_s=120)
    return got["remote"], remote_turns, got, name, digest


def _harness_record(opts: DeviceLatencyOptions, bundle_dir, info: DeviceInfo, device: Mapping[str, Any],
                    remote_bundle: str, remote_py: dict[str, Any], mask: str | None,
                    pushed: dict[str, Any]) -> dict[str, Any]:
    """``config.adb`` of the results, with the ``resume_key`` that says what a run measured."""
    from magicselector.files import sha256_file

    o = opts
    runner = remote_py.get("native_runner") if o.runner == "native" else None
    return {"serial": info.serial, "bundle_local": str(bundle_dir), "runner": o.runner, "native_runner": runner, "remote_dir": o.remote_dir,
            "remote_bundle": remote_bundle,
            "python_cmd": o.python_cmd, "workdir": o.workdir or o.remote_dir, "remote_env": dict(o.remote_env or {}),
            "remote_python": remote_py if o.runner == "python" else None, "runner_module": o.runner_module,
            "pinned_cores": device.get("big_cores") if mask else None, "taskset_mask": mask,
            "cool_down_s": o.cool_down_s, "cool_down_below_c": o.cool_down_below_c, "mem_probe": o.mem_probe,
            "runs_requested": o.runs, "push": pushed,
            "resume_key": {"serial": info.serial,
                           "bundle_manifest_sha256": sha256_file(Path(bundle_dir) / "manifest.json"),
                           "runner_module": o.runner_module, "python_cmd": o.python_cmd, "warmup": o.warmup,
                           "runner": o.runner, "native_runner_sha256": runner["sha256"] if runner else None,
                           "threads": o.threads, "passes_per_run": o.passes_per_run, "decompose": o.decompose,
                           "history_mode": o.history_mode, "taskset_mask": mask, "mem_probe": o.mem_probe,
                           "turns_sha256": sha256_file(o.turns) if o.turns is not None else None,
                           "turns_limit": o.turns_limit},
            "merge": "one runner process per run; cold_start_ms is the median over runs; stage p50/p90/p99 "
                     "are medians of the per-run percentiles, mean is n-weighted, min/max/n exact"}


def _prepare_session(bundle_dir, opts: DeviceLatencyOptions, out: Path) -> _Session:
    """The device picked and described, the bundle and the runner pushed (or its Python checked)."""
    say = _say(opts)
    runner = find_native_runner(opts.native_runner, log=say) if opts.runner == "native" else None
    info = pick_device(opts.serial, opts.adb_path)
    adb = Adb(info.serial, adb_path=opts.adb_path)
    device = {**describe_device(adb), "adb": info.to_dict()}
    say(f"[adb] {info.serial}: {device.get('manufacturer') or ''} {device.get('model') or info.model or '?'}, "
        f"{device.get('soc') or '?'}, Android {device.get('android_release') or '?'} (SDK {device.get('sdk')}), "
        f"{device.get('cores')} cores, big cores {device.get('big_cores')}")
    if runner is not None and device.get("abi") and not str(device["abi"]).startswith("arm64"):
        raise DeviceError(f"{adb.who} reports ABI {device['abi']}; the native runner is a static ARM64 "
                          "(arm64-v8a) executable")
    remote_bundle, remote_runs, remote_turns, pushed = _push(adb, bundle_dir, opts, say)
    extra: dict[str, Any] = {}
    if runner is not None:
        remote_runner, remote_turns, got, name, digest = _push_native(adb, opts, out, runner, say)
        python, remote_py = None, {"native_runner": {**got, "local": str(runner)}}
        extra = {"remote_runner": remote_runner, "workload_name": name, "workload_sha256": digest}
    else:
        python = RemotePython(opts.python_cmd or "python", opts.workdir, opts.remote_env)
        remote_py = remote_preflight(adb, python, opts.remote_dir, opts.runner_module)
    mask = device.get("big_cores_mask") if opts.pin_big_cores else None
    if opts.pin_big_cores and not mask:
        raise DeviceError(f"cannot pin to big cores on {adb.who}: no cpufreq information")
    harness = _harness_record(opts, bundle_dir, info, device, remote_bundle, remote_py, mask, pushed)
    return _Session(adb, info, device, python, remote_bundle, remote_runs, remote_turns, mask, harness, **extra)


def _probe_peak(stdout: str, mem_probe: str) -> tuple[float | None, str | None]:
    """The shell probe's peak memory (MB) and what it read, from the ``__MS_S`` lines of a run."""
    samples = "\n".join(line[7:] for line in stdout.splitlines() if line.startswith("__MS_S "))
    if mem_probe == "proc":
        return parse_vmhwm_mb(samples), "/proc/PID/status VmHWM (sampled)"
    if mem_probe == "dumpsys":
        got = [parse_dumpsys_meminfo_mb(s) for s in samples.split("---")]
        got = [g for g in got if g]
        if got:
            return max(g[0] for g in got), got[0][1] + " (sampled max)"
    return None, None


def _run_script(s: _Session, opts: DeviceLatencyOptions, remote_out: str) -> str:
    if s.python is None:
        assert s.remote_runner is not None and s.remote_turns is not None
        argv = opts.native_argv(s.remote_runner, s.remote_bundle, remote_out, s.remote_turns)
        command = " ".join(shlex.quote(a) for a in argv)
        where = f"cd {shlex.quote(opts.remote_dir)} || exit 97"
    else:
        argv = opts.runner_argv(s.remote_bundle, remote_out, s.remote_turns)
        command = f"{s.python.command} {' '.join(shlex.quote(a) for a in argv)}"
        where = s.python.prefix(opts.remote_dir)
    if s.mask:
        command = f"taskset {s.mask} {command}"
    prefix = f"{where}; rm -f {shlex.quote(remote_out)}"
    return (f"{prefix}; {command}" if opts.mem_probe == "runner"
            else _wrap_with_probe(prefix, command, opts.mem_probe, opts.mem_poll_s))


def _one_run(s: _Session, opts: DeviceLatencyOptions, i: int, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``i``: cool down, one runner process on the device, its results pulled and checked;
    returns (the runner's results, the run's entry in ``runs``)."""
    from magicselector.bench.latency import validate_results

    say = _say(opts)
    cool = None
    if opts.cool_down_s > 0 and i > 1:
        cool = wait_for_cool_down(s.adb, opts.cool_down_s, opts.cool_down_below_c)
    raw_name = f"run-{i}.raw.json" if s.python is None else f"run-{i}.json"
    remote_out = posixpath.join(s.remote_runs, raw_name)
    script = _run_script(s, opts, remote_out)
    say(f"[adb] run {i}/{opts.runs}" + (f" (cooled {cool['waited_s']:.0f} s to {cool['hottest_after_c']} C)"
                                        if cool else ""))
    t0 = time.perf_counter()
    try:
        proc = s.adb.shell(script, timeout_s=opts.run_timeout_s)
    except RemoteCommandError as e:
        (out / "runs" / f"run-{i}.log").write_text(e.stderr + e.stdout, encoding="utf-8")
        raise
    wall = time.perf_counter() - t0
    (out / "runs" / f"run-{i}.log").write_text(proc.stderr, encoding="utf-8")
    local_out = out / "runs" / f"run-{i}.json"
    s.adb.pull(remote_out, out / "runs" / raw_name, timeout_s=120)
    data = json.loads((out / "runs" / raw_name).read_text(encoding="utf-8"))
    if s.python is None:  # the native runner's raw samples, computed into the schema here
        if s.catalog is None:
            from magicselector.bundle import Bundle
            from magicselector.sections import read_catalog

            b = Bundle.open(s.harness["bundle_local"], verify=False)
            s.catalog = read_catalog(b, b.manifest["catalog"]["file"], verify=False)
        data = native_results(data, s.harness["bundle_local"], workload_name=s.workload_name,
                              workload_sha256=s.workload_sha256, catalog=s.catalog)
        pinned = s.harness.get("pinned_cores")
        data["device"]["cores_usable"] = len(pinned) if pinned else s.device.get("cores")
        _write_json(local_out, data)
    problems = validate_results(data)
    if problems:
        raise DeviceError(f"run {i}: the runner's results do not follow the schema: {problems}")
    probe_mb, probe_src = _probe_peak(proc.stdout, opts.mem_probe)
    peak = data.get("peak_rss_mb")
    meta = {"run": i, "cold_start_ms": data["cold_start_ms"], "cold_start_breakdown": data.get("cold_start_breakdown"),
            "peak_rss_mb": peak if peak is not None else probe_mb,
            "peak_rss_source": "runner VmHWM" if peak is not None else probe_src,
            "probe_peak_mb": probe_mb, "probe": probe_src,
            "total_p50_ms": data["stages"].get("total", {}).get("p50"),
            "wall_s": round(wall, 3), "cool_down": cool, "file": f"runs/run-{i}.json"}
    say(f"[adb] run {i}/{opts.runs}: cold start {data['cold_start_ms']:.0f} ms, total p50 "
        f"{meta['total_p50_ms'] or 0:.2f} ms, peak RSS {meta['peak_rss_mb'] or 0:.0f} MB")
    return data, meta


def _save_partial(partial: Path, results: list, meta: list, s: _Session, **state: Any) -> None:
    merged = merge_runs(results, meta, s.device, s.harness)
    merged.update(complete=False, **state)
    _write_json(partial, merged)


def run_latency_on_device(bundle_dir: str | os.PathLike, options: DeviceLatencyOptions | None = None
                          ) -> dict[str, Any]:
    """Measure latency on an Android device: ``options.runs`` fresh runner processes, merged.

    Each run is one ``magicselector-native-latency`` process on the device (or, with ``python_cmd``,
    one ``python -m magicselector.bench.latency_runner``) with
    ``--runs passes_per_run --warmup warmup --threads threads``, so every run measures a cold start
    and ``passes_per_run`` timed passes over the runner's workload (see ``DeviceLatencyOptions``
    for every setting).

    Peak memory: the runner's own VmHWM; ``mem_probe='proc'`` also samples ``/proc/PID/status``
    VmHWM from the shell every ``mem_poll_s``, ``'dumpsys'`` samples ``dumpsys meminfo PID`` (used
    when the runner reports none; both are in ``runs``).

    Writes ``out_dir/runs/run-N.json`` (pulled) and ``run-N.log`` (the runner's stderr), then
    ``out_dir/latency.json`` (the merged dict, also returned). After every finished run the runs
    so far are merged into ``out_dir/partial.json``, so a device that drops (or a host that is
    killed) loses no finished measurement; the DeviceError says how many were kept. With ``resume``
    (the default) a later call with the same device, bundle and runner settings into the same
    ``out_dir`` keeps those runs and starts at the first one missing.
    """
    opts = options if options is not None else DeviceLatencyOptions()
    opts.check()
    say = _say(opts)
    out = Path(opts.out_dir)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    s = _prepare_session(bundle_dir, opts, out)
    partial = out / "partial.json"
    results, meta = _finished_runs(partial, out, s.harness["resume_key"]) if opts.resume else ([], [])
    results, meta = results[:opts.runs], meta[:opts.runs]
    if results:
        say(f"[adb] resuming: {len(results)} finished run(s) kept from {partial}")
    for i in range(len(results) + 1, opts.runs + 1):
        try:
            data, entry = _one_run(s, opts, i, out)
            results.append(data)
            meta.append(entry)
            _save_partial(partial, results, meta, s, error=None, failed_run=None)  # on the host before the next
        except KeyboardInterrupt:
            _save_partial(partial, results, meta, s, error="interrupted", failed_run=i)
            raise
        except (DeviceError, OSError, ValueError) as e:
            gone = isinstance(e, DeviceDisconnected) or not s.adb.is_connected()
            _save_partial(partial, results, meta, s, error=str(e), failed_run=i)
            kept = f"{len(results)} result{'s' if len(results) != 1 else ''} kept in {partial}"
            if gone:
                raise DeviceDisconnected(f"device {s.info.serial} disconnected during run {i} of {opts.runs}; "
                                         f"{kept} ({e})") from e
            raise DeviceError(f"run {i} of {opts.runs} on device {s.info.serial} failed: {e}; {kept}") from e
    merged = merge_runs(results, meta, s.device, s.harness)
    merged.update(complete=True, error=None)
    _write_json(out / "latency.json", merged)
    if partial.exists():
        partial.unlink()
    return merged

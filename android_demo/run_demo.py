#!/usr/bin/env python3
"""A multi-turn phone-assistant session on an Android device, over ADB.

    python android_demo/run_demo.py [--serial S] [--bundle DIR] [--native-bin PATH | --python-cmd python]

Builds (or reuses) the default bundle on this machine, pushes it and the static ARM64
``magicselector-native`` (from ``magicselector native build --target arm64``, built on first use)
to the device with the magicselector ADB harness (only files whose sha256 differs there), then runs
the scripted demo dialogue ON THE DEVICE (``magicselector-native select`` over ``adb shell``, one
request per turn with the dialogue so far) and prints, per turn, the sub-tasks, the chosen tools, K
and the per-stage milliseconds measured on the phone. Nothing needs installing on the phone. With
``--python-cmd`` it runs ``python -m magicselector demo`` there instead, on a device whose Python
has the lean runtime; see android_demo/README.md.
"""
from __future__ import annotations

import argparse
import json
import posixpath
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from magicselector.bench.adb import DEFAULT_REMOTE_DIR
    from magicselector.config import HISTORY_MODES

    p = argparse.ArgumentParser(prog="run_demo.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--serial", help="device serial (default: the only attached device)")
    p.add_argument("--bundle", help="bundle folder on this machine (default: build or reuse the default bundle)")
    p.add_argument("--native-bin", help="the ARM64 magicselector-native to push (default: the arm64 build's, "
                                        "built on first use by `magicselector native build --target arm64`)")
    p.add_argument("--python-cmd", default=None,
                   help="run the Python runtime on the device instead: how adb shell starts Python there, a "
                        "shell fragment (e.g. python)")
    p.add_argument("--workdir", help="folder on the device to run in (default: --remote-dir)")
    p.add_argument("--remote-dir", default=DEFAULT_REMOTE_DIR,
                   help=f"where the bundle goes on the device, as REMOTE_DIR/bundle (default: {DEFAULT_REMOTE_DIR})")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment variable for the device's Python (repeatable), e.g. LD_LIBRARY_PATH=...")
    p.add_argument("--history-mode", choices=HISTORY_MODES, default=None,
                   help="what of the dialogue retrieval sees (default: as `magicselector demo`, the shipped "
                        "mode, or user when that is none)")
    p.add_argument("--adb", help="the adb executable (default: $ADB or adb on PATH)")
    p.add_argument("--json", action="store_true", help="print the device's per-turn JSON instead of text")
    return p.parse_args(argv)


def parse_demo_json(stdout: str) -> list[dict[str, Any]]:
    """The JSON list that ``magicselector demo --json`` prints after its title line."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "[" or line.startswith("[{") or line.strip() == "[]":
            try:
                data = json.loads("\n".join(lines[i:]))
            except json.JSONDecodeError:
                continue
            if isinstance(data, list):
                return data
    raise ValueError(f"no JSON list in the device's output: {stdout[-400:]!r}")


def format_turn(turn: dict[str, Any], assistant: str | None) -> str:
    tools = ", ".join(f"{t['name']} ({t['score']:.2f})" for t in turn["tools"])
    ms = turn["timings_ms"]
    stages = " ".join(f"{k}={v:.1f}" for k, v in ms.items() if k != "total")
    cut = turn.get("cut", {})
    out = [f"[{turn['turn']}] user: {turn['user']}",
           f"  sub-tasks ({len(turn['subtasks'])}, decomposer {turn.get('decomposer', 'none')}): "
           f"{'; '.join(json.dumps(s, ensure_ascii=False) for s in turn['subtasks'])}",
           f"  tools (K={turn['k']}, k_score={cut.get('k_score')}, k_sim={cut.get('k_sim')}): {tools}",
           f"  ms on device: {stages} total={ms.get('total', 0.0):.1f}"]
    if assistant:
        out.append(f"  assistant: {assistant}")
    return "\n".join(out)


def dialogue_requests() -> list[dict[str, Any]]:
    """The demo dialogue as native select requests, each turn with the dialogue before it."""
    from magicselector.cli import DEMO_FILE

    script = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
    history: list[dict[str, str]] = []
    out = []
    for turn in script["turns"]:
        out.append({"query": turn["user"], "history": list(history)})
        history += [{"role": "user", "content": turn["user"]}, {"role": "assistant", "content": turn["assistant"]}]
    return out


def _native_turns(adb: Any, args: argparse.Namespace, remote_bundle: str, say) -> list[dict[str, Any]]:
    """The dialogue through ``magicselector-native select`` on the device, one JSON line per turn."""
    import tempfile

    from magicselector.bench.adb import DeviceError, find_native_runner, push_runner

    exe = find_native_runner(args.native_bin, name="magicselector-native", log=say)
    got = push_runner(adb, exe, args.remote_dir)
    say(f"runner {got['remote']}: " + ("pushed" if got["pushed"] else "already there"))
    requests = dialogue_requests()
    remote_requests = posixpath.join(args.remote_dir, "demo-requests.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "demo-requests.jsonl"
        local.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests), encoding="utf-8")
        adb.push(local, remote_requests, timeout_s=120)
    options = json.dumps({"history": args.history_mode}, separators=(",", ":"))
    cmd = (f"cd {shlex.quote(args.remote_dir)} || exit 97; {shlex.quote(got['remote'])} select "
           f"{shlex.quote(remote_bundle)} --options {shlex.quote(options)} < {shlex.quote(remote_requests)}")
    proc = adb.shell(cmd, timeout_s=600)
    turns = []
    for n, (line, request) in enumerate(zip(proc.stdout.splitlines(), requests), 1):
        sel = json.loads(line)
        if "error" in sel:
            raise DeviceError(f"turn {n} on {adb.who}: {sel['error'].get('message')}")
        turns.append({"turn": n, "user": request["query"], **sel})
    if len(turns) != len(requests):
        raise DeviceError(f"the native runner on {adb.who} answered {len(turns)} of {len(requests)} turns: "
                          f"{proc.stderr.strip()[-300:]}")
    return turns


def run_demo(args: argparse.Namespace) -> int:
    from magicselector import ensure_default_bundle
    from magicselector.bench.adb import (Adb, DeviceError, RemotePython, describe_device, pick_device,
                                         push_bundle, remote_preflight)
    from magicselector.cli import DEMO_FILE

    # with --json, stdout carries only the JSON; the status lines go to stderr
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise DeviceError(f"--env expects KEY=VALUE, got {item!r}")
        env[key] = value
    bundle = Path(args.bundle) if args.bundle else ensure_default_bundle(progress=True)
    info = pick_device(args.serial, args.adb)
    adb = Adb(info.serial, adb_path=args.adb)
    dev = describe_device(adb)
    say(f"device {info.serial}: {dev.get('manufacturer') or ''} {dev.get('model') or info.model or '?'}, "
          f"{dev.get('soc') or '?'}, {dev.get('abi') or '?'}, Android {dev.get('android_release') or '?'} "
          f"(SDK {dev.get('sdk')}), {dev.get('cores')} cores (big: {dev.get('big_cores')})")
    remote_bundle = posixpath.join(args.remote_dir, "bundle")
    pushed = push_bundle(adb, bundle, remote_bundle, progress=say)
    say(f"bundle {bundle} -> {remote_bundle}: pushed {len(pushed['pushed'])} file(s), "
          f"{len(pushed['skipped'])} already there")
    from magicselector.cli.options import history_mode_with_history

    args.history_mode = history_mode_with_history(args, why="the demo is a dialogue")
    if args.python_cmd is None:
        turns = _native_turns(adb, args, remote_bundle, say)
    else:
        python = RemotePython(args.python_cmd, args.workdir, env)
        found = remote_preflight(adb, python, args.remote_dir, module=None)
        say(f"device Python {found['python']} ({found['executable']}), magicselector {found['magicselector']}")
        cmd = (f"{python.prefix(args.remote_dir)}; {python.command} -m magicselector demo --bundle "
               f"{shlex.quote(remote_bundle)} --history-mode {shlex.quote(args.history_mode)} --json")
        proc = adb.shell(cmd, timeout_s=600)
        try:
            turns = parse_demo_json(proc.stdout)
        except ValueError as e:
            raise DeviceError(f"the demo on {adb.who} printed no results: {e}") from None
    if args.json:
        print(json.dumps(turns, indent=2))
        return 0
    script = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
    print(f"\n{script['title']}  (on {info.serial}, history={args.history_mode})")
    for turn in turns:
        n = int(turn["turn"])
        assistant = script["turns"][n - 1]["assistant"] if n <= len(script["turns"]) else None
        print()
        print(format_turn(turn, assistant))
    totals = [t["timings_ms"].get("total", 0.0) for t in turns]
    if totals:
        first = "the first turn includes creating the ONNX session" if args.python_cmd else "after the bundle is open"
        print(f"\n{len(turns)} turns; total ms per turn on the device: median {statistics.median(totals):.1f}, "
              f"max {max(totals):.1f} ({first})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from magicselector.errors import MagicSelectorError

    args = _parse_args(argv)
    try:
        return run_demo(args)
    except MagicSelectorError as e:
        print(f"run_demo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

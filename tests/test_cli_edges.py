"""CLI edges: serve, select and eval open a bundle with --public-key and --min-release as the API
does; `eval --limit 0` means every query (as the bench's) and an empty benchmark is a clear error,
never a traceback; eval's progress bar is drawn only on a terminal."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs

from magicselector.cli import main


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "magicselector", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def signed(bundle_dir, tmp_path_factory):
    pytest.importorskip("cryptography", reason=needs("sign"))
    from magicselector.bundle_writer import sign_bundle
    from magicselector.signing import generate_keypair

    root = tmp_path_factory.mktemp("signed")
    keys = generate_keypair(root / "k")
    other = generate_keypair(root / "other")
    bundle = root / "b"
    shutil.copytree(bundle_dir, bundle)
    sign_bundle(bundle, keys["private_key"])
    release = json.loads((bundle / "manifest.json").read_text()).get("release", 0)
    return bundle, keys["public_key"], other["public_key"], release


@pytest.mark.slow
def test_select_takes_public_key_and_min_release(signed, capsys):
    bundle, key, other, release = signed
    assert main(["select", "wake me up at 7", "--bundle", str(bundle), "--public-key", key,
                 "--min-release", str(release), "--json"]) == 0
    assert "set_alarm" in [t["id"] for t in json.loads(capsys.readouterr().out)["tools"]]
    done = run_cli("select", "wake me up at 7", "--bundle", str(bundle), "--public-key", other)
    assert done.returncode == 2 and "signature" in done.stderr.lower() and "Traceback" not in done.stderr
    done = run_cli("select", "wake me up at 7", "--bundle", str(bundle), "--min-release", str(release + 1))
    assert done.returncode == 2 and "older than the oldest this app accepts" in done.stderr


@pytest.mark.slow
def test_eval_takes_public_key_and_min_release(signed, tiny_benchmark):
    bundle, key, other, release = signed
    done = run_cli("eval", str(tiny_benchmark), "--bundle", str(bundle), "--public-key", other)
    assert done.returncode == 2 and "signature" in done.stderr.lower() and "Traceback" not in done.stderr
    done = run_cli("eval", str(tiny_benchmark), "--bundle", str(bundle), "--min-release", str(release + 1))
    assert done.returncode == 2 and "older than the oldest this app accepts" in done.stderr
    done = run_cli("eval", str(tiny_benchmark), "--bundle", str(bundle), "--public-key", key)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_serve_takes_public_key_and_min_release(signed):
    pytest.importorskip("mcp", reason=needs("serve"))
    bundle, key, other, release = signed
    for flags, message in ((["--public-key", other], "signature"),
                           (["--min-release", str(release + 1)], "older than the oldest this app accepts")):
        done = run_cli("serve", "--bundle", str(bundle), *flags)
        assert done.returncode == 2 and message in done.stderr.lower() and "Traceback" not in done.stderr
    served = subprocess.run([sys.executable, "-m", "magicselector", "serve", "--bundle", str(bundle), "--public-key",
                             key, "--min-release", str(release)], capture_output=True, text=True, timeout=300,
                            input=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) + "\n")
    assert served.returncode == 0 and json.loads(served.stdout.splitlines()[0])["id"] == 1, served.stderr[-2000:]


@pytest.mark.slow
def test_eval_limit_0_means_every_query(bundle_dir, tiny_benchmark, capsys):
    out = tiny_benchmark / "report.json"
    assert main(["eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--limit", "0", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["overall"]["queries"] == 4
    done = run_cli("eval", str(tiny_benchmark), "--bundle", str(bundle_dir), "--limit", "-1")
    assert done.returncode == 2 and "limit must be a whole number >= 0" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_an_empty_benchmark_is_a_clear_error(bundle_dir, tiny_benchmark):
    (tiny_benchmark / "queries.jsonl").write_text("")
    done = run_cli("eval", str(tiny_benchmark), "--bundle", str(bundle_dir))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_eval_draws_no_progress_bar_into_a_log_file(bundle_dir, tiny_benchmark, tmp_path):
    log = tmp_path / "eval.log"
    with open(log, "w") as err:
        done = subprocess.run([sys.executable, "-m", "magicselector", "eval", str(tiny_benchmark), "--bundle",
                               str(bundle_dir)], stdout=subprocess.PIPE, stderr=err, text=True, timeout=300)
    assert done.returncode == 0
    text = log.read_text()
    assert "\r" not in text and "%|" not in text and "it/s" not in text, text[-500:]

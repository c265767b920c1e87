"""Files on disk: sha256 of a file, the cache folder, and folders built aside and moved into place."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes, read in ``chunk``-byte blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_home() -> Path:
    """Where built bundles, assembled models and cached vectors live: ``$MAGICSELECTOR_HOME``,
    default ``~/.cache/magicselector``."""
    return Path(os.environ.get("MAGICSELECTOR_HOME") or Path.home() / ".cache" / "magicselector")


@contextmanager
def staged_dir(target: str | Path) -> Iterator[Path]:
    """Build a folder next to ``target`` and move it into place only if the build succeeds,
    so a failed build leaves nothing half-written behind."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

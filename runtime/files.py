"""Files on disk: regular files opened without blocking, sha256 of a file, a JSON-lines line, an .npy header, the
cache folder, folders built aside and swapped into place atomically under a writers' lock; and the C heap's free
memory handed back (trim_heap)."""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, cast

import numpy as np

STAGING = "staging"  # a folder being built: .NAME.staging-PID-TOKEN, next to NAME
PREVIOUS = "previous"  # the folder being replaced, between the two renames where no exchange exists
LINK = "link"  # a symbolic link being made to replace NAME, a link to a release folder: .NAME.link-PID-TOKEN
CRASH_ENV = "MAGICSELECTOR_CRASH_AT"  # tests: the writer exits (os._exit) at this step, as a kill would
NO_EXCHANGE_ENV = "MAGICSELECTOR_NO_RENAME_EXCHANGE"  # tests and odd file systems: swap with two renames
_LEGACY_STAGING = re.compile(r"[a-z0-9_]{8}|old")  # what older builds left: mkdtemp's 8 characters, .old


def open_regular(path: str | Path, error: type[Exception], what: str = "file", missing: str | None = None) -> Any:
    """``path`` opened for binary reading, only if it is a regular file: it is opened without
    blocking (a FIFO in its place would wait for a writer forever) and checked through the
    descriptor (a FIFO, device or socket is ``error`` naming it, so nothing reads from ``/dev/zero``
    or waits on a pipe). Missing (``missing`` says why that is wrong) or unreadable: ``error`` too."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{path}: {missing or f'no such {what}'}") from None
    except IsADirectoryError:
        raise error(f"{path}: a folder, not a {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{path}: {_file_kind(mode)}, not a regular file; a {what} must be a plain file")
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# What a path that is no regular file is, for the message: the first test that holds.
_FILE_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"))


def _file_kind(mode: int) -> str:
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "not a file")


def read_sized(f: Any, size: int, path: str | Path, error: type[Exception], what: str = "file") -> bytes:
    """Exactly ``size`` bytes of the open file ``f`` (``open_regular``): its size is checked before
    anything is read, so a file larger than it should be is refused, not loaded into memory."""
    actual = os.fstat(f.fileno()).st_size
    if actual != size:
        raise error(f"{path}: size {actual:,} does not match the manifest ({size:,}); the {what} was altered or "
                    "truncated")
    data: bytes = f.read(size + 1)
    if len(data) != size:
        raise error(f"{path}: changed while it was read; the bundle is being rebuilt")
    return data


def npy_header(f: Any) -> tuple[tuple[int, ...], bool, Any]:
    """(shape, fortran_order, dtype) of the ``.npy`` array at the open file's position (format
    1.0 or 2.0), read without reading the array."""
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(f)
    return shape, fortran, dtype


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes, read in ``chunk``-byte blocks."""
    with open(path, "rb") as f:
        return sha256_stream(f, chunk)


def sha256_stream(f: Any, chunk: int = 1 << 20) -> str:
    """The hex sha256 of what is left to read of an open binary file."""
    h = hashlib.sha256()
    while block := f.read(chunk):
        h.update(block)
    return h.hexdigest()


@contextmanager
def pinned_file(path: str | Path, sha256: str, error: type[Exception], what: str = "file") -> Iterator[str]:
    """A path to exactly the bytes that were checked: ``path`` is opened once, hashed through that
    descriptor and compared with ``sha256`` (``error`` naming it on a mismatch), and what is yielded
    is the descriptor's own path (``/proc/self/fd/N``, ``/dev/fd/N``), so a library that opens it
    by name (llama.cpp) reads that same file even if ``path`` is replaced meanwhile. Only where
    neither exists is ``path`` itself yielded. The descriptor closes on exit (a mapping made from
    it stays valid)."""
    with open_regular(path, error, what, missing=f"cannot open the {what} (no such file)") as checked:  # no FIFO
        fd = os.dup(checked.fileno())
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            digest = sha256_stream(f)
        if digest != sha256:
            raise error(f"{path}: sha256 {digest[:12]}... does not match the pinned {sha256[:12]}...; "
                        f"the {what} was altered or replaced")
        for base in ("/proc/self/fd", "/dev/fd"):
            own = f"{base}/{fd}"
            if os.path.exists(own):
                yield own
                break
        else:
            yield str(path)
    finally:
        os.close(fd)


BLANK_LINE: Any = object()  # what ``json_line`` returns for a line of only white space (a JSON null is None)


def json_line(raw: bytes, n: int, path: str | Path, what: str, error: type[Exception]) -> Any:
    """Line ``n`` (from 1) of a JSON-lines file, parsed; ``BLANK_LINE`` for a blank one. A byte-order mark is
    allowed on the first line; bytes that are not UTF-8, text that is not JSON and JSON nested too
    deeply to be a ``what`` raise ``error`` naming ``path:n``."""
    where = f"{path}:{n}"
    text = utf8_text(raw, where, error, bom=n == 1)
    return BLANK_LINE if not text.strip() else json_text(text, where, what, error)


def utf8_text(raw: bytes, where: str, error: type[Exception], bom: bool = True) -> str:
    """``raw`` as UTF-8 text (a leading byte-order mark dropped where ``bom``); ``error`` naming ``where``."""
    try:
        return raw.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text ({e})") from None


def json_text(text: str, where: str, what: str, error: type[Exception]) -> Any:
    """``text`` parsed as JSON; text that is not JSON, or JSON nested too deeply to be a ``what``, raises
    ``error`` naming ``where`` (the one wording of every JSON file the project reads)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON ({e})") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply to be {what}") from None


def cache_home() -> Path:
    """Where built bundles, assembled models and cached vectors live: ``$MAGICSELECTOR_HOME``,
    default ``~/.cache/magicselector``."""
    return Path(os.environ.get("MAGICSELECTOR_HOME") or Path.home() / ".cache" / "magicselector")


def crash_point(step: str) -> None:
    """Exit at once, without cleanup, when ``$MAGICSELECTOR_CRASH_AT`` names ``step``: how the tests
    kill a build between two given steps of the atomic write."""
    if os.environ.get(CRASH_ENV) == step:
        os._exit(86)


def previous_dir(target: str | Path) -> Path:
    """Where ``target`` waits while it is replaced, where the file system cannot exchange two folders."""
    target = Path(target)
    return target.with_name(f".{target.name}.{PREVIOUS}")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's live process
    return True


class _WriterLock:
    """One folder's writers' lock in this process: a re-entrant thread lock, and the ``flock`` that
    its outermost holder takes for the process."""

    def __init__(self) -> None:
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd = -1


_WRITER_LOCKS: dict[str, _WriterLock] = {}
_WRITER_LOCKS_GUARD = threading.Lock()


@contextmanager
def writer_lock(target: str | Path) -> Iterator[None]:
    """Hold the writers' lock of ``target``'s parent folder: an exclusive ``flock`` on the folder
    itself (no lock file is left behind), so that writers of a bundle, in any process, take turns
    (and writers of its siblings wait too); re-entrant within a process, exclusive between its
    threads. Where ``fcntl`` is missing (Windows) or the file system refuses ``flock`` on a folder
    (NFS), only this process's threads take turns."""
    parent = Path(target).absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    key = str(parent.resolve())
    with _WRITER_LOCKS_GUARD:
        lock = _WRITER_LOCKS.setdefault(key, _WriterLock())
    with lock.thread_lock:
        if lock.depth == 0:
            lock.fd = _flock_folder(parent)
        lock.depth += 1
        try:
            yield
        finally:
            lock.depth -= 1
            if lock.depth == 0 and lock.fd >= 0:
                os.close(lock.fd)  # closing the descriptor releases the flock
                lock.fd = -1


def _flock_folder(folder: Path) -> int:
    try:
        import fcntl
    except ImportError:
        return -1
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            # a file system without flock on folders (NFS emulates it with write locks): writers in this
            # process still take turns, and a Selector's save still refuses a bundle rewritten under it
            return -1
        raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def sweep(target: str | Path) -> list[Path]:
    """Clean up after builds of ``target`` that were killed: restore the previous folder where a
    kill came between the two renames of a swap, and remove staging folders whose builder is gone
    (and what older versions left: ``.NAME.XXXXXXXX``, ``.NAME.old``). Returns what was removed."""
    target = Path(target)
    parent = target.parent
    if not parent.is_dir():
        return []
    _restore_previous(target)
    removed = []
    prefix = f".{target.name}."
    for entry in parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        rest = entry.name[len(prefix):]
        if entry.is_symlink() and rest.startswith(f"{LINK}-"):  # a link swap that a kill interrupted
            if not _builder_alive(rest, LINK):
                entry.unlink()
                removed.append(entry)
        elif _stale_build(entry, rest):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _restore_previous(target: Path) -> None:
    """The previous folder of a swap a kill interrupted: back in place where the target is gone,
    else removed."""
    previous = previous_dir(target)
    if previous.is_dir() and not previous.is_symlink():
        if not os.path.lexists(target):
            os.rename(previous, target)  # the kill came between the renames: the old bundle comes back
        else:
            shutil.rmtree(previous, ignore_errors=True)


def _builder_alive(rest: str, kind: str) -> bool:
    """Whether the process that made ``.NAME.<kind>-PID-TOKEN`` (``rest``: past ``.NAME.``) still runs."""
    pid = rest[len(kind) + 1:].partition("-")[0]
    return pid.isdigit() and _pid_alive(int(pid))


def _stale_build(entry: Path, rest: str) -> bool:
    """A folder next to the target that a killed build left: a staging folder whose builder is gone,
    or what older versions left (``.NAME.XXXXXXXX``, ``.NAME.old``) holding a bundle build."""
    if entry.is_symlink() or not entry.is_dir():
        return False
    if rest.startswith(f"{STAGING}-"):
        return not _builder_alive(rest, STAGING)  # a live one: another build of the same target is running
    return bool(_LEGACY_STAGING.fullmatch(rest)) and _looks_like_a_bundle_build(entry)


def _looks_like_a_bundle_build(folder: Path) -> bool:
    """An older build's leftover: empty, or holding what a bundle build writes first."""
    try:
        names = {p.name for p in folder.iterdir()}
    except OSError:
        return False
    return not names or bool(names & {"embedder", "manifest.json", "model.gguf", "adapter_config.json"})


def _fsync_tree(root: Path) -> None:
    """Flush every file and folder under ``root`` to disk before it is renamed into place."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def _fsync_dir(folder: Path) -> None:
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system
    or the file system has no such call."""
    if not sys.platform.startswith("linux") or os.environ.get(NO_EXCHANGE_ENV):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_into_place(staging: Path, target: Path) -> None:
    """Put the finished folder ``staging`` at ``target`` so that a reader sees the old folder or the
    new one, never neither: one exchange of the two where the system has it, else ``target`` to its
    ``previous_dir``, ``staging`` to ``target`` (a kill between the two leaves the old folder at
    ``previous_dir``, where ``Bundle.open`` finds it and the next build's ``sweep`` restores it)."""
    _fsync_tree(staging)
    crash_point("before-swap")
    if not os.path.lexists(target):
        os.rename(staging, target)
    elif target.is_dir() and not target.is_symlink() and _exchange(staging, target):
        crash_point("exchanged")
        shutil.rmtree(staging, ignore_errors=True)  # now the old folder: a reader keeps what it read
    else:
        previous = previous_dir(target)
        shutil.rmtree(previous, ignore_errors=True)
        os.rename(target, previous)
        crash_point("between-renames")
        os.rename(staging, target)
        crash_point("renamed")
        shutil.rmtree(previous, ignore_errors=True)
    _fsync_dir(target.parent)


@contextmanager
def staged_dir(target: str | Path, finish: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Build a folder next to ``target`` and swap it into place (``swap_into_place``) only if the
    build succeeds, after ``finish`` ran on it (a check, a signature): the folder at ``target`` is
    always a complete one, the old or the new. The whole build holds ``writer_lock(target)``, so
    concurrent writers take turns. Staging folders that killed builds left behind are swept first
    (``sweep``); a failed build removes its own. Where ``target`` is a symbolic link to a folder
    (``current -> releases/v1``), the new folder is built beside the link's folder and becomes a
    release folder of its own (``releases/release-N``, N the manifest's release), and the link is
    swapped to it in one rename; the old release folder stays, as a rollback target."""
    target = Path(target)
    with writer_lock(target):
        sweep(target)
        linked = target.is_symlink()
        home = target.resolve().parent if linked else target.parent
        if linked and not target.resolve().is_dir():
            raise FileNotFoundError(errno.ENOENT, "a symbolic link to no folder", str(target))
        tmp = home / f".{target.name}.{STAGING}-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            yield tmp
            if finish is not None:
                finish(tmp)
            if linked:
                _swap_link(tmp, target)
            else:
                swap_into_place(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _swap_link(staging: Path, link: Path) -> None:
    """Move the finished folder to a release folder of its own beside the one ``link`` points at,
    then point ``link`` at it with one rename of a new link over it (a reader sees the old target
    or the new one); the link stays relative if it was."""
    _fsync_tree(staging)
    crash_point("before-swap")
    release = _manifest_release(staging)
    home = staging.parent
    name = f"release-{release}" if release is not None else f"release-{secrets.token_hex(4)}"
    final = home / name
    while os.path.lexists(final):
        final = home / f"{name}-{secrets.token_hex(2)}"
    os.rename(staging, final)
    _fsync_dir(home)
    old = os.readlink(link)
    pointer = str(final) if os.path.isabs(old) else os.path.relpath(final, link.parent)
    tmp_link = link.with_name(f".{link.name}.{LINK}-{os.getpid()}-{secrets.token_hex(4)}")
    os.symlink(pointer, tmp_link)
    crash_point("link-made")
    os.replace(tmp_link, link)
    _fsync_dir(link.parent)


def _manifest_release(folder: Path) -> int | None:
    try:
        value = json.loads((folder / "manifest.json").read_text(encoding="utf-8")).get("release")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere):
    what the embedder gave back stays in the heap otherwise, and the process keeps its peak."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return cast(Callable[[int], int], fn)

"""Reading bundles: a folder with ``manifest.json`` naming every artifact with its size and sha256.

Loading verifies the manifest before anything is used; a missing or altered file is an error that
names the file. An artifact is read once into memory, checked against the manifest, and used from
those bytes (``Bundle.read``), so nothing can change between the check and the use. The default
bundle is built on first use from what the package ships (``magicselector.default_bundle``) and
cached under ``$MAGICSELECTOR_HOME`` (default ``~/.cache/magicselector``).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Mapping

from .errors import BundleError
from .files import (cache_home, json_text, open_regular, previous_dir, read_sized, sha256_file,  # noqa: F401
                    staged_dir, utf8_text)  # staged_dir is re-exported
from .signing import read_signature, verify_manifest_bytes

MANIFEST = "manifest.json"
FORMAT = "magicselector-bundle"
FORMAT_VERSION = 1
# Bumped whenever the default bundle's recipe changes, so caches from older recipes are not reused.
# v5: the reranker files carry graph_passes.first_token_last_layer (and tool vectors embedded in length groups)
# v7: the learned head (models/head) joins the bundle
# v9: golden.json gains the pipeline probes of every stage, schema_tokens.json the definition sizes (native core)
#     and the embedder as GGUF (embedder/model.gguf, the embedder section's gguf) that the native core runs
# v10: golden.json gains gguf_embeddings, the GGUF's own vectors in llama.cpp (the native embedder's exact check)
# v11: no cross-encoder (it left the runtime: docs/bench/reranker.md); the reranker files and golden scores are gone
# v12: tools embedded and indexed as catalog.jsonl gives them back (parameters in key order), a build
#      block beside the content_sha256 of the rest (reproducible bytes, issue 48)
DEFAULT_BUNDLE_RECIPE = "default-v14"
# the sections that stand for one artifact file each (a section's "file", relative to the folder)
ARTIFACT_SECTIONS = ("embedder", "index", "catalog", "golden", "decomposer", "lexical", "head")
MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists files and settings: kilobytes; refuse to read a huge one


def file_entry(root: Path, rel: str) -> dict[str, Any]:
    p = root / rel
    return {"sha256": sha256_file(p), "size": p.stat().st_size}


def default_bundle_dir() -> Path:
    return cache_home() / "bundles" / DEFAULT_BUNDLE_RECIPE


def _bundle_folder(path: Any) -> Path:
    """The bundle folder at ``path``: a folder path, or the previous folder where a build was killed
    between the two renames of its swap."""
    if not isinstance(path, (str, os.PathLike)) or "\x00" in os.fspath(path):
        raise BundleError(f"bundle path must be a folder path, got {path!r:.80}")
    folder = Path(path)
    if not folder.is_dir() and (previous_dir(folder) / MANIFEST).is_file():
        folder = previous_dir(folder)
    if not folder.is_dir():
        raise BundleError(f"{folder}: no such bundle folder")
    return folder


def _parsed_manifest(raw: bytes, mpath: Path) -> Mapping[str, Any]:
    """The manifest's JSON, checked to be this format and version."""
    manifest = json_text(utf8_text(raw, str(mpath), BundleError), str(mpath), "a manifest", BundleError)
    if not isinstance(manifest, Mapping) or manifest.get("format") != FORMAT:
        raise BundleError(f"{mpath}: not a magicselector bundle manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(f"{mpath}: format version {manifest.get('format_version')!r:.40} is not "
                          f"{FORMAT_VERSION}; rebuild the bundle with this magicselector")
    return manifest


def _relative_path(rel: Any, where: str) -> str:
    """A manifest's file path, checked: a non-empty, valid Unicode path relative to the bundle
    folder, never out of it."""
    if not isinstance(rel, str) or not rel:
        raise BundleError(f"{where}: a file path must be a non-empty string, got {rel!r:.80}")
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise BundleError(f"{where}: the path {rel!r:.80} is not valid Unicode") from None
    parts = PurePosixPath(rel).parts
    if ("\x00" in rel or "\\" in rel or rel.startswith("/") or PureWindowsPath(rel).drive or ".." in parts):
        raise BundleError(f"{where}: the path {rel!r:.120} leaves the bundle folder (an absolute path, a drive "
                          "or '..'); a bundle names its files relative to its own folder")
    return rel


def _sized_digest(f: Any, size: int, p: Path) -> str:
    """The sha256 of an open file that must hold ``size`` bytes: its size checked first, and one
    byte more than listed read, so a file that grows while it is hashed fails the check."""
    actual = os.fstat(f.fileno()).st_size
    if actual != size:
        raise BundleError(f"{p}: size {actual} does not match the manifest ({size}); "
                          "the file was altered or truncated")
    h = hashlib.sha256()
    left = size + 1
    try:
        while left > 0 and (block := f.read(min(1 << 20, left))):
            h.update(block)
            left -= len(block)
    except OSError as e:
        raise BundleError(f"{p}: cannot be read ({e.strerror or e})") from None
    return h.hexdigest()


@dataclass(frozen=True)
class Bundle:
    """A verified bundle folder and its manifest.

    Every path the manifest names is confined to the folder: relative, no ``..``, and resolving
    (symlinks followed) inside it, or the load fails with a BundleError naming the entry. With a
    ``public_key``, the manifest must carry a valid Ed25519 signature (``manifest.sig``,
    ``magicselector.signing``), checked over the very bytes that are then parsed.
    """

    path: Path
    manifest: Mapping[str, Any]
    manifest_bytes: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def open(cls, path: str | Path, verify: bool = True, public_key: Any = None,
             min_release: int | None = None) -> "Bundle":
        """Read and check the manifest (and with ``verify``, every file it lists). ``min_release``:
        refuse a bundle whose signed ``release`` is lower (an older bundle put back: a rollback)."""
        path = _bundle_folder(path)
        raw = cls._read_manifest(path)
        if public_key is not None:  # before parsing: nothing unsigned is interpreted
            verify_manifest_bytes(raw, read_signature(path), public_key, str(path))
        bundle = cls(path, _parsed_manifest(raw, path / MANIFEST), raw)
        bundle._check_release(min_release)
        if verify:
            bundle.verify_files()
        return bundle

    def _check_release(self, min_release: int | None) -> None:
        """The manifest's ``release`` checked, and (with ``min_release``) no lower than it."""
        release = self.release  # checks the field
        if min_release is None:
            return
        if isinstance(min_release, bool) or not isinstance(min_release, int):
            raise BundleError(f"min_release must be an integer, got {min_release!r:.40}")
        if release < min_release:
            raise BundleError(f"{self.path / MANIFEST}: release {release} is older than the oldest this app accepts "
                              f"({min_release}); an older bundle was put back (a rollback)")

    @staticmethod
    def _read_manifest(path: Path) -> bytes:
        """The manifest's bytes: a regular file (never a symbolic link), read once through one descriptor."""
        mpath = path / MANIFEST
        try:
            st = os.lstat(mpath)
        except FileNotFoundError:
            raise BundleError(f"{path}: not a bundle (no {MANIFEST})") from None
        except OSError as e:
            raise BundleError(f"{mpath}: cannot be read ({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise BundleError(f"{mpath}: a symbolic link; a bundle's manifest must be a file inside its folder")
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path}: not a bundle ({MANIFEST} is not a file)")
        try:
            fd = os.open(mpath, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped for a FIFO after the check
                    raise BundleError(f"{path}: not a bundle ({MANIFEST} is not a file)")
                os.set_blocking(fd, True)
                if os.fstat(f.fileno()).st_size > MAX_MANIFEST_BYTES:
                    raise BundleError(f"{mpath}: {os.fstat(f.fileno()).st_size:,} bytes; a manifest is at most "
                                      f"{MAX_MANIFEST_BYTES:,}")
                return f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as e:  # swapped for a link after the check, no permission
            raise BundleError(f"{mpath}: cannot be read ({e.strerror})") from None

    @property
    def release(self) -> int:
        """The manifest's ``release`` (0 for bundles made before releases were recorded)."""
        value = self.manifest.get("release", 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BundleError(f"{self.path / MANIFEST}: release must be a non-negative integer, got {value!r:.40}")
        return value

    def _confined(self, rel: Any, entry: str) -> Path:
        """``path / rel`` after checking that ``rel`` stays inside the bundle folder."""
        where = f"{self.path / MANIFEST}: {entry}"
        name = _relative_path(rel, where)
        try:
            root = self.path.resolve()
            target = (root / name).resolve()
        except (OSError, RuntimeError) as e:  # a name too long, a symlink loop
            raise BundleError(f"{where}: the path {name!r:.120} cannot be resolved ({e})") from None
        if target != root and root not in target.parents:
            raise BundleError(f"{where}: {name!r:.120} resolves to {target}, outside the bundle folder "
                              "(a symbolic link out of it)")
        return self.path / name

    def _entry(self, rel: str) -> Mapping[str, Any]:
        files = self.manifest.get("files")
        if not isinstance(files, Mapping) or not files:
            raise BundleError(f"{self.path / MANIFEST}: lists no files")
        entry = files.get(rel) if isinstance(rel, str) else None
        if entry is None:
            raise BundleError(f"{self.path}: {rel!r:.120} is not listed in the manifest")
        if not isinstance(entry, Mapping):
            raise BundleError(f"{self.path / MANIFEST}: files[{rel!r:.120}] must be an object with size and sha256")
        return entry

    def verify_files(self, skip: Any = ()) -> None:
        """Check every listed file (but those in ``skip``, already read and checked) against the manifest."""
        files = self.manifest.get("files")
        if not isinstance(files, Mapping) or not files:
            raise BundleError(f"{self.path / MANIFEST}: lists no files")
        for rel in files:
            if rel in skip:
                continue
            p = self._confined(rel, f"files[{rel!r:.120}]")
            entry = self._entry(rel)
            size = self._size(rel, entry)
            with self._open(p) as f:
                digest = _sized_digest(f, size, p)
            self._check_digest(p, digest, entry)

    @staticmethod
    def _check_digest(p: Path, digest: str, entry: Mapping[str, Any]) -> None:
        if digest != entry.get("sha256"):
            raise BundleError(f"{p}: sha256 {digest[:12]}... does not match the manifest "
                              f"({str(entry.get('sha256'))[:12]}...); the file was altered")

    def read(self, rel: str, verify: bool = True) -> bytes:
        """A listed file's bytes, read once: only a regular file (``files.open_regular``: a FIFO or
        device is refused at once, never waited on) of exactly the manifest's size, checked before
        anything is read (with ``verify`` off too); with ``verify``, also its sha256, so what the
        caller uses is exactly what was checked (no second open)."""
        p = self.file(rel)
        entry = self._entry(rel)
        size = self._size(rel, entry)  # checked with verify on or off: nothing larger than listed is read
        with self._open(p) as f:
            try:
                data = read_sized(f, size, p, BundleError)
            except OSError as e:
                raise BundleError(f"{p}: cannot be read ({e.strerror or e})") from None
        if verify:
            self._check_digest(p, hashlib.sha256(data).hexdigest(), entry)
        return data

    @staticmethod
    def _open(p: Path) -> Any:
        return open_regular(p, BundleError, "file", missing=f"missing from the bundle (listed in {MANIFEST})")

    def _size(self, rel: str, entry: Mapping[str, Any]) -> int:
        size = entry.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BundleError(f"{self.path / MANIFEST}: files[{rel!r:.120}].size must be a non-negative integer, "
                              f"got {size!r:.40}")
        return size

    def changed_on_disk(self) -> bool:
        """Whether the folder's manifest is no longer the one this Bundle read (a rebuild swapped it)."""
        try:
            return self._read_manifest(self.path) != self.manifest_bytes
        except BundleError:
            return True

    def sha256_of(self, rel: str) -> str:
        """The sha256 the manifest lists for a file (BundleError where it lists none)."""
        digest = self._entry(rel).get("sha256")
        if not isinstance(digest, str):
            raise BundleError(f"{self.path / MANIFEST}: files[{rel!r:.120}] has no sha256")
        return digest

    def file(self, rel: str) -> Path:
        files = self.manifest.get("files")
        if not isinstance(rel, str) or not isinstance(files, Mapping) or rel not in files:
            raise BundleError(f"{self.path}: {rel!r:.120} is not listed in the manifest")
        return self._confined(rel, f"files[{rel!r:.120}]")

    def section(self, name: str) -> Mapping[str, Any] | None:
        value = self.manifest.get(name)
        if not isinstance(value, Mapping):
            return None
        if name in ARTIFACT_SECTIONS and "file" not in value:
            raise BundleError(f"{self.path / MANIFEST}: the {name} section names no file ('file')")
        for key in ("file", "tokenizer"):  # the paths a section names: strings, listed, inside the folder
            if key in value:
                if not isinstance(value[key], str):
                    raise BundleError(f"{self.path / MANIFEST}: {name}.{key} must be a file path (a string), "
                                      f"got {value[key]!r:.80}")
                self.file(value[key])
        return value


def write_manifest(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Hash every file under ``root`` (but the manifest) into ``manifest['files']`` and write it."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = dict(manifest)
    manifest["format"] = FORMAT
    manifest["format_version"] = FORMAT_VERSION
    manifest["files"] = {rel: file_entry(root, rel) for rel in files}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest

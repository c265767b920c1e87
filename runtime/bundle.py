"""Bundles: a folder with ``manifest.json`` naming every artifact with its size and sha256.

Loading verifies the manifest before anything is used; a missing or altered file is an error that
names the file. The default bundle is built on first use from what the package ships (the INT8
models for this CPU, the phone catalog; ``magicselector.default_bundle``) and cached under
``$MAGICSELECTOR_HOME`` (default ``~/.cache/magicselector``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import BundleError
from .files import cache_home, sha256_file, staged_dir  # noqa: F401 - staged_dir is re-exported

MANIFEST = "manifest.json"
FORMAT = "magicselector-bundle"
FORMAT_VERSION = 1
# Bumped whenever the default bundle's recipe changes, so caches from older recipes are not reused.
DEFAULT_BUNDLE_RECIPE = "default-v3"
SHIPPED_RERANKER_DIR = Path(__file__).parent / "models" / "reranker"  # committed INT8 ONNX + model card


def file_entry(root: Path, rel: str) -> dict[str, Any]:
    p = root / rel
    return {"sha256": sha256_file(p), "size": p.stat().st_size}


def shipped_reranker_dir() -> Path | None:
    """The reranker folder that ships inside the package (None when this checkout has none)."""
    d = SHIPPED_RERANKER_DIR
    return d if (d / "model.onnx").is_file() and (d / "reranker.json").is_file() else None


def default_bundle_dir() -> Path:
    return cache_home() / "bundles" / DEFAULT_BUNDLE_RECIPE


@dataclass(frozen=True)
class Bundle:
    """A verified bundle folder and its manifest."""

    path: Path
    manifest: Mapping[str, Any]

    @classmethod
    def open(cls, path: str | Path, verify: bool = True) -> "Bundle":
        path = Path(path)
        mpath = path / MANIFEST
        if not path.is_dir():
            raise BundleError(f"{path}: no such bundle folder")
        if not mpath.is_file():
            raise BundleError(f"{path}: not a bundle (no {MANIFEST})")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise BundleError(f"{mpath}: not valid JSON ({e})") from None
        if manifest.get("format") != FORMAT:
            raise BundleError(f"{mpath}: not a magicselector bundle manifest")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise BundleError(f"{mpath}: format version {manifest.get('format_version')} is not "
                              f"{FORMAT_VERSION}; rebuild the bundle with this magicselector")
        bundle = cls(path, manifest)
        if verify:
            bundle.verify_files()
        return bundle

    def verify_files(self) -> None:
        files = self.manifest.get("files")
        if not isinstance(files, Mapping) or not files:
            raise BundleError(f"{self.path / MANIFEST}: lists no files")
        for rel, entry in files.items():
            p = self.path / rel
            if not p.is_file():
                raise BundleError(f"{p}: missing from the bundle (listed in {MANIFEST})")
            size = p.stat().st_size
            if size != entry.get("size"):
                raise BundleError(f"{p}: size {size} does not match the manifest ({entry.get('size')}); "
                                  "the file was altered or truncated")
            digest = sha256_file(p)
            if digest != entry.get("sha256"):
                raise BundleError(f"{p}: sha256 {digest[:12]}... does not match the manifest "
                                  f"({str(entry.get('sha256'))[:12]}...); the file was altered")

    def file(self, rel: str) -> Path:
        if rel not in self.manifest.get("files", {}):
            raise BundleError(f"{self.path}: {rel} is not listed in the manifest")
        return self.path / rel

    def section(self, name: str) -> Mapping[str, Any] | None:
        value = self.manifest.get(name)
        return value if isinstance(value, Mapping) else None


def write_manifest(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Hash every file under ``root`` (but the manifest) into ``manifest['files']`` and write it."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = dict(manifest)
    manifest["format"] = FORMAT
    manifest["format_version"] = FORMAT_VERSION
    manifest["files"] = {rel: file_entry(root, rel) for rel in files}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def ensure_default_bundle(progress: bool = True) -> Path:
    """The default bundle's folder, built on first use for this CPU from the models the package ships."""
    path = default_bundle_dir()
    if (path / MANIFEST).is_file():
        return path
    from .default_bundle import build_default_bundle

    build_default_bundle(path, progress=progress)
    return path

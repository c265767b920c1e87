"""Bundle signatures: Ed25519 over the exact bytes of ``manifest.json``, kept beside it as ``manifest.sig``.

The manifest lists every file with its sha256, so one signature over the manifest vouches for the
whole bundle: the hashes prove the files are the manifest's, the signature proves who wrote the
manifest. The signature file holds the 64 raw signature bytes (what Ed25519 verifiers on Android
read as they are). Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public); a public key
may also be given as the 32 raw key bytes, or their base64 or hex text, as an app pins it.

``cryptography`` is imported only when a key is used (``pip install 'magicselector[sign]'``).
This module works over bytes and files and imports no other bundle module: reading a bundle
(``magicselector.bundle``) checks signatures with it, writing one (``magicselector.bundle_writer``,
``sign_bundle``) makes them.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import BundleError, InputError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SIGNATURE_FILE = "manifest.sig"
MANIFEST_FILE = "manifest.json"
SIGNATURE_BYTES = 64
RAW_KEY_BYTES = 32
_MAX_KEY_FILE_BYTES = 64 * 1024  # a PEM key is a few hundred bytes; refuse to read anything large


def _crypto() -> None:
    """BundleError unless cryptography imports; each caller then imports what it uses by name, so
    mypy knows the modules' types (a module handed back from a function would be untyped)."""
    try:
        from cryptography.exceptions import InvalidSignature  # noqa: F401
        from cryptography.hazmat.primitives import serialization  # noqa: F401
        from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: F401
    except ImportError:
        raise BundleError("signing and verifying bundles needs the cryptography package: "
                          "pip install 'magicselector[sign]'") from None


def _key_bytes(key: Any, what: str) -> tuple[bytes, str]:
    """The bytes of a key given as bytes, or a path to a key file; and a name for messages."""
    if isinstance(key, (bytes, bytearray)):
        return bytes(key), what
    if isinstance(key, (str, os.PathLike)):
        return _named_key_bytes(os.fspath(key), what)
    raise InputError(f"{what}: a key is a file path or bytes, got {type(key).__name__}")


def _named_key_bytes(text: str, what: str) -> tuple[bytes, str]:
    """``_key_bytes`` of a string or path: PEM text, a key file's bytes, or base64 / hex key text."""
    if isinstance(text, str) and (text.lstrip().startswith("-----BEGIN") or "\x00" in text):
        return text.encode("utf-8", "surrogatepass"), what
    path = Path(text)
    try:
        if path.is_file():
            if path.stat().st_size > _MAX_KEY_FILE_BYTES:
                raise InputError(f"{path}: too large for a key file ({what})")
            return path.read_bytes(), str(path)
    except (OSError, ValueError) as e:
        raise InputError(f"{what}: cannot read the key file {text!r:.200} ({e})") from None
    if isinstance(text, str) and _decode_text_key(text) is not None:
        return text.encode("ascii"), what  # the key itself, as base64 or hex text
    raise InputError(f"{what}: no such key file {text!r:.200}")


def _decode_text_key(text: str) -> bytes | None:
    """32 raw key bytes from base64 or hex text, or None."""
    text = text.strip()
    if not text.isascii():
        return None
    if len(text) == 2 * RAW_KEY_BYTES:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            return None
    return raw if len(raw) == RAW_KEY_BYTES else None


def load_public_key(key: Any, what: str = "public key") -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file or text, 32 raw bytes, or base64 / hex text of them."""
    _crypto()
    from cryptography.hazmat.primitives.asymmetric import ed25519
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.public_key()
    data, name = _key_bytes(key, what)
    if data.lstrip().startswith(b"-----BEGIN"):
        return _pem_public_key(data, name)
    raw = _raw_key(data)
    if raw is None:
        raise InputError(f"{name}: not an Ed25519 public key (PEM, 32 raw bytes, or their base64 or hex)")
    return ed25519.Ed25519PublicKey.from_public_bytes(raw)


def _pem_public_key(data: bytes, name: str) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    try:
        loaded = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise InputError(f"{name}: not a PEM public key ({e})") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise InputError(f"{name}: a {type(loaded).__name__}, not an Ed25519 public key")
    return loaded


def _raw_key(data: bytes) -> bytes | None:
    """A key's 32 raw bytes: ``data`` itself, or its base64 or hex text decoded; None where it is neither."""
    if len(data) == RAW_KEY_BYTES:
        return data
    try:
        return _decode_text_key(data.decode("ascii"))
    except UnicodeDecodeError:
        return None


def load_private_key(key: Any, what: str = "signing key") -> Ed25519PrivateKey:
    """An Ed25519 private key from an unencrypted PKCS#8 PEM file (what ``bundle keygen`` writes)."""
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    data, name = _key_bytes(key, what)
    try:
        loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise InputError(f"{name}: not an unencrypted PEM private key ({e})") from None
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise InputError(f"{name}: a {type(loaded).__name__}, not an Ed25519 private key")
    return loaded


def raw_public_key(key: Any) -> bytes:
    """The 32 raw bytes of a public key (what an app pins)."""
    _crypto()
    from cryptography.hazmat.primitives import serialization
    return load_public_key(key).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_fingerprint(key: Any) -> str:
    """A short name for a public key: the first 16 hex digits of the sha256 of its raw bytes."""
    return hashlib.sha256(raw_public_key(key)).hexdigest()[:16]


def generate_keypair(prefix: str | Path) -> dict[str, str]:
    """Write ``PREFIX.key`` (private, PKCS#8 PEM, owner-only) and ``PREFIX.pub`` (public, PEM)."""
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    prefix = Path(prefix)
    private_path, public_path = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    for p in (private_path, public_path):
        if p.exists():
            raise InputError(f"{p}: already exists; keygen never overwrites a key")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = key.public_key()
    public_path.write_bytes(public.public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"private_key": str(private_path), "public_key": str(public_path),
            "public_key_base64": base64.b64encode(raw).decode("ascii"), "fingerprint": key_fingerprint(public)}


def sign_manifest_bytes(manifest: bytes, private_key: Any) -> bytes:
    return load_private_key(private_key).sign(manifest)


def verify_manifest_bytes(manifest: bytes, signature: bytes | None, public_key: Any, where: str) -> str:
    """Check ``signature`` over ``manifest`` with ``public_key``; BundleError unless it holds.
    Returns the key's fingerprint."""
    _crypto()
    from cryptography.exceptions import InvalidSignature
    key = load_public_key(public_key)
    if signature is None:
        raise BundleError(f"{where}: the bundle is not signed (no {SIGNATURE_FILE}) and a public key was given")
    if len(signature) != SIGNATURE_BYTES:
        raise BundleError(f"{where}/{SIGNATURE_FILE}: {len(signature)} bytes, not an Ed25519 signature "
                          f"({SIGNATURE_BYTES} bytes)")
    try:
        key.verify(signature, manifest)
    except InvalidSignature:
        raise BundleError(f"{where}/{SIGNATURE_FILE}: the signature does not match {MANIFEST_FILE} under public key "
                          f"{key_fingerprint(key)}: signed by another key, or the manifest was changed") from None
    return key_fingerprint(key)


def read_signature(bundle_dir: str | Path) -> bytes | None:
    """The bytes of ``manifest.sig`` (None when the bundle is unsigned)."""
    path = Path(bundle_dir) / SIGNATURE_FILE
    if not path.is_file() and not path.is_symlink():
        return None
    if path.is_symlink() or path.stat().st_size > _MAX_KEY_FILE_BYTES:
        raise BundleError(f"{path}: not a signature file (a link, or too large)")
    return path.read_bytes()


def write_signature(bundle_dir: str | Path, signature: bytes) -> Path:
    """Write ``manifest.sig`` (through a temporary file and a rename: never half a signature)."""
    target = Path(bundle_dir) / SIGNATURE_FILE
    tmp = target.with_name(f".{SIGNATURE_FILE}.tmp")
    tmp.write_bytes(signature)
    os.replace(tmp, target)
    return target


def verify_bundle_signature(bundle_dir: str | Path, public_key: Any) -> dict[str, Any]:
    """Check ``manifest.sig`` against the manifest under ``public_key`` (hashes are Bundle.open's job)."""
    root = Path(bundle_dir)
    manifest_path = root / MANIFEST_FILE
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise BundleError(f"{root}: not a bundle (no {MANIFEST_FILE}, or a symbolic link in its place)")
    fingerprint = verify_manifest_bytes(manifest_path.read_bytes(), read_signature(root), public_key, str(root))
    return {"signed": True, "fingerprint": fingerprint}

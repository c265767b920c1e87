"""Typed manifest sections for the encoder stages, and the one factory per task that builds a stage
from its section (the backend is chosen by ``magicselector.backends`` from the file's kind)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .bundle import Bundle
from .errors import BundleError
from .stages.embed import TextEmbedder, TextTokenizer
from .stages.rerank import PAIR_WINDOW_DEFAULTS, TRUNCATIONS, CrossEncoder, PairTokenizer
from .targets import TARGETS, warn_if_other_target

_MISSING = object()


def _section(raw: Any, name: str, where: str | Path) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        got = "none" if raw is None else type(raw).__name__
        raise BundleError(f"{where}: manifest section {name!r} must be an object, got {got}")
    return raw


def _text(raw: Mapping[str, Any], section: str, name: str, where: str | Path, default: Any = _MISSING) -> str:
    value = raw.get(name, default)
    if value is _MISSING:
        raise BundleError(f"{where}: manifest section {section!r} lacks the field {name!r}")
    if not isinstance(value, str) or not value:
        raise BundleError(f"{where}: manifest section {section!r}, field {name!r} must be a non-empty string, "
                          f"got {value!r}")
    return value


def _count(raw: Mapping[str, Any], section: str, name: str, where: str | Path, default: Any = _MISSING) -> int:
    value = raw.get(name, default)
    if value is _MISSING:
        raise BundleError(f"{where}: manifest section {section!r} lacks the field {name!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BundleError(f"{where}: manifest section {section!r}, field {name!r} must be a positive integer, "
                          f"got {value!r}")
    return value


@dataclass(frozen=True)
class EmbedderSection:
    """The manifest's ``embedder``: the encoder file, its tokenizer, the vector size and where the
    tokenizer truncates. Paths are relative to the bundle folder."""

    file: str
    tokenizer: str
    dim: int
    max_length: int = 128

    @classmethod
    def parse(cls, raw: Any, where: str | Path = "manifest.json") -> "EmbedderSection":
        raw = _section(raw, "embedder", where)
        return cls(file=_text(raw, "embedder", "file", where), tokenizer=_text(raw, "embedder", "tokenizer", where),
                   dim=_count(raw, "embedder", "dim", where),
                   max_length=_count(raw, "embedder", "max_length", where, cls.max_length))


@dataclass(frozen=True)
class RerankerSection:
    """The manifest's ``reranker``: the cross-encoder file, its tokenizer, the pair window it was
    trained with (``magicselector.stages.rerank``) and the CPU target its INT8 weights were
    quantized for (None: not recorded). Paths are relative to the bundle folder."""

    file: str
    tokenizer: str
    max_length: int = PAIR_WINDOW_DEFAULTS["max_length"]
    truncation: str = PAIR_WINDOW_DEFAULTS["truncation"]
    min_tool_tokens: int = PAIR_WINDOW_DEFAULTS["min_tool_tokens"]
    target: str | None = None

    @classmethod
    def parse(cls, raw: Any, where: str | Path = "manifest.json") -> "RerankerSection":
        raw = _section(raw, "reranker", where)
        truncation = _text(raw, "reranker", "truncation", where, cls.truncation)
        if truncation not in TRUNCATIONS:
            raise BundleError(f"{where}: manifest section 'reranker', field 'truncation' must be one of "
                              f"{TRUNCATIONS}, got {truncation!r}")
        target = raw.get("target")
        if target is not None and target not in TARGETS:
            raise BundleError(f"{where}: manifest section 'reranker', field 'target' must be one of "
                              f"{', '.join(TARGETS)}, got {target!r:.40}")
        return cls(file=_text(raw, "reranker", "file", where), tokenizer=_text(raw, "reranker", "tokenizer", where),
                   max_length=_count(raw, "reranker", "max_length", where, cls.max_length), truncation=truncation,
                   min_tool_tokens=_count(raw, "reranker", "min_tool_tokens", where, cls.min_tool_tokens),
                   target=target)


def _path(bundle: Bundle | Path, rel: str) -> Path:
    # an opened bundle checks that the file is one its manifest lists; a folder being built has no manifest yet
    return bundle.file(rel) if isinstance(bundle, Bundle) else Path(bundle) / rel


def open_embedder(section: EmbedderSection, bundle: Bundle | Path, threads: int = 1) -> TextEmbedder:
    """The embed stage of a bundle (or of the folder a bundle is being built in)."""
    return TextEmbedder.from_path(_path(bundle, section.file), _path(bundle, section.tokenizer), dim=section.dim,
                                  max_length=section.max_length, threads=threads)


def open_reranker(section: RerankerSection, bundle: Bundle | Path, threads: int = 1) -> CrossEncoder:
    """The rerank stage of a bundle (or of the folder a bundle is being built in). An opened bundle
    whose reranker was quantized for another CPU than this one warns once (``magicselector.targets``)."""
    if isinstance(bundle, Bundle):
        warn_if_other_target(section.target, f"{bundle.path}'s reranker")
    tokenizer = PairTokenizer(_path(bundle, section.tokenizer), section.max_length, section.truncation,
                              section.min_tool_tokens)
    return CrossEncoder(_path(bundle, section.file), tokenizer, threads=threads)

"""Typed manifest sections for the encoder stages, the one factory per task that builds a stage
from its section (the backend is chosen by ``magicselector.backends`` from the file's kind), and
``load_artifacts``: every artifact of an opened bundle read once, checked, and loaded from those bytes."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .backends import EncoderModel, open_model
from .bundle import MANIFEST, Bundle
from .catalog import Catalog, parse_tool
from .errors import BundleError, CatalogError
from .files import BLANK_LINE, json_line
from .stages.embed import TextEmbedder, TextTokenizer
from .stages.head import HeadModel
from .stages.index import ToolIndex
from .stages.lexical import LexicalIndex, bundle_lexical

_MISSING = object()
GGUF_EMBEDDER_FILE = "embedder/model.gguf"  # the embedder as GGUF (llama.cpp) in a bundle, for the native core


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
    """The manifest's ``embedder``: the encoder file, its tokenizer, the vector size, where the
    tokenizer truncates, and the same model as GGUF (``gguf.file``, which the native core runs;
    None in a bundle without one). Paths are relative to the bundle folder."""

    file: str
    tokenizer: str
    dim: int
    max_length: int = 128
    gguf: str | None = None

    @classmethod
    def parse(cls, raw: Any, where: str | Path = "manifest.json") -> "EmbedderSection":
        raw = _section(raw, "embedder", where)
        gguf = raw.get("gguf")
        if gguf is not None:
            gguf = _text(_section(gguf, "embedder.gguf", where), "embedder.gguf", "file", where)
        return cls(file=_text(raw, "embedder", "file", where), tokenizer=_text(raw, "embedder", "tokenizer", where),
                   dim=_count(raw, "embedder", "dim", where),
                   max_length=_count(raw, "embedder", "max_length", where, cls.max_length), gguf=gguf)


def _path(bundle: Bundle | Path, rel: str) -> Path:
    # an opened bundle checks that the file is one its manifest lists; a folder being built has no manifest yet
    return bundle.file(rel) if isinstance(bundle, Bundle) else Path(bundle) / rel


def _model(bundle: Bundle | Path, rel: str, threads: int, verify: bool) -> EncoderModel:
    """An opened bundle's model is read once, checked and loaded from those bytes at once; a folder
    being built opens its file (lazily)."""
    if isinstance(bundle, Bundle):
        name = str(bundle.path / rel)
        return open_model(bundle.file(rel), threads=threads, data=bundle.read(rel, verify), name=name)
    return open_model(Path(bundle) / rel, threads=threads)


def _tokenizer_bytes(bundle: Bundle | Path, rel: str, verify: bool) -> bytes | None:
    return bundle.read(rel, verify) if isinstance(bundle, Bundle) else None


def open_embedder(section: EmbedderSection, bundle: Bundle | Path, threads: int = 1,
                  verify: bool = True) -> TextEmbedder:
    """The embed stage of a bundle (or of the folder a bundle is being built in)."""
    tokenizer = TextTokenizer(_path(bundle, section.tokenizer), section.max_length,
                              data=_tokenizer_bytes(bundle, section.tokenizer, verify))
    key = (f"{bundle.sha256_of(section.file)}:{bundle.sha256_of(section.tokenizer)}:{section.max_length}"
           if isinstance(bundle, Bundle) else "")
    return TextEmbedder(_model(bundle, section.file, threads, verify), tokenizer, dim=section.dim, vectors_key=key)


def read_catalog(bundle: Bundle, rel: str, verify: bool = True) -> Catalog:
    """The bundle's ``catalog.jsonl`` (what ``Catalog.write_jsonl`` wrote), parsed from its checked bytes."""
    path = bundle.file(rel)
    data = bundle.read(rel, verify)
    tools = []
    for n, line in enumerate(data.split(b"\n"), 1):
        entry = json_line(line, n, path, "a tool", CatalogError)
        if entry is not BLANK_LINE:
            tools.append(parse_tool(entry, where=f"{path}:{n}"))
    if not tools:
        raise CatalogError(f"{path}: the catalog holds no tools")
    ids = [t.id for t in tools]
    if len(set(ids)) != len(ids):
        raise CatalogError(f"{path}: the same tool id appears twice")
    return Catalog(tools, source=str(path))


@dataclass(frozen=True)
class BundleArtifacts:
    """What a Selector is made of, every file read once and checked: nothing is opened later."""

    catalog: Catalog
    embedder: TextEmbedder
    index: ToolIndex
    lexical: LexicalIndex | None
    head: HeadModel | None
    read: frozenset[str]  # the files read (and, with verify, checked) here


def load_artifacts(bundle: Bundle, threads: int = 1, verify: bool = True) -> BundleArtifacts:
    """Build every stage of an opened bundle from its files' checked bytes: the embedder's session
    is created now, the index, catalog and lexical index fully parsed, so a damaged, truncated or
    missing file is a BundleError naming it before any query. With ``verify``, every other listed
    file (golden probes, a decomposer, the cross-encoder files of a bundle built before it left the
    runtime, which are ignored) is checked against the manifest too."""
    emb, idx, cat = bundle.section("embedder"), bundle.section("index"), bundle.section("catalog")
    if not (emb and idx and cat):
        raise BundleError(f"{bundle.path}: manifest lacks an embedder, index or catalog section")
    where = bundle.path / MANIFEST
    emb_section = EmbedderSection.parse(emb, where)
    read = {cat["file"], idx["file"], emb_section.file, emb_section.tokenizer}
    if emb_section.gguf is not None:
        bundle.file(emb_section.gguf)  # a listed file (checked with every other one below); the native core runs it
    catalog = read_catalog(bundle, cat["file"], verify)
    index = ToolIndex.from_bytes(bundle.read(idx["file"], verify), catalog.ids, name=str(bundle.file(idx["file"])))
    embedder = open_embedder(emb_section, bundle, threads=threads, verify=verify)
    if embedder.dim != index.ndim:
        raise BundleError(f"{where}: the embedder makes {embedder.dim}-d vectors but the index holds {index.ndim}-d")
    lexical = bundle_lexical(bundle, catalog.ids, verify=verify)
    lex = bundle.section("lexical")
    if lex:
        read.add(lex["file"])
    head = None
    hd = bundle.section("head")
    if hd:
        head_file = _text(hd, "head", "file", where)
        head = HeadModel.from_bytes(bundle.read(head_file, verify), str(bundle.file(head_file)))
        read.add(head_file)
    if verify:
        bundle.verify_files(skip=read)
    return BundleArtifacts(catalog, embedder, index, lexical, head, frozenset(read))

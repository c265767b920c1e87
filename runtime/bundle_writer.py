"""Writing bundle folders: the embedder files, the catalog embedded into a usearch index,
golden vectors, a hashed manifest with its release number, and its signature; every write is built
aside, signed there and swapped into place (``magicselector.files.staged_dir``), so a bundle appears
complete and signed or not at all. Torch-free: the default bundle is written with it at run time,
the exporters call it with the models they produce, and ``Selector.save`` rewrites a bundle's
catalog, index and lexical index with it (``rewrite_bundle``)."""
from __future__ import annotations

import hashlib
import json
import platform
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .bundle import MANIFEST, Bundle, write_manifest
from .catalog import Catalog, load_catalog, tool_text
from .errors import BundleError, InputError
from .files import crash_point, previous_dir, staged_dir
from .formats import FORMATS
from .golden import SCHEMA_TOKENS_FILE, schema_token_table, shipped_pipeline_probes
from .signing import key_fingerprint, load_private_key, sign_manifest_bytes, write_signature
from .sections import GGUF_EMBEDDER_FILE, EmbedderSection, open_embedder
from .stages.embed import TextEmbedder, TextTokenizer
from .stages.head import HEAD_FILE, HeadModel
from .stages.index import ToolIndex
from .stages.lexical import LexicalIndex

# Utterances that probe parity and index recall; phone requests of the kinds the product serves.
PROBE_QUERIES = [
    "wake me up at 6:30 tomorrow",
    "set a timer for ten minutes",
    "remind me to call mom when I get home",
    "what's the weather like in Berlin this weekend",
    "turn on bluetooth and play some jazz",
    "text Sam that I'm running late",
    "send an email to my boss about the budget",
    "navigate to the nearest gas station",
    "get me a ride to the airport",
    "turn the wifi off",
    "make the screen brighter",
    "take a selfie",
    "show me photos from last summer",
    "add milk and eggs to my shopping list",
    "order a large pepperoni pizza",
    "turn off the living room lights",
    "how many steps did I walk today",
    "translate good morning into Spanish",
    "what are today's top headlines",
    "book a hotel in Rome for next Friday",
    "pay Alex 20 dollars for dinner",
    "put on the latest episode of my podcast",
    "cancel my 3 pm meeting",
    "call the dentist",
]

# Manifest fields that say when, where and how fast a bundle was built (or rewritten), not what it
# holds: ``content_sha256`` covers the rest, so the same inputs built twice give the same digest.
VOLATILE_FIELDS = ("build", "release", "content_sha256", "rewritten_from")


def content_digest(manifest: Any) -> str:
    """sha256 of the manifest's content: every field but ``VOLATILE_FIELDS`` (the file hashes
    included), as canonical JSON (sorted keys, no spaces)."""
    kept = {k: v for k, v in manifest.items() if k not in VOLATILE_FIELDS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def write_digested_manifest(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """``write_manifest`` (every file hashed into ``files``), with ``content_sha256`` added."""
    manifest = write_manifest(root, {k: v for k, v in manifest.items() if k != "content_sha256"})
    manifest["content_sha256"] = content_digest(manifest)
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def build_block(catalog_source: str, seconds: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest's ``build`` block: when and on what kind of machine (not its name) the bundle was
    written, where its catalog was read from, how long its exports took."""
    block: dict[str, Any] = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "host": {"machine": platform.machine(), "system": platform.system()},
                             "catalog_source": catalog_source}
    if seconds:
        block["seconds"] = seconds
    return block


def _timed_apart(section: dict[str, Any] | None, name: str, seconds: dict[str, Any]) -> None:
    """Move a section's ``export_seconds`` (a run's time, not the model's) into ``seconds[name]``."""
    if section is not None and "export_seconds" in section:
        seconds[name] = section.pop("export_seconds")


def package_versions() -> dict[str, str]:
    """Versions of the packages that made a bundle, read from their metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("magicselector", "numpy", "onnxruntime", "usearch", "tokenizers", "torch", "transformers", "onnx",
                 "executorch", "torchao", "llama-cpp-python"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:  # an exporter that is not installed is not recorded
            pass
    return out


def measure_index_recall(vectors: np.ndarray, queries: np.ndarray, k: int = 10) -> dict[str, float]:
    """Recall@k of usearch f16 and i8 indexes against exact cosine search, on these vectors."""
    ids = [f"t{i}" for i in range(len(vectors))]
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :k]
    out = {}
    for dtype in ("f16", "i8"):
        index = ToolIndex(vectors.shape[1], dtype)
        index.add(ids, vectors)
        hits = 0
        for row, (got, _) in zip(exact, index.search(queries, k)):
            hits += len({f"t{i}" for i in row} & set(got))
        out[dtype] = hits / float(exact.size)
    return out


def choose_index_dtype(recall: dict[str, float], floor: float = 0.99) -> str:
    """i8 halves the index against f16; take it only when it keeps recall@10 >= floor."""
    return "i8" if recall.get("i8", 0.0) >= floor else "f16"


GOLDEN_TEXTS = ("turn on bluetooth and play some jazz", "set_alarm: Create a new alarm", "hi")
GGUF_GOLDEN_FORMAT = "magicselector-gguf-golden/1"
# The GGUF in llama.cpp fed the same ids one text per decode gives the same vectors up to float
# rounding and thread-count reduction order, so its own golden vectors are held tight.
GGUF_GOLDEN_COSINE_MIN = 0.999
# The GGUF against the INT8 ONNX vectors of the pipeline probes: two engines, the ONNX one
# quantizing activations per batch (0.967 against itself in another batch; the GGUF's worst on the
# development turn texts 0.973): docs/bench/native.md, "Golden vectors".
CROSS_ENGINE_COSINE_MIN = 0.97


def golden_vectors(embedder: TextEmbedder, tokenizer: TextTokenizer) -> dict[str, Any]:
    """Probe inputs with expected outputs, for ports of the runtime to other languages (the
    ``pipeline`` block of every stage on probe turns is added by ``golden.pipeline_probes``)."""
    texts = list(GOLDEN_TEXTS)
    enc = tokenizer.encode(texts)
    emb = embedder.embed(texts)
    return {
        "tokenizer": [{"text": t, "input_ids": enc["input_ids"][i][enc["attention_mask"][i] == 1].tolist()}
                      for i, t in enumerate(texts)],
        "embeddings": [{"text": t, "vector": emb[i].round(6).tolist()} for i, t in enumerate(texts)],
        "embedding_tolerance": 0.02,
    }


def token_ids(tokenizer: TextTokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids as the tokenizer gives them, padding dropped."""
    enc = tokenizer.encode(list(texts))
    return [row[mask == 1].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"])]


def gguf_golden_embeddings(gguf: str | Path, tokenizer: TextTokenizer, threads: int = 1) -> dict[str, Any]:
    """The GGUF embedder's own golden vectors: ``GOLDEN_TEXTS`` tokenized by the bundle's tokenizer
    and run in llama.cpp (llama-cpp-python) one text per decode, as the native core runs them.
    Written next to the shipped GGUF and into golden.json's ``gguf_embeddings``."""
    from .backends.llama import embed_token_ids, import_llama_cpp, load_llama_embedder
    from .files import sha256_file

    ids = token_ids(tokenizer, GOLDEN_TEXTS)
    vectors = embed_token_ids(load_llama_embedder(gguf, threads=threads), ids)
    version = getattr(import_llama_cpp(), "__version__", "unknown")
    return {"format": GGUF_GOLDEN_FORMAT, "gguf_sha256": sha256_file(gguf),
            "engine": f"llama.cpp (llama-cpp-python {version}): one text per decode, mean pooled, L2-normalised",
            "cosine_min": GGUF_GOLDEN_COSINE_MIN, "cross_engine_cosine_min": CROSS_ENGINE_COSINE_MIN,
            "embeddings": [{"text": t, "input_ids": i, "vector": v.astype(np.float64).round(6).tolist()}
                           for t, i, v in zip(GOLDEN_TEXTS, ids, vectors)]}


def check_gguf_golden(golden: Any, gguf_sha256: str, tokenizer: TextTokenizer, where: str) -> dict[str, Any]:
    """``golden`` (``gguf_golden_embeddings``'s record, read from ``where``) if it belongs to the
    GGUF of ``gguf_sha256`` and this tokenizer's ids of ``GOLDEN_TEXTS``; BundleError otherwise."""
    if not isinstance(golden, dict) or golden.get("format") != GGUF_GOLDEN_FORMAT:
        raise BundleError(f"{where}: not {GGUF_GOLDEN_FORMAT} golden vectors")
    if golden.get("gguf_sha256") != gguf_sha256:
        raise BundleError(f"{where}: gguf_sha256 is not the GGUF's; regenerate it: "
                          "python3 -m magicselector.export.shipped_embedder --gguf-golden")
    cases = golden.get("embeddings")
    if not isinstance(cases, list) or [c.get("text") for c in cases if isinstance(c, dict)] != list(GOLDEN_TEXTS):
        raise BundleError(f"{where}: embeddings are not the golden texts {list(GOLDEN_TEXTS)}")
    if [c.get("input_ids") for c in cases] != token_ids(tokenizer, GOLDEN_TEXTS):
        raise BundleError(f"{where}: input_ids are not this tokenizer's")
    return golden


def resolve_release(out: str | Path, release: int | None) -> int:
    """The release number a new bundle at ``out`` carries: ``release`` when given (a positive
    integer), else the current Unix time in seconds, or one more than the bundle already at ``out``
    where that is higher, so releases grow from build to build on one machine and roughly across
    machines (an app refuses older ones with ``min_release``)."""
    if release is not None:
        if isinstance(release, bool) or not isinstance(release, int) or release < 1:
            raise InputError(f"release must be a positive integer, got {release!r:.40}")
        return release
    previous = 0
    try:
        previous = int(json.loads((Path(out) / MANIFEST).read_text(encoding="utf-8")).get("release", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return max(int(time.time()), previous + 1)


def sign_staged(root: Path, private_key: Any) -> dict[str, Any]:
    """Check a folder's files against its manifest, then write ``manifest.sig`` over the manifest's
    very bytes that were checked."""
    key = load_private_key(private_key)  # a bad key fails before anything is read
    bundle = Bundle.open(root, verify=True)
    target = write_signature(bundle.path, sign_manifest_bytes(bundle.manifest_bytes, key))
    return {"signature": str(target), "fingerprint": key_fingerprint(key.public_key())}


def sign_bundle(bundle_dir: str | Path, private_key: Any) -> dict[str, Any]:
    """Sign a bundle in place (``bundle sign``): its files are checked, then ``manifest.sig`` is
    written next to the manifest (one rename; the manifest itself does not change)."""
    return sign_staged(Path(bundle_dir), private_key)


def build_bundle(out: str | Path, *, embedder_onnx: str | Path, tokenizer_file: str | Path, catalog: Catalog,
                 embedder_meta: dict[str, Any], index_dtype: str | None = None,
                 extra: dict[str, Any] | None = None, log: Callable[[str], None] = print,
                 decomposer: dict[str, Any] | None = None,
                 build_check: Callable[[Path], None] | None = None, target: str | None = None,
                 signing_key: Any = None, release: int | None = None,
                 head: str | Path | None = None, embedder_gguf: dict[str, Any] | None = None,
                 build: dict[str, Any] | None = None, cards: dict[str, str] | None = None,
                 head_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a bundle folder from an exported embedder and a catalog; returns the manifest.

    ``embedder_onnx`` may be an ``.onnx`` or an ExecuTorch ``.pte`` file. ``decomposer``
    (``{"gguf", "meta", "golden"}``, from ``magicselector.export.gguf.export_decomposer``) adds its
    artifact, manifest section and golden probes. ``build_check`` runs on the finished folder
    before it is moved into place (an exception there leaves nothing behind). ``target`` names the
    CPU target (``magicselector.targets``) the INT8 models were quantized for; the runtime warns once
    when it runs a bundle on another. ``signing_key`` (an Ed25519 private key) signs the manifest
    after ``build_check``; a bad key fails before any work. ``release``: ``resolve_release``.
    ``head``: a learned-head file (``stages/head.py``) fitted on this embedder's rankings.
    ``embedder_gguf`` (``{"file", "meta"}``): the same embedder as GGUF for llama.cpp (the native
    core), copied to ``embedder/model.gguf`` and named by the embedder section's ``gguf``.
    ``build``: more of the manifest's ``build`` block (``build_block``; e.g. ``{"seconds": ...}``);
    ``cards``: model cards, ``{path in the bundle: Markdown}``; ``head_meta``: more fields of the head
    section (its training ``record``).
    The folder appears only when everything succeeded, signed when a key was given (built aside,
    then swapped into place; the bundle that was at ``out`` stays until then). The manifest's
    ``content_sha256`` covers all but its volatile fields (``VOLATILE_FIELDS``): the same inputs,
    built twice with the same packages, give the same files and the same digest.
    """
    out = Path(out)
    key = load_private_key(signing_key) if signing_key is not None else None
    with staged_dir(out) as root:  # holds the writers' lock: the release is resolved under it, so it is unique
        release = resolve_release(out, release)
        emb_section = _write_embedder(root, embedder_onnx, tokenizer_file, embedder_meta, embedder_gguf)
        embedder = open_embedder(EmbedderSection.parse(emb_section, "embedder_meta"), root, threads=2)
        catalog.write_jsonl(root / "catalog.jsonl")
        # embedded and indexed as a Selector reads it back (parameters in key order): the index holds the
        # tool texts the runtime computes, and a rebuild from the bundle's own catalog gives the same bytes
        written = load_catalog(root / "catalog.jsonl")
        log(f"embedding {len(written)} tools")
        index, index_section = _write_index(root, embedder, written, index_dtype)
        lexical = LexicalIndex.from_catalog(written)
        lexical.save(root / "lexical.npz")
        golden = golden_vectors(embedder, embedder.tokenizer)
        if embedder_gguf is not None:
            golden["gguf_embeddings"] = _gguf_golden(root / GGUF_EMBEDDER_FILE, embedder_gguf, embedder.tokenizer)
        dec_section = _add_decomposer(root, decomposer, golden) if decomposer else None
        head_section = {**_add_head(root, Path(head)), **(head_meta or {})} if head is not None else None
        _write_cards(root, cards or {})
        _write_probes(root, golden, embedder, index, lexical, head_section is not None)
        manifest = {
            "build": _build_record(catalog.source, emb_section, dec_section, build or {}),
            "embedder": emb_section,
            "index": index_section,
            "catalog": {"file": "catalog.jsonl", "tools": len(catalog),
                        "tool_text": "name (de-snake-cased): description (parameters: names)"},
            "lexical": {"file": "lexical.npz", **lexical.describe()},
            "golden": {"file": "golden.json"},
            "schema_tokens": {"file": SCHEMA_TOKENS_FILE, "formats": list(FORMATS)},
            "decomposer": dec_section,
            "head": head_section,
            "target": target,
            "exporters": package_versions(),
            **(extra or {}),
            "release": release,
        }
        return _finish_bundle(root, manifest, build_check, key, log)


def _write_embedder(root: Path, embedder_onnx: str | Path, tokenizer_file: str | Path, embedder_meta: dict[str, Any],
                    embedder_gguf: dict[str, Any] | None) -> dict[str, Any]:
    """The embedder's files copied into ``root/embedder``; its manifest section."""
    (root / "embedder").mkdir()
    emb_rel = "embedder/model" + (".pte" if str(embedder_onnx).endswith(".pte") else ".onnx")
    shutil.copy2(embedder_onnx, root / emb_rel)
    shutil.copy2(tokenizer_file, root / "embedder" / "tokenizer.json")
    max_length = int(embedder_meta.get("max_length", 128))
    emb_section = {"file": emb_rel, "tokenizer": "embedder/tokenizer.json",
                   "pooling": "mean", "normalize": True, "max_length": max_length, **embedder_meta}
    emb_section.pop("gguf", None)  # meta copied from another manifest names a GGUF this build may not write
    if embedder_gguf is not None:
        shutil.copy2(embedder_gguf["file"], root / GGUF_EMBEDDER_FILE)
        emb_section["gguf"] = {"file": GGUF_EMBEDDER_FILE, **embedder_gguf.get("meta", {})}
    return emb_section


def _write_index(root: Path, embedder: Any, catalog: Catalog, index_dtype: str | None) -> tuple[ToolIndex, dict[str, Any]]:
    """The catalog embedded into ``root/index.usearch`` (i8 unless its recall says f16); the index
    and its manifest section."""
    tool_vecs = embedder.embed([tool_text(t) for t in catalog])
    recall = measure_index_recall(tool_vecs, embedder.embed(PROBE_QUERIES))
    dtype = index_dtype or choose_index_dtype(recall)
    index = ToolIndex(tool_vecs.shape[1], dtype)
    index.add(catalog.ids, tool_vecs, threads=1)  # one thread: the same graph, the same bytes, every build
    index.save(root / "index.usearch")
    return index, {"file": "index.usearch", "metric": "cos", "dtype": dtype, "ndim": int(tool_vecs.shape[1]),
                   "recall_at_10_vs_exact": recall,
                   "dtype_rule": "i8 when its recall@10 against exact search is >= 0.99, else f16"}


def _write_cards(root: Path, cards: dict[str, str]) -> None:
    """Model cards, ``{path in the bundle: Markdown}``."""
    for rel, text in cards.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def _write_probes(root: Path, golden: dict[str, Any], embedder: Any, index: ToolIndex, lexical: LexicalIndex,
                  has_head: bool) -> None:
    """The pipeline probes into ``golden.json`` and the schema-token table, over the catalog as
    written (the tools as a Selector reads them, key order included)."""
    written = load_catalog(root / "catalog.jsonl")
    golden["pipeline"] = shipped_pipeline_probes(written, embedder, index, lexical, root / HEAD_FILE if has_head else None)
    (root / SCHEMA_TOKENS_FILE).write_text(json.dumps(schema_token_table(written)) + "\n")
    (root / "golden.json").write_text(json.dumps(golden) + "\n")


def _build_record(source: str, emb_section: dict[str, Any], dec_section: dict[str, Any] | None,
                  build: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``build`` block: ``build_block`` with the models' timings set apart, and the
    caller's fields (dicts merge: the exporter's seconds beside the models')."""
    seconds: dict[str, Any] = {}
    for name, section in (("embedder", emb_section), ("decomposer", dec_section)):
        _timed_apart(section, name, seconds)
    block = build_block(source, seconds)
    for field, value in build.items():
        block[field] = {**block[field], **value} if isinstance(value, dict) and isinstance(block.get(field), dict) \
            else value
    return block


def _finish_bundle(root: Path, manifest: dict[str, Any], build_check: Callable[[Path], None] | None, key: Any,
                   log: Callable[[str], None]) -> dict[str, Any]:
    """The manifest hashed and written, the build check run, then the manifest signed (with a key)."""
    log("hashing artifacts into manifest.json")
    manifest = write_digested_manifest(root, manifest)
    crash_point("manifest-written")
    if build_check is not None:
        build_check(root)
    if key is not None:
        log(f"signing the manifest (key {sign_staged(root, key)['fingerprint']})")
        crash_point("signed")
    return manifest


def _gguf_golden(gguf: Path, embedder_gguf: dict[str, Any], tokenizer: TextTokenizer) -> dict[str, Any]:
    """The GGUF's golden vectors: the ones written beside it (``embedder_gguf["golden"]``, checked to
    be its own), else computed (llama-cpp-python, which converting a GGUF needs anyway)."""
    from .files import sha256_file

    if embedder_gguf.get("golden") is not None:
        return check_gguf_golden(embedder_gguf["golden"], sha256_file(gguf), tokenizer, f"{embedder_gguf['file']} golden")
    return gguf_golden_embeddings(gguf, tokenizer)


def _add_head(root: Path, src: Path) -> dict[str, Any]:
    """Copy a learned-head file into the bundle, checked first (a bad one fails the build)."""
    if not src.is_file():
        raise InputError(f"{src}: no such head file")
    data = src.read_bytes()
    model = HeadModel.from_bytes(data, str(src))
    (root / HEAD_FILE).write_bytes(data)
    return {"file": HEAD_FILE, "depth": model.depth, "layers": [int(w.shape[1]) for w, _ in model.layers]}


def _add_decomposer(root: Path, decomposer: dict[str, Any], golden: dict[str, Any]) -> dict[str, Any]:
    (root / "decomposer").mkdir()
    rel = "decomposer/model.gguf"
    shutil.copy2(decomposer["gguf"], root / rel)
    golden["decomposer"] = [{"prompt": c["prompt"], "input_ids": list(map(int, c["input_ids"])),
                             "expected": list(map(int, c["expected"]))} for c in decomposer.get("golden", [])]
    golden["decomposer_tolerance"] = {"first_token_agreement_min": 0.5}
    return {"file": rel, **decomposer.get("meta", {})}


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


# id(source Bundle) -> (a weak reference to it, {folder: the manifest bytes last written there from it}):
# a Selector that saves to its own folder twice is not another writer
_OWN_WRITES: dict[int, tuple[Any, dict[str, bytes]]] = {}


def _own_writes(source: Bundle) -> dict[str, bytes]:
    import weakref

    key = id(source)
    ref, writes = _OWN_WRITES.get(key, (None, {}))
    if ref is None or ref() is not source:
        def forget(_: Any) -> None:
            _OWN_WRITES.pop(key, None)

        writes = {}
        _OWN_WRITES[key] = (weakref.ref(source, forget), writes)
    return writes


def _check_source_is_current(source: Bundle, out: Path) -> None:
    """Refuse to write over a bundle that another writer rewrote after ``source`` was read from it
    (another process, or another Selector): the tools it added or removed would be lost without a
    word (last writer wins)."""
    if not (_same_folder(source.path, out) or source.path == previous_dir(out)):
        return
    try:
        current = Bundle._read_manifest(out)
    except BundleError:
        return  # nothing readable there to lose
    if current != source.manifest_bytes and current != _own_writes(source).get(str(out.resolve())):
        raise BundleError(f"{out}: rewritten by another writer since this Selector loaded it (release "
                          f"{source.release}); load the bundle again and redo the change, or save elsewhere")


def _copy_checked(source: Bundle, rel: str, root: Path, out: Path | None = None) -> None:
    """Copy one listed file of ``source`` into ``root``; the copy is what is hashed, so it is
    exactly the file the source manifest vouches for, or a BundleError. A source that was opened
    where a killed swap had left it (``previous_dir(out)``), and that the sweep has since put back
    at ``out``, is read there."""
    dest = root / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    entry = source.manifest["files"][rel]
    path = source.file(rel)
    if out is not None and source.path == previous_dir(out) and not source.path.exists():
        path = out / rel
    h = hashlib.sha256()
    try:
        with open(path, "rb") as src, open(dest, "wb") as dst:
            while block := src.read(1 << 20):
                h.update(block)
                dst.write(block)
    except OSError as e:
        raise BundleError(f"{source.path / rel}: cannot be copied ({e.strerror})") from None
    if h.hexdigest() != entry.get("sha256"):
        raise BundleError(f"{source.path / rel}: changed since this Selector loaded its bundle (sha256 "
                          f"{h.hexdigest()[:12]}... is not the manifest's); load the bundle again before saving")


def write_state(root: Path, files: dict[str, str], catalog: Catalog, index: Any, lexical: Any) -> dict[str, Any]:
    """Write a catalog, its ToolIndex and its LexicalIndex (None: built from the catalog) into
    ``root`` under the names in ``files``; returns their manifest sections' new fields."""
    from .stages.lexical import LexicalIndex

    catalog.write_jsonl(root / files["catalog"])
    index.save(root / files["index"])
    if lexical is None:
        lexical = LexicalIndex.from_catalog(catalog)
    lexical.save(root / files["lexical"])
    written = load_catalog(root / files["catalog"])  # the tools as a Selector reads them (key order included)
    (root / files["schema_tokens"]).write_text(json.dumps(schema_token_table(written)) + "\n")
    return {"schema_tokens": {"formats": list(FORMATS)}, "catalog": {"tools": len(catalog)},
            "index": {"dtype": index.dtype, "ndim": int(index.ndim)},
            "lexical": lexical.describe()}


# The files of a Selector's run-time state, by manifest section, where the source names none.
_STATE_FILES = {"catalog": "catalog.jsonl", "index": "index.usearch", "lexical": "lexical.npz",
                "schema_tokens": SCHEMA_TOKENS_FILE}


def _state_files(source: Bundle) -> dict[str, str]:
    """The files of the run-time state, as the source's manifest names them."""
    names = {}
    for name, default in _STATE_FILES.items():
        section = source.manifest.get(name)
        names[name] = section["file"] if isinstance(section, dict) and isinstance(section.get("file"), str) else default
    return names


def _rewritten_manifest(source: Bundle, changed: dict[str, Any], names: dict[str, str], release: int
                        ) -> dict[str, Any]:
    """The source's manifest with the rewritten state's sections, a run-time build block, this
    release and what it was rewritten from (its files listed and hashed by the writer)."""
    manifest = {k: v for k, v in source.manifest.items() if k not in ("files", "format", "format_version")}
    for name, fields in changed.items():
        manifest[name] = _rewritten_section(source, name, fields, names[name])
    manifest.get("catalog", {}).pop("source", None)  # bundles before the build block kept it there
    before = source.manifest.get("build")
    before = before if isinstance(before, dict) else {}
    manifest.pop("created", None)
    manifest["build"] = {**build_block("<rewritten at run time>"),
                         **({"seconds": before["seconds"]} if "seconds" in before else {})}
    manifest["release"] = release
    manifest["rewritten_from"] = {"release": source.release,
                                  "created": before.get("created", source.manifest.get("created")),
                                  "content_sha256": source.manifest.get("content_sha256")}
    return manifest


def _rewritten_section(source: Bundle, name: str, fields: dict[str, Any], file: str) -> dict[str, Any]:
    """A rewritten section: the source's fields (none for the lexical index, which describes itself
    whole) under the new ones; an index's measured recall dropped where its dtype changed."""
    base = dict(source.manifest.get(name) or {}) if name != "lexical" else {}
    if name == "index" and base.get("dtype") != fields["dtype"]:
        base.pop("recall_at_10_vs_exact", None)
    return {**base, **fields, "file": file}


def rewrite_bundle(source: Bundle, out: str | Path, *,
                   snapshot: Callable[[Callable[..., dict[str, Any]]], dict[str, Any]],
                   signing_key: Any = None, release: int | None = None) -> dict[str, Any]:
    """Write ``source``'s bundle to ``out`` with another catalog, index and lexical index (what a
    Selector holds after tools were added or removed at run time); returns the new manifest.

    Every other file (models, tokenizers, golden probes, a decomposer) is copied and checked
    against ``source``'s manifest. ``snapshot(write)`` must call ``write(catalog, index, lexical)``
    once, holding whatever lock keeps the three consistent, and return its result. The folder is
    built aside, signed with ``signing_key`` when given, and swapped into place (``out`` may be the
    source folder itself): the bundle that was there stays until the new one is complete."""
    out = Path(out)
    key = load_private_key(signing_key) if signing_key is not None else None
    names = _state_files(source)
    with staged_dir(out) as root:  # holds the writers' lock: the check and the release are made under it
        _check_source_is_current(source, out)
        release = resolve_release(out, release)
        for rel in source.manifest["files"]:
            if rel not in names.values():
                _copy_checked(source, rel, root, out)
        crash_point("models-copied")
        changed = snapshot(lambda catalog, index, lexical: write_state(root, names, catalog, index, lexical))
        manifest = write_digested_manifest(root, _rewritten_manifest(source, changed, names, release))
        written = (root / MANIFEST).read_bytes()
        crash_point("manifest-written")
        if key is not None:
            sign_staged(root, key)
            crash_point("signed")
    _own_writes(source)[str(out.resolve())] = written
    return manifest

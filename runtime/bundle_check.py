"""``bundle verify``: hashes, loading every artifact, the golden vectors and the golden pipeline probes re-run (``golden.py``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .bundle import Bundle
from .errors import BundleError
from .golden import SCHEMA_TOKENS_FILE, check_pipeline, schema_token_table
from .selector import Selector

if TYPE_CHECKING:
    from .stages.embed import TextEmbedder


def verify_bundle(path: str | Path) -> dict[str, Any]:
    """Check a bundle end to end; raises BundleError naming what failed, else returns the checks run."""
    try:
        return _verify(path)
    except (KeyError, TypeError, IndexError, AttributeError) as e:  # golden.json of the wrong shape
        raise BundleError(f"{path}: golden.json does not hold the probes a bundle writes "
                          f"({type(e).__name__}: {str(e)[:120]})") from None


def _verify(path: str | Path) -> dict[str, Any]:
    selector = Selector.from_bundle(path, verify=True)  # every file checked, every model loaded
    bundle = cast(Bundle, selector.bundle)  # from_bundle sets it
    checks: dict[str, Any] = {"files": len(bundle.manifest["files"]), "tools": len(selector.catalog),
                              "release": bundle.release}
    checks.update(check_content_digest(bundle))
    golden_meta = bundle.section("golden")
    if golden_meta:
        golden = _golden_file(bundle, golden_meta["file"])
        checks.update(_check_golden_embedder(selector, golden))
        if golden.get("gguf_embeddings"):
            checks.update(_check_golden_gguf(bundle, golden["gguf_embeddings"]))
        if golden.get("pipeline"):
            checks.update(check_pipeline(selector, golden["pipeline"]))
        checks.update(_check_schema_tokens(bundle, selector))
        if golden.get("decomposer"):
            checks.update(_check_golden_decomposer(bundle, golden))
    sel = selector.select("turn on bluetooth")
    checks["smoke_selection"] = sel.ids[:3]
    return checks


def _golden_file(bundle: Bundle, rel: str) -> dict[str, Any]:
    """The bundle's golden probes, read from their checked bytes."""
    try:
        golden: dict[str, Any] = json.loads(bundle.read(rel).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BundleError(f"{bundle.file(rel)}: not readable golden probes ({e})") from None
    return golden


def _check_golden_embedder(selector: Selector, golden: dict[str, Any]) -> dict[str, Any]:
    """The embedder's tokenizer gives the golden token ids and its vectors the golden ones (within
    the file's cosine tolerance)."""
    tok = cast("TextEmbedder", selector.embedder).tokenizer  # what a bundle's embedder section loads
    for case in golden["tokenizer"]:
        enc = tok.encode([case["text"]])
        ids = enc["input_ids"][0][enc["attention_mask"][0] == 1].tolist()
        if ids != case["input_ids"]:
            raise BundleError(f"golden tokenizer ids differ for {case['text']!r}")
    texts = [c["text"] for c in golden["embeddings"]]
    got = selector.embedder.embed(texts)
    cos = [float(np.dot(g, np.asarray(c["vector"], dtype=np.float32))) for g, c in zip(got, golden["embeddings"])]
    if min(cos) < 1.0 - float(golden.get("embedding_tolerance", 0.02)):
        raise BundleError(f"golden embeddings differ: worst cosine {min(cos):.4f}")
    return {"golden_tokenizer": len(golden["tokenizer"]), "golden_embeddings_min_cosine": round(min(cos), 5)}


def check_content_digest(bundle: Bundle) -> dict[str, Any]:
    """The manifest's ``content_sha256`` (where it has one: bundles built before it was written have
    none) must be the digest of its content (``bundle_writer.content_digest``)."""
    from .bundle_writer import content_digest

    want = bundle.manifest.get("content_sha256")
    if want is None:
        return {}
    got = content_digest(bundle.manifest)
    if want != got:
        raise BundleError(f"{bundle.path / 'manifest.json'}: content_sha256 {str(want)[:12]:.12}... is not the "
                          f"digest of the manifest's content ({got[:12]}...); the manifest was edited")
    return {"content_sha256": got}


def _check_schema_tokens(bundle: Bundle, selector: Selector) -> dict[str, Any]:
    """schema_tokens.json (where the bundle has one) must hold the catalog's definition sizes."""
    section = bundle.section("schema_tokens")
    if not section:
        return {}
    try:
        table = json.loads(bundle.read(section["file"]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BundleError(f"{bundle.file(section['file'])}: not a readable schema token table ({e})") from None
    if table != schema_token_table(selector.catalog):
        raise BundleError(f"{bundle.file(section['file'])}: the definition sizes differ from the catalog's "
                          f"(a {SCHEMA_TOKENS_FILE} of another catalog, or another token counter)")
    return {"schema_tokens": len(table["tools"])}


def verify_native(path: str | Path, binary: str | Path, timeout: float = 600.0) -> dict[str, Any]:
    """``magicselector-native verify BUNDLE``: the native build's own check of every golden stage;
    its JSON report, or a BundleError with what it said where it found a mismatch."""
    import subprocess

    exe = Path(binary)
    if not exe.is_file():
        raise BundleError(f"--native: {exe} is not a file (build it with `magicselector native build`)")
    try:
        run = subprocess.run([str(exe), "verify", str(path)], capture_output=True, text=True, timeout=timeout)
    except OSError as e:
        raise BundleError(f"--native: {exe} cannot run ({e.strerror})") from None
    except subprocess.TimeoutExpired:
        raise BundleError(f"--native: {exe} verify took over {timeout:.0f} s") from None
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        report = None
    if run.returncode != 0 or not isinstance(report, dict):
        said = (run.stdout.strip() or run.stderr.strip())[-2000:]
        raise BundleError(f"native verify failed (exit {run.returncode}): {said}")
    return report


def _check_golden_gguf(bundle: Bundle, golden: dict[str, Any]) -> dict[str, Any]:
    """Run the GGUF embedder in llama.cpp on the golden ids, one text per decode, against its own
    golden vectors (where llama-cpp-python is installed)."""
    gguf = (bundle.section("embedder") or {}).get("gguf")
    if not isinstance(gguf, dict):
        raise BundleError("golden.json has gguf_embeddings but the manifest's embedder names no gguf")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return {"golden_gguf_embeddings": "skipped: llama-cpp-python is not installed (pip install 'magicselector[llm]')"}
    from .backends.llama import embed_token_ids, load_llama_embedder

    cases = golden["embeddings"]
    got = embed_token_ids(load_llama_embedder(bundle.file(gguf["file"])), [c["input_ids"] for c in cases])
    cos = [float(np.dot(g, np.asarray(c["vector"], dtype=np.float32))) for g, c in zip(got, cases)]
    floor = float(golden["cosine_min"])
    if min(cos) < floor:
        raise BundleError(f"golden GGUF embeddings differ: worst cosine {min(cos):.5f} < {floor}")
    return {"golden_gguf_embeddings_min_cosine": round(min(cos), 6)}


def _check_golden_decomposer(bundle: Bundle, golden: dict[str, Any]) -> dict[str, Any]:
    """Load the GGUF decomposer and re-run its greedy probe continuations."""
    dec = bundle.section("decomposer")
    if not dec:
        raise BundleError("golden.json has decomposer probes but the manifest names no decomposer")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return {"golden_decomposer": "skipped: llama-cpp-python is not installed (pip install 'magicselector[llm]')"}
    from .backends.llama import greedy, load_llama

    llm = load_llama(bundle.file(dec["file"]))
    cases = golden["decomposer"]
    firsts, prefix = 0, 0
    for case in cases:
        out = greedy(llm, case["input_ids"], len(case["expected"]))
        exp = case["expected"]
        firsts += bool(out and exp and out[0] == exp[0])
        n = 0
        while n < min(len(out), len(exp)) and out[n] == exp[n]:
            n += 1
        prefix += n
    share = firsts / max(1, len(cases))
    floor = float(golden.get("decomposer_tolerance", {}).get("first_token_agreement_min", 0.5))
    if share < floor:
        raise BundleError(f"golden decomposer continuations differ: first tokens agree on {share:.2f} of the "
                          f"prompts (< {floor})")
    return {"golden_decomposer_prompts": len(cases), "golden_decomposer_first_token": round(share, 3),
            "golden_decomposer_mean_prefix": round(prefix / max(1, len(cases)), 3)}

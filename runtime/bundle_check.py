"""``bundle verify``: hashes, loading every artifact, and the golden vectors re-run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .bundle import Bundle
from .errors import BundleError
from .selector import Selector
from .stages.cut import paper_cut


def verify_bundle(path: str | Path) -> dict[str, Any]:
    """Check a bundle end to end; raises BundleError naming what failed, else returns the checks run."""
    bundle = Bundle.open(path, verify=True)
    selector = Selector.from_bundle(path, verify=False)
    checks: dict[str, Any] = {"files": len(bundle.manifest["files"]), "tools": len(selector.catalog)}
    golden_meta = bundle.section("golden")
    if golden_meta:
        golden = json.loads(bundle.file(golden_meta["file"]).read_text())
        tok = selector.embedder.tokenizer
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
        for case in golden["adaptive_k"]:
            c = paper_cut(np.asarray(case["scores"]), np.asarray(case["embeddings"]), case["k_min"], case["k_max"])
            if c.k != case["k"]:
                raise BundleError(f"golden adaptive K differs: {c.k} != {case['k']} for scores {case['scores']}")
        checks.update(golden_tokenizer=len(golden["tokenizer"]), golden_embeddings_min_cosine=round(min(cos), 5),
                      golden_adaptive_k=len(golden["adaptive_k"]))
    sel = selector.select("turn on bluetooth")
    checks["smoke_selection"] = sel.ids[:3]
    return checks

"""The native core's selection parity with the Python runtime on the development parts, at the issue's two levels.

Per development evaluation part (``quality.development_sets``; a seeded sample of ``limit`` queries,
drawn as ``eval --limit`` draws them), a bundle of the part's catalog is written (the shipped bundle
``with_catalog``, saved), and every turn is selected by the Python runtime (``Selector.select``,
``SelectorConfig()``) and by ``magicselector-native``:

- fed vectors (``magicselector-native replay``): the native core gets the Python embedder's vectors of
  every retrieval text, and must give the same kept ids, order and K on every turn;
- its own embedder (``magicselector-native select``, the bundle's GGUF on llama.cpp): the share of
  turns whose kept set equals the Python one, and NDCG@10 / C@5 (of the ranked list), C@K and mean K
  on both sides.

    python -m magicselector.bench.native_parity BIN --bundle DIR --work DIR [--limit 500] [--out report.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from magicselector.data.metrics import completeness_at_k, ndcg_at_k
from magicselector.errors import MagicSelectorError
from magicselector.selector import Selector

from .native_text_parity import _history, development_turns


def part_bundle(base: Selector, catalog: Any, out: Path) -> Selector:
    """A bundle of ``catalog`` at ``out`` (the base bundle's models, this catalog's index, BM25 and
    definition sizes), and the Python Selector read back from it: what the native core reads."""
    if not (out / "manifest.json").is_file():
        base.with_catalog(catalog).save(out)
    return Selector.from_bundle(out)


def _f32(vector: Any) -> list[float]:
    return [float(str(x)) for x in np.asarray(vector, dtype=np.float32)]


def python_turns(selector: Selector, queries: Sequence[Any]) -> list[dict[str, Any]]:
    """Each turn's request (with the vectors of its retrieval texts) and the Python selection."""
    rows = []
    for q in queries:
        history = _history(q)
        row: dict[str, Any] = {"id": q.id, "gold": list(q.gold), "request": {"query": q.query, "history": history}}
        try:
            sel = selector.select(q.query, history)
        except MagicSelectorError as e:
            row["error"] = type(e).__name__
            rows.append(row)
            continue
        texts = sel.to_dict()["retrieved_texts"]
        row["vectors"] = [_f32(v) for v in selector.embedder.embed(texts)]
        row.update(ids=sel.ids, k=sel.k, ranked=list(sel.ranked_ids))
        rows.append(row)
    return rows


def run_native(binary: Path, command: str, bundle: Path, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``BIN command BUNDLE`` over these requests (one JSON line each), its answers in order."""
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    run = subprocess.run([str(binary), command, str(bundle), "--options", '{"ranked_ids": true}'], input=text,
                         capture_output=True, text=True, timeout=3600)
    out = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    if len(out) != len(lines):
        raise RuntimeError(f"{binary} {command}: {len(out)} answers to {len(lines)} requests "
                           f"(exit {run.returncode}): {run.stderr[-500:]}")
    return out


def quality(rows: Sequence[tuple[list[str], list[str], list[str]]]) -> dict[str, float]:
    """NDCG@10 and C@5 of the ranked lists, C@K of the kept ones, mean K, over (gold, ranked, kept)."""
    if not rows:
        return {}
    return {"NDCG@10": float(np.mean([ndcg_at_k(r, g, 10) for g, r, _ in rows])),
            "C@5": float(np.mean([completeness_at_k(r, g, 5) for g, r, _ in rows])),
            "C@K": float(np.mean([completeness_at_k(k, g, len(k)) for g, _, k in rows])),
            "K": float(np.mean([len(k) for _, _, k in rows]))}


def compare_part(binary: Path, bundle: Path, turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Both levels of parity on one part's turns."""
    fed = run_native(binary, "replay", bundle, [{**t["request"], "vectors": t.get("vectors", [])} for t in turns])
    t0 = time.perf_counter()
    own = run_native(binary, "select", bundle, [t["request"] for t in turns])
    own_s = time.perf_counter() - t0
    same_fed = same_set = refused_both = refused_one = 0
    first_diff = None
    py_q, native_q = [], []
    for t, f, o in zip(turns, fed, own):
        if "error" in t:
            both = "error" in o
            refused_both += both
            refused_one += not both
            continue
        if "error" in f or "error" in o:
            refused_one += 1
            continue
        exact = [x["id"] for x in f["tools"]] == t["ids"] and f["k"] == t["k"]
        same_fed += exact
        if not exact and first_diff is None:
            first_diff = {"id": t["id"], "python": t["ids"], "native": [x["id"] for x in f["tools"]]}
        kept = [x["id"] for x in o["tools"]]
        same_set += set(kept) == set(t["ids"])
        py_q.append((t["gold"], t["ranked"], t["ids"]))
        native_q.append((t["gold"], o["ranked_ids"], kept))
    answered = len(py_q)
    py, nat = quality(py_q), quality(native_q)
    return {"turns": len(turns), "answered": answered, "refused_by_both": refused_both, "refused_by_one": refused_one,
            "fed_vectors_same_selection": same_fed, "fed_vectors_first_difference": first_diff,
            "own_embedder_same_kept_set": same_set, "own_embedder_same_kept_set_share": same_set / max(answered, 1),
            "python": py, "native": nat, "delta": {k: nat[k] - py[k] for k in py},
            "native_select_seconds": round(own_s, 2)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m magicselector.bench.native_parity", description=__doc__.split("\n")[0])
    ap.add_argument("binary", type=Path, help="the magicselector-native executable")
    ap.add_argument("--bundle", type=Path, default=None, help="the shipped bundle (default: the default bundle)")
    ap.add_argument("--work", type=Path, required=True, help="a folder for the parts and their bundles")
    ap.add_argument("--shared-data", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the report here as JSON")
    args = ap.parse_args(argv)
    base = Selector.from_bundle(args.bundle)
    report: dict[str, Any] = {"limit": args.limit, "seed": args.seed, "parts": {}}
    for part, bench, queries in development_turns(args.work / "sets", args.shared_data, args.limit, args.seed,
                                                  note=lambda m: print(m, file=sys.stderr)):
        folder = args.work / "bundles" / part.replace(" ", "-")
        selector = part_bundle(base, bench.catalog, folder)
        turns = python_turns(selector, queries)
        report["parts"][part] = compare_part(args.binary, folder, turns)
        print(part, json.dumps(report["parts"][part]), file=sys.stderr)
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    ok = all(p["fed_vectors_same_selection"] == p["answered"] and p["refused_by_one"] == 0 for p in report["parts"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

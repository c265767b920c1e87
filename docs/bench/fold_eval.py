"""docs/bench/history.md, "Trained for the question-only fold": one bundle under one history mode on every development part, echo and realistic generated dialogues included.

python3 docs/bench/fold_eval.py BUNDLE|default MODE OUT.json [N [CUT [CONFIG]]]   # N seeded queries a part (default 500)
CUT: a JSON object of CutConfig fields that replace the shipped cut's, e.g. '{"range_margin": 0.6}';
CONFIG: the same for SelectorConfig fields, e.g. '{"history_turns": 6}';
PARTS=realistic,bfcl (environment) keeps only the parts whose name starts so.
Parts: /tmp/mobile and /tmp/mobile_real (history.md), /tmp/splits (budget.md). Per part: C@5, C@10, NDCG@10 of
the ranking, and C@K, mean and p90 K, MCP schema tokens per turn of the shipped cut.
"""
import json, os, sys
from dataclasses import replace
import numpy as np
from magicselector import Selector
from magicselector.catalog import load_catalog
from magicselector.data.metrics import ndcg_at_k
from magicselector.formats import tool_definition
from magicselector.tokens import schema_tokens
from ranking_probes import queries  # budget_eval.py's sample: random.Random(0) shuffle, first n

PARTS = {f"{v}/{p}": f"/tmp/{d}/{p}" for v, d in (("echo", "mobile"), ("realistic", "mobile_real"))
         for p in ("dev", "test", "test_ood")}
PARTS |= {"bfcl/eval": "/tmp/splits/bfcl/eval", "metatool/eval": "/tmp/splits/metatool/eval"}


def part(sel, d, n):
    tok = {}
    cost = lambda i: tok.setdefault(i, schema_tokens(tool_definition(sel.catalog.get(i), "mcp")))
    rows = []
    for q in queries(d, n):
        g, s = set(q["gold"]), sel.select(q["query"], q["history"])
        rows.append((g <= set(s.ranked_ids[:5]), g <= set(s.ranked_ids[:10]), ndcg_at_k(s.ranked_ids, g, 10),
                     g <= set(s.ids), s.k, sum(cost(i) for i in s.ids)))
    a = np.array(rows, dtype=float)
    return {"C@5": a[:, 0].mean(), "C@10": a[:, 1].mean(), "NDCG@10": a[:, 2].mean(), "C@K": a[:, 3].mean(),
            "meanK": a[:, 4].mean(), "p90K": float(np.percentile(a[:, 4], 90)), "tokens": a[:, 5].mean()}


def main(bundle, mode, out, n=500, cut="{}", config="{}", wrap=lambda sel: sel,
         over=lambda base, catalog: base if catalog is base.catalog else base.with_catalog(catalog)):
    """``wrap``: a probe's change to each part's Selector (fold_probes.py); ``over(base, catalog)``: the
    Selector over a part's catalog (embedder_eval.py builds every index with another embedder)."""
    base = Selector.from_bundle(None if bundle == "default" else bundle)
    base = base.with_config(history=mode, cut=replace(base.config.cut, **json.loads(cut)), **json.loads(config))
    only = tuple(os.environ.get("PARTS", "").split(",")) if os.environ.get("PARTS") else ("",)
    res = {}
    for name, d in PARTS.items():
        if not name.startswith(only):
            continue
        sel = wrap(over(base, base.catalog if name.startswith(("echo", "realistic")) else load_catalog(f"{d}/tools.jsonl")))
        res[name] = {k: round(float(v), 4) for k, v in part(sel, d, n).items()}
        print(f"{name:20s}", " ".join(f"{k} {v:.3f}" for k, v in res[name].items()), flush=True)
    json.dump({"bundle": bundle, "history": mode, "n": n, "cut": json.loads(cut), "config": json.loads(config), "parts": res}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:5]), *sys.argv[5:7])

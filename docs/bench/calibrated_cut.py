"""docs/bench/budget.md: a calibrated per-list cut (logistic regression fitted on the train parts) against rmargin, at matched mean K.

python3 docs/bench/calibrated_cut.py BUNDLE|default
Features per candidate of each retrieval list: the fused score, its gap to the top and to the next,
its min-max position in the head, log rank, the list's top gap and spread, the z-score, the cosine
and its gap to the top cosine, BM25 over the list's best, how many lists hold it in their top 5, and
the number of lists. Fitted (Newton, L2 1e-2) on the generated train split and the bfcl / metatool
train parts (tool-disjoint from the eval parts); the cut keeps each list's prefix with p >= tau.
"""
import json, random, sys, time
from dataclasses import replace
import numpy as np
from magicselector import Selector
from magicselector.catalog import load_catalog
from magicselector.config import DEFAULT_CUT
from magicselector.stages.cut import CutConfig, apply_cut

bundle = None if sys.argv[1] == "default" else sys.argv[1]
TRAIN = {"mobile/train": ("/tmp/mobile/train", 2621), "bfcl/train": ("/tmp/splits/bfcl/train", 1742),
         "metatool/train": ("/tmp/splits/metatool/train", 1500)}
DEV = {"mobile/test": "/tmp/mobile/test", "mobile/test_ood": "/tmp/mobile/test_ood",
       "bfcl/eval": "/tmp/splits/bfcl/eval", "metatool/eval": "/tmp/splits/metatool/eval"}
base = Selector.from_bundle(bundle)

def rankings(d, n, seed=0):
    qs = [json.loads(l) for l in open(f"{d}/queries.jsonl")]
    random.Random(seed).shuffle(qs); qs = qs[:n]
    sel = base.with_catalog(load_catalog(f"{d}/tools.jsonl"))
    keep = sel.with_config(cut=CutConfig(rule="fixed", fixed_k=sel.config.candidates))
    out = []
    for q in qs:
        s = keep.select(q["query"], q["history"])
        texts = [t for t, _, _ in s.lists]
        vecs = keep.embedder.embed(texts)
        lists = []
        top5 = {}
        for _, i, _ in s.lists:
            for t in i[:5]: top5[t] = top5.get(t, 0) + 1
        for (t, i, sc), v in zip(s.lists, vecs):
            i = list(i)
            cos = keep.index.vectors(i) @ v if i else np.zeros(0)
            bm = keep.lexical.score_of(keep.lexical.scores(t), i) if i else np.zeros(0)
            extra = np.stack([cos, cos[0] - cos if len(i) else cos, bm / max(float(np.max(bm)) if len(bm) else 0, 1e-9),
                              np.array([top5.get(x, 0) for x in i], dtype=float), np.full(len(i), float(len(s.lists)))], axis=1) if i else np.zeros((0, 5))
            lists.append((i, np.asarray(sc, dtype=np.float64), extra))
        out.append((set(q["gold"]), s.ranked_ids, lists))
    return out

def feats(s, extra=None, depth=15):
    s = np.asarray(s, dtype=np.float64); n = len(s)
    h = s[:depth] if depth else s
    rng = max(h.max() - h.min(), 1e-9); sd = max(h.std(), 1e-9)
    i = np.arange(n)
    nxt = np.append(s[:-1] - s[1:], 0.0)
    top_gap = (s[0] - s[1]) if n > 1 else 0.0
    return np.stack([s, s[0] - s, (s - h.min()) / rng, np.log1p(i), nxt, np.full(n, top_gap), np.full(n, sd),
                     (s - h.mean()) / sd, (i == 0).astype(float), np.full(n, float(n))], axis=1) if extra is None else \
        np.hstack([np.stack([s, s[0] - s, (s - h.min()) / rng, np.log1p(i), nxt, np.full(n, top_gap), np.full(n, sd),
                   (s - h.mean()) / sd, (i == 0).astype(float), np.full(n, float(n))], axis=1), extra])

def fit(X, y, l2=1e-2, iters=30):
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Z = np.hstack([(X - mu) / sd, np.ones((len(X), 1))])
    w = np.zeros(Z.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-Z @ w))
        g = Z.T @ (p - y) + l2 * w
        H = (Z * (p * (1 - p))[:, None]).T @ Z + l2 * np.eye(len(w))
        w -= np.linalg.solve(H, g)
    return mu, sd, w

def prob(model, s, extra=None):
    mu, sd, w = model
    Z = np.hstack([(feats(s, extra) - mu) / sd, np.ones((len(s), 1))])
    return 1 / (1 + np.exp(-Z @ w))

t0 = time.time()
X, Y = [], []
for name, (d, n) in TRAIN.items():
    for gold, ranked, lists in rankings(d, n):
        for ids, sc, ex in lists:
            if len(ids) < 2: continue
            X.append(feats(sc, ex)); Y.append(np.array([t in gold for t in ids], dtype=float))
    print(name, "collected", f"{time.time()-t0:.0f}s", flush=True)
model = fit(np.vstack(X), np.concatenate(Y))
print("weights", np.round(model[2], 3).tolist())

def cut_calibrated(lists, ranked, tau, kmax=20):
    keep = set()
    for ids, sc, ex in lists:
        if not ids: continue
        if len(ids) == 1: keep.update(ids); continue
        p = prob(model, sc, ex)
        k = 1
        while k < len(ids) and p[k] >= tau: k += 1
        keep.update(ids[:min(k, kmax)])
    order = [t for t in ranked if t in keep]
    return min(len(order), kmax), order

def cut_rm(lists, ranked, cfg):
    keep = set()
    for ids, sc, ex in lists:
        if not ids: continue
        keep.update(ids[:apply_cut(cfg, sc, None, normalized=True).k])
    order = [t for t in ranked if t in keep]
    return min(len(order), cfg.k_max), order

dev = {name: rankings(d, 500) for name, d in DEV.items()}
res = {}
for label, fn in [*[(f"calib tau={t}", (lambda L, R, t=t: cut_calibrated(L, R, t))) for t in (0.2, 0.15, 0.1, 0.07, 0.05, 0.04, 0.03, 0.02)],
                  *[(f"rmargin {m}", (lambda L, R, m=m: cut_rm(L, R, replace(DEFAULT_CUT, range_margin=m)))) for m in (0.825, 0.75, 0.7, 0.6, 0.5)]]:
    row = []
    for name, rows in dev.items():
        C, K = [], []
        for gold, ranked, lists in rows:
            k, order = fn(lists, ranked)
            C.append(gold <= set(order[:k])); K.append(k)
        row.append((np.mean(C), np.mean(K), np.percentile(K, 90)))
    res[label] = row
    print(f"{label:18s}", " | ".join(f"{c:.3f}@{k:.1f}({p:.0f})" for c, k, p in row), f"mean {np.mean([r[0] for r in row]):.3f}@{np.mean([r[1] for r in row]):.1f}", flush=True)

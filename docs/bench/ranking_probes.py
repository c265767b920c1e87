"""docs/bench/budget.md, "Probes of the ranking (2026-12-05)": what a retrained embedder, weight interpolation, a two-embedder ensemble, the cross-encoder as head evidence and an oracle decomposition do to the head of the ranking.

python3 docs/bench/ranking_probes.py eval BUNDLE|default     # a bundle's ranking, head off (C@5, C@10, NDCG@10, C@K, K)
python3 docs/bench/ranking_probes.py wise BASE FT ALPHA OUT  # WiSE-FT: (1-ALPHA)*BASE + ALPHA*FT weights, as a checkpoint
python3 docs/bench/ranking_probes.py ensemble BUNDLE W       # the default embedder and BUNDLE's, cosines mixed 1-W : W
python3 docs/bench/ranking_probes.py oracle                  # the generator's own sub-task texts as the decomposition
python3 docs/bench/ranking_probes.py mpnet W [DIR]           # the default embedder and all-mpnet-base-v2 as published (FP32 torch,
                                                             # DIR default /tmp/mp/all-mpnet-base-v2), cosines mixed 1-W : W,
                                                             # the shipped pipeline and head otherwise (ONLY=mobile/test,... parts)
python3 docs/bench/ranking_probes.py ce-head                 # the learned head refitted with cross-encoder features
Parts and queries as budget_eval.py: 500 seeded queries of each development evaluation part.
"""
import json, math, random, sys
import numpy as np
from magicselector.data.metrics import ndcg_at_k

PARTS = {"mobile/test": "/tmp/mobile/test", "mobile/test_ood": "/tmp/mobile/test_ood",
         "bfcl/eval": "/tmp/splits/bfcl/eval", "metatool/eval": "/tmp/splits/metatool/eval"}
TRAIN = {"mobile/train": "/tmp/mobile/train", "bfcl/train": "/tmp/splits/bfcl/train",
         "metatool/train": "/tmp/splits/metatool/train"}


def queries(d, n=500):
    qs = [json.loads(line) for line in open(f"{d}/queries.jsonl")]
    random.Random(0).shuffle(qs)
    return qs[:n]


def report(name, rows):
    """rows: (gold set, Selection) pairs."""
    print(f"{name:16s} C@5 {np.mean([g <= set(s.ranked_ids[:5]) for g, s in rows]):.3f} "
          f"C@10 {np.mean([g <= set(s.ranked_ids[:10]) for g, s in rows]):.3f} "
          f"NDCG@10 {np.mean([ndcg_at_k(s.ranked_ids, g, 10) for g, s in rows]):.3f} "
          f"C@K {np.mean([g <= set(s.ids) for g, s in rows]):.3f} K {np.mean([s.k for _, s in rows]):.2f}", flush=True)


def run(selector_for, parts=PARTS):
    for name, d in parts.items():
        sel = selector_for(name, d)
        report(name, [(set(q["gold"]), sel.select(q["query"], q["history"])) for q in queries(d)])


def over_catalog(base):
    from magicselector.catalog import load_catalog
    return lambda name, d: base if name.startswith("mobile") else base.with_catalog(load_catalog(f"{d}/tools.jsonl"))


def eval_bundle(bundle):
    from magicselector import Selector
    run(over_catalog(Selector.from_bundle(None if bundle == "default" else bundle).with_config(head=False)))


def wise(base_dir, ft_dir, alpha, out):
    import shutil
    from safetensors.torch import load_file, save_file
    base = {k.removeprefix("bert."): v for k, v in load_file(f"{base_dir}/model.safetensors").items()}
    tuned = load_file(f"{ft_dir}/model.safetensors")
    shutil.copytree(ft_dir, out, dirs_exist_ok=True)
    mixed = {}
    for k, v in tuned.items():
        b = base.get(k.removeprefix("bert."))
        ok = b is not None and b.shape == v.shape and v.is_floating_point()
        mixed[k] = ((1 - alpha) * b.float() + alpha * v.float()).to(v.dtype).contiguous() if ok else v
    save_file(mixed, f"{out}/model.safetensors", metadata={"format": "pt"})


class ConcatEmbedder:
    """Two embedders' unit vectors side by side, weighted so that a cosine is (1-w)*cos_a + w*cos_b."""

    def __init__(self, a, b, w):
        self.a, self.b, self.w, self.dim = a, b, w, a.dim + b.dim

    def embed(self, texts, release=False):
        return np.hstack([math.sqrt(1 - self.w) * self.a.embed(texts, release),
                          math.sqrt(self.w) * self.b.embed(texts, release)]).astype(np.float32)


def ensemble(bundle, w):
    from magicselector import Selector, SelectorConfig
    from magicselector.catalog import load_catalog
    from magicselector.tool_vectors import catalog_index
    a, b = Selector.from_bundle(None), Selector.from_bundle(bundle)
    emb = ConcatEmbedder(a.embedder, b.embedder, w)

    def selector_for(name, d):
        cat = a.catalog if name.startswith("mobile") else load_catalog(f"{d}/tools.jsonl")
        return Selector(cat, emb, catalog_index(emb, cat, "", a.index.dtype), config=SelectorConfig(head=False))
    run(selector_for)


class TorchMeanPool:
    """A sentence-transformers folder (BERT / MPNet) as an embedder: FP32 torch, mean pooling, unit vectors."""

    def __init__(self, folder, max_length=128, tokenizer=None):
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModel
        self.torch, self.tok = torch, Tokenizer.from_file(tokenizer or f"{folder}/tokenizer.json")
        self.tok.enable_truncation(max_length)
        self.tok.no_padding()
        self.pad = self.tok.token_to_id("<pad>") or 0
        self.model = AutoModel.from_pretrained(folder).eval()
        self.dim, self.cache = self.model.config.hidden_size, {}

    def embed(self, texts, release=False):
        torch = self.torch
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        for s in range(0, len(todo), 32):
            chunk = todo[s:s + 32]
            encs = self.tok.encode_batch(chunk)
            n = max(len(e.ids) for e in encs)
            ids = torch.tensor([e.ids + [self.pad] * (n - len(e.ids)) for e in encs])
            mask = torch.tensor([[1] * len(e.ids) + [0] * (n - len(e.ids)) for e in encs])
            with torch.no_grad():
                h = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
            v = torch.nn.functional.normalize((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True), dim=-1)
            self.cache.update(zip(chunk, v.numpy()))
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)


def mpnet(w, folder="/tmp/mp/all-mpnet-base-v2"):
    import os
    from dataclasses import replace
    from magicselector import Selector
    from magicselector.catalog import load_catalog
    from magicselector.tool_vectors import catalog_index
    a = Selector.from_bundle(None)
    emb = ConcatEmbedder(a.embedder, TorchMeanPool(folder), w)

    def selector_for(name, d):
        cat = a.catalog if name.startswith("mobile") else load_catalog(f"{d}/tools.jsonl")
        return Selector(cat, emb, catalog_index(emb, cat, "", a.index.dtype), head=a.head, config=replace(a.config))
    only = os.environ.get("ONLY", ",".join(PARTS)).split(",")
    run(selector_for, {k: v for k, v in PARTS.items() if k in only})


def oracle():
    from magicselector import Selector
    from magicselector.decompose.base import DecomposeTrace, Decomposition

    class GoldTasks:
        name, tasks = "oracle", ()

        def decompose(self, query, history):
            return Decomposition(tuple(self.tasks), DecomposeTrace(ran="oracle"))
    base = Selector.from_bundle(None)
    for name, d in list(PARTS.items())[:2]:  # the generated parts carry their sub-task texts
        sel, gold_tasks = base.with_config(), GoldTasks()
        sel.decomposer = gold_tasks
        rows = []
        for q in queries(d):
            gold_tasks.tasks = [t["text"] for t in q.get("tasks", [])] or [q["query"]]
            rows.append((set(q["gold"]), sel.select(q["query"], q["history"])))
        report(name, rows)


def ce_head():
    """The head's 23 features, with and without 6 cross-encoder ones (z-score, gap to the best and log
    rank of its logit, paired with the sub-task text and with the utterance), fitted on 500 seeded
    queries of each train part as train/head.py fits it; C@5 of the probability order on the eval parts."""
    from sklearn.neural_network import MLPClassifier
    from magicselector import Selector
    from magicselector.catalog import tool_text
    from magicselector.stages.cut import CutConfig
    from magicselector.stages.head import head_features
    base = Selector.from_bundle(None)
    pick = over_catalog(base)
    rows = {}
    for name, d in {**PARTS, **TRAIN}.items():
        keep = pick(name, d).with_config(cut=CutConfig(rule="fixed", fixed_k=30), head=False)
        rows[name] = []
        for q in queries(d):
            s = keep.select(q["query"], q["history"])
            top = s.tools[:20]
            texts = [tool_text(keep.catalog.get(t.id)) for t in top]
            rows[name].append((set(q["gold"]), s.ranked_ids[:20],
                               head_features([(i, sc) for _, i, sc in s.lists], s.history_list, s.ranked_ids,
                                             s.ranked_scores, 20),
                               [keep.reranker.score_pairs([(t.subtask, x) for t, x in zip(top, texts)]),
                                keep.reranker.score_pairs([(q["query"], x) for x in texts])]))

    def features(f, ce, with_ce):
        if not with_ce:
            return f
        extra = []
        for c in ce:
            c = np.asarray(c[:len(f)], float)
            rank = np.empty(len(c))
            rank[np.argsort(-c)] = np.arange(len(c))
            extra += [(c - c.mean()) / max(c.std(), 1e-6), c.max() - c, np.log1p(rank)]
        return np.column_stack([f, *extra])
    for with_ce in (False, True):
        x = np.vstack([features(f, ce, with_ce) for p in TRAIN for _, _, f, ce in rows[p]])
        y = np.concatenate([[t in g for t in ids[:len(f)]] for p in TRAIN for g, ids, f, _ in rows[p]])
        mu, sd = x.mean(0), np.where(x.std(0) < 1e-9, 1, x.std(0))
        mlp = MLPClassifier((16,), alpha=1e-3, max_iter=500, random_state=0).fit((x - mu) / sd, y)
        line = []
        for p in PARTS:
            hits = []
            for g, ids, f, ce in rows[p]:
                prob = mlp.predict_proba((features(f, ce, with_ce) - mu) / sd)[:, 1]
                hits.append(g <= {ids[i] for i in np.argsort(-prob, kind="stable")[:5]})
            line.append(f"{p} C@5 {np.mean(hits):.3f}")
        print("with cross-encoder" if with_ce else "head features only", " | ".join(line), flush=True)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "eval":
        eval_bundle(args[0])
    elif cmd == "wise":
        wise(args[0], args[1], float(args[2]), args[3])
    elif cmd == "ensemble":
        ensemble(args[0], float(args[1]))
    elif cmd == "mpnet":
        mpnet(float(args[0]), *args[1:2])
    elif cmd == "oracle":
        oracle()
    elif cmd == "ce-head":
        ce_head()
    else:
        sys.exit(__doc__)

"""docs/bench/budget.md, "MPNet's knowledge distilled into MiniLM-L6": the embedder trained with eq. 13 plus a KL term towards a teacher that mixes the shipped embedder's cosine with all-mpnet-base-v2's (the 30:70 mix that lifted test_ood in ranking_probes.py mpnet 0.3), on the same train parts; measured as ranking_probes.py eval measures any embedder.

python3 docs/bench/distill_probe.py INIT OUT [W [LAMBDA [MAX_QUERIES_PER_FOLDER]]]
  INIT: the student's start (a train embedder checkpoint); W: MPNet's share of the teacher (0.3);
  LAMBDA: weight of the KL term (1.0); then
magicselector bundle build --embedder OUT --no-reranker --out B && python3 docs/bench/ranking_probes.py eval B
Needs the export extra and all-mpnet-base-v2 in /tmp/mp (budget.md). Train data as the shipped recipe's.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

from magicselector import Selector
from magicselector.train import embedder as E
from magicselector.train.losses import InfoNCELoss
from ranking_probes import TorchMeanPool

DATA = ["/tmp/mobile/train", "/tmp/splits/bfcl/train", "/tmp/splits/metatool/train"]


class Teacher:
    """Unit vectors whose dot product is (1-W) cos(shipped) + W cos(MPNet), cached per text."""

    def __init__(self, w, mpnet="/tmp/mp/all-mpnet-base-v2"):
        self.shipped = Selector.from_bundle(None).embedder
        self.mpnet = TorchMeanPool(mpnet, 128)
        self.a, self.b, self.cache = np.sqrt(1 - w), np.sqrt(w), {}

    def __call__(self, texts):
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            s = self.shipped.embed(todo)
            m = self.mpnet.embed(todo)
            self.cache.update(zip(todo, np.hstack([self.a * s, self.b * m]).astype(np.float32)))
        return torch.from_numpy(np.stack([self.cache[t] for t in texts]))


class DistillInfoNCE(InfoNCELoss):
    """Eq. 13 over [positive, negatives, in-batch positives] plus LAMBDA * KL(teacher || student)
    over the same columns, both at the loss's temperature."""

    name = "InfoNCE (eq. 13) + KL to a mixed teacher"

    def __init__(self, teacher, lam, temperature=0.05):
        super().__init__(temperature, in_batch=True)
        self.teacher, self.lam = teacher, lam

    def __call__(self, outputs, labels=None, in_batch=None):
        q = F.normalize(outputs["query"], dim=-1)
        p = F.normalize(outputs["positive"], dim=-1)
        n = F.normalize(outputs["negatives"], dim=-1)
        b = q.shape[0]
        keep = torch.ones(b, b, dtype=torch.bool)
        for i in range(b):
            own = set(labels["gold"][i]) | {labels["pos_ids"][i]}
            for j in range(b):
                keep[i, j] = i != j and labels["pos_ids"][j] not in own
        mask = torch.cat([torch.ones(b, 1 + n.shape[1], dtype=torch.bool), keep], dim=1)

        def logits(qv, pv, nv):
            cols = [(qv * pv).sum(-1, keepdim=True), torch.einsum("bd,bnd->bn", qv, nv), qv @ pv.T]
            return (torch.cat(cols, 1) / self.temperature).masked_fill(~mask, float("-inf"))
        student = logits(q, p, n)
        nce = -torch.log_softmax(student, 1)[:, 0].mean()
        if self.lam == 0 or not self.training_texts(labels):
            return nce
        tq, tp = self.teacher(labels["query_texts"]), self.teacher(labels["pos_texts"])
        tn = self.teacher([t for row in labels["neg_texts"] for t in row]).reshape(b, n.shape[1], -1)
        with torch.no_grad():
            target = torch.softmax(logits(tq, tp, tn), 1)
        log_s = torch.log_softmax(student, 1).masked_fill(~mask, 0.0)
        kl = (target * (torch.log(target.clamp_min(1e-12)) - log_s)).masked_fill(~mask, 0.0).sum(1).mean()
        return nce + self.lam * kl

    @staticmethod
    def training_texts(labels):
        return labels is not None and "query_texts" in labels

    def describe(self):
        return {**super().describe(), "name": self.name, "lambda": self.lam}


def _loss_with_texts(self, chunk, negatives, in_batch=None, model=None):
    """``_Trainer._loss`` that also hands the loss the texts (the teacher embeds texts, not vectors)."""
    model = self.net if model is None else model
    qs = [self.queries[qi] for qi, _ in chunk]
    width = max(len(negatives[q.id]) for q in qs)
    negs = [[negatives[q.id][j % len(negatives[q.id])] for j in range(width)] for q in qs]
    pos_texts = [self.texts[q.bench][t] for q, (_, t) in zip(qs, chunk)]
    neg_texts = [[self.texts[q.bench][t] for t in row] for q, row in zip(qs, negs)]
    flat = list(dict.fromkeys(pos_texts + [t for row in neg_texts for t in row]))
    emb = E._forward(model, self.tokenizer, flat)
    at = {t: i for i, t in enumerate(flat)}
    query_emb = E._forward(model, self.tokenizer, [q.text for q in qs])
    pos_emb = emb[torch.tensor([at[t] for t in pos_texts])]
    neg_emb = emb[torch.tensor([at[t] for row in neg_texts for t in row])].reshape(len(qs), width, -1)
    labels = {"pos_ids": [t for _, t in chunk], "gold": [q.gold for q in qs]}
    if model is self.net:  # the probe loss (eval mode, another model object) stays eq. 13
        labels.update(query_texts=[q.text for q in qs], pos_texts=pos_texts, neg_texts=neg_texts)
    return self.loss({"query": query_emb, "positive": pos_emb, "negatives": neg_emb}, labels)


if __name__ == "__main__":
    init, out = sys.argv[1], sys.argv[2]
    w = float(sys.argv[3]) if len(sys.argv) > 3 else 0.3
    lam = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    per_folder = int(sys.argv[5]) if len(sys.argv) > 5 else 3000
    torch.set_num_threads(2)
    E._Trainer._loss = _loss_with_texts
    config = E.EmbedderTrainConfig(base_model=init, rounds=0, epochs=1, batch_size=32, negatives=3, pool=20,
                                   in_batch=True, freeze_embeddings=True, max_length=64, lr=2e-5,
                                   history="all", max_queries_per_folder=per_folder, threads=2, seed=0)
    summary = E.train_embedder(DATA, out, config, loss=DistillInfoNCE(Teacher(w), lam))
    print({k: summary[k] for k in ("counts", "final_loss", "probe_loss_before", "probe_loss_after")})

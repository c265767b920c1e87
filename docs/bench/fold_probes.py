"""docs/bench/history.md, "What did not ship": probes of the default-v8 pipeline under the `questions` fold, each patched in and run through fold_eval.py's parts.

python3 docs/bench/fold_probes.py mass EPS OUT.json      # the head cut by dropped mass: drop the longest tail of kept tools whose probabilities sum under EPS
python3 docs/bench/fold_probes.py prf BETA M OUT.json    # dense pseudo-relevance feedback: each query vector moved BETA toward the score-weighted mean of its top M tools
python3 docs/bench/fold_probes.py head HEAD.json OUT.json  # another head file (e.g. `train head --hidden 32 16 --history-mode questions`)
PARTS=realistic,bfcl,metatool (environment) as fold_eval.py.
"""
import sys
from dataclasses import replace
import numpy as np
import fold_eval
import magicselector.selector as S
from magicselector.stages.head import HeadModel, head_features


def mass_head(eps):
    def _head(self, lists, history_list, ids, scores, order, cut):
        probs = self.head.probabilities(head_features([(lst.ids, lst.scores) for lst in lists], history_list, ids,
                                                      scores, self.head.depth))
        p = lambda i: float(probs[i]) if i < len(probs) else 0.0
        kept = sorted(order[:cut.k], key=lambda i: (-p(i), i))
        tail, n = 0.0, len(kept)
        while n > 1 and tail + p(kept[n - 1]) < eps:
            tail, n = tail + p(kept[n - 1]), n - 1
        chosen = set(kept[:n])
        rest = [i for i in order if i not in chosen]
        scored = sorted((i for i in rest if i < len(probs)), key=lambda i: (-p(i), i))
        new = kept[:n] + scored + [i for i in rest if i >= len(probs)]
        return new, replace(cut, k=n, rule=f"{cut.rule}+head"), dict(zip(ids, map(float, probs)))
    return _head


class PRF:
    """The embedder, each vector moved toward the score-weighted mean of its top ``m`` tools."""

    def __init__(self, inner, sel, beta, m):
        self.inner, self.sel, self.beta, self.m, self.dim = inner, sel, beta, m, inner.dim

    def embed(self, texts, *a, **k):
        v = self.inner.embed(texts, *a, **k)
        out = []
        for q, (ids, sc) in zip(v, self.sel.index.search(v, self.m)):
            w = np.asarray(sc, dtype=np.float32)
            x = q + self.beta * (self.sel.index.vectors(ids).astype(np.float32) * w[:, None]).sum(0) / max(w.sum(), 1e-6)
            out.append(x / np.linalg.norm(x))
        return np.asarray(out, dtype=np.float32)


def copy_with(sel, **attrs):
    """A copy of ``sel`` (its catalog state shared) with some stages replaced."""
    c = sel.with_config()
    for k, v in attrs.items():
        setattr(c, k, v)
    return c


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    wrap = lambda sel: sel
    if what == "mass":
        S.Selector._head = mass_head(float(args[0]))
    elif what == "prf":
        beta, m = float(args[0]), int(args[1])
        wrap = lambda sel: copy_with(sel, embedder=PRF(sel.embedder, sel, beta, m))  # after the index is built
    elif what == "head":
        head = HeadModel.from_bytes(open(args[0], "rb").read())
        wrap = lambda sel: copy_with(sel, head=head)
    else:
        sys.exit(__doc__)
    fold_eval.main("default", "questions", args[-1], 500, wrap=wrap)

"""docs/bench/history.md and budget.md, "What did not ship": probes of the default-v8 pipeline under the `questions` fold, each patched in and run through fold_eval.py's parts.

python3 docs/bench/fold_probes.py mass EPS OUT.json      # the head cut by dropped mass: drop the longest tail of kept tools whose probabilities sum under EPS
python3 docs/bench/fold_probes.py prf BETA M OUT.json    # dense pseudo-relevance feedback: each query vector moved BETA toward the score-weighted mean of its top M tools
python3 docs/bench/fold_probes.py head HEAD.json OUT.json  # another head file (e.g. `train head --hidden 32 16 --history-mode questions`);
                                                         # BUNDLE=DIR (environment): on that bundle instead of the default
python3 docs/bench/fold_probes.py relfloor R OUT.json    # the head's floor relative to the surest kept tool: max(min_probability, R * p_top)
python3 docs/bench/fold_probes.py pdesc OUT.json         # each tool's parameter descriptions appended to its text (index rebuilt, no retraining)
python3 docs/bench/fold_probes.py answer KINDS OUT.json  # KINDS (answer,fragment,pronoun): such a follow-up of a turn that asked for
                                                         # several things completes every request of it, as a retry does
python3 docs/bench/fold_probes.py subtop M OUT.json      # each sub-task list's top M tools kept past the head's floor
python3 docs/bench/fold_probes.py named OUT.json         # the fold also reads an assistant sentence that names what the utterance
                                                         # names (a capitalized word after its start: "Play Reply All." after
                                                         # "Okay, I'll download the latest Reply All episode.")
python3 docs/bench/fold_probes.py mask W OUT.json        # names masked: a text's title-case spans after its first word read
                                                         # as "something", its dense vector W of the way to the masked text's
PARTS=realistic,bfcl,metatool (environment) as fold_eval.py; CUT='{"min_probability": 0.006}' (environment) replaces
fields of the shipped cut. The mass, prf and head rows of history.md ran on the tree at b370c8a (its rules and cut).
"""
import os
import re
import sys
from dataclasses import replace
import numpy as np
import fold_eval
import magicselector.catalog as C
import magicselector.dialogue as D
import magicselector.decompose.rules as R
import magicselector.selector as S
import magicselector.stages.head as H
import magicselector.tool_vectors as TV
from magicselector.dialogue import Turn
from magicselector.stages.head import HeadModel, head_features, head_order


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


def subtask_tops(m):
    """Selector._head, then each sub-task list's top ``m`` tools added back where the floor dropped them."""
    shipped = S.Selector._head

    def _head(self, lists, history_list, ids, scores, order, cut):
        order, cut, probability = shipped(self, lists, history_list, ids, scores, order, cut)
        if len(lists) < 3:  # not decomposed: the anchor and at most the history list
            return order, cut, probability
        at = {t: i for i, t in enumerate(ids)}
        kept = order[:cut.k]
        tops = [at[t] for j, lst in enumerate(lists[1:], 1) if j != history_list for t in lst.ids[:m] if t in at]
        kept = kept + [i for i in dict.fromkeys(tops) if i not in set(kept)]
        return kept + [i for i in order if i not in set(kept)], replace(cut, k=len(kept)), probability
    return _head


def relative_floor(r):
    def order(probs, order, k, floor, k_max=None):
        top = max((float(probs[i]) for i in order[:k] if i < len(probs)), default=0.0)
        return head_order(probs, order, k, max(floor, r * top), k_max)
    return order


def with_parameter_descriptions(tool, max_description_chars=400):
    props = tool.parameters.get("properties", {}) if isinstance(tool.parameters, dict) else {}
    parts = [f"{k.replace('_', ' ')}: {v['description']}" for k, v in list(props.items())[:12]
             if isinstance(v, dict) and v.get("description")]
    text = TOOL_TEXT(tool, max_description_chars)
    return f"{text} {'; '.join(parts)}" if parts else text


class EveryRequest(R.RuleDecomposer):
    """The rules, with an answer/fragment/pronoun follow-up (``kinds``) of a turn that asked for
    several things completed with each of its requests, as a retry or status check is."""

    def __init__(self, kinds):
        super().__init__()
        self.kinds = kinds

    def resolve(self, clause, history, memo=None, depth=0, seen=None):
        if seen is not None and R._is_elliptical(clause, history) in self.kinds:
            prevs = self.previous_requests(history, memo, depth, seen)
            if len(prevs) >= 2:
                asked = next((t.content for t in reversed(history) if t.role == "assistant"), "")
                each = super().resolve  # zero-argument super() does not reach into a comprehension
                return [task for p in prevs for task in each(clause, [Turn("user", p), Turn("assistant", asked)], {})]
        return super().resolve(clause, history, memo, depth, seen)


def mask_names(text):
    """The title-case spans after a text's first word (not "I") as "something": "Play Reply All." -> "Play something."."""
    words, out, i = text.split(), [], 0
    while i < len(words):
        w = words[i]
        if i and w[:1].isupper() and w not in ("I", "I'm", "I'll", "I'd") and not out[-1].endswith((".", "?", "!")):
            j = i
            while j < len(words) and (words[j][:1].isupper() or words[j] in ("a", "of", "the")) and words[j] != "I":
                j += 1
            out.append("something" + re.sub(r"^[\w'%&-]*", "", words[j - 1]))  # its trailing punctuation kept
            i = j
        else:
            out.append(w)
            i += 1
    return " ".join(out)


class Masked:
    """The embedder, each text with names moved ``w`` of the way to its ``mask_names`` vector."""

    def __init__(self, inner, w):
        self.inner, self.w, self.dim = inner, w, inner.dim

    def embed(self, texts, *a, **k):
        v = np.array(self.inner.embed(texts, *a, **k), dtype=np.float32, copy=True)
        masked = [mask_names(t) for t in texts]
        changed = [i for i, (t, m) in enumerate(zip(texts, masked)) if t != m]
        if changed:
            for i, mv in zip(changed, self.inner.embed([masked[i] for i in changed], *a, **k)):
                x = (1 - self.w) * v[i] + self.w * mv
                v[i] = x / np.linalg.norm(x)
        return v


_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-zA-Z0-9'%-]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def named_fold(query, history, mode, turns=4):
    """``retrieval_text`` with up to two assistant sentences that share a name with the utterance
    right after it (most recent first)."""
    text = D.retrieval_text(query, history, mode, turns)
    names = {m.group(0) for m in _NAME.finditer(query.strip())} - {"I", "I'm", "I'll", "I'd"}
    if mode == "none" or not history or not names:
        return text
    extra = []
    for t in reversed(D._exchanges(history, tool_words=False)[-2 * turns:]):
        for s in _SENTENCE.split(t.content) if t.role == "assistant" else ():
            if any(re.search(rf"\b{re.escape(n)}\b", s) for n in names) and s not in text and s not in extra:
                extra.append(s)
    head, _, rest = text.partition(" | ")
    return " | ".join([head, *extra[:2]] + ([rest] if rest else [])) if extra else text


def copy_with(sel, **attrs):
    """A copy of ``sel`` (its catalog state shared) with some stages replaced."""
    c = sel.with_config()
    for k, v in attrs.items():
        setattr(c, k, v)
    return c


TOOL_TEXT = C.tool_text


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
    elif what == "mask":
        w = float(args[0])
        wrap = lambda sel: copy_with(sel, embedder=Masked(sel.embedder, w))
    elif what == "named":
        S.retrieval_text = named_fold
    elif what == "subtop":
        S.Selector._head = subtask_tops(int(args[0]))
    elif what == "relfloor":
        H.head_order = relative_floor(float(args[0]))  # what head_cut calls
    elif what == "pdesc":
        C.tool_text = TV.tool_text = with_parameter_descriptions
        wrap = lambda sel: sel.with_catalog(sel.catalog)  # the index and BM25 rebuilt from the new texts
    elif what == "answer":
        kinds = tuple(args[0].split(","))
        wrap = lambda sel: copy_with(sel, decomposer=EveryRequest(kinds))
    else:
        sys.exit(__doc__)
    fold_eval.main(os.environ.get("BUNDLE", "default"), "questions", args[-1], 500, os.environ.get("CUT", "{}"), wrap=wrap)

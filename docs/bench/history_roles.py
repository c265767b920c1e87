"""docs/bench/history.md, "Weighting the history by role": the shipped pipeline with `all` folding the user's turns plus only the assistant's questions (`questions`) or only a last assistant turn that asks (`lastq`), on the echo and the realistic seed-0 splits.

python3 docs/bench/history_roles.py all|questions|lastq   # needs /tmp/mobile and /tmp/mobile_real (history.md)
"""
import json, random, sys, math, re
import numpy as np
from magicselector.data.metrics import ndcg_at_k
import magicselector.dialogue as D
from magicselector.dialogue import Turn
from magicselector import Selector
variant = sys.argv[1]
orig = D.recent_turns
QUESTION = re.compile(r"[^.!?]*\?")
def recent_turns(history, mode, turns=4):
    if mode != "all": return orig(history, mode, turns)
    merged = D._exchanges(history)
    keep = []
    for t in merged:
        if t.role == "user": keep.append(t)
        elif variant == "questions":
            qs = QUESTION.findall(t.content)
            if qs: keep.append(Turn("assistant", " ".join(q.strip() for q in qs), t.tools))
        elif variant == "lastq":  # only the assistant turn right before the utterance, if it asks
            pass
    if variant == "lastq" and merged and merged[-1].role == "assistant" and merged[-1].content.rstrip().endswith("?"):
        keep.append(merged[-1])
    return keep[-turns:]
if variant != "all": D.recent_turns = recent_turns
import magicselector.selector as S
base = Selector.from_bundle(None)
for d in ["/tmp/mobile/dev", "/tmp/mobile/test", "/tmp/mobile/test_ood", "/tmp/mobile_real/dev", "/tmp/mobile_real/test", "/tmp/mobile_real/test_ood"]:
    qs = [json.loads(l) for l in open(f"{d}/queries.jsonl")]; random.Random(0).shuffle(qs); qs = qs[:500]
    r = [(set(q["gold"]), base.select(q["query"], q["history"])) for q in qs]
    print(f"{variant:10s} {d:24s} C@5 {np.mean([g <= set(s.ranked_ids[:5]) for g, s in r]):.3f} C@10 {np.mean([g <= set(s.ranked_ids[:10]) for g, s in r]):.3f} NDCG {np.mean([ndcg_at_k(s.ranked_ids, g, 10) for g, s in r]):.3f} C@K {np.mean([g <= set(s.ids) for g, s in r]):.3f} K {np.mean([s.k for g, s in r]):.2f}", flush=True)

"""docs/bench/budget.md, "What test_ood misses, by domain": where the shipped ranking misses at 5 on the held-out domains (a cut-down MPNet: e5_zero_shot.py mpnet@LAYERS).

python3 docs/bench/ood_probes.py domains [PART ...]       # C@5 of the shipped pipeline per generator domain
python3 docs/bench/ood_probes.py titles SUBSTITUTE [PART]  # the same with every podcast and audiobook title
                                                           # replaced by SUBSTITUTE (diagnosis only, never for training)
Parts: /tmp/mobile (history.md), /tmp/splits (budget.md); 500 seeded queries a part (ranking_probes.queries).
"""
import collections
import json
import re
import sys
from pathlib import Path

from ranking_probes import queries

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


def show(part, res):
    print(part, " ".join(f"{d}:{c:.3f}({n})" for d, (c, n) in res.items()), flush=True)


if __name__ == "__main__":
    cmd, args = (sys.argv[1:2] or [""])[0], sys.argv[2:]
    if cmd == "domains":
        for p in args or ["/tmp/mobile/test_ood", "/tmp/mobile/test"]:
            show(p, by_domain(p))
    elif cmd == "titles":
        show(args[1] if len(args) > 1 else "/tmp/mobile/test_ood", titles(*args))
    else:
        raise SystemExit(__doc__)

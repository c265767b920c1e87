"""Training queries in the words the runtime retrieves with: the rules decomposer's sub-task clauses of a generated folder's turns, each paired with one gold tool, written as a benchmark folder.

    python3 -m magicselector.bench.experiments.clause_queries --data GENERATED_TRAIN --out DIR

The embedder trains on whole turns (history folded in) and on the generator's canonical sub-task
texts (``tasks``), but at run time a decomposed turn is searched with the rules' clauses as the
user said them ("lock in the Ace Hotel for five nights please", "Turn it up" completed from the
dialogue). This writes those clauses as training queries: each turn with recorded ``tasks`` that the
rules split (or completed from the dialogue) is decomposed as ``Selector.plan`` decomposes it
(``plan_turn``: the runtime's history bounds and sub-task cap), and each clause is paired with the
gold task it shares the most content words with (``pair_clauses``: a one-to-one assignment on the
Jaccard overlap of 5-letter stems of the clause and the task's text and tool id; a clause that
shares no word with any task is left out). No model takes part, so the folder (and a run on it) is
remade bit for bit. The output is a benchmark folder (the source's ``tools.jsonl``; queries with
no history, category ``clause``) that ``magicselector train embedder --data`` takes beside the
others. It reads only a train folder: the clauses of an evaluation part are never written.

docs/bench/multi-tool.md ("After default-v13") has what it measured.
"""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Sequence

from magicselector.config import SelectorConfig
from magicselector.decompose import build_decomposer
from magicselector.decompose.rules import content_words
from magicselector.errors import InputError
from magicselector.plan import plan_turn

from magicselector.data.datasets import load_benchmark
from magicselector.data.splits import split_part


def _stems(text: str) -> set[str]:
    return {w[:5] for w in content_words(text.replace("_", " "))}


def pair_clauses(clauses: Sequence[str], tasks: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(clause, tool) pairs: the one-to-one assignment of clauses to ``tasks`` ((text, tool) each)
    that shares the most content-word stems (Jaccard, summed; ties: the earlier assignment in
    ``itertools.permutations`` order), without pairs that share none."""
    if not clauses or not tasks:
        return []
    mine = [_stems(c) for c in clauses]
    theirs = [_stems(text) | _stems(tool) for text, tool in tasks]
    overlap = [[len(a & b) / max(1, len(a | b)) for b in theirs] for a in mine]
    n = min(len(clauses), len(tasks))
    best, best_score = None, -1.0
    # at most max_subtasks clauses and a turn's few tasks: the exhaustive assignment is small
    for rows in itertools.combinations(range(len(clauses)), n):
        for cols in itertools.permutations(range(len(tasks)), n):
            score = sum(overlap[r][c] for r, c in zip(rows, cols))
            if score > best_score:
                best, best_score = list(zip(rows, cols)), score
    return [(clauses[r], tasks[c][1]) for r, c in best or [] if overlap[r][c] > 0]


def clause_rows(folder: Path, config: SelectorConfig = SelectorConfig()) -> list[dict]:
    """The clause queries of one generated folder (de-duplicated on clause and tool, in file order)."""
    bench = load_benchmark(folder)
    decomposer = build_decomposer("rules")
    rows, seen = [], set()
    for q in bench.queries:
        tasks = q.extra.get("tasks")
        if not tasks:
            continue
        plan = plan_turn(config, decomposer, q.query, list(q.history))
        if plan.subtasks == [plan.query]:
            continue  # left whole: the turn's own training query already reads it
        pairs = pair_clauses(plan.subtasks, [(" ".join(t["text"].split()), t["tool"]) for t in tasks])
        for j, (clause, tool) in enumerate(pairs):
            if (clause, tool) in seen:
                continue
            seen.add((clause, tool))
            rows.append({"id": f"{q.id}#clause{j}", "history": [], "query": clause, "gold": [tool],
                         "category": "clause"})
    return rows


def write_clause_folder(source: Path, out: Path) -> int:
    """``clause_rows`` of ``source`` as a benchmark folder ``out`` (its tools.jsonl copied); the
    number of queries written. An evaluation part is refused."""
    part = split_part(source)
    if (part is not None and part["part"] == "eval") or source.name.startswith("test"):  # test, test_ood
        raise InputError(f"{source}: an evaluation part; clause queries are written from train folders only")
    rows = clause_rows(source)
    if not rows:
        raise InputError(f"{source}: no turn with recorded tasks that the rules split")
    out.mkdir(parents=True, exist_ok=True)
    (out / "tools.jsonl").write_bytes((source / "tools.jsonl").read_bytes())
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m magicselector.bench.experiments.clause_queries",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="a generated train folder (rows with tasks)")
    parser.add_argument("--out", required=True, type=Path, help="the clause folder to write")
    args = parser.parse_args(argv)
    try:
        n = write_clause_folder(args.data, args.out)
    except InputError as e:
        raise SystemExit(f"error: {e}")
    print(f"{n} clause queries written to {args.out}")


if __name__ == "__main__":
    main()

"""The decomposer's training data: the runtime's prompt settings, the turns of a benchmark folder
as examples (generated turns with gold tasks; public multi-tool and keep-whole queries), what a
stage trains on, and the shared start of a run (``prepare_run``). No torch here.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from magicselector.data.datasets import Benchmark, load_benchmark
from magicselector.data.splits import split_part
from magicselector.decompose import LlmDecomposer
from magicselector.decompose.prompts import build_suffix, parse_tasks, prompt_prefix
from magicselector.dialogue import Turn, validate_history
from magicselector.errors import InputError

from .queries import gold_tasks, load_benchmarks, refuse_eval_parts
from .toolkit import check_out_dir, data_record


def runtime_decomposer() -> LlmDecomposer:
    """The runtime's LLM decomposer with its default settings, not loaded (constructing one loads
    nothing): the source of ``history_turns``, ``max_lines``, ``max_chars``, ``max_tokens``, ``n_ctx``."""
    return LlmDecomposer()


@functools.lru_cache(maxsize=None)
def runtime_prefix(style: str = "few_shot") -> str:
    """The fixed part of the prompt (``LlmDecomposer.load`` evaluates it once into the KV cache):
    ``prompt_prefix(style)``, with the few-shot examples or (``zero_shot``) the system prompt alone."""
    return prompt_prefix(style)


def runtime_settings(dec: LlmDecomposer | None = None) -> dict[str, int]:
    dec = dec or runtime_decomposer()
    return {"history_turns": dec.history_turns, "max_lines": dec.max_lines, "max_chars": dec.max_chars,
            "max_tokens": dec.max_tokens, "n_ctx": dec.n_ctx}


EXAMPLE_KINDS = ("tasks", "multi_tool", "keep_whole")
NEUTRAL_PREFERENCE = 0.5  # R_pref of a sample whose turn has no reference tasks: sigmoid(0)


@dataclass(frozen=True)
class DecompositionExample:
    """One turn as a decomposer training example.

    ``suffix`` is the per-turn part of the prompt (``build_suffix``); the whole prompt is
    ``runtime_prefix() + suffix``. ``tasks`` are the gold task texts (whitespace collapsed), ``gold``
    the turn's gold tools (for the counterfactual reward). ``kind``: ``tasks`` (a generated turn's
    gold sub-tasks), ``multi_tool`` (a public query with 2+ gold tools and no tasks: GRPO only) or
    ``keep_whole`` (a public single-tool query, its utterance as the one task)."""

    id: str
    bench: int
    query: str
    history: tuple[Turn, ...]
    suffix: str
    tasks: tuple[str, ...]
    gold: tuple[str, ...]
    kind: str = "tasks"

    @property
    def prompt(self) -> str:
        return runtime_prefix() + self.suffix

    @property
    def target(self) -> str:
        return "\n".join(self.tasks)


def _gold_tasks(bench: Benchmark, q) -> list[str] | None:
    pairs = gold_tasks(bench, q)
    if pairs is None:
        return None
    out = []
    for j, (text, _) in enumerate(pairs):
        if not text:
            raise InputError(f"{bench.path}: query {q.id!r}: tasks[{j}] has an empty text")
        out.append(text)
    return out


def decomposition_examples(bench: Benchmark | str | Path, bench_index: int = 0,
                           decomposer: LlmDecomposer | None = None) -> list[DecompositionExample]:
    """The turns of a benchmark folder that carry gold ``tasks``, as training examples, de-duplicated
    on (prompt, target, gold). Turns without ``tasks`` (hand-made sets) are skipped."""
    if not isinstance(bench, Benchmark):
        bench = load_benchmark(bench)
    dec = decomposer or runtime_decomposer()
    out: list[DecompositionExample] = []
    seen: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()
    for q in bench.queries:
        tasks = _gold_tasks(bench, q)
        if not tasks:
            continue
        query = " ".join(q.query.split())          # Selector.select: validate_query
        history = tuple(validate_history(q.history))  # Selector.select: validate_history
        suffix = build_suffix(query, history, dec.history_turns)
        key = (suffix, tuple(tasks), tuple(q.gold))
        if key in seen:
            continue
        seen.add(key)
        out.append(DecompositionExample(f"{bench_index}:{q.id}", bench_index, query, history, suffix,
                                        tuple(tasks), tuple(q.gold)))
    return out


def is_public_format(bench: Benchmark) -> bool:
    """True when no row of the folder carries gold ``tasks`` (a public set or its split part)."""
    return all(q.extra.get("tasks") is None for q in bench.queries)


def public_examples(bench: Benchmark | str | Path, bench_index: int = 0, decomposer: LlmDecomposer | None = None
                    ) -> tuple[list[DecompositionExample], list[DecompositionExample]]:
    """(multi-tool examples, keep-whole candidates) of a public-format folder, each de-duplicated
    on (prompt, gold). Multi-tool: 2+ distinct gold tools, no tasks (GRPO only). Keep-whole: one
    gold tool, no history, an utterance of at most the runtime's ``max_chars`` (the grammar's line
    limit), as its one task. Other rows (a single-tool turn with history, whose sub-task would have
    to resolve the dialogue; an over-long utterance) are left out. A folder whose rows carry
    ``tasks`` gives none: its turns are ``decomposition_examples``."""
    if not isinstance(bench, Benchmark):
        bench = load_benchmark(bench)
    if not is_public_format(bench):
        return [], []
    dec = decomposer or runtime_decomposer()
    multi: list[DecompositionExample] = []
    whole: list[DecompositionExample] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for q in bench.queries:
        query = " ".join(q.query.split())
        history = tuple(validate_history(q.history))
        gold = tuple(dict.fromkeys(q.gold))
        if len(gold) >= 2:
            kind, tasks, into = "multi_tool", (), multi
        elif len(gold) == 1 and not history and 0 < len(query) <= dec.max_chars:
            kind, tasks, into = "keep_whole", (query,), whole
        else:
            continue
        suffix = build_suffix(query, history, dec.history_turns)
        if (suffix, gold) in seen:
            continue
        seen.add((suffix, gold))
        into.append(DecompositionExample(f"{bench_index}:{q.id}", bench_index, query, history, suffix, tasks, gold,
                                         kind))
    return multi, whole


def decomposition_pairs(bench: Benchmark | str | Path) -> list[tuple[str, str]]:
    """(prompt text, target text) for each turn with gold ``tasks``: the prompt the runtime's
    ``LlmDecomposer`` builds for the dialogue (ChatML, few-shot prefix included, ending with
    ``<|im_start|>assistant\\n``) and the gold task texts one per line (the end-of-turn token that
    follows in training is not part of the text)."""
    return [(ex.prompt, ex.target) for ex in decomposition_examples(bench)]


def data_summary(benches: list[Benchmark], examples: list[DecompositionExample],
                  sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``data_record`` of each folder with its format, its split part (if it is one), the examples
    of this run by kind and what the folder offered before the sampling (``sources``)."""
    return data_record(
        benches, examples=lambda i, _: sum(ex.bench == i for ex in examples),
        examples_by_kind=lambda i, _: {k: sum(ex.bench == i and ex.kind == k for ex in examples)
                                       for k in EXAMPLE_KINDS},
        **{key: (lambda i, _, key=key: sources[i][key]) for key in sources[0]})


def parser_agreement(examples: Sequence[DecompositionExample], dec: LlmDecomposer | None = None) -> dict[str, Any]:
    """How many gold targets the runtime's own parser would change (``parse_tasks``: lines that share
    no content word with the dialogue are dropped, leading digits and bullets are stripped, lines are
    clipped to max_chars, at most max_lines are kept). A model that reproduced such a target exactly
    would still lose those tasks at run time."""
    dec = dec or runtime_decomposer()
    examples = [ex for ex in examples if ex.tasks]  # a multi-tool public query has no target to parse
    changed, examples_of = 0, []
    for ex in examples:
        got, _ = parse_tasks(ex.target, ex.query, list(ex.history), dec.max_lines, dec.max_chars)
        if list(got) != list(ex.tasks):
            changed += 1
            if len(examples_of) < 5:
                examples_of.append({"id": ex.id, "gold": list(ex.tasks), "parsed": got})
    return {"examples": len(examples), "changed_by_parser": changed, "samples": examples_of}


def seeded_sample(examples: list, limit: int | None, rng: np.random.Generator) -> list:
    if limit is not None and limit < len(examples):
        keep = sorted(rng.choice(len(examples), limit, replace=False))
        return [examples[int(i)] for i in keep]
    return examples


def seeded_cycle(n: int, rng: np.random.Generator):
    """Indices 0..n-1 in a fresh seeded order each pass, forever."""
    while True:
        yield from (int(i) for i in rng.permutation(n))


def keep_whole_cap(share: float, others: int) -> int:
    """The most keep-whole examples a run takes so that they are at most ``share`` of its examples."""
    return int(math.floor(share * others / (1.0 - share) + 1e-9))


def training_examples(benches: Sequence[Benchmark], stage: str, keep_whole_share: float, seed: int,
                      dec: LlmDecomposer | None = None) -> tuple[list[DecompositionExample], list[dict[str, Any]]]:
    """The examples of one stage (``sft`` or ``grpo``) from the folders, in folder then row order,
    and per folder what it offered: ``format`` (generated | public), ``split`` (``split_part``),
    ``multi_tool_available``, ``keep_whole_available``. Generated turns with tasks join both stages;
    public multi-tool queries join GRPO only; the keep-whole candidates of all folders are pooled
    and a seeded sample of ``keep_whole_cap(keep_whole_share, other examples)`` joins."""
    dec = dec or runtime_decomposer()
    core: list[DecompositionExample] = []
    candidates: list[DecompositionExample] = []
    sources: list[dict[str, Any]] = []
    for b, bench in enumerate(benches):
        refuse_eval_parts([bench])
        part = split_part(bench.path)
        public = is_public_format(bench)
        multi, whole = public_examples(bench, b, dec) if public else ([], [])
        core += decomposition_examples(bench, b, dec) if not public else (multi if stage == "grpo" else [])
        candidates += whole
        sources.append({"format": "public" if public else "generated", "split": part,
                        "multi_tool_available": len(multi), "keep_whole_available": len(whole)})
    cap = keep_whole_cap(keep_whole_share, len(core))
    if len(candidates) > cap:
        rng = np.random.default_rng([seed, 0x6B77])  # its own stream: the run's generator is untouched
        candidates = [candidates[int(i)] for i in sorted(rng.choice(len(candidates), cap, replace=False))]
    return sorted(core + candidates, key=lambda ex: ex.bench), sources  # stable: row order within a folder


@dataclass
class PreparedRun:
    """What a stage starts from: the checked output folder, the folders, the runtime decomposer's
    settings, the stage's examples (sampled, then cut to what fits the runtime's context) and what
    each folder offered."""

    t_start: float
    out_dir: Path
    benches: list[Benchmark]
    dec: LlmDecomposer
    examples: list[DecompositionExample]
    sources: list[dict[str, Any]]
    rng: np.random.Generator
    available: int = 0
    too_long: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def prepare_run(data_dirs, out_dir, overwrite, stage: str, config) -> PreparedRun:
    """The start both stages share: the output folder checked, the folders loaded (evaluation
    parts refused), the stage's examples built and a seeded sample of ``config.max_examples``."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    benches = load_benchmarks(data_dirs, "train_decomposer")
    dec = runtime_decomposer()
    examples, sources = training_examples(benches, stage, config.keep_whole_share, config.seed, dec)
    if not examples:
        raise InputError("no training examples: the data folders hold no turns with gold 'tasks' (generate them "
                         "with `magicselector generate`)" + ("" if stage == "grpo" else
                         ", and public multi-tool queries join GRPO only"))
    rng = np.random.default_rng(config.seed)
    available = len(examples)
    return PreparedRun(t0, out_dir, benches, dec, seeded_sample(examples, config.max_examples, rng), sources, rng,
                       available)

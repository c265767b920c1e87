"""The schema tokens a selection hands the LLM per turn, and what prefilling them costs on the GGUF.

``bench latency`` reports, per timed turn of its first timed pass, the tokens of the tool
definitions (MCP format, ``magicselector.tokens.schema_tokens`` of
``magicselector.formats.tool_definition(tool, "mcp")``) at three levels:

- ``all``: every catalog tool (what an assistant without selection sends; the same every turn),
- ``fixed_10``: the first 10 of the ranked list (``Selection.ranked_ids[:10]``),
- ``cut``: the shipped cut (``Selection.ids``).

This module imports only the runtime (it runs on the phone, inside the latency runner).
:func:`measure_prefill` (``--prefill``, the ``llm`` extra) times llama.cpp evaluating a prompt of
each level's mean token count on the shipped decomposer GGUF, next to the selection's own p50.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

LEVELS = ("all", "fixed_10", "cut")
FIXED_K = 10
FORMAT = "mcp"


class HandedTokens:
    """Collects per-turn schema tokens at the three levels; one cached count per tool id."""

    def __init__(self, catalog: Any) -> None:
        self.catalog = catalog
        self._cache: dict[str, int] = {}
        self._all: int | None = None
        self.turns: dict[str, list[int]] = {level: [] for level in LEVELS}

    def tool_tokens(self, tool_id: str) -> int:
        n = self._cache.get(tool_id)
        if n is None:
            from magicselector.formats import tool_definition
            from magicselector.tokens import schema_tokens

            n = self._cache[tool_id] = schema_tokens(tool_definition(self.catalog.get(tool_id), FORMAT))
        return n

    def tokens_of(self, ids: Sequence[str]) -> int:
        return sum(self.tool_tokens(i) for i in ids)

    def add(self, selection: Any) -> None:
        if self._all is None:
            self._all = self.tokens_of(self.catalog.ids)
        self.turns["all"].append(self._all)
        self.turns["fixed_10"].append(self.tokens_of(list(selection.ranked_ids)[:FIXED_K]))
        self.turns["cut"].append(self.tokens_of(list(selection.ids)))

    def summary(self) -> dict[str, Any] | None:
        """``{"format", "fixed_k", "turns", "<level>": {"mean", "p90", "min", "max"}}``, None before any turn."""
        if not self.turns["all"]:
            return None
        import numpy as np

        out: dict[str, Any] = {"format": FORMAT, "fixed_k": FIXED_K, "turns": len(self.turns["all"])}
        for level, v in self.turns.items():
            a = np.asarray(v, dtype=np.float64)
            out[level] = {"mean": float(a.mean()), "p90": float(np.percentile(a, 90)),
                          "min": int(a.min()), "max": int(a.max())}
        return out


def definitions_text(catalog: Any) -> str:
    """Every catalog tool's MCP definition as compact JSON, one per line: the prompt text prefilled."""
    from magicselector.formats import tool_definition
    from magicselector.tokens import compact_json

    return "\n".join(compact_json(tool_definition(t, FORMAT)) for t in catalog)


def _time_eval(runner: Any, tokens: list[int], reps: int) -> float:
    """The mean ms of ``reps`` evaluations of ``tokens``, each from an empty context."""
    times = []
    for _ in range(reps):
        runner.llm.reset()
        t0 = time.perf_counter()
        runner.llm.eval(tokens)
        times.append((time.perf_counter() - t0) * 1e3)
    return sum(times) / len(times)


def measure_prefill(catalog: Any, levels: Mapping[str, float], threads: int = 1, *, reps: int = 2,
                    max_tokens: int = 4096, model_path: str | None = None) -> dict[str, Any]:
    """Prefill time (ms) of a prompt of each level's mean token count on the shipped GGUF.

    The prompt is the first N tokens (llama.cpp's tokenizer) of :func:`definitions_text`. A level
    over ``max_tokens`` is timed at ``max_tokens`` and scaled linearly (``extrapolated``; attention
    makes the real cost somewhat higher). Raises LlamaCppMissingError (a MagicSelectorError naming
    the ``llm`` extra) without llama-cpp-python.
    """
    from magicselector.backends.llama import LlamaRunner, require_llama_cpp
    from magicselector.errors import InputError

    require_llama_cpp()
    if reps < 1 or max_tokens < 1 or threads < 1:
        raise InputError("prefill needs reps >= 1, max_tokens >= 1, threads >= 1")
    from magicselector.decompose.model import ensure_default_model

    path = model_path if model_path is not None else ensure_default_model()
    wanted = {k: max(1, round(v)) for k, v in levels.items()}
    n_ctx = min(max(wanted.values()), max_tokens) + 16
    runner = LlamaRunner(path, n_threads=threads, n_ctx=n_ctx)
    text = definitions_text(catalog)
    tokens = runner.tokenize(text, special=False)
    while len(tokens) < min(max(wanted.values()), max_tokens):  # a tiny catalog: repeat its text
        tokens = tokens + tokens
    _time_eval(runner, tokens[:32], 1)  # the one warm-up (weights paged in, threads started)
    rows: dict[str, Any] = {}
    for level, n in wanted.items():
        timed_n = min(n, max_tokens)
        ms = _time_eval(runner, tokens[:timed_n], reps)
        rows[level] = {"tokens": n, "timed_tokens": timed_n, "ms": ms * n / timed_n, "extrapolated": n > timed_n}
    return {"model": str(path), "threads": threads, "reps": reps, "warmup": 1, "max_tokens": max_tokens,
            "n_ctx": n_ctx, "prompt": f"the first N llama.cpp tokens of the catalog's {FORMAT} definitions (JSON)",
            "levels": rows}


def format_handed(results: Mapping[str, Any]) -> list[str]:
    """The markdown section of ``bench latency``'s summary (empty when the results have neither)."""
    handed, prefill = results.get("handed_tokens"), results.get("prefill")
    if not handed and not prefill:
        return []
    lines = ["", f"## Schema tokens handed to the LLM per turn ({FORMAT} format)", ""]
    if not handed:
        lines.append("Not reported (the runtime that ran the selections predates this field).")
        return lines
    total = (results.get("stages") or {}).get("total", {}).get("p50")
    rows = (prefill or {}).get("levels") or {}
    lines.append(f"{handed['turns']} turns; tokens estimated by magicselector.tokens.schema_tokens.")
    if prefill and prefill.get("skipped"):
        lines.append(f"Prefill not measured: {prefill['skipped']}")
    elif prefill:
        lines.append(f"Prefill: {prefill['model'].rsplit('/', 1)[-1]}, {prefill['threads']} thread(s), "
                     f"1 warm-up + mean of {prefill['reps']}; selection p50 (total) {total or 0:.2f} ms.")
    lines += ["", "| level | mean tokens | p90 tokens | prefill ms | prefill / selection p50 |",
              "|---|---:|---:|---:|---:|"]
    names = {"all": "all catalog tools", "fixed_10": f"fixed {handed.get('fixed_k', FIXED_K)}", "cut": "shipped cut"}
    for level in LEVELS:
        st, row = handed[level], rows.get(level)
        ms = "-" if not row else f"{row['ms']:.1f}" + (f" (scaled from {row['timed_tokens']})"
                                                         if row["extrapolated"] else "")
        ratio = f"{row['ms'] / total:.1f}x" if row and total else "-"
        lines.append(f"| {names[level]} | {st['mean']:.0f} | {st['p90']:.0f} | {ms} | {ratio} |")
    return lines


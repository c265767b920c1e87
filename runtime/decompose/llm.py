"""The LLM decomposer (``llm``): a small instruction model (GGUF, run by the llama.cpp backend) writes the sub-tasks.

The prompt (``prompts.py``) follows the MagicSelector paper's Appendix A: resolve pronouns and
omissions from the dialogue, split compound commands, one task per line. Output is bounded by a
grammar (1..max_lines lines of <= max_chars characters), cut at the first repeated line, and lines
that share no content word with the dialogue are dropped; the utterance is data inside a
delimited field, so injected instructions cannot exceed those bounds. The model loads on first
use; the fixed prompt prefix is evaluated once and kept in the KV cache.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence, cast

from ..backends.llama import Generation, Grammar, LlamaRunner
from ..dialogue import Turn
from ..errors import InputError, ModelError
from ..files import pinned_file
from .base import DecomposeTrace, Decomposition
from .prompts import PROMPT_STYLES, build_suffix, parse_tasks, prompt_prefix
from .rules import task_key


def lines_grammar(max_lines: int = 4, max_chars: int = 80) -> str:
    """GBNF: 1..max_lines lines, each 1..max_chars characters, starting with a non-space."""
    if max_lines < 1 or max_chars < 1:
        raise InputError("max_lines and max_chars must be >= 1")
    more = f' ("\\n" line){{0,{max_lines - 1}}}' if max_lines > 1 else ""
    tail = f"[^\\n]{{0,{max_chars - 1}}}" if max_chars > 1 else ""
    return f"root ::= line{more}\nline ::= [^\\n \\t] {tail}\n"


@dataclass(frozen=True)
class LlmSettings:
    """What a loaded LLM decomposer is built from: two decomposers with equal settings can share one model."""

    model: str | None = None  # a GGUF path; None = the pinned default (``model.ensure_default_model``)
    prompt: str = "few_shot"  # a style of ``prompts.PROMPT_STYLES``
    threads: int = 2
    n_ctx: int = 2048
    # the sha256 the GGUF must have when it loads (a bundle's decomposer: its manifest's); the
    # pinned default always has one
    sha256: str | None = None


class LlmDecomposer:
    """The LLM decomposer. The model loads on first use (``load()``); the prompt prefix is
    evaluated once and kept in the KV cache."""

    name = "llm"

    def __init__(self, model_path: str | Path | None = None, threads: int = 2, n_ctx: int = 2048,
                 max_lines: int = 4, max_chars: int = 80, max_tokens: int = 96, history_turns: int = 4,
                 reuse_prefix: bool = True, runner: LlamaRunner | None = None, prompt: str = "few_shot",
                 sha256: str | None = None) -> None:
        if prompt not in PROMPT_STYLES:
            raise InputError(f"unknown decomposer prompt {prompt!r}; choose one of {PROMPT_STYLES}")
        self.model_path = model_path
        self.sha256 = sha256
        self.prompt = prompt
        self.threads = threads
        self.n_ctx = n_ctx
        self.max_lines = max_lines
        self.max_chars = max_chars
        self.max_tokens = max_tokens
        self.history_turns = history_turns
        self.reuse_prefix = reuse_prefix
        self._runner = runner
        self._grammar: Grammar | None = None
        self._lock = threading.Lock()
        self.load_ms = 0.0  # the model load and prefix evaluation, once loaded

    @classmethod
    def from_settings(cls, settings: LlmSettings) -> "LlmDecomposer":
        return cls(settings.model, threads=settings.threads, n_ctx=settings.n_ctx, prompt=settings.prompt,
                   sha256=settings.sha256)

    @property
    def settings(self) -> LlmSettings:
        """The settings this decomposer's model is built from (``build_decomposer`` reuses it when they match)."""
        model = None if self.model_path is None else str(self.model_path)
        return LlmSettings(model=model, prompt=self.prompt, threads=self.threads, n_ctx=self.n_ctx, sha256=self.sha256)

    @property
    def loaded(self) -> bool:
        return self._runner is not None and self._grammar is not None

    def ensure_loaded(self) -> float:
        """Load the model and evaluate the prompt prefix unless done; the milliseconds this call spent."""
        with self._lock:
            spent = 0.0
            if self._runner is None:
                t0 = time.perf_counter()
                self._runner = self._open_runner()
                spent += (time.perf_counter() - t0) * 1e3
            if self._grammar is None:
                self._grammar = Grammar(self._runner, lines_grammar(self.max_lines, self.max_chars))
                t0 = time.perf_counter()
                self._runner.set_prefix(prompt_prefix(self.prompt))
                spent += (time.perf_counter() - t0) * 1e3
            self.load_ms += spent
            return spent

    def _open_runner(self) -> LlamaRunner:
        """The model opened: the caller's GGUF as it is where it is unpinned, else checked against
        its sha256 and opened from the same file (a swap after the check is never loaded)."""
        from .model import DEFAULT_MODEL_SHA256, ensure_default_model

        path: str | Path
        sha256: str | None
        if self.model_path is None:
            path, sha256 = ensure_default_model(), DEFAULT_MODEL_SHA256
        else:
            path, sha256 = self.model_path, self.sha256
        if sha256 is None:
            return LlamaRunner(path, n_threads=self.threads, n_ctx=self.n_ctx)
        with pinned_file(path, sha256, ModelError, "decomposer model") as same:
            try:
                runner = LlamaRunner(same, n_threads=self.threads, n_ctx=self.n_ctx)
            except ModelError as e:  # name the file, not its descriptor
                raise ModelError(str(e).replace(same, str(path))) from None
        runner.path = Path(path)  # the name, not the descriptor's (closed now)
        return runner

    def load(self) -> LlamaRunner:
        """The loaded runner (loading it on first use)."""
        self.ensure_loaded()
        return cast(LlamaRunner, self._runner)  # ensure_loaded set it

    @property
    def runner(self) -> LlamaRunner:
        return self.load()

    @property
    def grammar(self) -> Grammar:
        self.load()
        return cast(Grammar, self._grammar)  # ensure_loaded set it

    def _stop(self, text: str) -> bool:
        lines = [task_key(x) for x in text.split("\n")[:-1]]
        lines = [x for x in lines if x]
        return len(lines) != len(set(lines)) or len(lines) >= self.max_lines

    def _generate(self, query: str, history: Sequence[Turn], deadline: float | None) -> Generation:
        runner = cast(LlamaRunner, self._runner)  # decompose ran ensure_loaded first
        return runner.generate(build_suffix(query, history, self.history_turns), grammar=self._grammar,
                               max_tokens=self.max_tokens, reuse_prefix=self.reuse_prefix, deadline=deadline,
                               stop=self._stop)

    def decompose(self, query: str, history: Sequence[Turn], deadline: float | None = None) -> Decomposition:
        """The model's sub-tasks (the utterance itself when none parses). ``deadline`` is a
        ``time.perf_counter()`` instant: past it generation stops, the tasks are empty and
        ``trace.stopped`` is ``deadline``."""
        load_ms = self.ensure_loaded()
        gen = self._generate(query, history, deadline)
        trace = DecomposeTrace(ran=self.name, raw=gen.text, ms=gen.ms, ttft_ms=gen.ttft_ms, tokens=gen.tokens,
                               stopped=gen.stopped, load_ms=load_ms)
        if gen.stopped == "deadline":
            return Decomposition((), replace(trace, reason="deadline"))
        tasks, dropped = parse_tasks(gen.text, query, history, self.max_lines, self.max_chars)
        return Decomposition(tuple(tasks or [query]), replace(trace, dropped=tuple(dropped)))

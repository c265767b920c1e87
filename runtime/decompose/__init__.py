"""Decomposition: a dialogue turn -> the sub-tasks retrieval runs on, with the trace of how (``Decomposition``).

* ``none`` (``PassthroughDecomposer``): the turn as one sub-task (the Selector folds the history
  into it by the configured history mode).
* ``rules`` (``rules.RuleDecomposer``): clause splitting and elliptical carry-over, no model.
* ``llm`` (``llm.LlmDecomposer``): a small GGUF instruction model (``prompts.py`` its prompt,
  ``model.py`` the pinned default model, ``magicselector.backends.llama`` the runtime).
* ``auto`` (``gate.GatedDecomposer``): the rules always, the LLM where it can help, within a deadline.

The Selector always retrieves the plain utterance too (the anchor list), so a wrong or partial
decomposition costs less than it would alone.
"""
from __future__ import annotations

from typing import Sequence

from ..backends.llama import require_llama_cpp
from ..dialogue import Turn
from ..errors import InputError
from .base import DecomposeTrace, Decomposer, Decomposition
from .gate import GatedDecomposer
from .llm import LlmDecomposer, LlmSettings
from .prompts import PROMPT_STYLES
from .rules import RuleDecomposer

DECOMPOSERS = ("none", "rules", "llm", "auto")


class PassthroughDecomposer:
    """No decomposition: the utterance is the only sub-task (the Selector folds the history into
    it, ``Selector.plan``)."""

    name = "none"

    def decompose(self, query: str, history: Sequence[Turn]) -> Decomposition:
        return Decomposition((query,), DecomposeTrace(ran=self.name))


# the decomposers build_decomposer makes (any other object with ``name`` and ``decompose`` is the caller's own)
BUILT_IN = (PassthroughDecomposer, RuleDecomposer, LlmDecomposer, GatedDecomposer)


def _llm_in(decomposer: Decomposer | None) -> LlmDecomposer | None:
    if isinstance(decomposer, LlmDecomposer):
        return decomposer
    if isinstance(decomposer, GatedDecomposer):
        return decomposer.llm
    return None


def build_decomposer(kind: str, *, deadline_ms: float | None = 1500.0, llm: LlmSettings | None = None,
                     reuse: Decomposer | None = None) -> Decomposer:
    """A decomposer by name (``none``, ``rules``, ``llm``, ``auto``); the LLM is not loaded here.

    ``reuse``: a decomposer built before (e.g. the one a Selector holds); its LLM, loaded or not,
    is kept when it was built with the same ``llm`` settings, so changing other settings does
    not load the model again.
    """
    if kind == "none":
        return PassthroughDecomposer()
    if kind == "rules":
        return RuleDecomposer()
    if kind not in DECOMPOSERS:
        raise InputError(f"unknown decomposer {kind!r}; choose one of {DECOMPOSERS}")
    require_llama_cpp()
    settings = llm or LlmSettings()
    model = _llm_in(reuse)
    if model is None or model.settings != settings:
        model = LlmDecomposer.from_settings(settings)
    if kind == "llm":
        return model
    return GatedDecomposer(model, RuleDecomposer(max_tasks=model.max_lines), deadline_ms=deadline_ms)


__all__ = [
    "BUILT_IN", "DECOMPOSERS", "PROMPT_STYLES", "DecomposeTrace", "Decomposer", "Decomposition", "GatedDecomposer",
    "LlmDecomposer", "LlmSettings", "PassthroughDecomposer", "RuleDecomposer", "build_decomposer",
]

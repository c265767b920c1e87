"""The command-line vocabulary every ``magicselector`` subcommand shares: one spelling per
SelectorConfig setting, and parsed args -> SelectorConfig.

Every command line lives under ``magicselector.cli`` (main, bench, train, split, serve), so they
all spell their options from this one module; it imports only the runtime's config.

Every option defaults to None, meaning "what ``SelectorConfig()`` ships"; ``selector_config``
fills in only what was given, so a command without flags runs exactly the shipped product.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from magicselector.config import DECOMPOSE_MODES, HISTORY_MODES, SelectorConfig
from magicselector.stages.cut import CutConfig
from magicselector.decompose import PROMPT_STYLES

SHIPPED = SelectorConfig()

# the shipped cut's parameters: (flag, CutConfig field, type, help)
_CUT_PARAMETERS = (
    ("--k-min", "k_min", int, "lower bound on K for every adaptive rule"),
    ("--k-max", "k_max", int, "upper bound on K for every adaptive rule"),
    ("--range-margin", "range_margin", float, "rmargin: keep tools within this fraction of the head's score range"),
    ("--range-depth", "range_depth", int, "rmargin: the head the range is taken over (0: the whole list)"),
    ("--list-range-margin", "list_range_margin", float, "rmargin on each list of a decomposed turn"),
    ("--anchor-k-max", "anchor_k_max", int, "the most tools the whole-utterance list adds in a decomposed turn"),
    ("--min-probability", "min_probability", float,
     "drop a kept tool the bundle's learned head gives a lower relevance probability (the surest stays)"),
)


def warn(message: str) -> None:
    """A note on stderr (stdout stays the command's output, e.g. JSON)."""
    print(f"magicselector: {message}", file=sys.stderr, flush=True)


def add_bundle_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", metavar="DIR",
                   help="bundle folder (default: the embedded default bundle, built on first use)")


def add_bundle_trust_options(p: argparse.ArgumentParser) -> None:
    """``--public-key`` and ``--min-release``: what ``Selector.from_bundle`` takes to trust a bundle."""
    p.add_argument("--public-key", metavar="PUB", default=None,
                   help="require the bundle to be signed by this Ed25519 public key (PEM file, or the 32 raw bytes as "
                        "base64 or hex); every file is then checked against the signed manifest")
    p.add_argument("--min-release", type=int, metavar="N", default=None,
                   help="refuse a bundle whose signed release is lower than N (an older bundle put back)")


def bundle_trust(args: argparse.Namespace) -> dict[str, Any]:
    """The ``public_key`` and ``min_release`` keywords of ``Selector.from_bundle`` from the parsed flags."""
    return {"public_key": getattr(args, "public_key", None), "min_release": getattr(args, "min_release", None)}


def add_threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, metavar="N",
                   help=f"inference threads of the embedder (default {SHIPPED.threads})")


def add_history_mode_option(p: argparse.ArgumentParser, *, default_help: str | None = None) -> None:
    """``--history-mode none|user|questions|all``."""
    p.add_argument("--history-mode", choices=HISTORY_MODES, default=None, dest="history_mode",
                   help="what of the dialogue retrieval sees: none (the utterance), user (plus earlier user "
                        f"turns), questions (plus earlier user turns and the assistant's questions), all (plus the whole "
                        f"dialogue); default {default_help or repr(SHIPPED.history)}")


def add_history_file_option(p: argparse.ArgumentParser) -> None:
    """``--history-file FILE``."""
    p.add_argument("--history-file", dest="history_file", metavar="FILE",
                   help="JSON file: the chat history before the utterance (a list of {role, content} "
                        "messages, or {\"history\": [...]})")


def add_cut_options(p: argparse.ArgumentParser) -> None:
    """The shipped cut's parameters (``CutConfig``)."""
    for flag, field, type_, text in _CUT_PARAMETERS:
        p.add_argument(flag, type=type_, default=None, dest=f"cut_{field}",
                       help=f"{text} (default {getattr(SHIPPED.cut, field)})")


def add_decompose_options(p: argparse.ArgumentParser, *, mode_only: bool = False) -> None:
    """``--decompose MODE`` and, unless ``mode_only``, the decomposer's model, prompt, deadline, threads."""
    p.add_argument("--decompose", choices=DECOMPOSE_MODES, default=None,
                   help=f"sub-task decomposition: none, rules (no model), llm (GGUF), auto (gated LLM with a "
                        f"deadline); default {SHIPPED.decompose!r}")
    if mode_only:
        return
    p.add_argument("--decomposer-model", metavar="GGUF",
                   help="a GGUF file for the LLM decomposer (default: the bundle's, else the pinned Qwen2.5 0.5B)")
    p.add_argument("--decomposer-prompt", choices=PROMPT_STYLES,
                   help="the decomposer's prompt: few_shot (an instruction model) or zero_shot (a model trained "
                        "with `train decomposer --prompt zero_shot`); default: the bundle decomposer's, else few_shot")
    p.add_argument("--deadline-ms", type=float, default=None, dest="deadline_ms",
                   help=f"auto: the LLM's latency budget per turn (default {SHIPPED.llm.deadline_ms})")
    p.add_argument("--llm-threads", type=int, default=None, dest="llm_threads",
                   help=f"threads of the LLM decomposer (default {SHIPPED.llm.threads})")


def add_budget_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tools", type=int, default=None, dest="max_tools", metavar="N",
                   help="keep at most N tools a turn, the likeliest first by the learned head where the bundle has "
                        "one, else one per sub-task first (default: as many as the cut keeps)")
    p.add_argument("--max-schema-tokens", type=int, default=None, dest="max_schema_tokens", metavar="T",
                   help="keep at most T tokens of tool definitions a turn, counted in --format's shape (MCP by default)")


def add_head_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-head", action="store_true", default=None, dest="no_head",
                   help="cut and order without the bundle's learned head (stages/head.py; default: on where the "
                        "bundle has one)")


def add_selector_options(p: argparse.ArgumentParser) -> None:
    """Every SelectorConfig option: bundle, history mode, cut, head, budget, threads, decomposition."""
    add_bundle_option(p)
    add_history_mode_option(p)
    add_cut_options(p)
    add_head_option(p)
    add_budget_options(p)
    add_threads_option(p)
    add_decompose_options(p)


def cut_config(args: argparse.Namespace, base: CutConfig | None = None) -> CutConfig:
    """The cut the flags ask for: ``base`` (default: the shipped cut) with the given parameters."""
    changes = {field: getattr(args, f"cut_{field}") for _, field, _, _ in _CUT_PARAMETERS
               if getattr(args, f"cut_{field}", None) is not None}
    return replace(base if base is not None else CutConfig(), **changes)


def selector_config(args: argparse.Namespace, base: SelectorConfig = SHIPPED, **overrides: Any) -> SelectorConfig:
    """``base`` (the shipped SelectorConfig) with what the flags gave; ``overrides`` win over both."""
    changes: dict[str, Any] = {"cut": cut_config(args, base.cut if isinstance(base.cut, CutConfig) else None)}
    for field, attr in (("history", "history_mode"), ("threads", "threads"),
                        ("decompose", "decompose"), ("max_tools", "max_tools"),
                        ("max_schema_tokens", "max_schema_tokens")):
        value = getattr(args, attr, None)
        if value is not None:
            changes[field] = value
    llm = {field: getattr(args, attr) for field, attr in (
        ("model", "decomposer_model"), ("prompt", "decomposer_prompt"), ("deadline_ms", "deadline_ms"),
        ("threads", "llm_threads")) if getattr(args, attr, None) is not None}
    if llm:
        changes["llm"] = replace(base.llm, **llm)
    if getattr(args, "no_head", None):
        changes["head"] = False
    changes.update(overrides)
    return replace(base, **changes)


def history_mode_with_history(args: argparse.Namespace, base: SelectorConfig = SHIPPED, why: str = "") -> str:
    """The history mode for a command that has a history to use (``select --history-file``, ``demo``):
    ``--history-mode`` when given, else the shipped mode, else (when that is ``none``, which would
    ignore the history) ``user``, with a note on stderr."""
    mode: str | None = getattr(args, "history_mode", None)
    if mode is not None:
        return mode
    if base.history != "none":
        return base.history
    warn(f"note: {why or 'a history was given'} but the shipped history mode is 'none', which ignores it; "
         "using --history-mode user (pass --history-mode to choose)")
    return "user"

"""How a history mode folds earlier turns into the retrieval text (``retrieval_text``, ``recent_turns``; the Selector's one fold is ``Selector.plan``)."""
from __future__ import annotations

import re
from collections.abc import Sequence  # abc: isinstance is several times typing's speed

from .messages import Turn


_WIRE_HASH = re.compile(r"(?<=.)_[0-9a-f]{8}$")


def tool_phrase(names: Sequence[str]) -> str:
    """Called tools as words the embedder knows: ``github__create_issue`` -> ``github create issue``.
    A trailing ``_`` and 8 hex digits (the hash of a wire name, or an opaque id) are no words and
    are left out: ``ws__files_read_1a2b3c4d`` reads as ``ws files read``, like ``ws__files.read``."""
    return ", ".join(re.sub(r"[_.\-/:]+", " ", _WIRE_HASH.sub("", n)).strip() for n in names)


def _with_tools(text: str, tools: Sequence[str]) -> str:
    if not tools:
        return text
    return f"{text} ({tool_phrase(tools)})" if text else tool_phrase(tools)


def _exchanges(history: Sequence[Turn], tool_words: bool = True) -> list[Turn]:
    """User and assistant turns, tool results and system prompts dropped; an assistant message's
    text carries the tools it called (unless ``tool_words`` is off), and an assistant's consecutive
    messages (a tool call, then its reply) are merged, so that ``history_turns`` counts turns of the
    conversation, not tool plumbing."""
    out: list[Turn] = []
    for t in history:
        if t.role in ("system", "tool"):
            continue
        text = _with_tools(t.content, t.tools) if t.role == "assistant" and tool_words else t.content
        if out and t.role == "assistant" and out[-1].role == "assistant":
            out[-1] = _merged(out[-1], text, t.tools)
        else:
            out.append(Turn(t.role, text, t.tools))
    return out


def _merged(prev: Turn, text: str, tools: tuple[str, ...]) -> Turn:
    """An assistant turn with the next assistant message's text and tools added."""
    return Turn("assistant", " ".join(x for x in (prev.content, text) if x), tuple(dict.fromkeys(prev.tools + tools)))


def retrieval_text(query: str, history: Sequence[Turn], mode: str, turns: int = 4) -> str:
    """The text retrieved with under a history mode.

    The utterance comes first and earlier turns follow (``recent_turns``), most recent first, so
    that the encoder's truncation drops the oldest context and never the request itself.
    """
    if mode == "none" or not history:
        return query
    earlier = [t.content for t in reversed(recent_turns(history, mode, turns)) if t.content]
    return " | ".join([query, *earlier]) if earlier else query


_SENTENCE_END = re.compile(r"([.!?\n])")


def _questions(text: str) -> str:
    """The question sentences of a text (each from the last sentence end up to its "?"), joined. A
    split, not a search for questions: that search rescans a long run without a sentence end from
    every start, quadratic in the 16,000 characters a history may hold."""
    parts = _SENTENCE_END.split(text)  # text, end, text, end, ..., text
    return " ".join((parts[i] + "?").strip() for i in range(0, len(parts) - 1, 2) if parts[i + 1] == "?")


def recent_turns(history: Sequence[Turn], mode: str, turns: int = 4) -> list[Turn]:
    """The earlier turns a history mode keeps, oldest first: the last ``turns`` user turns (``user``),
    user turns and the questions the assistant asked (``questions``), or turns of the conversation
    (``all``); none for ``none``. The one place history is folded: ``retrieval_text`` and the LLM
    decomposer's prompt both read it.

    Tool results and system prompts are left out, and an assistant's tool call and its reply count
    as one turn. The tools called come along as words (measured in docs/bench/history.md): under
    ``all`` each assistant turn carries the tools it called, under ``user`` and ``questions`` each
    user turn carries the tools called in answer to it. ``questions`` keeps only the question
    sentences of an assistant turn ("To where?", "Which one, Priya or Luis?"): a real assistant's
    results, IDs and confirmations name no task, while its clarifying question names the one the
    next answer completes (docs/bench/history.md, "Weighting the history by role").
    """
    if mode == "none":
        return []
    if mode == "all":
        return _exchanges(history)[-turns:]
    return _user_turns(_exchanges(history, tool_words=False), mode == "questions")[-turns:]


def _user_turns(merged: list[Turn], questions: bool) -> list[Turn]:
    """The user turns, each with the tools called in answer to it, and (``questions``) the
    questions the assistant asked, oldest first."""
    answered = [nxt.tools if nxt.role == "assistant" else () for nxt in [*merged[1:], Turn("user", "")]]
    keep: list[Turn] = []
    for t, tools in zip(merged, answered):
        if t.role == "user":
            keep.append(Turn("user", _with_tools(t.content, tools), tools))
        elif questions and (asked := _questions(t.content)):
            keep.append(Turn("assistant", asked))
    return keep


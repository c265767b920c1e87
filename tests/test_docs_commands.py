"""Every ``magicselector ...`` command the README, the guides, the port guide, the measurement pages
and the model cards show exists: its subcommands and each ``--flag`` are checked against the real
argparse parser (nothing is run). docs/bench/LOG.md is left out: its entries keep the commands of
their day, and its table maps the gone ones to today's."""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md")), ROOT / "android_demo" / "README.md",
         ROOT / "docs" / "ARCHITECTURE.md",
         *sorted(p for p in (ROOT / "docs" / "bench").glob("*.md") if p.name != "LOG.md"),
         *sorted(ROOT.glob("runtime/models/*/MODEL_CARD.md")), *sorted(ROOT.glob("bench/experiments/*/MODEL_CARD.md"))]
# a command starts at `magicselector` (or `python3 -m magicselector`) followed by a word: a subcommand
# or a top-level flag (not Python's `from magicselector import`); it ends at the end of its code
# span or line
COMMAND = re.compile(r"(?:^|[\s`(;|&])(?<!from )(?<!import )(?:python3? -m )?magicselector "
                     r"((?:--?[a-z]|[a-z])[^`\n]*)")


def code_texts(markdown: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every fenced code line (backslash continuations joined) and every
    inline code span outside fences (one wrapped over lines of its paragraph joined by spaces)."""
    fenced = False
    pending, start = "", 0
    paragraph: list[str] = []
    first = 0
    for number, line in enumerate([*markdown.splitlines(), ""], 1):
        if (fenced or not line.strip() or line.lstrip().startswith("```")) and paragraph:
            text = "\n".join(paragraph)
            for span in re.finditer(r"`([^`]+)`", text):
                yield first + text.count("\n", 0, span.start()), span.group(1).replace("\n", " ")
            paragraph = []
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            if not pending:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, pending + line
            pending = ""
        elif line.strip():
            if not paragraph:
                first = number
            paragraph.append(line)


def shown_commands(markdown: str) -> Iterator[tuple[int, list[str]]]:
    """The line and the words (after ``magicselector``) of each command a page shows."""
    for number, text in code_texts(markdown):
        for match in COMMAND.finditer(text):
            words = re.sub(r"\s#.*", "", match.group(1))  # a shell comment ends the command
            yield number, [w.strip("[]|(){}'\"") for w in words.split()]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def problems(words: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """What in ``words`` today's parser does not take: an unknown subcommand or flag."""
    path = ["magicselector"]
    options = {o for a in parser._actions for o in a.option_strings}
    rest = list(words)
    while rest:
        subs = _subparsers(parser)
        word = rest[0]
        if not subs or word.startswith("-"):
            break
        if word not in subs:
            if re.fullmatch(r"[a-z][a-z-]*", word):
                return [f"`{' '.join(path)}` has no subcommand {word!r} (it has {sorted(subs)})"]
            break  # a placeholder (COMMAND, ...) where the page names no one command
        parser = subs[rest.pop(0)]
        path.append(word)
        options |= {o for a in parser._actions for o in a.option_strings}
    found = []
    for word in rest:
        flag = word.split("=", 1)[0]
        if re.fullmatch(r"--[a-z][a-z0-9-]*", flag) and flag not in options:
            found.append(f"`{' '.join(path)}` takes no {flag}")
    return found


def test_the_extractor_finds_commands_and_flags():
    from magicselector.cli import build_parser

    parser = build_parser()
    page = ("run `magicselector bench latency --threads 1` then\n```\nmagicselector eval DIR \\\n  --rerank  # gone\n"
            "```\nand `from magicselector import Selector`, or `magicselector select\n--no-rerank TEXT` wrapped\n")
    shown = list(shown_commands(page))
    assert shown == [(1, ["bench", "latency", "--threads", "1"]), (3, ["eval", "DIR", "--rerank"]),
                     (6, ["select", "--no-rerank", "TEXT"])]
    assert problems(shown[0][1], parser) == []
    assert problems(shown[1][1], parser) == ["`magicselector eval` takes no --rerank"]
    assert problems(["bench", "rerank"], parser)[0].startswith("`magicselector bench` has no subcommand 'rerank'")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_a_page_shows_exists(page):
    from magicselector.cli import build_parser

    parser = build_parser()
    shown = list(shown_commands(page.read_text(encoding="utf-8")))
    wrong = [f"{page.relative_to(ROOT)}:{number}: {p}" for number, words in shown for p in problems(words, parser)]
    assert wrong == []


def test_the_pages_show_commands_to_check():
    """The check above is not empty: the pages show some 200 commands (238 when written)."""
    assert sum(len(list(shown_commands(page.read_text(encoding="utf-8")))) for page in PAGES) > 150

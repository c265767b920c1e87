"""Every ``magicselector ...`` command the README, the guides, the port guide, the measurement pages
and the model cards show exists: its subcommands and each ``--flag`` are checked against the real
argparse parser (nothing is run). So is every ``python3 -m magicselector.<module> ...`` command they
show: the module imports, and each ``--flag`` is one its parser takes (the parser of a module-level
function that returns one, or the one ``main`` builds, taken at its ``parse_args`` when ``main`` does
nothing before but build it), or, for a module with no such parser, one its source names.
docs/bench/LOG.md is left out: its entries keep the commands of their day, and its table maps the
gone ones to today's."""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator
from unittest import mock

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
# a module command: `python3 -m magicselector.<module>`, then its arguments to the end of the code span or line
MODULE_COMMAND = re.compile(r"""(?:^|[\s`(;|&"'=])python3? -m (magicselector(?:\.\w+)+)(?:[ \t]+([^`\n]*))?""")


# a line after which an indented line continues a list item rather than starting a code block
LIST_LINE = re.compile(r"\s|[-*+]\s|\d+[.)]\s")


def code_texts(markdown: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every code line, fenced or indented by four spaces after a blank line
    (not in a list item), with backslash continuations joined, and of every inline code span
    outside them (one wrapped over lines of its paragraph joined by spaces)."""
    fenced = block = False  # in a fenced code block; in an indented one
    pending, start = "", 0
    paragraph: list[str] = []
    first = 0
    after_blank, last_text = True, ""  # the line before was blank; the last line of text outside code
    for number, line in enumerate([*markdown.splitlines(), ""], 1):
        blank = not line.strip()
        if not fenced and not blank:
            block = line.startswith("    ") and (block or (after_blank and not LIST_LINE.match(last_text)))
        after_blank = blank
        if (fenced or block or blank or line.lstrip().startswith("```")) and paragraph:
            text = "\n".join(paragraph)
            for span in re.finditer(r"`([^`]+)`", text):
                yield first + text.count("\n", 0, span.start()), span.group(1).replace("\n", " ")
            paragraph = []
        if not block and line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or (block and not blank):
            if not pending:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, pending + line
            pending = ""
        elif not blank:
            last_text = line
            if not paragraph:
                first = number
            paragraph.append(line)


def shown_commands(markdown: str) -> Iterator[tuple[int, list[str]]]:
    """The line and the words (after ``magicselector``) of each command a page shows."""
    for number, text in code_texts(markdown):
        for match in COMMAND.finditer(text):
            words = re.sub(r"\s#.*", "", match.group(1))  # a shell comment ends the command
            yield number, [w.strip("[]|(){}'\"") for w in words.split()]


def shown_module_commands(markdown: str) -> Iterator[tuple[int, str, list[str]]]:
    """The line, the module and the words after it of each ``python3 -m magicselector.<module>``
    command a page shows."""
    for number, text in code_texts(markdown):
        for match in MODULE_COMMAND.finditer(text):
            words = re.sub(r"(^|\s)#.*", "", match.group(2) or "")  # a shell comment ends the command
            yield number, match.group(1), [w.strip("[]|(){}'\"") for w in words.split()]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def problems(words: list[str], parser: argparse.ArgumentParser, prog: str = "magicselector") -> list[str]:
    """What in ``words`` today's parser (of the command ``prog``) does not take: an unknown
    subcommand or flag."""
    path = [prog]
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


class _ParserBuilt(Exception):
    """Raised in place of ``parse_args`` to hand back the parser ``main`` built, before it runs anything."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


# the calls that only build a parser: ArgumentParser(...), p.add_argument(...), add_part_args(p), ...
def _builds_parser(call: ast.expr) -> bool:
    if not isinstance(call, ast.Call):
        return False
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return name == "ArgumentParser" or name.startswith("add_") or name == "set_defaults"


def _builds_only_a_parser_first(main: Callable[..., Any]) -> bool:
    """Whether ``main`` does nothing before its ``parse_args`` but import and build the parser (so
    stopping it there runs nothing of the command)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(main)))
    except (OSError, TypeError, SyntaxError):
        return False
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef):
        return False
    for statement in function.body:
        if any(isinstance(n, ast.Attribute) and n.attr == "parse_args" for n in ast.walk(statement)):
            return True
        docstring = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
        building = isinstance(statement, (ast.Expr, ast.Assign)) and _builds_parser(statement.value)
        if not (docstring or building or isinstance(statement, (ast.Import, ast.ImportFrom))):
            return False
    return False


def module_parser(module: ModuleType) -> argparse.ArgumentParser | None:
    """The module's argparse parser where it is reachable without running the command: what a
    module-level function of no arguments returning an ArgumentParser gives, else the parser
    ``main`` builds, taken at its ``parse_args`` (only when ``main`` does nothing before but build
    it); None for a module with neither."""
    for function in vars(module).values():
        if (inspect.isfunction(function) and function.__module__ == module.__name__
                and str(inspect.signature(function).return_annotation).endswith("ArgumentParser")
                and not any(p.default is p.empty for p in inspect.signature(function).parameters.values())):
            parser = function()
            assert isinstance(parser, argparse.ArgumentParser), function
            return parser
    main = getattr(module, "main", None)
    if not callable(main) or not _builds_only_a_parser_first(main):
        return None

    def hand_back(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _ParserBuilt(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", hand_back):
        try:
            main([])
        except _ParserBuilt as built:
            return built.parser
    raise AssertionError(f"{module.__name__}.main returned without parsing its arguments")


def module_problems(name: str, words: list[str]) -> list[str]:
    """What is wrong with ``python3 -m <name> <words>``: a module that does not import, or a --flag
    its parser does not take (its source does not name, where it has no parser)."""
    prog = f"python3 -m {name}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and not (e.name == "magicselector" or e.name.startswith("magicselector.")):
            pytest.skip(f"`{prog}` needs {e.name!r}, not installed here")
        return [f"`{prog}`: there is no module {e.name!r}"]
    parser = module_parser(module)
    if parser is not None:
        return problems(words, parser, prog)
    source = inspect.getsource(module)
    return [f"`{prog}` has no parser, and its source names no {word.split('=', 1)[0]}" for word in words
            if re.fullmatch(r"--[a-z][a-z0-9-]*", word.split("=", 1)[0]) and word.split("=", 1)[0] not in source]


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
    # a code block indented by four spaces is code; a list item's indented paragraph is not
    page = ("with\n\n    magicselector eval DIR --rerank\n\n    magicselector bench latency\nthen\n\n"
            "- an item\n\n    magicselector is the package (`magicselector bench quality`)\n")
    assert list(shown_commands(page)) == [(3, ["eval", "DIR", "--rerank"]), (5, ["bench", "latency"]),
                                          (10, ["bench", "quality"])]


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


def test_the_module_extractor_finds_modules_and_flags():
    page = ("```\npython3 -m magicselector.bench.experiments.fold_eval $PARTS --out OUT.json  # + --head none\n"
            "python -m magicselector.bench.decompose_bench \\\n  --threads 2 --rerank\n```\n"
            "run `python3 -m magicselector.bench.experiments.NAME --help`; `magicselector eval` is not one\n")
    shown = list(shown_module_commands(page))
    assert shown == [(2, "magicselector.bench.experiments.fold_eval", ["$PARTS", "--out", "OUT.json"]),
                     (3, "magicselector.bench.decompose_bench", ["--threads", "2", "--rerank"]),
                     (6, "magicselector.bench.experiments.NAME", ["--help"])]
    assert module_problems(*shown[0][1:]) == []  # fold_eval: a parser() function
    # decompose_bench: the parser its main builds, taken before anything runs
    assert module_problems(*shown[1][1:]) == ["`python3 -m magicselector.bench.decompose_bench` takes no --rerank"]
    assert module_problems("magicselector.bench.no_such_bench", []) == [
        "`python3 -m magicselector.bench.no_such_bench`: there is no module 'magicselector.bench.no_such_bench'"]
    # a main that does anything before parse_args is not run to reach its parser
    def main_that_works_first(argv: list[str]) -> Any:
        Path(argv[0]).write_text("")
        return argparse.ArgumentParser().parse_args(argv)

    def main_that_only_builds(argv: list[str]) -> Any:
        """A docstring, an import, a parser."""
        import json  # noqa: F401
        p = argparse.ArgumentParser()
        p.add_argument("--x")
        return p.parse_args(argv)

    assert not _builds_only_a_parser_first(main_that_works_first)
    assert _builds_only_a_parser_first(main_that_only_builds)
    # cli.serve reads --limits-report by hand (no parser): the flag is looked for in its source
    assert module_problems("magicselector.cli.serve", ["--limits-report"]) == []
    assert module_problems("magicselector.cli.serve", ["--limits-csv"]) == [
        "`python3 -m magicselector.cli.serve` has no parser, and its source names no --limits-csv"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_command_a_page_shows_exists(page):
    wrong = [f"{page.relative_to(ROOT)}:{number}: {p}"
             for number, name, words in shown_module_commands(page.read_text(encoding="utf-8"))
             if re.fullmatch(r"magicselector(\.[a-z_][a-z0-9_]*)+", name)  # not a placeholder (.NAME)
             for p in module_problems(name, words)]
    assert wrong == []


def test_the_pages_show_module_commands_to_check():
    """The module check is not empty either (about 50 commands when written)."""
    assert sum(len(list(shown_module_commands(page.read_text(encoding="utf-8")))) for page in PAGES) > 30

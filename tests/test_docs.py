"""The README is true to the code: its pipeline picture, its SelectorConfig signature, its CLI command list, its OPTIONS paragraph and its Python example are checked against what they describe."""
from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _render(value: Any, indent: str) -> str:
    """A default as the README writes it: a dataclass as its constructor, one field a line."""
    if not dataclasses.is_dataclass(value):
        return repr(value)
    inner = indent + "    "
    fields = [f for f in dataclasses.fields(value) if f.init]
    body = "".join(f"{inner}{f.name}={_render(getattr(value, f.name), inner)},\n" for f in fields)
    return f"{type(value).__name__}(\n{body}{indent})"


def render_config() -> str:
    """``SelectorConfig()`` spelled out: every keyword with its shipped value, nested settings too."""
    from magicselector.config import SelectorConfig

    return _render(SelectorConfig(), "")


def _normalized(code: str) -> str:
    """Code without comments and whitespace (the README may annotate and wrap it)."""
    return "".join(re.sub(r"#.*", "", line) for line in code.splitlines()).replace(" ", "")


def _block(start: str) -> str:
    """The README's fenced code block whose first line starts with ``start``."""
    for block in re.findall(r"```[a-z]*\n(.*?)```", _readme(), re.S):
        if block.lstrip().startswith(start):
            return block
    raise AssertionError(f"README.md has no code block starting with {start!r}")


def _leaves(parser: argparse.ArgumentParser, words: tuple[str, ...] = (), help_: str = ""
            ) -> Iterator[tuple[tuple[str, ...], str]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, help_
    for action in subs:
        helps = {c.dest: c.help or "" for c in action._choices_actions}
        for name, sub in action.choices.items():
            yield from _leaves(sub, (*words, name), helps.get(name, ""))


def cli_commands() -> list[tuple[tuple[str, ...], str]]:
    """Every command the ``magicselector`` parser runs (its leaves: ``bench latency``, ``demo``)
    with its one-line help."""
    from magicselector.cli import build_parser

    return list(_leaves(build_parser()))


def shared_options() -> list[argparse.Action]:
    """The options ``demo``, ``select`` and ``eval`` share, as --help shows them."""
    import importlib

    for module in ("magicselector.cli.options", "magicselector.cli_options"):
        try:
            add = importlib.import_module(module).add_selector_options
            break
        except (ImportError, AttributeError):
            continue
    else:
        raise AssertionError("add_selector_options is in neither magicselector.cli.options nor cli_options")
    parser = argparse.ArgumentParser(add_help=False)
    add(parser)
    return [a for a in parser._actions if a.help != argparse.SUPPRESS and a.option_strings]


def picture_stages() -> list[str]:
    """The stage names of the README's pipeline picture, in order (``search + lexical`` is two)."""
    picture = _block("dialogue turn")
    segments = [s.strip() for s in re.split(r"─▶", picture)][1:-1]  # drop the turn and the Selection
    return [part.split()[0] for seg in segments for part in re.sub(r"\([^)]*\)", "", seg).split("+") if part.strip()]


def test_the_selectorconfig_block_is_the_shipped_signature():
    from magicselector.config import SelectorConfig
    import inspect

    block = _block("SelectorConfig(")
    assert _normalized(block) == _normalized(render_config()), (
        "README's SelectorConfig block drifted from the code; write it as:\n" + render_config())
    named = re.findall(r"^    ([a-z_]+)=", block, re.M)
    assert named == list(inspect.signature(SelectorConfig).parameters)


def test_the_cli_table_lists_every_command_and_no_other():
    text = _readme()
    section = text[text.index("## Command line"):]
    section = section[:section.index("\n## ")]
    listed = {tuple(m.split()) for m in re.findall(r"^\| `magicselector ([a-z][a-z -]*)`", section, re.M)}
    commands = {words for words, _ in cli_commands()}
    assert listed == commands, (f"in the README only: {sorted(listed - commands)}; "
                                f"in the CLI only: {sorted(commands - listed)}")


def test_the_options_paragraph_names_every_shared_option():
    text = _readme()
    paragraph = text[text.index("`OPTIONS` are the same on"):text.index("`eval --at N` is")]
    shown = [o for a in shared_options() for o in a.option_strings]
    assert len(shown) > 15 and [o for o in shown if f"`{o}" not in paragraph] == []
    named = set(re.findall(r"`(--[a-z][a-z-]*)", paragraph))
    assert named <= set(shown), f"the paragraph names options the CLI does not take: {named - set(shown)}"


def test_the_pipeline_picture_names_every_stage_module():
    stages = picture_stages()
    modules = {p.stem for p in (ROOT / "runtime" / "stages").glob("*.py") if p.stem != "__init__"}
    timed_as = {"index": "search"}  # the index module's stage is the search (Selection.timings_ms)
    missing = {m for m in modules if timed_as.get(m, m) not in stages}
    assert missing == set(), f"stage modules the README's picture leaves out: {missing}"
    assert "decompose" in stages and (ROOT / "runtime" / "decompose").is_dir()


@pytest.mark.slow
def test_the_pipeline_picture_runs_in_the_order_select_times_its_stages(selector):
    """A turn with every stage on (history, two intents, a budget) times its stages in the order
    the picture draws them (the head is timed with the cut)."""
    sel = selector.with_config(decompose="rules")
    turn = sel.select("turn on bluetooth and play some jazz", [{"role": "user", "content": "hi"}], max_tools=3)
    timed = [k for k in turn.timings_ms if k not in ("total", "decompose_load")]
    assert [s for s in picture_stages() if s != "head"] == timed


@pytest.mark.slow
def test_the_python_example_runs(home):
    code = _block("from magicselector import Selector")
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})


def test_the_extras_sentence_names_every_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    text = _readme()
    sentence = text[text.index("Extras:"):]
    sentence = sentence[:sentence.index("\n\n")]
    named = set(re.findall(r"`([a-z]+)`", sentence))
    assert named == set(extras), f"README's extras: {sorted(named)}; pyproject's: {sorted(extras)}"


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings (outside code blocks)."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_docs_links_resolve():
    """Every relative link of the README, docs/ and the port guide names a file that exists and,
    with ``#anchor``, a heading in it."""
    pages = [README, ROOT / "android_demo" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []

"""One command-line vocabulary: each spelling parses into the SelectorConfig it names, no option is
hidden, and `eval` without flags is the shipped product."""
from __future__ import annotations

from dataclasses import replace

import pytest

from magicselector.cli import build_parser
from magicselector.cli.main import eval_config
from magicselector.cli.options import history_mode_with_history, selector_config
from magicselector.config import SelectorConfig
from magicselector.errors import InputError
from magicselector.stages.cut import CutConfig


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_no_flags_is_the_shipped_config(capsys):
    for argv in (["demo"], ["select", "hi"], ["eval", "DIR"]):
        assert selector_config(parse(*argv)) == SelectorConfig()
    assert capsys.readouterr().err == ""


def test_eval_defaults_to_what_from_bundle_ships(capsys):
    config = eval_config(parse("eval", "DIR"))
    assert config.selector == SelectorConfig()  # the CLI builds the one SelectorConfig, the shipped one
    assert config.cut == CutConfig() and config.adaptive is True and config.decomposition == "rules"
    assert config.k == 10  # the metric cutoff
    assert capsys.readouterr().err == ""


def test_new_spellings(capsys):
    args = parse("select", "hi", "--history-file", "h.json", "--history-mode", "all",
                 "--range-margin", "0.5", "--range-depth", "0", "--k-max", "8", "--threads", "2",
                 "--decompose", "rules")
    assert args.history_file == "h.json"
    config = selector_config(args)
    assert config == replace(SelectorConfig(), history="all", threads=2, decompose="rules",
                             cut=CutConfig(range_margin=0.5, range_depth=0, k_max=8))
    assert capsys.readouterr().err == ""


def test_eval_cut_is_the_shipped_one_or_a_bench_baseline(capsys):
    """``eval --cut paper|fixed`` runs the bench's rules (bench/cut_rules.py); --k is the fixed cut's
    k (alone it means --cut fixed), --at the metric cutoff; the other commands run the shipped cut."""
    from magicselector.bench.cut_rules import FixedCut, PaperCut

    config = eval_config(parse("eval", "DIR", "--at", "5", "--k", "3"))
    assert config.k == 5 and config.cut == FixedCut(3) and config.adaptive
    assert eval_config(parse("eval", "DIR", "--k", "10")).adaptive is False  # a fixed k at the cutoff
    assert eval_config(parse("eval", "DIR", "--cut", "fixed")).cut == FixedCut(10)
    config = eval_config(parse("eval", "DIR", "--history-mode", "user", "--cut", "paper", "--k-max", "8"))
    assert config.selector.history == "user" and config.k == 10
    assert config.cut == PaperCut(k_min=1, k_max=8, anchor_k_max=CutConfig().anchor_k_max,
                                  min_probability=CutConfig().min_probability)
    assert capsys.readouterr().err == ""
    assert eval_config(parse("eval", "DIR", "--cut", "paper", "--k", "4")).cut.rule == "paper"
    assert "does not read it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse("select", "hi", "--cut", "paper")  # not a runtime rule


@pytest.mark.parametrize("command", [("select", "hi"), ("eval", "DIR"), ("serve",), ("demo",)])
def test_no_command_takes_a_cross_encoder_flag(command, capsys):
    """The cross-encoder left the runtime (docs/bench/reranker.md): its flags are gone, not ignored."""
    for flag in ("--rerank", "--no-rerank", "--rerank-skip-margin", "--rerank-weight", "--reranker"):
        with pytest.raises(SystemExit):
            parse(*command, flag, *(["1"] if flag not in ("--rerank", "--no-rerank") else []))
        assert "unrecognized arguments: " + flag in capsys.readouterr().err


def test_a_history_is_used_when_one_is_given(capsys):
    args = parse("select", "hi", "--history-file", "h.json")
    shipped = SelectorConfig()
    if shipped.history == "none":
        assert history_mode_with_history(args, shipped) == "user"
        assert "using --history-mode user" in capsys.readouterr().err
    assert history_mode_with_history(args, replace(shipped, history="all")) == "all"
    assert history_mode_with_history(parse("demo", "--history-mode", "none"), shipped) == "none"


def test_bundle_build_runs_the_export_code(monkeypatch, capsys):
    import magicselector.export.cli as export_cli

    calls = []
    monkeypatch.setattr(export_cli, "run_export_bundle", lambda **kw: calls.append(kw) or 0)
    common = ["--embedder", "m.onnx", "--catalog", "tools.jsonl", "--out", "B", "--quant", "q4_0"]
    new = parse("bundle", "build", *common, "--model-format", "pte")
    assert new.func(new) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert dict(out="B", embedder="m.onnx", catalog="tools.jsonl", decomposer=None, fmt="pte",
                preset=None, quant="q4_0", verify=True).items() <= calls[0].items()


def test_a_custom_bundle_names_what_it_lacks():
    args = parse("bundle", "build", "--embedder", "m.onnx")
    with pytest.raises(InputError, match="--catalog, --out"):
        args.func(args)


def test_decomposer_flags_fill_the_llm_group(capsys):
    from magicselector.config import LLMDecomposerConfig

    config = selector_config(parse("select", "hi", "--decompose", "auto", "--decomposer-model", "m.gguf",
                                   "--decomposer-prompt", "zero_shot", "--deadline-ms", "80", "--llm-threads", "3"))
    assert config.llm == LLMDecomposerConfig(model="m.gguf", prompt="zero_shot", deadline_ms=80.0, threads=3)
    assert selector_config(parse("select", "hi", "--llm-threads", "1")).llm == LLMDecomposerConfig(threads=1)
    assert capsys.readouterr().err == ""


def _help(*command):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    return out.getvalue()


def _every_help(parser, prog=()):
    """(command words, help text) of ``parser`` and of every subcommand under it, depth first."""
    import argparse

    yield prog, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _every_help(sub, (*prog, name))


def test_every_option_of_every_command_is_in_its_help():
    """No hidden flag: what a command parses, its --help shows (the train and bench subcommands' included)."""
    import argparse

    helps = dict(_every_help(build_parser()))
    assert ("train", "decomposer") in helps and ("bench", "serve") in helps and ("eval",) in helps
    hidden = [(" ".join(cmd), action.option_strings) for cmd, parser in _every_parser(build_parser())
              for action in parser._actions if action.help == argparse.SUPPRESS and action.option_strings
              and action.dest != "help"]
    assert hidden == []


def _every_parser(parser, prog=()):
    """(command words, parser) of ``parser`` and of every subcommand under it, depth first."""
    import argparse

    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _every_parser(sub, (*prog, name))


def test_the_readmes_options_paragraph_names_every_shared_option():
    """README's ``OPTIONS`` (what demo, select and eval share) names every option that
    ``add_selector_options`` shows in --help, so the docs say what the command line takes."""
    import argparse
    from pathlib import Path

    from magicselector.cli.options import add_selector_options

    parser = argparse.ArgumentParser(add_help=False)
    add_selector_options(parser)
    shown = [o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings]
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    paragraph = text[text.index("`OPTIONS` are the same on"):text.index("`eval --at N` is")]
    assert len(shown) >= 15 and [o for o in shown if f"`{o}" not in paragraph] == []

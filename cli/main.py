"""The ``magicselector`` command. Export, bench and train code is imported only by the
subcommands that need it, so the runtime commands stay lean."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
import sys
from pathlib import Path
from typing import Any, Sequence

import magicselector as _runtime
from magicselector.errors import InputError, MagicSelectorError

DEMO_FILE = Path(_runtime.__file__).resolve().parent / "demo" / "dialogue.json"


def _cut(rule: str, k_min: int, k_max: int, range_margin: float | None, **more: Any):
    """The shipped cut (``DEFAULT_CUT``) with the rule and bounds the flags give."""
    from magicselector.config import DEFAULT_CUT

    return replace(DEFAULT_CUT, rule=rule, k_min=k_min, k_max=k_max,
                   **({} if range_margin is None else {"range_margin": range_margin}), **more)


def _selector(args: argparse.Namespace, **config: Any):
    from magicselector.config import DEFAULT_CUT, SelectorConfig
    from magicselector.selector import Selector

    cut = _cut(getattr(args, "cut", DEFAULT_CUT.rule), getattr(args, "k_min", 1), getattr(args, "k_max", 20),
               getattr(args, "range_margin", None), fixed_k=getattr(args, "k", 10))
    decomposition = {k: getattr(args, a) for k, a in (("decompose", "decompose"), ("decomposer_model", "decomposer_model"),
                                                       ("decomposer_prompt", "decomposer_prompt"),
                                                       ("decompose_deadline_ms", "deadline_ms"),
                                                       ("llm_threads", "llm_threads")) if getattr(args, a, None) is not None}
    cfg = SelectorConfig(history=getattr(args, "history_mode", "none"), cut=cut, threads=getattr(args, "threads", 1),
                         **decomposition, **config)
    return Selector.from_bundle(args.bundle, config=cfg, progress=True)


def _print_selection(sel, indent: str = "  ", trace=None) -> None:
    names = ", ".join(f"{t.name} ({t.score:.2f})" for t in sel.tools)
    stages = " ".join(f"{k}={v:.1f}" for k, v in sel.timings_ms.items() if k != "total")
    ran = f"{sel.decomposer}"
    if trace is not None and getattr(trace, "ran", ""):
        ran += f" -> {trace.ran}" + (f", {trace.reason}" if trace.reason else "") if sel.decomposer == "auto" else ""
    print(f"{indent}sub-tasks [{ran}]: {' | '.join(sel.subtasks)}")
    print(f"{indent}tools (K={sel.k}, k_score={sel.cut.k_score}, k_sim={sel.cut.k_sim}): {names}")
    print(f"{indent}ms: {stages} total={sel.timings_ms['total']:.1f}")


def cmd_demo(args: argparse.Namespace) -> int:
    script = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
    selector = _selector(args)
    history: list[dict[str, str]] = []
    out = []
    if not args.json:
        print(f"{script['title']}  (bundle: {selector.bundle.path if selector.bundle else '-'}, "
              f"{len(selector.catalog)} tools, history={selector.config.history})")
    for n, turn in enumerate(script["turns"], 1):
        sel = selector.select(turn["user"], history)
        if args.json:
            out.append({"turn": n, "user": turn["user"], **sel.to_dict()})
        else:
            print(f"\n[{n}] user: {turn['user']}")
            _print_selection(sel, trace=getattr(selector.decomposer, "last", None))
            print(f"  assistant: {turn['assistant']}")
        history += [{"role": "user", "content": turn["user"]}, {"role": "assistant", "content": turn["assistant"]}]
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def _read_history(path: str | None) -> list[dict[str, str]]:
    if not path:
        return []
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such history file") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e})") from None
    if isinstance(data, dict):  # also a recorded chat request: its messages (Chat, Anthropic) or input (Responses)
        data = next((data[k] for k in ("history", "turns", "messages", "input") if k in data), None)
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of messages (or an object with 'history' or 'messages')")
    return data


def cmd_select(args: argparse.Namespace) -> int:
    history = _read_history(args.history)
    selector = _selector(args)
    if args.catalog:  # tools from MCP servers' tools/list dumps, indexed here (vectors cached by content)
        from magicselector.catalog import load_catalogs

        selector = selector.with_catalog(load_catalogs(args.catalog))
    sel = selector.select(args.utterance, history)
    if args.format:  # the definitions alone, as the caller's LLM API takes them
        print(json.dumps(selector.schemas(sel, format=args.format), indent=2))
    elif args.json:
        print(json.dumps({**sel.to_dict(), "schemas": selector.schemas(sel)}, indent=2))
    else:
        _print_selection(sel, indent="", trace=getattr(selector.decomposer, "last", None))
    return 0


def cmd_bundle_build(args: argparse.Namespace) -> int:
    from magicselector.bundle import default_bundle_dir

    out = Path(args.out) if args.out else default_bundle_dir()
    if (out / "manifest.json").exists() and not args.force:
        print(f"bundle already built: {out} (use --force to rebuild)")
        return 0
    from magicselector.export.bundle import build_default_bundle

    reranker = "retrain" if args.retrain_reranker else (None if args.no_reranker else "shipped")
    build_default_bundle(out, progress=True, preset=args.preset, reranker=reranker, train_data=args.train_data)
    print(out)
    return 0


def cmd_bundle_verify(args: argparse.Namespace) -> int:
    from magicselector.bundle_check import verify_bundle

    checks = verify_bundle(args.dir)
    print(json.dumps({"ok": True, **checks}, indent=2))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from magicselector.bench.evaluate import EvalConfig, evaluate, format_report

    config = EvalConfig(k=args.k, adaptive=args.adaptive, history=args.history, retriever=args.retriever,
                        cut=_cut(args.cut_rule, args.k_min, args.k_max, args.range_margin),
                        limit=args.limit,
                        decompose=args.decompose, fusion=args.fusion, cut_scope=args.cut_scope,
                        decompose_deadline_ms=args.deadline_ms, llm_threads=args.llm_threads,
                        decomposer_model=args.decomposer_model, decomposer_prompt=args.decomposer_prompt,
                        rerank=not args.no_rerank, reranker=args.reranker,
                        rerank_weight=args.rerank_weight, rerank_candidates=args.rerank_candidates,
                        threads=args.threads)
    report = evaluate(args.dataset, config, bundle=args.bundle, progress=not args.quiet)
    print(format_report(report))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from magicselector.data.mobile import GeneratorConfig, generate_benchmark

    summary = generate_benchmark(args.out, GeneratorConfig(seed=args.seed, dialogues=args.dialogues))
    print(json.dumps(summary, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from magicselector.config import DEFAULT_CUT
    from magicselector.stages.cut import CUT_RULES
    from magicselector.stages.decompose import PROMPT_STYLES

    p = argparse.ArgumentParser(prog="magicselector", description="On-device tool selection for phone assistants.")
    sub = p.add_subparsers(dest="command", required=True)

    def selector_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--bundle", help="bundle folder (default: the embedded default bundle, built on first use)")
        sp.add_argument("--history-mode", choices=["none", "user", "all"], default="none",
                        help="what of the dialogue retrieval sees (default: none)")
        sp.add_argument("--cut", choices=sorted(CUT_RULES), default=DEFAULT_CUT.rule,
                        help=f"Top-K rule (default: {DEFAULT_CUT.rule}; paper = Algorithm 2 as written)")
        sp.add_argument("--range-margin", type=float,
                        help=f"rmargin: keep tools within this fraction of the score range of the top "
                             f"(default {DEFAULT_CUT.range_margin})")
        sp.add_argument("--k", type=int, default=10, help="k for --cut fixed")
        sp.add_argument("--k-min", type=int, default=1)
        sp.add_argument("--k-max", type=int, default=20)
        sp.add_argument("--threads", type=int, default=1)
        decompose_args(sp)

    def decompose_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--decompose", choices=["none", "rules", "llm", "auto"], default="none",
                        help="sub-task decomposition: none, rules (no model), llm (GGUF), auto (gated LLM, deadline)")
        sp.add_argument("--decomposer-model", help="a GGUF file for the LLM decomposer (default: the bundle's, else "
                                                   "the pinned Qwen2.5 0.5B)")
        sp.add_argument("--decomposer-prompt", choices=PROMPT_STYLES,
                        help="the decomposer's prompt: few_shot (an instruction model, the default) or zero_shot "
                             "(a model trained with `train decomposer --prompt zero_shot`)")
        sp.add_argument("--deadline-ms", type=float, default=1500.0, help="auto: LLM latency budget per turn")
        sp.add_argument("--llm-threads", type=int, default=2, help="threads for the LLM decomposer")

    sp = sub.add_parser("demo", help="a scripted multi-turn phone dialogue: tools, K and stage times per turn")
    selector_args(sp)
    sp.add_argument("--json", action="store_true", help="print JSON instead of text")
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("select", help="select tools for one utterance")
    sp.add_argument("utterance")
    sp.add_argument("--history", help="JSON file: a list of {role, content} turns before the utterance")
    sp.add_argument("--json", action="store_true", help="print the selection (and tool schemas) as JSON")
    sp.add_argument("--catalog", nargs="+", metavar="[SERVER=]FILE",
                    help="select among these tools instead of the bundle's: MCP tools/list results (JSON-RPC "
                         "response or result) or any catalog file; with several, tools are named SERVER__TOOL")
    sp.add_argument("--format", choices=["mcp", "openai", "openai-responses", "anthropic"],
                    help="print only the chosen tools' definitions, as this API takes them")
    selector_args(sp)
    sp.set_defaults(func=cmd_select)

    bp = sub.add_parser("bundle", help="build or verify bundles").add_subparsers(dest="bundle_command", required=True)
    sp = bp.add_parser("build", help="build the default bundle (needs the export extra)")
    sp.add_argument("--out", help="output folder (default: the cache folder the runtime loads from)")
    sp.add_argument("--force", action="store_true", help="rebuild even if the bundle exists")
    sp.add_argument("--preset", help="INT8 preset: qint8_arm64 (phones), qint8_x86, qint8_avx512_vnni, "
                                     "qint8_per_tensor (default: the building machine's)")
    rr = sp.add_mutually_exclusive_group()
    rr.add_argument("--retrain-reranker", action="store_true",
                    help="train the cross-encoder again with its model card's recipe (an hour or more) "
                         "instead of using the shipped INT8 reranker")
    rr.add_argument("--no-reranker", action="store_true", help="build without a rerank stage")
    sp.add_argument("--train-data", metavar="DIR",
                    help="--retrain-reranker: benchmark folder to train on (default: generate the mobile train split)")
    sp.set_defaults(func=cmd_bundle_build)
    sp = bp.add_parser("verify", help="check hashes, load every artifact, re-run the golden vectors")
    sp.add_argument("dir")
    sp.set_defaults(func=cmd_bundle_verify)

    sp = sub.add_parser("eval", help="evaluate on a benchmark folder (tools.jsonl + queries.jsonl)")
    sp.add_argument("dataset")
    sp.add_argument("--k", type=int, default=10)
    sp.add_argument("--adaptive", action="store_true", help="cut with the adaptive Top-K rule")
    sp.add_argument("--cut-rule", choices=sorted(CUT_RULES), default=DEFAULT_CUT.rule,
                    help=f"the adaptive rule (with --adaptive; default: {DEFAULT_CUT.rule}, the Selector's; "
                         "paper = Algorithm 2 as written)")
    sp.add_argument("--range-margin", type=float,
                    help=f"rmargin: keep tools within this fraction of the score range of the top (default {DEFAULT_CUT.range_margin})")
    sp.add_argument("--k-min", type=int, default=1)
    sp.add_argument("--k-max", type=int, default=20)
    sp.add_argument("--history", choices=["none", "user", "all"], default="none")
    sp.add_argument("--no-rerank", action="store_true", help="retrieval only: switch the cross-encoder off")
    sp.add_argument("--reranker", metavar="DIR",
                    help="a reranker folder (model.onnx, tokenizer.json, reranker.json) instead of the bundle's")
    sp.add_argument("--rerank-weight", type=float,
                    help="weight of the cross-encoder's z-scored logit against the retrieval similarity (1 = CE only)")
    sp.add_argument("--rerank-candidates", type=int, help="tools per list the cross-encoder scores")
    sp.add_argument("--threads", type=int, default=1, help="inference threads (embedder, reranker)")
    sp.add_argument("--retriever", choices=["dense", "bm25", "hybrid"], default="dense")
    sp.add_argument("--json", metavar="OUT", help="write the report as JSON")
    sp.add_argument("--bundle")
    sp.add_argument("--limit", type=int, help="evaluate a seeded sample of this many queries")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    decompose_args(sp)
    sp.add_argument("--fusion", choices=["peak", "rrf"], default="peak", help="how sub-task lists are fused")
    sp.add_argument("--cut-scope", choices=["fused", "subtask"], default="subtask",
                    help="adaptive cut per sub-task list then union (default), or on the fused list")
    sp.set_defaults(func=cmd_eval)

    # `magicselector bench ...` lives in magicselector.bench.cli (registered here; its heavy
    # imports happen inside its commands, so parsing stays lean).
    try:
        from magicselector.bench.cli import register as register_bench
    except ImportError:
        register_bench = None
    if register_bench is not None:
        register_bench(sub)
    try:  # `magicselector export bundle ...` (needs the export extra only when it runs)
        from magicselector.export.cli import register as register_export
    except ImportError:
        register_export = None
    if register_export is not None:
        register_export(sub)
    try:  # `magicselector train ...` (needs the train extra only when a command runs)
        from magicselector.train.cli import register as register_train
    except ImportError:
        register_train = None
    if register_train is not None:
        register_train(sub)

    sp = sub.add_parser("generate", help="generate the mobile multi-turn benchmark (train/dev/test/test_ood)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--dialogues", type=int, default=1200)
    sp.set_defaults(func=cmd_generate)

    from magicselector.cli.serve import register as register_serve  # the mcp package loads only when it runs

    register_serve(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MagicSelectorError as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``magicselector`` command: demo, select, bundle, eval and generate, plus the bench, export
and train subcommands those layers register. Export, bench and train code is imported only by the
subcommands that need it, so the runtime commands stay lean. The options shared by every
subcommand are spelled once, in ``magicselector.cli.options``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import magicselector as _runtime
from magicselector.cli.options import (add_bundle_trust_options, add_history_file_option, add_selector_options,
                                       bundle_trust, history_mode_with_history, selector_config, warn)
from magicselector.errors import InputError, MagicSelectorError
from magicselector.files import json_text, utf8_text
from magicselector.targets import TARGET_CHOICES

DEMO_FILE = Path(_runtime.__file__).resolve().parent / "demo" / "dialogue.json"
METRICS_AT = 10  # eval's default metric cutoff (NDCG@10, Recall@10, Completeness@10)
FIXED_K = 10  # eval --cut fixed's default k


def _selector(args: argparse.Namespace, **config: Any):
    from magicselector.selector import Selector

    return Selector.from_bundle(args.bundle, config=selector_config(args, **config), progress=True,
                                **bundle_trust(args))


def _print_selection(sel, indent: str = "  ") -> None:
    names = ", ".join(f"{t.name} ({t.score:.2f})" for t in sel.tools)
    stages = " ".join(f"{k}={v:.1f}" for k, v in sel.timings_ms.items() if k != "total")
    ran = f"{sel.decomposer}"
    if sel.decomposer == "auto" and sel.trace.ran:
        ran += f" -> {sel.trace.ran}" + (f", {sel.trace.reason}" if sel.trace.reason else "")
    print(f"{indent}sub-tasks [{ran}]: {' | '.join(sel.subtasks)}")
    print(f"{indent}tools (K={sel.k}, k_score={sel.cut.k_score}, k_sim={sel.cut.k_sim}): {names}")
    print(f"{indent}ms: {stages} total={sel.timings_ms['total']:.1f}")


def cmd_demo(args: argparse.Namespace) -> int:
    script = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
    # a dialogue with elliptical follow-ups: the demo always runs with a history mode that reads it
    mode = history_mode_with_history(args, why="the demo is a dialogue")
    selector = _selector(args, history=mode)
    history: list[dict[str, str]] = []
    out = []
    if not args.json:
        print(f"{script['title']}  (bundle: {selector.bundle.path if selector.bundle else '-'}, "
              f"{len(selector.catalog)} tools, history mode: {selector.config.history}, "
              f"cut: {selector.config.cut.rule})")
    for n, turn in enumerate(script["turns"], 1):
        sel = selector.select(turn["user"], history)
        if args.json:
            out.append({"turn": n, "user": turn["user"], **sel.to_dict()})
        else:
            print(f"\n[{n}] user: {turn['user']}")
            _print_selection(sel)
            print(f"  assistant: {turn['assistant']}")
        history += [{"role": "user", "content": turn["user"]}, {"role": "assistant", "content": turn["assistant"]}]
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def _read_history(path: str | None) -> list[dict[str, str]]:
    if not path:
        return []
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such history file") from None
    except OSError as e:  # a folder, no permission
        raise InputError(f"{path}: cannot read the history file ({e.strerror})") from None
    data = json_text(utf8_text(raw, str(path), InputError), str(path), "a history", InputError)  # a BOM is allowed
    if isinstance(data, dict):  # also a recorded chat request: its messages (Chat, Anthropic) or input (Responses)
        data = next((data[k] for k in ("history", "turns", "messages", "input") if k in data), None)
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of messages (or an object with 'history' or 'messages')")
    return data


def cmd_select(args: argparse.Namespace) -> int:
    history = _read_history(args.history_file)
    mode = history_mode_with_history(args, why="--history-file was given") if history else None
    selector = _selector(args, **({"history": mode} if mode else {}))
    if args.catalog:  # tools from MCP servers' tools/list dumps, indexed here (vectors cached by content)
        from magicselector.catalog import load_catalogs

        selector = selector.with_catalog(load_catalogs(args.catalog, namespace=getattr(args, "namespace", "server")))
    sel = selector.select(args.utterance, history, format=args.format or "mcp")  # tokens counted in that shape
    if args.json:  # the whole selection, its definitions in --format's shape (MCP by default)
        fmt = args.format or "mcp"
        print(json.dumps({**sel.to_dict(), "format": fmt, "schemas": selector.schemas(sel, format=fmt)}, indent=2))
    elif args.format:  # the definitions alone, as the caller's LLM API takes them
        print(json.dumps(selector.schemas(sel, format=args.format), indent=2))
    else:
        _print_selection(sel, indent="")
    return 0


_CUSTOM_BUILD = ("embedder", "decomposer", "catalog", "model_format", "head")


def cmd_bundle_build(args: argparse.Namespace) -> int:
    custom = [f"--{a.replace('_', '-')}" for a in _CUSTOM_BUILD if getattr(args, a) is not None]
    if custom:
        return _build_custom_bundle(args, custom)
    if args.quant is not None or args.no_verify:
        raise InputError("--quant and --no-verify apply to a custom bundle (with --embedder and --catalog)")
    from magicselector.bundle import default_bundle_dir

    out = Path(args.out) if args.out else default_bundle_dir()
    if (out / "manifest.json").exists() and not args.force:
        print(f"bundle already built: {out} (use --force to rebuild)")
        return 0
    # the key signs the bundle in its staging folder, before it replaces the one at OUT
    signed = {"signing_key": _signing_key(args.signing_key), "release": args.release}
    if args.preset is None:
        from magicselector.default_bundle import build_default_bundle as build_from_shipped  # no exporter needed

        build_from_shipped(out, target=args.target, **signed)
        _report_built(out, args.signing_key)
        return 0
    from magicselector.export.bundle import build_default_bundle

    build_default_bundle(out, progress=True, preset=args.preset, target=args.target, **signed)
    _report_built(out, args.signing_key)
    return 0


def _build_custom_bundle(args: argparse.Namespace, custom: list[str]) -> int:
    """``bundle build --embedder ... --catalog ...``: export every model, check parity, write and
    verify the bundle (``export.cli.run_export_bundle``)."""
    missing = [f for f, v in (("--embedder", args.embedder), ("--catalog", args.catalog), ("--out", args.out))
               if v is None]
    if missing:
        raise InputError(f"a custom bundle ({', '.join(custom)}) needs {', '.join(missing)}")
    from magicselector.export.cli import run_export_bundle

    return run_export_bundle(out=args.out, embedder=args.embedder, catalog=args.catalog, decomposer=args.decomposer,
                             fmt=args.model_format or "onnx", preset=args.preset, quant=args.quant or "q8_0",
                             verify=not args.no_verify, signing_key=_signing_key(args.signing_key),
                             target=args.target, release=args.release, head=args.head)


def cmd_bundle_verify(args: argparse.Namespace) -> int:
    from magicselector.bundle_check import verify_bundle

    signature = None
    if args.public_key:  # who made it, before what it holds
        from magicselector.signing import verify_bundle_signature

        signature = verify_bundle_signature(args.dir, args.public_key)
    checks = verify_bundle(args.dir)
    if args.native:  # the native build's own check of every golden stage
        from magicselector.bundle_check import verify_native

        checks["native"] = verify_native(args.dir, args.native)
    if args.against:  # rebuilt from the checkpoint: every file and the content digest must be the same
        from magicselector.export.reproduce import verify_against_checkpoint

        checks["against"] = verify_against_checkpoint(args.dir, args.against,
                                                      log=lambda m: print(f"[against] {m}", file=sys.stderr))
    print(json.dumps({"ok": True, **checks, **({"signature": signature} if signature else {})}, indent=2))
    return 0


def cmd_bundle_sign(args: argparse.Namespace) -> int:
    from magicselector.bundle_writer import sign_bundle

    print(json.dumps(sign_bundle(args.dir, args.key), indent=2))
    return 0


def cmd_bundle_keygen(args: argparse.Namespace) -> int:
    from magicselector.signing import generate_keypair

    print(json.dumps(generate_keypair(args.out), indent=2))
    return 0


def cmd_bundle_rewrite(args: argparse.Namespace) -> int:
    """``bundle rewrite SRC``: the bundle at SRC with tools added (``--add-tools``, replacing tools of
    the same id) and removed (``--remove-tools``), written atomically to ``--out`` (default: SRC
    itself), signed with ``--signing-key`` when given; what ``Selector.save`` does for an app."""
    from magicselector.catalog import load_catalog
    from magicselector.config import SelectorConfig
    from magicselector.errors import UnknownToolError
    from magicselector.files import writer_lock
    from magicselector.selector import Selector

    if not (args.add_tools or args.remove_tools):
        raise InputError("bundle rewrite: nothing to change; give --add-tools FILE and/or --remove-tools ID ...")
    key = _signing_key(args.signing_key)
    out = Path(args.out) if args.out else Path(args.src)
    with writer_lock(out):  # rewrites of one bundle take turns, each starting from the one before it
        selector = Selector.from_bundle(args.src, config=SelectorConfig(threads=1))
        removed = []
        for tool_id in args.remove_tools or []:
            try:
                selector.remove_tool(tool_id)
            except UnknownToolError:
                raise InputError(f"--remove-tools: {tool_id!r} is not a tool of {args.src}") from None
            removed.append(tool_id)
        added = []
        for spec in args.add_tools or []:
            for tool in load_catalog(spec):
                selector.add_tool(tool)
                added.append(tool.id)
        manifest = selector.save(out, signing_key=key, release=args.release)
    print(json.dumps({"out": str(out), "tools": manifest["catalog"]["tools"], "added": added, "removed": removed,
                      "release": manifest["release"], "signed": key is not None}, indent=2))
    return 0


def _signing_key(key: str | None):
    """``--signing-key``: the private key, loaded now, so a bad key fails before any build work."""
    if not key:
        return None
    from magicselector.signing import load_private_key

    return load_private_key(key, "--signing-key")


def _report_built(out: Path, key: str | None) -> None:
    if key:
        from magicselector.signing import SIGNATURE_FILE

        print(f"signed {out / SIGNATURE_FILE}", file=sys.stderr)
    print(out)


def eval_config(args: argparse.Namespace):
    """The EvalConfig of ``eval``'s flags: without flags, exactly the shipped SelectorConfig
    (its cut, history mode, fusion and decomposition), measured at ``--at`` (10)."""
    from magicselector.bench.evaluate import EvalConfig

    at = METRICS_AT if args.at is None else args.at  # --k is the fixed cut's k
    config = selector_config(args)
    cut = eval_cut(args, config.cut)
    if args.retriever == "bm25" and args.decompose not in (None, "none"):
        raise InputError("decomposition is evaluated with the dense or hybrid retriever (--retriever dense|hybrid)")
    lexical = {name: getattr(args, name) for name in ("lexical_weight", "lexical_candidates")
               if getattr(args, name) is not None}
    from dataclasses import replace

    return EvalConfig(replace(config, cut=cut, **lexical), k=at, adaptive=not (cut.rule == "fixed" and cut.k_max == at),
                      retriever=args.retriever, limit=args.limit, on_bad_query=args.on_bad_query)


def eval_cut(args: argparse.Namespace, shipped: Any) -> Any:
    """The cut ``eval --cut`` names: the shipped rmargin (``shipped``, the cut flags applied), or a
    bench baseline (``magicselector.bench.cut_rules``): the paper's Algorithm 2 within the shipped
    cut's bounds, or the first ``--k`` tools. ``--k N`` alone means ``--cut fixed``."""
    rule = args.cut or ("fixed" if args.k is not None else "rmargin")
    if args.k is not None and rule != "fixed":
        warn(f"note: --k sets the fixed cut's k; --cut {rule} does not read it (bounds: --k-min, --k-max)")
    if rule == "rmargin":
        return shipped
    from magicselector.bench.cut_rules import FixedCut, PaperCut

    if rule == "fixed":
        return FixedCut(FIXED_K if args.k is None else args.k)
    return PaperCut(k_min=shipped.k_min, k_max=shipped.k_max, anchor_k_max=shipped.anchor_k_max,
                    min_probability=shipped.min_probability)


def cmd_eval(args: argparse.Namespace) -> int:
    from magicselector.bench.evaluate import evaluate, format_report

    config = eval_config(args)
    if args.json:  # an unwritable --json fails before the evaluation runs, not after it
        try:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            with open(args.json, "a", encoding="utf-8"):
                pass
        except OSError as e:
            raise InputError(f"--json: cannot write {args.json}: {e.strerror or e}") from None
    report = evaluate(args.dataset, config, bundle=args.bundle, progress=not args.quiet, **bundle_trust(args))
    print(format_report(report))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as e:
            raise InputError(f"--json: cannot write {args.json}: {e.strerror or e}") from None
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from magicselector.data.mobile import GeneratorConfig, generate_benchmark

    summary = generate_benchmark(args.out, GeneratorConfig(seed=args.seed, dialogues=args.dialogues,
                                                           assistant_turns=args.assistant_turns))
    print(json.dumps(summary, indent=2))
    return 0


def _add_bundle_build_parser(bp) -> None:
    sp = bp.add_parser("build", help="build a bundle: the default one, or your models and catalog (needs the "
                                     "export extra)")
    sp.add_argument("--out", metavar="DIR", help="output folder (default bundle: the cache folder the runtime "
                                                 "loads from; a custom bundle needs it)")
    sp.add_argument("--force", action="store_true", help="rebuild the default bundle even if it exists")
    sp.add_argument("--target", choices=TARGET_CHOICES, default="host",
                    help="CPU the INT8 models are for: arm64 (phones), x86-avx2, x86-vnni (default: this machine's); "
                         "the default bundle takes the shipped embedder made for it, no exporter needed")
    sp.add_argument("--preset", help="INT8 preset: qint8_arm64 (phones), qint8_x86, qint8_avx512_vnni, "
                                     "qint8_per_tensor (default: the target's); quantizes again (export extra)")
    sp.add_argument("--embedder", metavar="PATH", help="a custom bundle's embedder: Hugging Face checkpoint "
                    "folder, or a ready .onnx / .pte with tokenizer.json beside it (default: the packaged MiniLM)")
    sp.add_argument("--catalog", metavar="PATH", help="a custom bundle's tools (required with --embedder): MCP "
                                                      "JSON, tools.jsonl or a folder; the default bundle holds the "
                                                      "phone catalog")
    sp.add_argument("--head", metavar="FILE", help="a custom bundle's learned head: the head.json `train head` "
                                                   "writes (default: none; the default bundle carries the shipped one)")
    sp.add_argument("--decomposer", metavar="PATH", help="a decomposer: causal-LM checkpoint folder (converted "
                                                         "to GGUF) or a .gguf (default: none in the bundle)")
    sp.add_argument("--model-format", choices=["onnx", "pte"], default=None,
                    help="a custom bundle's encoder format: onnx (onnxruntime, default) or pte (ExecuTorch, "
                         "XNNPACK INT8)")
    sp.add_argument("--quant", help="a custom bundle's decomposer GGUF quantization: q8_0 (default), q4_k_m, "
                                    "q4_0, q5_k_m, q6_k, f16, ...")
    sp.add_argument("--no-verify", action="store_true", help="a custom bundle: skip the final bundle verify")
    sp.add_argument("--signing-key", metavar="KEY", help="sign the built bundle with this Ed25519 private key "
                                                         "(PEM, from `bundle keygen`): manifest.sig, written "
                                                         "before the bundle replaces the one at --out")
    _add_release_option(sp)
    sp.set_defaults(func=cmd_bundle_build)


def _add_release_option(sp) -> None:
    sp.add_argument("--release", type=int, metavar="N", help="the release number the manifest carries (a "
                    "positive integer; default: the Unix time, or one more than the bundle being replaced); "
                    "apps refuse older ones with Selector.from_bundle(..., min_release=N)")


def _add_bundle_rewrite_parser(bp) -> None:
    sp = bp.add_parser("rewrite", help="a bundle with tools added or removed, written atomically (models kept)")
    sp.add_argument("src", metavar="DIR", help="the bundle to start from")
    sp.add_argument("--out", metavar="DIR", help="where to write it (default: DIR itself, replaced atomically)")
    sp.add_argument("--add-tools", nargs="+", metavar="FILE", help="catalog files whose tools are added "
                    "(a tool with the id of one already there replaces it)")
    sp.add_argument("--remove-tools", nargs="+", metavar="ID", help="ids of tools to remove")
    sp.add_argument("--signing-key", metavar="KEY", help="sign it with this Ed25519 private key (PEM)")
    _add_release_option(sp)
    sp.set_defaults(func=cmd_bundle_rewrite)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="magicselector", description="On-device tool selection for phone assistants.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_runtime.__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("demo", help="a scripted multi-turn phone dialogue: tools, K and stage times per turn")
    add_selector_options(sp)
    sp.add_argument("--json", action="store_true", help="print JSON instead of text")
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("select", help="select tools for one utterance")
    sp.add_argument("utterance")
    add_history_file_option(sp)
    sp.add_argument("--json", action="store_true", help="print the selection as JSON, with its tools' definitions "
                                                        "('schemas') in --format's shape (default MCP)")
    sp.add_argument("--catalog", nargs="+", metavar="[SERVER=]FILE",
                    help="select among these tools instead of the bundle's: MCP tools/list results (JSON-RPC "
                         "response or result) or any catalog file; with several, tools are named SERVER__TOOL")
    sp.add_argument("--namespace", choices=["server", "mcp"], default="server",
                    help="how --catalog names tools: SERVER__TOOL (default), or mcp__SERVER__TOOL as MCP hosts such "
                         "as Claude Code do (also for one file); server names are sanitized as hosts do")
    sp.add_argument("--format", choices=["mcp", "openai", "openai-responses", "anthropic"],
                    help="print only the chosen tools' definitions, as this API takes them")
    add_selector_options(sp)
    add_bundle_trust_options(sp)
    sp.set_defaults(func=cmd_select)

    bp = sub.add_parser("bundle", help="build or verify bundles").add_subparsers(dest="bundle_command", required=True)
    _add_bundle_build_parser(bp)
    _add_bundle_rewrite_parser(bp)
    sp = bp.add_parser("verify", help="check hashes, load every artifact, re-run the golden vectors")
    sp.add_argument("dir")
    sp.add_argument("--public-key", metavar="PUB", help="also require a valid signature (manifest.sig) by this "
                    "Ed25519 public key: PEM file, or the 32 raw bytes as base64 or hex")
    sp.add_argument("--native", metavar="BIN", help="also run a native build's check of every golden stage "
                    "(`BIN verify DIR`, BIN: the magicselector-native executable of `magicselector native build`)")
    sp.add_argument("--against", metavar="CKPT", help="also show the bundle came from this embedder checkpoint: "
                    "its weights sha256 as recorded, and a rebuild with the recorded settings equal file for file "
                    "(needs the export extra; a build's time)")
    sp.set_defaults(func=cmd_bundle_verify)
    sp = bp.add_parser("sign", help="sign a bundle's manifest with an Ed25519 private key (writes manifest.sig)")
    sp.add_argument("dir")
    sp.add_argument("--key", required=True, metavar="KEY", help="the private key (PEM, from `bundle keygen`)")
    sp.set_defaults(func=cmd_bundle_sign)
    sp = bp.add_parser("keygen", help="make an Ed25519 key pair for signing bundles: PREFIX.key and PREFIX.pub")
    sp.add_argument("--out", required=True, metavar="PREFIX", help="where to write PREFIX.key (private, owner "
                                                                   "only) and PREFIX.pub (public)")
    sp.set_defaults(func=cmd_bundle_keygen)
    from magicselector.cli.release import register as register_release, register_bundle_compare

    register_bundle_compare(bp)  # `magicselector bundle compare A B`
    register_release(sub)  # `magicselector release`

    sp = sub.add_parser("eval", help="evaluate on a benchmark folder (tools.jsonl + queries.jsonl); without "
                                     "flags, the shipped configuration")
    sp.add_argument("dataset")
    sp.add_argument("--at", type=int, default=None, metavar="N",
                    help=f"the metric cutoff: NDCG@N, Recall@N, Completeness@N (default {METRICS_AT})")
    add_selector_options(sp)
    sp.add_argument("--cut", choices=["rmargin", "paper", "fixed"], default=None,
                    help="the Top-K rule: rmargin (default: the shipped cut, with the cut flags above), or a bench "
                         "baseline: paper (the paper's Algorithm 2 as written, within --k-min/--k-max) or fixed "
                         "(the first --k tools)")
    sp.add_argument("--k", type=int, default=None, metavar="N",
                    help=f"k of the fixed cut; alone it means --cut fixed (default {FIXED_K})")
    sp.add_argument("--retriever", choices=["dense", "bm25", "hybrid"], default=None,
                    help="dense (the Selector without its BM25 channel), hybrid (the Selector with its BM25 channel "
                         "fused into every list) or bm25 (the runtime's BM25 alone); default: the shipped one")
    sp.add_argument("--lexical-weight", type=float, help="hybrid: the BM25 list's share in the fusion, 0..1")
    sp.add_argument("--lexical-candidates", type=int, help="hybrid: BM25 hits per list that enter the fusion")
    sp.add_argument("--json", metavar="OUT", help="write the report as JSON")
    sp.add_argument("--limit", type=int, help="evaluate a seeded sample of this many queries (0: all)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar (there is none unless stderr is a terminal)")
    add_bundle_trust_options(sp)
    sp.add_argument("--on-bad-query", choices=["skip", "truncate"], default="skip",
                    help="a query the Selector refuses (over-long, empty, invalid Unicode, malformed history) is "
                         "skipped (default), or an over-long one is cut to the utterance limit; counted and "
                         "listed in the report either way")
    sp.set_defaults(func=cmd_eval)

    # `magicselector bench ...` lives in magicselector.cli.bench (registered here; its heavy
    # imports happen inside its commands, so parsing stays lean).
    try:
        from magicselector.cli.bench import register as register_bench
    except ImportError:
        register_bench = None
    if register_bench is not None:
        register_bench(sub)
    try:  # `magicselector train ...` (needs the train extra only when a command runs)
        from magicselector.cli.train import register as register_train
    except ImportError:
        register_train = None
    if register_train is not None:
        register_train(sub)

    from magicselector.data.mobile.generator import ASSISTANT_TURNS

    sp = sub.add_parser("generate", help="generate the mobile multi-turn benchmark (train/dev/test/test_ood)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--dialogues", type=int, default=1200)
    sp.add_argument("--assistant-turns", choices=ASSISTANT_TURNS, default="echo",
                    help="echo (default: the shipped splits): assistant turns restate the task; realistic: tool "
                         "results with IDs, times and values and short confirmations, as real transcripts have "
                         "(same user turns, gold and categories)")
    sp.set_defaults(func=cmd_generate)
    from magicselector.cli.split import register as register_split  # `magicselector split`

    register_split(sub)

    from magicselector.cli.serve import register as register_serve  # the mcp package loads only when it runs

    register_serve(sub)
    from magicselector.cli.native import register as register_native  # `magicselector native build|test`

    register_native(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # what `serve --workers` starts again
    _quiet_torch_import_logs()
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here at the latest, not at interpreter exit
        return code
    except BrokenPipeError:
        _quiet_closed_stdout()
        return 0
    except MagicSelectorError as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


# torchao (imported by transformers and executorch) logs a warning for each CUDA kernel library it
# cannot load, and registers enums that torch's _pytree then warns about: noise on a CPU host, on
# stderr of every train/export command. The command line is the application, so it sets the levels
# (before torch is imported: nothing is imported here); the library leaves logging to its callers.
TORCH_IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")


def _quiet_torch_import_logs() -> None:
    import logging

    for name in TORCH_IMPORT_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def _quiet_closed_stdout() -> None:
    """The reader of stdout went away (``| head -1``): what is still buffered goes to the null
    device, so neither this exit nor the interpreter's final flush prints a BrokenPipeError."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())

"""``magicselector split``: tool-disjoint train/eval parts of benchmark folders, rebuilt by command
(``data/splits.py``); registered by ``magicselector.cli``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from magicselector.errors import InputError


def cmd_split(args: argparse.Namespace) -> int:
    from magicselector.data.splits import (SHARED_SETS, ToolSplitConfig, default_shared_data, public_split_configs,
                                           write_tool_disjoint_splits)

    sources = [Path(s) for s in args.sources]
    configs = {}
    if args.shared or args.shared_data is not None:  # --shared-data DIR: the public sets from DIR
        shared = Path(args.shared_data) if args.shared_data is not None else default_shared_data()
        flag = "--shared-data" if args.shared_data is not None else "--shared"
        for name in SHARED_SETS:
            if not (shared / name).is_dir():
                raise InputError(f"{shared / name}: {flag} needs the public set {name!r} there"
                                 + ("" if args.shared_data is not None else
                                    " (the shared data beside this checkout; another folder: --shared-data DIR)"))
            sources.append(shared / name)
        # each public set keeps its own draw and merge (data/splits.py PUBLIC_SPLITS); the flags replace
        # only the fraction and the seed, and only where given
        configs = public_split_configs(args.eval_fraction, args.seed)
    if not sources:
        raise InputError("split: name source folders, or pass --shared (or --shared-data DIR)")
    config = ToolSplitConfig(eval_fraction=0.3 if args.eval_fraction is None else args.eval_fraction,
                             seed=0 if args.seed is None else args.seed, draw=args.draw,
                             merge_versions=args.merge_versions)
    summary = write_tool_disjoint_splits(sources, args.out, config, overwrite=args.force,
                                         note=lambda line: print(line, file=sys.stderr, flush=True), configs=configs)
    print(json.dumps(summary, indent=2))
    return 0


def register(subparsers) -> None:
    """Add ``split`` to the ``magicselector`` command's subparsers."""
    sp = subparsers.add_parser(
        "split", help="seeded tool-disjoint train/eval parts of benchmark folders (the eval part's tools never "
                      "occur in training)",
        description="Draws eval-fraction of each source's tools (seeded; the draw depends only on the tool ids and the "
                    "gold sets) as the evaluation part. A query goes to the part holding all its gold tools; one whose "
                    "tools straddle both parts is dropped. The public sets (--shared) are split as data/splits.py "
                    "PUBLIC_SPLITS says: nestful and restbench draw whole gold sets, sgd merges its service versions. "
                    "Writes OUT/<source name>/{train,eval}/ (tools.jsonl, "
                    "queries.jsonl) and OUT/<source name>/split.json; progress on stderr, a JSON summary on stdout.")
    sp.add_argument("sources", nargs="*", metavar="SOURCE", help="benchmark folders (tools.jsonl + queries.jsonl)")
    sp.add_argument("--shared", action="store_true",
                    help="also split the public sets in the shared data beside this checkout (../shared/data: "
                         "bfcl, metatool, nestful, restbench, toolalpaca, gorilla_apibench, sgd)")
    sp.add_argument("--shared-data", metavar="DIR",
                    help="the public sets' folder (bfcl/, metatool/, ...), as bench quality takes it; implies --shared")
    sp.add_argument("--out", required=True, metavar="DIR", help="output folder: one sub-folder per source")
    sp.add_argument("--eval-fraction", type=float, default=None,
                    help="share of the tools in the eval part (default 0.3)")
    sp.add_argument("--seed", type=int, default=None, help="seed of the tool draw (default 0)")
    sp.add_argument("--draw", choices=("tools", "gold_sets"), default="tools",
                    help="for the named sources: draw tools one by one (default), or whole gold sets first (multi-tool "
                         "sets, where a tool draw splits most gold sets and drops their queries)")
    sp.add_argument("--merge-versions", action="store_true",
                    help="for the named sources: merge <Service>_<n>.<Intent> tools (SGD's service versions) into one "
                         "<Service>.<Intent> before the draw")
    sp.add_argument("--force", action="store_true", help="write into a non-empty output folder")
    sp.set_defaults(func=cmd_split)

"""``magicselector split``: tool-disjoint train/eval parts of benchmark folders, rebuilt by command
(``data/splits.py``); registered by ``magicselector.cli``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from magicselector.errors import InputError


def cmd_split(args: argparse.Namespace) -> int:
    from magicselector.data.splits import SHARED_SETS, ToolSplitConfig, default_shared_data, write_tool_disjoint_splits

    sources = [Path(s) for s in args.sources]
    if args.shared or args.shared_data is not None:  # --shared-data DIR: the public sets from DIR
        shared = Path(args.shared_data) if args.shared_data is not None else default_shared_data()
        flag = "--shared-data" if args.shared_data is not None else "--shared"
        for name in SHARED_SETS:
            if not (shared / name).is_dir():
                raise InputError(f"{shared / name}: {flag} needs the public set {name!r} there"
                                 + ("" if args.shared_data is not None else
                                    " (the shared data beside this checkout; another folder: --shared-data DIR)"))
            sources.append(shared / name)
    if not sources:
        raise InputError("split: name source folders, or pass --shared (or --shared-data DIR)")
    config = ToolSplitConfig(eval_fraction=args.eval_fraction, seed=args.seed)
    summary = write_tool_disjoint_splits(sources, args.out, config, overwrite=args.force,
                                         note=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(summary, indent=2))
    return 0


def register(subparsers) -> None:
    """Add ``split`` to the ``magicselector`` command's subparsers."""
    sp = subparsers.add_parser(
        "split", help="seeded tool-disjoint train/eval parts of benchmark folders (the eval part's tools never "
                      "occur in training)",
        description="Draws eval-fraction of each source's tools (seeded; the draw depends only on the tool ids) as "
                    "the evaluation part. A query goes to the part holding all its gold tools; one whose tools "
                    "straddle both parts is dropped. Writes OUT/<source name>/{train,eval}/ (tools.jsonl, "
                    "queries.jsonl) and OUT/<source name>/split.json; progress on stderr, a JSON summary on stdout.")
    sp.add_argument("sources", nargs="*", metavar="SOURCE", help="benchmark folders (tools.jsonl + queries.jsonl)")
    sp.add_argument("--shared", action="store_true",
                    help="also split the public sets in the shared data beside this checkout (../shared/data: "
                         "bfcl, metatool)")
    sp.add_argument("--shared-data", metavar="DIR",
                    help="the public sets' folder (bfcl/, metatool/), as bench quality takes it; implies --shared")
    sp.add_argument("--out", required=True, metavar="DIR", help="output folder: one sub-folder per source")
    sp.add_argument("--eval-fraction", type=float, default=0.3,
                    help="share of the tools in the eval part (default 0.3)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the tool draw (default 0)")
    sp.add_argument("--force", action="store_true", help="write into a non-empty output folder")
    sp.set_defaults(func=cmd_split)

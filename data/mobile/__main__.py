"""``python -m magicselector.data.mobile --out DIR [--seed N] [--dialogues N]``"""
from __future__ import annotations

import argparse
import json
import sys

from .generator import ASSISTANT_TURNS, GeneratorConfig, format_summary, generate_benchmark


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m magicselector.data.mobile",
                                 description="Generate the mobile multi-turn tool-selection benchmark.")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dialogues", type=int, default=1200)
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--catalog-dir", default=None, help="default: the shipped phone catalog")
    ap.add_argument("--templates-dir", default=None, help="default: the shipped templates")
    ap.add_argument("--assistant-turns", choices=ASSISTANT_TURNS, default="echo",
                    help="realistic: tool results and short confirmations instead of restated tasks")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    config = GeneratorConfig(seed=args.seed, dialogues=args.dialogues, max_turns=args.max_turns,
                             catalog_dir=args.catalog_dir, templates_dir=args.templates_dir,
                             assistant_turns=args.assistant_turns)
    try:
        summary = generate_benchmark(args.out, config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
    else:
        print(format_summary(summary))
        for w in summary["warnings"]:
            print(f"warning: {w}")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``magicselector train ...`` subcommands. Registered by ``magicselector.cli``; nothing heavy
(torch, transformers) is imported until a command runs."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from magicselector.cli.options import add_history_mode_option
from magicselector.errors import InputError


def _print_summary(short: dict[str, Any]) -> None:
    """The run's summary on stdout, once: by rank 0 when a launcher started several processes."""
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(short, indent=2))


def cmd_train_reranker(args: argparse.Namespace) -> int:
    from magicselector.train.reranker import RerankerTrainConfig, train_reranker

    fields: dict[str, Any] = {
        "seed": args.seed, "epochs_pointwise": args.epochs_pointwise, "epochs_listwise": args.epochs_listwise,
        "rounds": args.rounds, "negatives": args.negatives, "list_size": args.list_size, "pool": args.pool,
        "batch_size": args.batch_size, "lr": args.lr, "max_length": args.max_length, "layers": args.layers,
        "history": args.history_mode, "max_queries": args.max_queries, "threads": args.threads,
        "max_queries_per_folder": args.max_queries_per_folder,
        "base_model": args.base_model, "include_tasks": not args.no_tasks, "truncation": args.truncation,
        "catalog_scope": args.catalog_scope, "mining_epochs_listwise": args.mining_epochs_listwise,
        "save_stages": args.save_stages or None, "device": args.device,
        "teacher": args.teacher, "distill_weight": args.distill_weight,
    }
    config = RerankerTrainConfig(**{k: v for k, v in fields.items() if v is not None})
    summary = train_reranker(args.data, args.out, config, bundle=args.bundle, progress=not args.quiet,
                             overwrite=args.force)
    short = {k: summary[k] for k in ("out_dir", "layers", "counts", "loss_summary", "probe_loss_before",
                                     "probe_loss_after", "final_loss", "wall_seconds")}
    _print_summary(short)
    return 0


def cmd_train_embedder(args: argparse.Namespace) -> int:
    from magicselector.train.embedder import EmbedderTrainConfig, train_embedder

    fields: dict[str, Any] = {
        "seed": args.seed, "epochs": args.epochs, "rounds": args.rounds, "negatives": args.negatives,
        "pool": args.pool, "batch_size": args.batch_size, "lr": args.lr, "temperature": args.temperature,
        "in_batch": args.in_batch or None, "max_length": args.max_length, "layers": args.layers,
        "max_queries": args.max_queries, "threads": args.threads,
        "max_queries_per_folder": args.max_queries_per_folder, "history": args.history_mode,
        "catalog_scope": args.catalog_scope, "base_model": args.base_model,
        "include_tasks": False if args.no_tasks else None, "device": args.device,
        "freeze_embeddings": args.freeze_embeddings or None,
    }
    config = EmbedderTrainConfig(**{k: v for k, v in fields.items() if v is not None})
    loss = None
    if args.teacher:
        from magicselector.train.losses import TeacherKLInfoNCELoss
        from magicselector.train.teacher import EmbeddingTeacher

        if not args.distill_weight >= 0:
            raise InputError(f"--distill-weight must be >= 0, got {args.distill_weight}")
        # from_specs checks every part before it loads a model
        loss = TeacherKLInfoNCELoss(EmbeddingTeacher.from_specs(args.teacher), args.distill_weight,
                                    config.temperature, config.in_batch)
    summary = train_embedder(args.data, args.out, config, progress=not args.quiet, overwrite=args.force, loss=loss)
    short = {k: summary[k] for k in ("out_dir", "layers", "counts", "loss_summary", "probe_loss_before",
                                     "probe_loss_after", "train_retrieval_before", "train_retrieval_after",
                                     "final_loss", "wall_seconds")}
    _print_summary(short)
    return 0


def cmd_train_head(args: argparse.Namespace) -> int:
    from magicselector.train.head import HeadTrainConfig, train_head

    fields: dict[str, Any] = {"seed": args.seed, "max_queries_per_folder": args.max_queries_per_folder,
                              "hidden": tuple(args.hidden) if args.hidden else None, "alpha": args.alpha,
                              "max_iter": args.max_iter, "depth": args.depth,
                              "history": args.history_mode}
    config = HeadTrainConfig(**{k: v for k, v in fields.items() if v is not None})
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    summary = train_head(args.data, args.out, config, bundle=args.bundle, overwrite=args.force, log=log)
    _print_summary({k: summary[k] for k in ("out", "rows", "relevant", "train_log_loss", "wall_seconds")})
    return 0


def cmd_train_plot(args: argparse.Namespace) -> int:
    from magicselector.train.plots import plot_training_logs

    print(plot_training_logs(args.runs, args.out, window=args.window))
    return 0


def _add_run_flags(sp) -> None:
    """The flags every encoder trainer has at the end: where torch trains, --force, --quiet."""
    sp.add_argument("--device", choices=["cpu", "cuda", "auto"], help="where torch trains (default cpu)")
    sp.add_argument("--force", action="store_true", help="write into a non-empty output folder")
    sp.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_data_flags(sp) -> None:
    """The flags every encoder trainer starts with: the data folders and the output folder."""
    sp.add_argument("--data", nargs="+", required=True, metavar="DIR", help="benchmark folders to train on")
    sp.add_argument("--out", required=True, metavar="DIR", help="output checkpoint folder")


def _add_sampling_flags(sp) -> None:
    """The sampling, threads and history flags both encoder trainers have."""
    sp.add_argument("--max-queries", type=int, help="train on a seeded sample of at most N queries")
    sp.add_argument("--max-queries-per-folder", type=int, metavar="N",
                    help="first sample at most N queries from each --data folder (seeded; keeps a mix balanced)")
    sp.add_argument("--threads", type=int, help="torch threads")
    add_history_mode_option(sp, default_help="'user' (the training default)")


def _add_reranker_parser(tsub) -> None:
    sp = tsub.add_parser("reranker", help="train the cross-encoder reranker: an experiment the runtime does not run "
                                          "(point-wise, list-wise, self-distillation hard-negative mining)",
                         description="Train the cross-encoder reranker: an experiment. The runtime carries no "
                                     "cross-encoder (docs/bench/reranker.md); export the checkpoint with "
                                     "python3 -m magicselector.export.shipped_reranker and score it on top of the "
                                     "shipped ranking with python3 -m magicselector.bench.experiments.rerank.")
    _add_data_flags(sp)
    sp.add_argument("--bundle", help="bundle whose dense retriever gives the candidate pools (default bundle)")
    sp.add_argument("--base-model", help="BERT-style checkpoint to start from (default: the packaged MiniLM)")
    sp.add_argument("--teacher", metavar="DIR",
                    help="a trained cross-encoder checkpoint to distil from: its scores of the training pairs "
                         "become soft targets (default: none, 0/1 labels only)")
    sp.add_argument("--distill-weight", type=float, metavar="W",
                    help="share of the teacher's soft targets in each loss, in [0, 1] (default 0.5; with --teacher)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--epochs-pointwise", type=int)
    sp.add_argument("--epochs-listwise", type=int)
    sp.add_argument("--mining-epochs-listwise", type=int,
                    help="list-wise epochs in the mining rounds (default: --epochs-listwise)")
    sp.add_argument("--save-stages", action="store_true",
                    help="also save a checkpoint after each stage under OUT/stages/ (for ablations)")
    sp.add_argument("--rounds", type=int, help="hard-negative mining rounds after the initial model")
    sp.add_argument("--negatives", type=int, help="negatives per gold tool (and hard negatives mined per query)")
    sp.add_argument("--list-size", type=int, help="items per list-wise list (1 gold + L-1 negatives)")
    sp.add_argument("--pool", type=int, help="retriever candidates per query")
    sp.add_argument("--batch-size", type=int, help="pairs per optimizer step")
    sp.add_argument("--lr", type=float)
    sp.add_argument("--layers", type=int, help="keep only the first N encoder layers")
    sp.add_argument("--max-length", type=int, help="tokens per (query, tool) pair (default 96)")
    _add_sampling_flags(sp)
    sp.add_argument("--truncation", choices=["query_capped", "longest_first"])
    sp.add_argument("--catalog-scope", choices=["gold", "all"],
                    help="train against the tools some training query needs (gold, default) or the whole catalog")
    sp.add_argument("--no-tasks", action="store_true", help="do not add the gold sub-tasks as extra queries")
    _add_run_flags(sp)
    sp.set_defaults(func=cmd_train_reranker)


def _add_embedder_parser(tsub) -> None:
    sp = tsub.add_parser("embedder", help="train the dense embedder (InfoNCE, self-distillation hard-negative "
                                          "mining); measure it with bundle build + eval")
    _add_data_flags(sp)
    sp.add_argument("--base-model", help="BERT-style checkpoint to start from (default: the packaged MiniLM)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--epochs", type=int, help="epochs per round")
    sp.add_argument("--rounds", type=int, help="hard-negative mining rounds after the random-negative round")
    sp.add_argument("--negatives", type=int, help="negatives per (query, gold tool) item")
    sp.add_argument("--pool", type=int, help="the current model's top tools per query that negatives come from")
    sp.add_argument("--batch-size", type=int, help="(query, gold tool) items per optimizer step")
    sp.add_argument("--lr", type=float)
    sp.add_argument("--temperature", type=float, help="InfoNCE temperature (default 0.05)")
    sp.add_argument("--in-batch", action="store_true", help="also use the batch's other positives as negatives")
    sp.add_argument("--layers", type=int, help="keep only the first N encoder layers")
    sp.add_argument("--max-length", type=int, help="tokens per text (default 128, the runtime's window)")
    _add_sampling_flags(sp)
    sp.add_argument("--catalog-scope", choices=["gold", "all"],
                    help="train against the tools some training query needs (gold, default) or the whole catalog")
    sp.add_argument("--no-tasks", action="store_true", help="do not add the gold sub-tasks as extra queries")
    sp.add_argument("--freeze-embeddings", action="store_true",
                    help="keep the word-embedding table fixed (unseen words keep their pre-trained vectors)")
    sp.add_argument("--teacher", nargs="+", metavar="WEIGHT=SOURCE",
                    help="distil from a teacher that mixes embedders' cosines: 0.7=bundle (the default bundle's "
                         "embedder; or a bundle folder) 0.3=CKPT (a sentence encoder folder); weights sum to 1")
    sp.add_argument("--distill-weight", type=float, default=1.0,
                    help="with --teacher: weight of the KL term beside eq. 13 (default 1)")
    _add_run_flags(sp)
    sp.set_defaults(func=cmd_train_embedder)


def _add_head_parser(tsub) -> None:
    sp = tsub.add_parser("head", help="fit the learned head (a relevance probability per candidate from how the "
                                      "retrieval lists rank it) on the bundle's rankings of the train folders")
    sp.add_argument("--data", nargs="+", required=True, metavar="DIR", help="benchmark folders to train on")
    sp.add_argument("--out", required=True, metavar="FILE", help="the head file to write (head.json)")
    sp.add_argument("--bundle", help="bundle whose pipeline ranks the candidates (default bundle)")
    sp.add_argument("--max-queries-per-folder", type=int, metavar="N",
                    help="a seeded sample of at most N queries per folder (default 3000)")
    sp.add_argument("--hidden", type=int, nargs="+", metavar="W", help="hidden layer widths (default 16)")
    sp.add_argument("--alpha", type=float, help="L2 penalty (default 1e-3)")
    sp.add_argument("--max-iter", type=int, help="Adam epochs at most (default 500)")
    sp.add_argument("--depth", type=int, help="fused candidates scored per turn (default 20)")
    add_history_mode_option(sp, default_help="the shipped Selector's (the Selector that uses the head must share it)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--force", action="store_true", help="replace an existing head file")
    sp.add_argument("--quiet", action="store_true", help="no progress lines")
    sp.set_defaults(func=cmd_train_head)


def register(subparsers) -> None:
    """Add ``train`` (with ``train reranker`` and ``train embedder``) to the ``magicselector``
    command's subparsers."""
    tp = subparsers.add_parser("train", help="train models (needs the train extra)")
    tsub = tp.add_subparsers(dest="train_command", required=True)
    _add_reranker_parser(tsub)
    _add_embedder_parser(tsub)

    _add_head_parser(tsub)

    from magicselector.cli.train_decomposer import add_decomposer_parser, add_merge_lora_parser

    add_decomposer_parser(tsub)
    add_merge_lora_parser(tsub)

    sp = tsub.add_parser("plot", help="draw training curves (loss; GRPO rewards, KL, duplicate rate) from run folders")
    sp.add_argument("runs", nargs="+", metavar="RUN_DIR", help="folders holding a training_log.csv")
    sp.add_argument("--out", required=True, help="image file to write (.png)")
    sp.add_argument("--window", type=int, default=10, help="steps in the trailing mean (default 10)")
    sp.set_defaults(func=cmd_train_plot)

"""Training curves from the runs' ``training_log.csv`` files (``magicselector train plot``).

A GRPO run (columns ``reward``, ``r_cf``, ``r_pref``, ``kl``, ``dup_rate``) gets its rewards, KL and
duplicate-task rate against the step; any other run (SFT, embedder, reranker) its loss. Noisy series
are drawn raw (faint) with a trailing mean over ``window`` steps. Needs matplotlib (the bench extra).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from magicselector.errors import InputError

GRPO_SERIES = ("reward", "r_cf", "r_pref")


def read_log(run_dir: str | Path) -> dict[str, np.ndarray]:
    path = Path(run_dir) / "training_log.csv"
    if not path.is_file():
        raise InputError(f"{run_dir}: no training_log.csv")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise InputError(f"{path}: no rows")
    out = {}
    for key in rows[0]:
        try:
            out[key] = np.array([float(r[key]) for r in rows])
        except (TypeError, ValueError):
            continue
    return out


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each step (fewer at the start)."""
    c = np.cumsum(np.insert(np.asarray(values, dtype=float), 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def _label(run_dir: Path) -> str:
    info = run_dir / "train_config.json"
    kind = json.loads(info.read_text(encoding="utf-8")).get("kind", "") if info.is_file() else ""
    return f"{run_dir.name} ({kind})" if kind else run_dir.name


def plot_training_logs(run_dirs: Sequence[str | Path], out: str | Path, window: int = 10) -> Path:
    """One panel per run (two for GRPO: rewards, then KL and duplicate rate); written to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(Path(d), read_log(d)) for d in run_dirs]
    panels = sum(2 if "reward" in log else 1 for _, log in runs)
    fig, axes = plt.subplots(panels, 1, figsize=(7, 2.6 * panels), squeeze=False)
    axes = list(axes[:, 0])
    for run_dir, log in runs:
        x = log.get("step", np.arange(1, len(next(iter(log.values()))) + 1))
        if "reward" in log:
            ax = axes.pop(0)
            for key in GRPO_SERIES:
                line, = ax.plot(x, trailing_mean(log[key], window), label=f"{key} (mean of {window})")
                ax.plot(x, log[key], color=line.get_color(), alpha=0.2, linewidth=0.8)
            ax.set_title(f"{_label(run_dir)}: rewards")
            ax.legend(fontsize=7)
            ax = axes.pop(0)
            ax.plot(x, log["kl"], label="KL to the SFT model")
            if "dup_rate" in log:
                ax.plot(x, log["dup_rate"], label="duplicate-task rate")
            ax.set_title(f"{_label(run_dir)}: KL and duplicates")
            ax.legend(fontsize=7)
        elif "loss" in log:
            ax = axes.pop(0)
            ax.plot(x, log["loss"], alpha=0.25, linewidth=0.8)
            ax.plot(x, trailing_mean(log["loss"], window), label=f"loss (mean of {window})")
            ax.set_title(f"{_label(run_dir)}: loss")
            ax.legend(fontsize=7)
        else:
            raise InputError(f"{run_dir}: training_log.csv has neither a loss nor a reward column")
        ax.set_xlabel("step")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

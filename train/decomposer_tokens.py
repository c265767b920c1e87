"""The decomposer's tokens: prompts and targets tokenized as llama.cpp tokenizes them, padded
causal-LM batches, per-token log-probabilities and the SFT loss, and what the summaries record of
the prompt format.
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import torch

from magicselector.decompose import LlmDecomposer
from magicselector.errors import InputError

from .decomposer_data import DecompositionExample, runtime_prefix, runtime_settings

END_OF_TURN = "<|im_end|>"
_CHATML = ("<|im_start|>", "<|im_end|>")
_OTHER_ENDS = ("<|endoftext|>",)


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


def fit_examples(examples: list[DecompositionExample], toks: PromptTokens, dec: LlmDecomposer
          ) -> tuple[list[DecompositionExample], int]:
    """The examples the runtime could run: prompt + max_tokens within n_ctx (llama.cpp refuses more)."""
    keep = [ex for ex in examples if len(toks.prompt_ids(ex)) + dec.max_tokens <= dec.n_ctx]
    return keep, len(examples) - len(keep)


def prompt_format(dec: LlmDecomposer, toks: PromptTokens) -> dict[str, Any]:
    return {"prompt": f"magicselector.decompose.prompts.prompt_prefix({toks.prompt!r}) + build_suffix(query, history, "
                      f"history_turns={dec.history_turns})",
            "style": toks.prompt,
            "prefix_sha256": hashlib.sha256(runtime_prefix(toks.prompt).encode("utf-8")).hexdigest(),
            "prefix_tokens": len(toks.prefix_ids), "target": "gold task texts joined by newlines + "
            f"{toks.tokenizer.convert_ids_to_tokens(toks.end_id)}", "runtime": runtime_settings(dec)}

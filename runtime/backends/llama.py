"""The llama.cpp backend: loading a GGUF (``load_llama``), greedy decoding, GBNF grammars and ``LlamaRunner``.

Layers, lowest first: the raw binding (``llama_cpp``, imported only here and only when called)
-> ``load_llama`` (the one loader: quiet, seeded, extra buffer types chosen once) -> the owning
wrapper ``LlamaRunner`` (one model, a prompt prefix kept in the KV cache, grammar-first greedy
generation) -> the task built on it (``magicselector.decompose.llm.LlmDecomposer``).

Extra buffer types: on x86 CPUs that list AMX, llama.cpp's AMX matmul executes ``ldtilecfg``,
which faults (SIGSEGV) where the kernel or hypervisor does not grant tile state; they are off on
such hosts. ``MAGICSELECTOR_LLAMA_EXTRA_BUFFERS=1|0`` overrides. Phones (arm64) keep them: the
repacked Q4 kernels are their fast path.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ModelError

EXTRA_BUFFERS_ENV = "MAGICSELECTOR_LLAMA_EXTRA_BUFFERS"

# Llama() takes its model params from the module-level llama_model_default_params(); choosing the
# extra buffer types means swapping that function for the call, so every load holds this lock.
_LOAD_LOCK = threading.Lock()


class LlamaCppMissingError(ModelError):
    """llama-cpp-python is not installed (it comes with the ``llm`` extra)."""


def import_llama_cpp() -> Any:
    """The ``llama_cpp`` module, or a LlamaCppMissingError that says which extra installs it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before llama_cpp (and its OpenMP) loads
    try:
        import llama_cpp
    except ImportError as e:
        raise LlamaCppMissingError(
            "decompose=\"llm\"/\"auto\" and GGUF models need the llm extra: pip install 'magicselector[llm]' "
            f"(the lean install does not include llama-cpp-python; {e})") from None
    return llama_cpp


def require_llama_cpp() -> None:
    """Raise LlamaCppMissingError now, without importing it, when llama-cpp-python is not installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        import_llama_cpp()


def _flag(value: str) -> bool:
    return value.strip().lower() not in ("0", "false", "no", "")


def _amx_listed() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " amx_tile" in f.read(1 << 16)
    except OSError:
        return False


def default_extra_buffers() -> bool:
    """Whether llama.cpp may use its extra CPU buffer types (weight repacking, Intel AMX): off where
    the CPU lists AMX, on elsewhere, unless ``MAGICSELECTOR_LLAMA_EXTRA_BUFFERS`` says otherwise."""
    env = os.environ.get(EXTRA_BUFFERS_ENV)
    if env is not None:
        return _flag(env)
    return not _amx_listed()


def check_gguf(path: str | Path) -> Path:
    """``path`` if it is a file that starts with the GGUF magic; ModelError naming it otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: GGUF model file not found")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(f"{path}: not a GGUF file (magic {magic!r})")
    return path


def load_llama(path: str | Path, *, n_ctx: int = 512, threads: int = 2, extra_buffers: bool | None = None,
               seed: int = 0, **options: Any) -> Any:
    """A quiet ``llama_cpp.Llama`` over the GGUF at ``path``; ``options`` go to ``Llama()`` as they are.

    ``extra_buffers`` None = ``default_extra_buffers()``.
    """
    path = check_gguf(path)
    llama_cpp = import_llama_cpp()
    import llama_cpp.llama_cpp as lowlevel  # the binding module llama_cpp.llama reads the defaults from

    use_extra = default_extra_buffers() if extra_buffers is None else extra_buffers
    with _LOAD_LOCK:
        original = lowlevel.llama_model_default_params

        def params() -> lowlevel.llama_model_params:
            p: lowlevel.llama_model_params = original()  # llama_cpp's ctypes decorator leaves it untyped
            p.use_extra_bufts = use_extra
            return p

        lowlevel.llama_model_default_params = params
        try:
            return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, seed=seed, verbose=False,
                                   **options)
        except (ValueError, RuntimeError) as e:
            raise ModelError(f"{path}: llama.cpp could not load this GGUF ({e}); truncated or not a model") from None
        finally:
            lowlevel.llama_model_default_params = original


def greedy(llm: Any, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
    """Greedy continuation (temperature 0, no penalties) of token ids, stopping at end-of-generation."""
    llama_cpp = import_llama_cpp()
    is_eog = getattr(llama_cpp, "llama_vocab_is_eog", None)
    vocab = llama_cpp.llama_model_get_vocab(llm.model) if is_eog is not None else None
    out: list[int] = []
    if max_new_tokens <= 0:
        return out
    for tok in llm.generate(list(prompt_ids), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                            reset=True):
        out.append(int(tok))
        if len(out) >= max_new_tokens or _ends_generation(llm, tok, is_eog, vocab):
            break
    return out


def _ends_generation(llm: Any, tok: int, is_eog: Any, vocab: Any) -> bool:
    """Whether ``tok`` is end-of-sequence, or (where llama.cpp has the test) any end-of-generation token."""
    return bool(tok == llm.token_eos() or (is_eog is not None and is_eog(vocab, tok)))


LLAMA_POOLING_MEAN = 1  # llama_cpp.LLAMA_POOLING_TYPE_MEAN


def load_llama_embedder(path: str | Path, *, threads: int = 1, n_ctx: int = 512) -> Any:
    """A BERT GGUF loaded for embeddings as the native core runs it: mean pooling, one batch of
    ``n_ctx`` tokens."""
    return load_llama(path, n_ctx=n_ctx, threads=threads, embedding=True, pooling_type=LLAMA_POOLING_MEAN,
                      n_batch=n_ctx, n_ubatch=n_ctx)


def embed_token_ids(llm: Any, sequences: Sequence[Sequence[int]]) -> np.ndarray:
    """One mean-pooled, L2-normalised vector per token-id sequence from ``load_llama_embedder``'s
    model, each sequence decoded alone (as the native core's embedder does, so the two agree to
    float rounding)."""
    llama_cpp = import_llama_cpp()
    dim = int(llm.n_embd())
    out = np.zeros((len(sequences), dim), dtype=np.float32)
    batch, ctx = llm._batch, llm._ctx
    for row, ids in enumerate(sequences):
        if not 0 < len(ids) <= llm.n_batch:
            raise ModelError(f"sequence {row}: {len(ids)} tokens; the embedder takes 1 to {llm.n_batch}")
        batch.reset()
        batch.add_sequence(list(map(int, ids)), 0, True)
        ctx.kv_cache_clear()
        ctx.decode(batch)
        vec = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_seq(ctx.ctx, 0), shape=(dim,))
        out[row] = vec / max(float(np.linalg.norm(vec)), 1e-12)
    batch.reset()
    return out


class Grammar:
    """A compiled GBNF grammar bound to a model's vocabulary (a llama.cpp grammar sampler)."""

    def __init__(self, runner: "LlamaRunner", gbnf: str, root: str = "root") -> None:
        llama_cpp = import_llama_cpp()
        self._lib = llama_cpp
        self.gbnf = gbnf
        # LlamaGrammar.from_string only carries the text; llama.cpp parses it here.
        g = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)
        self._smpl = llama_cpp.llama_sampler_init_grammar(runner.vocab, g._grammar.encode(), g._root.encode())
        if not self._smpl:
            raise ModelError(f"invalid GBNF grammar: {gbnf!r}")
        self._one = llama_cpp.llama_token_data()
        self._one_arr = llama_cpp.llama_token_data_array(ctypes.pointer(self._one), 1, -1, False)

    def reset(self) -> None:
        self._lib.llama_sampler_reset(self._smpl)

    def allows(self, token: int) -> bool:
        self._one.id, self._one.logit, self._one.p = int(token), 0.0, 0.0
        self._one_arr.size, self._one_arr.selected, self._one_arr.sorted = 1, -1, False
        self._lib.llama_sampler_apply(self._smpl, ctypes.byref(self._one_arr))
        return bool(np.isfinite(self._one.logit))

    def mask(self, arr: Any) -> None:
        """Apply the grammar to a full-vocabulary ``llama_token_data_array`` (rejected logits become -inf)."""
        self._lib.llama_sampler_apply(self._smpl, ctypes.byref(arr))

    def accept(self, token: int) -> None:
        self._lib.llama_sampler_accept(self._smpl, int(token))

    def __del__(self) -> None:
        smpl, self._smpl = getattr(self, "_smpl", None), None
        if smpl:
            try:
                self._lib.llama_sampler_free(smpl)
            except Exception:
                pass


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: int
    prompt_tokens: int  # evaluated for this call (the suffix when the prefix was reused)
    ttft_ms: float      # from the call to the first generated token
    ms: float
    stopped: str        # "eos", "max_tokens", "stop", "deadline"
    grammar_fallbacks: int = 0


_TOKEN_DTYPE = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class LlamaRunner:
    """One loaded GGUF model with greedy decoding, a reusable prompt prefix and grammar checks.

    A fixed prompt prefix is evaluated once and stays in the KV cache; each call truncates the
    cache back to the prefix and evaluates only its own suffix, so nothing is copied (the
    library's whole-state save/load and its RAM cache copy the whole logits buffer on every
    restore). With a grammar, the greedy token is checked against the grammar alone first; only
    when the grammar rejects it is the whole vocabulary filtered (the "grammar first" shortcut of
    llama.cpp's common sampler). Not re-entrant: a lock serialises calls (the Selector may be
    shared across threads).
    """

    def __init__(self, model_path: str | Path, n_threads: int = 2, n_ctx: int = 2048, seed: int = 0,
                 n_batch: int = 512, extra_buffers: bool | None = None) -> None:
        self.path = check_gguf(model_path)
        llama_cpp = import_llama_cpp()
        self._lib = llama_cpp
        self.n_threads = n_threads
        self.n_ctx = n_ctx
        self.extra_buffers = default_extra_buffers() if extra_buffers is None else extra_buffers
        t0 = time.perf_counter()
        self.llm = load_llama(self.path, n_ctx=n_ctx, threads=n_threads, extra_buffers=self.extra_buffers, seed=seed,
                              n_batch=min(n_batch, n_ctx), n_threads_batch=n_threads, logits_all=False)
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm._model.model)
        self.n_vocab = self.llm.n_vocab()
        self.eos = self.llm.token_eos()
        self._lock = threading.Lock()
        self._prefix: list[int] = []
        self.prefix_ms = 0.0
        self._cands = np.zeros(self.n_vocab, dtype=_TOKEN_DTYPE)
        self._cands["id"] = np.arange(self.n_vocab, dtype=np.int32)
        self._cands_arr = llama_cpp.llama_token_data_array(
            self._cands.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), self.n_vocab, -1, False)

    # -- tokens ----------------------------------------------------------------------------------
    def tokenize(self, text: str, special: bool = True) -> list[int]:
        ids: list[int] = self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        return ids

    def detokenize(self, tokens: Sequence[int]) -> str:
        text: bytes = self.llm.detokenize(list(tokens))
        return text.decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self.vocab, int(token)))

    # -- prefix ----------------------------------------------------------------------------------
    def set_prefix(self, text: str) -> float:
        """Evaluate a fixed prompt prefix once; later calls with ``reuse_prefix`` start after it."""
        with self._lock:
            tokens = self.tokenize(text)
            if len(tokens) >= self.n_ctx - 64:
                raise ModelError(f"the prompt prefix is {len(tokens)} tokens; n_ctx={self.n_ctx} is too small")
            t0 = time.perf_counter()
            self.llm.n_tokens = 0
            self.llm.eval(tokens)
            self._prefix = tokens
            self.prefix_ms = (time.perf_counter() - t0) * 1e3
            return self.prefix_ms

    @property
    def prefix_tokens(self) -> int:
        return len(self._prefix)

    # -- generation ------------------------------------------------------------------------------
    def _logits(self) -> np.ndarray:
        ptr = self._lib.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def _pick(self, grammar: Grammar | None) -> tuple[int, bool]:
        logits = self._logits()
        tok = int(np.argmax(logits))
        if grammar is None or grammar.allows(tok):
            return tok, False
        self._cands["logit"] = logits
        self._cands["p"] = 0.0
        self._cands_arr.size, self._cands_arr.selected, self._cands_arr.sorted = self.n_vocab, -1, False
        grammar.mask(self._cands_arr)
        masked = self._cands["logit"]
        tok = int(np.argmax(masked))
        if not np.isfinite(masked[tok]):
            raise ModelError("the grammar allows no token here")
        return tok, True

    def generate(self, suffix: str, *, grammar: Grammar | None = None, max_tokens: int = 96,
                 reuse_prefix: bool = True, deadline: float | None = None,
                 stop: Callable[[str], bool] | None = None) -> Generation:
        """Greedy continuation of prefix + ``suffix``.

        ``deadline`` is a ``time.perf_counter()`` instant checked after the prompt and between
        tokens; ``stop(text)`` ends generation early when it returns True.
        """
        with self._lock:
            t0 = time.perf_counter()
            prompt = self._prompt(suffix, reuse_prefix, max_tokens)
            if grammar is not None:
                grammar.reset()
            self.llm.eval(prompt)
            out: list[int] = []
            ttft = 0.0
            fallbacks = 0
            stopped = "max_tokens"
            text = ""
            while len(out) < max_tokens:
                if deadline is not None and time.perf_counter() > deadline:
                    stopped = "deadline"
                    break
                tok, fell_back = self._pick(grammar)
                fallbacks += fell_back
                if not out:
                    ttft = (time.perf_counter() - t0) * 1e3
                if self.is_eog(tok):
                    stopped = "eos"
                    break
                text = self._take(tok, out, grammar)
                if stop is not None and stop(text):
                    stopped = "stop"
                    break
                self.llm.eval([tok])
            return Generation(text=text, tokens=len(out), prompt_tokens=len(prompt), ttft_ms=ttft,
                              ms=(time.perf_counter() - t0) * 1e3, stopped=stopped, grammar_fallbacks=fallbacks)

    def _prompt(self, suffix: str, reuse_prefix: bool, max_tokens: int) -> list[int]:
        """The tokens to evaluate for prefix + ``suffix``: only the suffix's where the cached prefix
        is reused (its KV cells kept, the rest dropped); refused where it and ``max_tokens`` pass n_ctx."""
        suffix_tokens = self.tokenize(suffix)
        if reuse_prefix and self._prefix:
            self.llm.n_tokens = len(self._prefix)  # eval() drops the KV cells after this
            prompt = suffix_tokens
        else:
            self.llm.n_tokens = 0
            prompt = self._prefix + suffix_tokens
        if self.llm.n_tokens + len(prompt) + max_tokens > self.n_ctx:
            raise ModelError(f"prompt of {self.llm.n_tokens + len(prompt)} tokens + {max_tokens} new tokens "
                             f"exceeds n_ctx={self.n_ctx}")
        return prompt

    def _take(self, tok: int, out: list[int], grammar: Grammar | None) -> str:
        """One generated token appended to ``out`` (and fed to the grammar); the text so far."""
        if grammar is not None:
            grammar.accept(tok)
        out.append(tok)
        return self.detokenize(out)

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()

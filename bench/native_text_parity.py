"""The native text stages' parity file: what the Python runtime gives, turn by turn, for the native core to match.

Per turn of the development evaluation parts (``quality.development_sets``; a seeded sample of
``limit`` queries each, drawn as ``eval --limit`` draws them), of hostile utterances at the length
limit and of a seeded fuzz of odd Unicode, one JSON line: the input (utterance, history as
``[{role, content}]``), whether the Python runtime refuses it (``validate_query`` /
``bounded_history``), the rules decomposer's sub-tasks, the texts ``SelectorConfig()`` retrieves
with (``Selector.plan``), and the bundle tokenizer's ids of each; per tool text of each part's
catalog (``catalog.tool_text``) and per fuzz text, its ids and its ``str.lower()``; per fuzz byte
string, whether it is UTF-8. ``native/tests/test_text_parity.cpp`` reads the file and must match
every line.

    python -m magicselector.bench.native_text_parity OUT.jsonl [--limit 500] [--all] [--fuzz 3000]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Iterator

from magicselector.catalog import tool_text
from magicselector.config import SelectorConfig
from magicselector.data.datasets import load_benchmark
from magicselector.decompose import RuleDecomposer
from magicselector.errors import InputError
from magicselector.selector import Selector
from magicselector.stages.embed import TextTokenizer

from .quality import development_sets

PARITY_FILE = "text_parity.jsonl"  # the name native tests look for in their data folder


def shipped_tokenizer_file() -> Path:
    """The tokenizer.json every bundle built from the shipped embedder copies."""
    from magicselector.default_bundle import SHIPPED_EMBEDDER_DIR

    return Path(SHIPPED_EMBEDDER_DIR) / "tokenizer.json"


class TextOracle:
    """The Python runtime's text stages under ``SelectorConfig()`` with the rules decomposer."""

    def __init__(self, tokenizer_file: Path, config: SelectorConfig | None = None) -> None:
        self.config = config or SelectorConfig()
        if self.config.decompose != "rules":
            raise InputError(f"the parity file is written for the rules decomposer, not {self.config.decompose!r}")
        # Selector.plan reads only these two attributes: the real code runs, without opening a
        # bundle's models
        self._selector = SimpleNamespace(config=self.config, decomposer=RuleDecomposer())
        self.tokenizer = TextTokenizer(tokenizer_file, max_length=128)

    def ids(self, texts: list[str]) -> list[list[int]]:
        return [list(e.ids) for e in self.tokenizer.encodings(texts)] if texts else []

    def turn(self, query: Any, history: list[dict[str, Any]]) -> dict[str, Any]:
        row: dict[str, Any] = {"kind": "turn", "query": query, "history": history}
        try:
            plan = Selector.plan(self._selector, query, history)
        except InputError as e:
            return {**row, "error": str(e)}
        texts = list(plan.texts)
        return {**row, "error": None, "tasks": list(plan.decomposition.tasks), "texts": texts, "ids": self.ids(texts)}


# -- the fuzz --------------------------------------------------------------------------------------
_ODD = ("\u0301", "\u0316", "\u0334", "\u0345", "\U0001d165", "\u302e", "\u0f39", "\u0e49", "\u20dd",  # marks
        "\u4e2d", "\u6587", "\u3042", "\uac00", "\u1100\u1161", "\uf900", "\U00020000",  # CJK, kana, Hangul
        "\U0001f600", "\U0001f970", "\U0001faf6", "\u2764\ufe0f", "\U0001f468\u200d\U0001f469",  # emoji
        "\x00", "\x01", "\x0b", "\x0c", "\x1c", "\x1f", "\x7f", "\x85", "\u00a0", "\u1680", "\u2028", "\u200b",
        "\u200d", "\u2060", "\ufeff", "\ufffd", "\ue000", "\U000f0000", "\u0378", "\U000e0001",  # controls, formats
        "\u0130", "\u0131", "\u017f", "\u212a", "\u03a3", "\u1e9e", "\u00df", "\ufb01", "\u0149", "\u01c5",  # case
        "\u00e9", "e\u0301", "\u1e69", "\u0958", "\u2126", "\u00c5", "\u212b", "\u0344",  # NFD
        "\u2019", "\u201c", "\u201d", "\u00bf", "\u3002", "\uff0c", "\u2014", "\u00b7", "$", "^", "`", "~", "|",
        "\u0660", "\u00b2", "\u2167", "\u0e51", "_", "\\", "\\d", "\\1", "\\g<0>", "\n", "\t", "\r", "  ",
        "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "[unused1]", "##ing", "a" * 101, "\u00e9" * 60)
_WORDS = ("and", "then", "also", "plus", "oh, and", "oh and", "after that", "as well as", "while you're at it",
          "while you\u2019re at it", "one more thing", "on top of that", "it", "that", "this", "them", "it's",
          "please", "can you", "could you", "i'd like to", "i want to", "let's", "what about", "how about",
          "rock and roll", "r and b", "an hour and a half", "try again", "retry", "is it done yet?", "how's that going?",
          "turn", "on", "off", "the", "lights", "play", "some", "jazz", "set", "alarm", "for", "7", "am", "Dr.", "p.m.",
          "e.g.", "A.", "tomorrow", "Paris", "and for tomorrow?", "same for", "first,", "finally,", "lastly.",
          "I invested $5000", "Imagine you are a drone operator", "my", "sister", "paid", "send", "text", "to",
          "mom", ",", ", ", ".", ". ", "; ", "!", "?", "? ", '"', '"quoted and then text"', "\u201cquoted\u201d",
          "TURN", "ThEn", "AND", "\u0130t", "K", "\u212aelvin", "\u017fo", "PLEA\u017fE")
# str.lower()'s final sigma: a capital sigma after a cased letter and before none, marks skipped
_SIGMA_PROBES = ["\u039f\u0394\u039f\u03a3", "\u039f\u0394\u039f\u03a3.", "\u03a3", "\u0391\u03a3'\u0392",
                 "\u0391\u03a3\u0301", "\u0391\u0301\u03a3", "\u0391\u03a3\u0391", "\u039f\u0394\u039f\u03a3 \u039f\u0394\u039f\u03a3",
                 "1\u03a3", "\u02b0\u03a3", "a\u00ad\u03a3\u00ad", "\u03a3\u03a3\u03a3", "x\u03a3\u0130", "\u0130\u03a3"]
_ROLES = ("user", "assistant", "assistant", "user", "system", "tool", "developer", "function")


def _fuzz_text(rng: random.Random, pieces: int) -> str:
    out = []
    for _ in range(pieces):
        r = rng.random()
        out.append(rng.choice(_WORDS) if r < 0.6 else rng.choice(_ODD) if r < 0.9 else chr(rng.randrange(0x20, 0x3000)))
        out.append(" " if rng.random() < 0.7 else "")
    return "".join(out)


def fuzz_turns(seed: int, count: int) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    rng = random.Random(seed)
    for i in range(count):
        query = _fuzz_text(rng, rng.randrange(0, 24))
        if i % 97 == 0:
            query = _fuzz_text(rng, 40) * rng.randrange(50, 200)  # long: the max_chars clip and the 16,000 limit
        history: list[Any] = []
        for _ in range(rng.choice((0, 0, 1, 2, 3, 5, 40))):
            role = rng.choice(_ROLES) if rng.random() < 0.97 else "bogus"
            content: Any = _fuzz_text(rng, rng.randrange(0, 16))
            if rng.random() < 0.03:
                content = _fuzz_text(rng, 40) * rng.randrange(20, 150)
            history.append(_odd_message(rng, role, content) if rng.random() < 0.06 else {"role": role, "content": content})
        yield query, history


def _odd_message(rng: random.Random, role: str, content: str) -> Any:
    """A message of the benchmark format at its edges: null or missing content, a [role, content]
    pair, a role or content of another JSON type, a message that is no object."""
    return rng.choice([{"role": role, "content": None}, {"role": role}, {"content": content}, [role, content],
                       [role, None], {"role": 3, "content": content}, {"role": None, "content": content},
                       {"role": role, "content": 5}, {"role": role, "content": True}, "hello", 7, None, [role],
                       {"content": content, "role": role}])


# utterances that make the rules work hardest (each repeated to the 16,000-character limit, after 32
# turns of history): long runs of connectors, quotes, abbreviations, pronouns, fixed phrases
_HOSTILE = ('"x" and play ', "and ", "x, play ", "rock and roll ", "it ", "a. ", "x", "then play it ", '"',
            'play jazz, and then "quoted and stuff" turn it off; oh, and try again? ', "\u0130 rock and roll ",
            "oh, and ", "Dr. ", "\u201cq\u201d and play ", "first, ", "lights off; ", "\u03a3 ")


def hostile_turns() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for unit in _HOSTILE:
        query = unit * (16_000 // len(unit))
        history = [{"role": "assistant" if i % 2 else "user",
                    "content": ("which one? " * 500) if i % 2 else (unit * (600 // len(unit) + 1)) * 8} for i in range(32)]
        yield query, history


def fuzz_bytes(seed: int, count: int) -> Iterator[bytes]:
    """Byte strings near UTF-8: valid text with a byte changed, cut or inserted, surrogates, overlong forms."""
    rng = random.Random(seed)
    specials = [b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\x80",
                b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98"]
    for _ in range(count):
        data = bytearray(_fuzz_text(rng, rng.randrange(1, 8)).encode("utf-8"))
        r = rng.random()
        if r < 0.3 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif r < 0.5 and data:
            del data[rng.randrange(len(data)):]
        elif r < 0.8:
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.choice(specials)
        yield bytes(data)


# -- the file --------------------------------------------------------------------------------------
def development_turns(work: Path, shared_data: Path | None, limit: int | None, seed: int = 0,
                      note=print) -> Iterator[tuple[str, Any]]:
    """(part, Benchmark) of each development evaluation part, its queries sampled as ``eval --limit`` does."""
    import numpy as np

    for name, folder in development_sets(work, shared_data, note=note):
        bench = load_benchmark(folder, skip_bad_rows=True)
        queries = bench.queries
        if limit is not None and limit < len(queries):
            rng = np.random.default_rng(seed)
            queries = [queries[i] for i in sorted(rng.choice(len(queries), limit, replace=False))]
        yield name, bench, queries


def _history(query: Any) -> list[dict[str, Any]]:
    return [{"role": t.role, "content": t.content} if hasattr(t, "role") else dict(t) for t in (query.history or [])]


def write_parity(out: Path, *, work: Path, shared_data: Path | None = None, limit: int | None = 500,
                 all_queries: Iterable[Path] = (), fuzz: int = 3000, seed: int = 0,
                 tokenizer_file: Path | None = None, note=print) -> dict[str, dict[str, int]]:
    """Writes the parity file; returns the count of lines per part and kind."""
    tokenizer_file = tokenizer_file or shipped_tokenizer_file()
    oracle = TextOracle(tokenizer_file)
    counts: dict[str, dict[str, int]] = {}

    def count(part: str, kind: str, n: int = 1) -> None:
        counts.setdefault(part, {}).setdefault(kind, 0)
        counts[part][kind] += n

    import tokenizers
    import unicodedata

    with open(out, "w", encoding="utf-8") as f:
        def emit(row: dict[str, Any]) -> None:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")

        cfg = oracle.config
        emit({"kind": "header", "tokenizer": str(tokenizer_file), "max_length": 128, "python": sys.version.split()[0],
              "unicode": unicodedata.unidata_version, "tokenizers": tokenizers.__version__,
              "config": {"history": cfg.history, "history_turns": cfg.history_turns, "decompose": cfg.decompose,
                         "max_query_chars": cfg.limits.max_query_chars, "max_history_turns": cfg.limits.max_history_turns,
                         "max_history_chars": cfg.limits.max_history_chars, "max_subtasks": cfg.limits.max_subtasks}})
        for part, bench, queries in development_turns(work, shared_data, limit, seed, note):
            for q in queries:
                emit({"part": part, "id": q.id, **oracle.turn(q.query, _history(q))})
                count(part, "turns")
            texts = [tool_text(t) for t in bench.catalog]
            for text, ids in zip(texts, oracle.ids(texts)):
                emit({"kind": "text", "part": part + " tools", "text": text, "ids": ids})
            count(part, "tool texts", len(texts))
        for path in all_queries:
            part = f"{path.parent.name}/{path.name}"
            with open(path, encoding="utf-8") as qf:
                for line in qf:
                    row = json.loads(line)
                    emit({"part": part, "id": row.get("id"), **oracle.turn(row.get("query"), row.get("history") or [])})
                    count(part, "turns")
        for query, history in hostile_turns():
            emit({"part": "hostile", **oracle.turn(query, history)})
            count("hostile", "turns")
        for query, history in fuzz_turns(seed, fuzz):
            emit({"part": "fuzz", **oracle.turn(query, history)})
            count("fuzz", "turns")
            text = query + "".join(m["content"] for m in history if isinstance(m, dict) and isinstance(m.get("content"), str))
            emit({"kind": "text", "part": "fuzz", "text": text, "ids": oracle.ids([text])[0]})
            count("fuzz", "texts")
        for text in _SIGMA_PROBES + [_fuzz_text(random.Random(seed + i), 12) for i in range(fuzz)]:
            emit({"kind": "lower", "part": "fuzz", "text": text, "lower": text.lower()})
            count("fuzz", "lowered")
        for data in fuzz_bytes(seed, fuzz):
            try:
                data.decode("utf-8")
                valid = True
            except UnicodeDecodeError:
                valid = False
            emit({"kind": "utf8", "part": "fuzz", "hex": data.hex(), "valid": valid})
            count("fuzz", "byte strings")
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m magicselector.bench.native_text_parity", description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help=f"the JSONL file to write (native tests read {PARITY_FILE})")
    ap.add_argument("--limit", type=int, default=500, help="queries per development part (0: all of them)")
    ap.add_argument("--all", action="store_true", help="also every query of each shared set's queries.jsonl")
    ap.add_argument("--fuzz", type=int, default=3000, help="fuzz turns and byte strings")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shared-data", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=None, help="where the development parts are written (default: a temp dir)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json (default: the shipped embedder's)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ms-text-parity-") as tmp:
        work = args.work or Path(tmp)
        shared = args.shared_data
        extra: list[Path] = []
        if args.all:
            from magicselector.data.splits import default_shared_data

            extra = sorted((shared or default_shared_data()).glob("*/queries.jsonl"))
        counts = write_parity(args.out, work=work, shared_data=shared, limit=args.limit or None, all_queries=extra,
                              fuzz=args.fuzz, seed=args.seed, tokenizer_file=args.tokenizer,
                              note=lambda m: print(m, file=sys.stderr))
    print(json.dumps({"out": str(args.out), "seconds": round(time.perf_counter() - started, 1), "lines": counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

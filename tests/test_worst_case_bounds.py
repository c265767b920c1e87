"""The bounds behind ``bench worst-case`` (issue 27.3): the rules read a bounded part of a long
utterance or history turn, the embedder tokenizes a long text only as far as its kept tokens reach
and runs a repeated row once, and the lexical scores gather every posting at once; each gives the
same result as the unbounded code on the inputs it can see."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magicselector.decompose import rules
from magicselector.decompose.rules import RuleDecomposer, split_clauses
from magicselector.dialogue import Turn
from magicselector.errors import InputError
from magicselector.stages.embed import (TextEmbedder, TextTokenizer, distinct_rows, grouped_runs,
                                        mean_pool_normalize)
from magicselector.stages.lexical import LexicalIndex, lexical_tokens

MODELS = Path(__file__).resolve().parents[1] / "runtime" / "models" / "embedder"
CLAUSE = "turn on the living room lights and set an alarm for 7, then play some jazz; "


# -- the rules decomposer ---------------------------------------------------------------------
def _recording_split(monkeypatch) -> list[int]:
    seen: list[int] = []

    def split(text: str) -> list[str]:
        seen.append(len(text))
        return split_clauses(text)

    monkeypatch.setattr(rules, "split_clauses", split)
    return seen


def test_a_long_utterance_of_repeated_requests_is_split_only_as_far_as_max_chars(monkeypatch):
    """Repeated clauses never reach the task cap, so stopping at it does not bound them: the
    rules split the first max_chars characters (16,000 before) and drop the clause the clip cut."""
    seen = _recording_split(monkeypatch)
    dec = RuleDecomposer()
    query = (CLAUSE * 300)[:16_000]
    tasks = dec.decompose(query, []).tasks
    assert seen and max(seen) <= dec.max_chars == 4 * rules.CHARS_PER_TASK
    assert tasks == ("turn on the living room lights", "set an alarm for 7", "play some jazz")
    short = "turn on the lights and play some jazz"
    assert dec.decompose(short, []).tasks == ("turn on the lights", "play some jazz")


def test_the_previous_request_is_read_from_the_turn_s_end_once_per_utterance(monkeypatch):
    seen = _recording_split(monkeypatch)
    dec = RuleDecomposer()
    history = [Turn("user", CLAUSE * 250 + "play the radio"), Turn("assistant", "Done.")]
    query = "; ".join(["turn it off"] * 50)  # every clause asks for the previous request
    tasks = dec.decompose(query, history).tasks
    assert tasks == ("turn radio off",)  # the subject of "play the radio"
    long_splits = [n for n in seen if n > len(query)]
    # one split of the turn: its last max_chars characters, from the first clause the clip left whole
    assert len(long_splits) == 1 and dec.max_chars - len(CLAUSE) < long_splits[0] <= dec.max_chars


def test_follow_ups_read_each_earlier_turn_once_and_at_most_follow_depth_back(monkeypatch):
    """A retry or status check decomposes the previous user turn, whose own follow-ups decompose the
    one before, FOLLOW_DEPTH turns back: each turn split once per depth, whatever the clause count."""
    seen = _recording_split(monkeypatch)
    dec = RuleDecomposer()
    follow = "try again, and is it done? "
    history = []
    for i in range(32):
        history += [Turn("user", follow * 400 + f"set an alarm for {i}"), Turn("assistant", "Error.")]
    query = "; ".join(["try again"] * 50 + ["is it done?"] * 50)
    tasks = dec.decompose(query, history).tasks
    # the previous turn's requests, its retries resolved FOLLOW_DEPTH turns back (then the last request)
    assert tasks == ("set an alarm for 29", "set an alarm for 30", "set an alarm for 31")
    assert rules.FOLLOW_DEPTH == 2 and len([n for n in seen if n > len(query)]) <= rules.FOLLOW_DEPTH + 1
    assert all(n <= dec.max_chars for n in seen if n > len(query))


def test_the_character_bound_is_checked():
    for bad in (0, -1, 2.5, "4000", True):
        with pytest.raises(InputError, match="max_chars"):
            RuleDecomposer(max_chars=bad)


def _strip_fillers_before(clause: str) -> str:
    """The filler stripping as it was (every filler and sequence word tried in turn)."""
    c = clause.strip(" ,;:.-")
    changed = True
    while changed and c:
        changed = False
        low = c.lower()
        for f in rules._FILLERS:
            if low == f or low.startswith(f + " ") or low.startswith(f + ","):
                c, changed = c[len(f):].strip(" ,;:.-"), True
                break
        else:
            for f in rules._SEQUENCE_WORDS:
                if low.rstrip(".!") == f or low.startswith(f + ","):
                    c, changed = c[len(f):].strip(" ,;:.-"), True
                    break
    return c


_PIECES = [*rules._FILLERS, *rules._SEQUENCE_WORDS, "Oh", "AND", "ohio", "thenceforth", "also,", "first.",
           "In addition!", "play jazz", " ", ",", ".", "-", "é", "set an alarm", "İ"]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_PIECES), max_size=8).map(" ".join))
def test_filler_stripping_is_what_it_was(text):
    assert rules._strip_fillers(text) == _strip_fillers_before(text)


# -- the embedder's tokenization and rows ------------------------------------------------------
def _tokenizers():
    """The shipped embedder's tokenizer as TextTokenizer and as a plain ``tokenizers`` one."""
    if not (MODELS / "tokenizer.json").is_file():
        pytest.skip("this checkout has no shipped embedder tokenizer")
    return _build_tokenizers()


@lru_cache(maxsize=1)
def _build_tokenizers():
    from tokenizers import Tokenizer

    ref = Tokenizer.from_file(str(MODELS / "tokenizer.json"))
    ref.enable_truncation(max_length=64)
    ref.no_padding()
    return TextTokenizer(MODELS / "tokenizer.json", max_length=64), ref


_CHARS = list("abc xyz,.!?;'\"-\t\n\r ") + ["é", "\u0301", "你", "好", "\x1c", "\x0b", "\u00a0", "İ", "ς",
                                               "[MASK]", " [SEP] ", "\ufffd", "<\u0338", "a" * 120, "believable", "﹗"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_CHARS), min_size=0, max_size=1_200).map("".join))
def test_long_texts_get_the_tokens_of_the_whole_text(text):
    tok, ref = _tokenizers()
    texts = [text, "set an alarm", text[::-1]]
    got, want = tok.encodings(texts), ref.encode_batch(texts)
    for g, w in zip(got, want):
        assert (g.ids, g.type_ids, g.attention_mask) == (w.ids, w.type_ids, w.attention_mask)


class _Recording:
    """A ``tokenizers`` tokenizer that records the length of every text it is given."""

    def __init__(self, tok) -> None:
        self.tok, self.lengths = tok, []

    def encode_batch(self, texts):
        self.lengths += [len(t) for t in texts]
        return self.tok.encode_batch(texts)

    def encode(self, text):
        self.lengths.append(len(text))
        return self.tok.encode(text)


def test_a_16000_character_text_is_tokenized_from_its_start_and_falls_back_when_it_must():
    _, ref = _tokenizers()
    tok = TextTokenizer(MODELS / "tokenizer.json", max_length=64)
    tok._tok = rec = _Recording(tok._tok)
    words = (CLAUSE * 300)[:16_000]
    assert [e.ids for e in tok.encodings([words])] == [e.ids for e in ref.encode_batch([words])]
    assert max(rec.lengths) == tok.clip_chars
    rec.lengths.clear()
    one_word = "a" * 16_000  # one [UNK]: the prefix holds too few tokens to prove anything
    assert [e.ids for e in tok.encodings([one_word])] == [e.ids for e in ref.encode_batch([one_word])]
    assert rec.lengths == [tok.clip_chars, 16_000]


class _RowModel:
    """An encoder whose hidden state at each token is that token's id; records its calls' rows."""

    path = Path("rows.onnx")
    kind = "onnx"
    max_batch = None
    max_seq_len = None

    def __init__(self) -> None:
        self.rows: list[int] = []

    def run(self, feeds, release=False):
        ids = feeds["input_ids"]
        self.rows.append(len(ids))
        return np.repeat(ids[..., None].astype(np.float32), 4, axis=2)


def test_texts_with_the_same_tokens_run_once_and_keep_their_rows():
    tok, _ = _tokenizers()
    long = CLAUSE * 20
    texts = [long, "Play Jazz", long + " | earlier turn", "play jazz", "call mom"]
    batch, of = distinct_rows(tok.encode(texts))
    assert of.tolist() == [0, 1, 0, 1, 2] and len(batch["input_ids"]) == 3
    model = _RowModel()
    got = TextEmbedder(model, tok, dim=4).embed(texts)
    assert sum(model.rows) == 3
    for i, text in enumerate(texts):
        assert np.array_equal(got[i], TextEmbedder(_RowModel(), tok, dim=4).embed([text])[0])


def test_the_shipped_embedder_gives_a_repeated_row_the_vector_it_gets_twice():
    model = MODELS / "model-int8.onnx"
    if not model.is_file():
        pytest.skip("this checkout has no shipped embedder")
    emb = TextEmbedder.from_path(model, MODELS / "tokenizer.json", max_length=64)
    long = CLAUSE * 20
    folded = long + " | and turn it off"
    got = emb.embed([long, "play some jazz", folded])
    assert np.array_equal(got[0], got[2])
    batch = emb.tokenizer.encode([long, folded])  # both rows in one call, as before the dedup
    twice = next(hidden for _, _, hidden in grouped_runs(emb.model, batch, emb.max_padding))
    assert np.allclose(mean_pool_normalize(twice, batch["attention_mask"])[0], got[0], atol=1e-6)


# -- the lexical scores ------------------------------------------------------------------------
def _scores_before(index: LexicalIndex, text: str) -> np.ndarray:
    """BM25 as it was computed (one slice per query token, concatenated)."""
    tids = [index._term_id[t] for t in lexical_tokens(text, index.stem) if t in index._term_id]
    if not tids:
        return np.zeros(len(index), dtype=np.float32)
    ip = index._indptr
    rows = np.concatenate([index._docs[ip[t]:ip[t + 1]] for t in tids])
    w = np.concatenate([index._weights[ip[t]:ip[t + 1]] for t in tids])
    return np.bincount(rows, weights=w, minlength=len(index)).astype(np.float32)


_TOOLS = ["set_alarm: set an alarm for a time", "play_music: play songs, albums and jazz radio",
          "smart_lights: turn the living room lights on or off", "send_text: text a contact a message",
          "weather: the forecast for a city"]
_WORDS = ["alarm", "alarms", "jazz", "lights", "living", "room", "text", "xyzzy", "the", "for", "city", "7"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_WORDS), max_size=400).map(" ".join))
def test_lexical_scores_are_what_they_were(text):
    index = LexicalIndex.build([t.split(":")[0] for t in _TOOLS], _TOOLS)
    got = index.scores(text)
    assert got.dtype == np.float32 and np.array_equal(got, _scores_before(index, text))

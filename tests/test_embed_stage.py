"""The embed task: rows of very different length go in separate calls, and every vector lands on
its own text's row."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magicselector.stages.embed import TextEmbedder, TextTokenizer, length_groups

MODELS = Path(__file__).resolve().parents[1] / "runtime" / "models" / "embedder"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=128), min_size=1, max_size=40),
       st.sampled_from([0.0, 0.25, 0.5]))
def test_length_groups_cover_every_row_once_within_the_padding_bound(lengths, max_padding):
    lengths = np.asarray(lengths)
    groups = length_groups(lengths, max_padding)
    rows = np.concatenate(groups)
    assert sorted(rows.tolist()) == list(range(len(lengths)))
    widths = [int(lengths[g].max()) for g in groups]
    for g, width in zip(groups, widths):
        assert (lengths[g] >= (1.0 - max_padding) * width).all()
        if max_padding == 0.0:
            assert (lengths[g] == width).all()
    assert widths == sorted(set(widths), reverse=True)  # longest first, one group per width at most


class RecordingModel:
    """An encoder whose hidden state at each token is that token's id: the pooled vector of a row
    tells which text it came from."""

    path = Path("recording.onnx")
    kind = "onnx"
    max_batch = None
    max_seq_len = None

    def __init__(self, fixed_shapes: bool = False) -> None:
        self.calls: list[tuple[int, int]] = []
        if fixed_shapes:
            self.fixed_shapes = True

    def run(self, feeds, release=False):
        ids = feeds["input_ids"]
        self.calls.append(ids.shape)
        return np.repeat(ids[..., None].astype(np.float32), 4, axis=2)


def _tokenizer():
    return TextTokenizer(MODELS / "tokenizer.json", max_length=64)


def test_uneven_texts_run_in_length_groups_and_keep_their_rows():
    long = "and in Porto? what's the weather in Lisbon this weekend? Sunny, highs of 24."
    texts = ["call my mom", long, "turn on bluetooth", long + " and tomorrow"]  # 5, 22, 6, 24 tokens
    tok = _tokenizer()
    model = RecordingModel()
    got = TextEmbedder(model, tok, dim=4).embed(texts)
    widths = tok.encode(texts)["attention_mask"].sum(axis=1)
    assert sorted(w for _, w in model.calls) == sorted({int(widths[[1, 3]].max()), int(widths[[0, 2]].max())})
    for i, text in enumerate(texts):  # each row pools its own tokens, wherever its group ran
        alone = TextEmbedder(RecordingModel(), tok, dim=4).embed([text])[0]
        assert np.allclose(got[i], alone)
    fixed = RecordingModel(fixed_shapes=True)
    assert np.allclose(TextEmbedder(fixed, tok, dim=4).embed(texts), got) and len(fixed.calls) == 1


def test_shipped_embedder_vectors_do_not_depend_on_the_other_texts():
    """The INT8 model with real texts: a short text batched with a long one gets the vector it gets
    alone (its own call; dynamic INT8 scales follow the call's rows)."""
    model = MODELS / "model-int8.onnx"
    if not model.is_file():
        pytest.skip("this checkout has no shipped embedder")
    emb = TextEmbedder.from_path(model, MODELS / "tokenizer.json", max_length=64)
    short = "set a timer for 12 minutes"
    long = "book an uber to the airport and email my boarding pass to Anna | order a large pepperoni pizza"
    both = emb.embed([long, short])
    assert np.array_equal(both[1], emb.embed([short])[0])
    assert np.array_equal(both[0], emb.embed([long])[0])
    assert float(both[0] @ both[1]) < 0.9

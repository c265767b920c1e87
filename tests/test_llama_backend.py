"""The llama.cpp backend without a model: the one extra-buffers setting, the error when llama-cpp-python is
missing, and GGUF checks."""
from __future__ import annotations

import sys
import warnings

import pytest

from magicselector.backends import llama as B
from magicselector.decompose import build_decomposer
from magicselector.errors import MagicSelectorError, ModelError


@pytest.fixture()
def clean_env(monkeypatch):
    monkeypatch.delenv(B.EXTRA_BUFFERS_ENV, raising=False)
    monkeypatch.delenv("MAGICSELECTOR_LLAMA_EXTRA_BUFTS", raising=False)
    return monkeypatch


def test_extra_buffers_follow_the_cpu_unless_the_variable_says(clean_env):
    assert B.default_extra_buffers() is (not B._amx_listed())
    for value, expected in (("1", True), ("0", False), ("false", False), ("yes", True)):
        clean_env.setenv(B.EXTRA_BUFFERS_ENV, value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the current name warns about nothing
            assert B.default_extra_buffers() is expected


def test_without_llama_cpp_the_llm_modes_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # what an install without the llm extra sees
    for kind in ("llm", "auto"):
        with pytest.raises(B.LlamaCppMissingError, match=r"pip install 'magicselector\[llm\]'") as err:
            build_decomposer(kind)
        assert isinstance(err.value, MagicSelectorError)
    with pytest.raises(B.LlamaCppMissingError, match=r"decompose=\"llm\"/\"auto\""):
        B.import_llama_cpp()
    # the rules and the passthrough need no model
    assert build_decomposer("rules").decompose("call mom and play jazz", []).tasks == ("call mom", "play jazz")
    assert build_decomposer("none").decompose("call mom", []).tasks == ("call mom",)


def test_a_file_that_is_not_gguf_is_refused_before_llama_cpp_sees_it(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        B.load_llama(tmp_path / "missing.gguf")
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"nope")
    with pytest.raises(ModelError, match="not a GGUF"):
        B.load_llama(bad)

"""files.pinned_file: a model is checked and opened from the same file, so a swap after the check is never read."""
from __future__ import annotations

import hashlib
import os

import pytest

from magicselector.errors import ModelError
from magicselector.files import pinned_file


def test_the_checked_bytes_are_what_is_read_even_after_the_path_is_replaced(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + b"verified" * 1000)
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    with pinned_file(model, digest, ModelError, "decomposer model") as same:
        swapped = tmp_path / "evil.gguf"
        swapped.write_bytes(b"GGUF" + b"unsigned" * 1000)
        os.replace(swapped, model)  # a rebuild or an attacker replaces the file after the check
        with open(same, "rb") as f:
            assert f.read() == b"GGUF" + b"verified" * 1000
    assert model.read_bytes().startswith(b"GGUFunsigned")


def test_a_file_altered_before_the_load_is_refused_by_name(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(100))
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    model.write_bytes(b"GGUF" + bytes(99) + b"x")
    with pytest.raises(ModelError, match=r"model.gguf: sha256 .* altered or replaced"):
        with pinned_file(model, digest, ModelError, "decomposer model"):
            pass
    with pytest.raises(ModelError, match="missing.gguf: cannot open the decomposer model"):
        with pinned_file(tmp_path / "missing.gguf", digest, ModelError, "decomposer model"):
            pass

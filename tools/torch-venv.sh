#!/usr/bin/env bash
# The cached venv with upstream torch (torchrun, gloo, DCP), Ray and TensorBoard's writer that
# tests/upstream/ runs against. PyPI ships only the CUDA build (about 2.5 GB to download, 5 GB
# installed); it runs on CPU with gloo. Prints the venv's folder on its last line.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
exec bash "$top/tools/locked-venv.sh" torch "$top/tests/upstream/requirements.lock" \
  'import torch.distributed as d; assert d.is_gloo_available()'

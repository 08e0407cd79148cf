#!/usr/bin/env bash
# The cached venv with upstream torch (torchrun, gloo, DCP) that tests/upstream/ runs against.
# PyPI ships only the CUDA build (about 2.5 GB to download, 5 GB installed); it runs on CPU
# with gloo. Keyed by the lock file's hash like the Go builds, so a pin change rebuilds it.
# Prints the venv's folder on its last line.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${RLJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rljob-operator}
lock="$top/tests/upstream/requirements.lock"
key=$(sha256sum "$lock" | cut -c1-16)
venv="$cache_root/torch-$key"
uv="$cache_root/uv-0.13.8/bin/uv"
python=${PYTHON:-python3}

if [ ! -f "$venv/.complete" ]; then
  echo "torch-venv: installing torch into $venv (about 2.5 GB download)" >&2
  rm -rf "$venv"
  "$uv" venv -q --python "$python" "$venv" >&2
  VIRTUAL_ENV="$venv" "$uv" pip sync -q --require-hashes "$lock" >&2
  "$venv/bin/python" -c 'import torch.distributed as d; assert d.is_gloo_available()' >&2
  touch "$venv/.complete"
fi
echo "$venv"

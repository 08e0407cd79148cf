#!/usr/bin/env bash
# Sets up a fresh machine for the demo and the tests: uv (from PyPI, in a cache venv), the
# project venv in .venv from uv.lock, Prometheus (Debian's package), the upstream binaries
# built from Go modules (tools/build.sh), upstream torch for tests/upstream/
# (tools/torch-venv.sh) and the real vLLM for tests/upstream/vllm/ (tools/vllm-venv.sh), all cached.
# Idempotent: a second run does almost nothing. Prints the bin folder on its last line.
# `--demo`: what the demo runs, without the torch and Ray venv (5.6 GB) and the vLLM venv (8.9 GB)
# only tests/upstream/ uses.
set -euo pipefail
for_tests=1
[ "${1:-}" = "--demo" ] && for_tests=0
top=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${RLJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rljob-operator}
uv_version=0.13.8

python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "bootstrap: Python >= 3.11 is required ($python is $("$python" --version 2>&1))" >&2; exit 1; }
command -v go >/dev/null || { echo "bootstrap: Go >= 1.26 is required (go not on PATH)" >&2; exit 1; }

uv="$cache_root/uv-$uv_version/bin/uv"
if [ ! -x "$uv" ]; then
  echo "bootstrap: installing uv $uv_version" >&2
  "$python" -m venv "$cache_root/uv-$uv_version"
  "$cache_root/uv-$uv_version/bin/pip" install -q "uv==$uv_version"
fi
cd "$top"
UV_PYTHON="$python" "$uv" sync -q --frozen --extra dev --extra test >&2
bash "$top/tools/prometheus.sh" >&2   # Debian's prometheus + promtool, unpacked, no service
# torch and vLLM for tests/upstream/ download while the Go builds compile (one after the other:
# both are mostly CUDA wheels, and the link is the limit).
venvs_pid=""
if [ "$for_tests" = 1 ]; then
  (bash "$top/tools/torch-venv.sh" && bash "$top/tools/vllm-venv.sh") >"$cache_root/upstream-venvs.log" 2>&1 &
  venvs_pid=$!
fi
bin_dir=$(bash "$top/tools/build.sh" | tail -n1)
if [ -n "$venvs_pid" ]; then
  wait "$venvs_pid" || { cat "$cache_root/upstream-venvs.log" >&2; echo "bootstrap: upstream venvs failed" >&2; exit 1; }
fi
echo "$bin_dir"

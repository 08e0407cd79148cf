#!/usr/bin/env bash
# Runs every benchmark and refreshes bench/RESULTS.md: bash bench/run.sh [--smoke] [...]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
exec "$repo/.venv/bin/python" -m bench "$@"

#!/usr/bin/env bash
# The demo: sets up what is missing, then runs `rljob dev demo` (local control plane with
# simulated GPU nodes, the operator, and examples/rljob-demo.yaml). Ctrl-C stops all of it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export RLJOB_BIN_DIR=${RLJOB_BIN_DIR:-$(bash tools/bootstrap.sh --demo | tail -n1)}
exec .venv/bin/rljob dev demo "$@"

#!/usr/bin/env bash
# The test command: sets up what is missing (tools/bootstrap.sh), then lint, types and every
# test (unit and integration on a local control plane it starts), each phase timed and the 25
# slowest tests of each pytest tier printed. Extra args go to one pytest run instead of the tiers.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export RLJOB_BIN_DIR=${RLJOB_BIN_DIR:-$(bash tools/bootstrap.sh | tail -n1)}
py=.venv/bin/python

timed() { # timed NAME COMMAND...: runs a phase and prints its wall time; returns its status
  local name=$1 start=$SECONDS rc=0
  shift
  echo "== $name"
  "$@" || rc=$?
  echo "== $name took $(( SECONDS - start ))s (status $rc)"
  return $rc
}

tests() { # tests ARGS...: pytest, where collecting nothing is a failure too
  local rc=0
  $py -m pytest -p no:cacheprovider -ra --durations=25 "$@" || rc=$?
  [ $rc -eq 5 ] && { echo "pytest collected no tests: that is a failure here" >&2; return 1; }
  return $rc
}

lint() { # chained: inside `timed` a failing step would not stop the function by itself
  $py -m ruff check operator tests bench &&
    $py -m ruff format --check operator tests bench &&
    $py -m mypy && $py -m mypy bench && $py -m mypy -p tests &&
    .venv/bin/lint-imports --no-logo
}

smoke() {
  $py -m bench --smoke --output "$(mktemp --suffix=.md)" >/dev/null
}

timed "lint, types and import contracts" lint
[ $# -gt 0 ] && { timed "pytest $*" tests "$@"; exit; }

# The tiers: the CPU-bound unit and model tests on every core; the tests against upstream code
# and the control plane one at a time. Every tier runs, so one run reports every failure.
failed=()
timed "unit and model tests" tests -n auto tests/unit || failed+=(unit)
timed "upstream tests" tests tests/upstream || failed+=(upstream)
timed "integration tests" tests tests/integration || failed+=(integration)
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed tiers: ${failed[*]}" >&2
  exit 1
fi
# The whole suite passed: prove the benchmark command works (figures only, bench/RESULTS.md kept).
timed "bench --smoke" smoke

#!/usr/bin/env bash
# The test command: sets up what is missing (tools/bootstrap.sh), then lint, types and every
# test (unit and integration on a local control plane it starts), each phase timed and the 25
# slowest tests of each pytest tier printed. `unit`, `upstream` or `integration` runs one tier;
# other arguments go to one pytest run instead of the tiers.
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
    $py -m mypy -p rljob -p bench -p tests &&
    .venv/bin/lint-imports --no-logo
}

# The integration tests mostly wait (for detection windows, the operator, kwok), so they run in
# two lanes at once: most on RLJOB_TEST_WORKERS xdist workers sharing one plane, each worker's
# operator watching only its own namespaces; one at a time, the cluster_wide ones, which change
# what every namespace shares, on a plane of their own, and the own_plane ones, which start
# theirs. Each lane's lines carry its name.
workers=${RLJOB_TEST_WORKERS:-3}
prefixed() { # prefixed TAG PHASE COMMAND...: a timed phase whose output lines start [TAG]
  local tag=$1
  shift
  timed "$@" 2>&1 | sed -u "s/^/[$tag] /"
}

lane() { # lane NAME PYTEST-ARGS...: one lane, its output prefixed, its time and status printed
  local name=$1
  shift
  prefixed "$name" "integration lane $name" tests "$@"
}

integration() {
  local rc=0 shared alone
  lane shared -n "$workers" --dist loadgroup -m "not (cluster_wide or own_plane or goodput_bench)" \
    tests/integration &
  shared=$!
  # Never on a plane named by RLJOB_TEST_RUN_DIR: the shared lane's workers may be using it.
  (unset RLJOB_TEST_RUN_DIR; lane alone -m "(cluster_wide or own_plane) and not goodput_bench" tests/integration) &
  alone=$!
  wait $alone || rc=1
  wait $shared || rc=1
  return $rc
}

smoke() { # its progress lines (figures per size, per-job slopes), not the report it renders
  $py -m bench --smoke --output "$(mktemp --suffix=.md)" | sed -un '/^\[[0-9:]*\] /p'
}

unit() { tests -n auto tests/unit; }
goodput() { tests -m goodput_bench tests/integration; }
upstream() { tests tests/upstream; }

# A tier's name runs that tier only (after lint); other arguments replace the tiers with one
# pytest run; none runs every tier and the bench smoke.
timed "lint, types and import contracts" lint
case "${1:-}" in
  unit | upstream | integration | goodput) timed "$1 tests" "$1"; exit ;;
  "") ;;
  *) timed "pytest $*" tests "$@"; exit ;;
esac

# The tiers: the CPU-bound unit and model tests on every core, then the integration tests in
# their two lanes. Beside them, one after the other, the tests against upstream code (they mostly
# wait: torchrun's and Ray's start-up, a watchdog's timeout) and the bench smoke, which proves
# the benchmark command works on a plane of its own (figures only, bench/RESULTS.md kept): it
# starts when the upstream tests end, in the unit tier's last minutes, and ends early in the
# integration tier, off the path of its longest lane; then the goodput smoke (issue 33: three
# arms on one failure trace, a bed of its own, about 10 minutes), which fits in what is left of
# the integration tier. Every tier runs, so one run reports every failure.
failed=()
beside=$(mktemp -d)
{
  prefixed upstream "upstream tests" upstream || touch "$beside/upstream"
  prefixed bench "bench --smoke" smoke || touch "$beside/bench-smoke"
  prefixed goodput "goodput smoke" goodput || touch "$beside/goodput-smoke"
} &
beside_pid=$!
timed "unit and model tests" unit || failed+=(unit)
timed "integration tests" integration || failed+=(integration)
wait $beside_pid
for tier in upstream bench-smoke goodput-smoke; do
  if [ -e "$beside/$tier" ]; then failed+=("$tier"); fi
done
rm -rf "$beside"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed tiers: ${failed[*]}" >&2
  exit 1
fi

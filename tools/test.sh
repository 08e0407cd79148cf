#!/usr/bin/env bash
# The test command: sets up what is missing (tools/bootstrap.sh), then lint, types and every
# test (unit and integration on a local control plane it starts). Extra args go to pytest.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export RLJOB_BIN_DIR=${RLJOB_BIN_DIR:-$(bash tools/bootstrap.sh | tail -n1)}
py=.venv/bin/python
echo "== ruff"; $py -m ruff check operator tests bench
echo "== ruff format"; $py -m ruff format --check operator tests bench
echo "== mypy"; $py -m mypy; $py -m mypy bench; $py -m mypy -p tests
echo "== import contract"; .venv/bin/lint-imports --no-logo
echo "== pytest"
set +e
$py -m pytest -p no:cacheprovider -ra "$@"
rc=$?
set -e
[ $rc -eq 5 ] && { echo "pytest collected no tests: that is a failure here" >&2; exit 1; }
[ $rc -ne 0 ] || [ $# -gt 0 ] && exit $rc
# The whole suite passed: prove the benchmark command works (figures only, bench/RESULTS.md kept).
echo "== bench --smoke"; $py -m bench --smoke --output "$(mktemp --suffix=.md)" >/dev/null

#!/usr/bin/env bash
# The test command: sets up what is missing (tools/bootstrap.sh), then lint, types and every
# test (unit and integration on a local control plane it starts). Extra args go to pytest.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export RLJOB_BIN_DIR=${RLJOB_BIN_DIR:-$(bash tools/bootstrap.sh | tail -n1)}
py=.venv/bin/python
echo "== ruff"; $py -m ruff check operator tests
echo "== ruff format"; $py -m ruff format --check operator tests
echo "== mypy"; $py -m mypy
echo "== pytest"
set +e
$py -m pytest -p no:cacheprovider -ra "$@"
rc=$?
set -e
[ $rc -eq 5 ] && { echo "pytest collected no tests: that is a failure here" >&2; exit 1; }
exit $rc

#!/usr/bin/env bash
# A cached venv for tests/upstream/ from one lock: `locked-venv.sh NAME LOCK CHECK` makes
# <cache>/NAME-<the lock's hash> with exactly the lock's pins (hashes required), runs the python
# statement CHECK in it once, and prints the venv's folder on its last line. A pin change makes a
# new venv; tools/torch-venv.sh and tools/vllm-venv.sh name theirs.
set -euo pipefail
name=$1 lock=$2 check=$3
cache_root=${RLJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rljob-operator}
key=$(sha256sum "$lock" | cut -c1-16)
venv="$cache_root/$name-$key"
uv="$cache_root/uv-0.13.8/bin/uv"
python=${PYTHON:-python3}

if [ ! -f "$venv/.complete" ]; then
  echo "$name-venv: installing $lock into $venv" >&2
  rm -rf "$venv"
  "$uv" venv -q --python "$python" "$venv" >&2
  VIRTUAL_ENV="$venv" "$uv" pip sync -q --require-hashes "$lock" >&2
  "$venv/bin/python" -c "$check" >&2
  touch "$venv/.complete"
fi
echo "$venv"

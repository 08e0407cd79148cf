#!/usr/bin/env bash
# Makes a real Prometheus server and promtool available for the test bed without installing or
# starting any service: Debian's `prometheus` package is downloaded with `apt-get download` and
# unpacked with `dpkg-deb -x` into a cache folder outside the repo,
#   ${RLJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rljob-operator}/prometheus-<debian version>/
# Idempotent: a complete folder for the candidate version (or, when apt knows no candidate, any
# complete folder) is reused and nothing is downloaded. Prints the folder holding `prometheus`
# and `promtool` on its last line.
set -euo pipefail
cache_root=${RLJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rljob-operator}  # as tools/build.sh

candidate() {
  apt-cache policy prometheus 2>/dev/null | sed -n 's/^[[:space:]]*Candidate:[[:space:]]*//p' \
    | grep -v '^(none)$' | head -n1 || true
}

newest_complete() {
  local dir
  for dir in $(ls -d "$cache_root"/prometheus-*/ 2>/dev/null | sort -V -r); do
    if [ -f "$dir/.complete" ]; then
      echo "${dir%/}"
      return 0
    fi
  done
  return 1
}

version=$(candidate)
if [ -z "$version" ]; then
  if found=$(newest_complete); then
    echo "prometheus: cache hit ${found##*/} (apt knows no candidate)" >&2
    echo "$found/usr/bin"
    exit 0
  fi
  echo "prometheus: no apt candidate, running apt-get update" >&2
  apt-get update -qq >&2
  version=$(candidate)
  [ -n "$version" ] || { echo "prometheus: apt has no prometheus package" >&2; exit 1; }
fi

# Debian versions may hold ':' (epoch); keep the folder name plain.
folder="$cache_root/prometheus-${version//:/_}"
if [ -f "$folder/.complete" ]; then
  echo "prometheus: cache hit ${folder##*/}" >&2
  echo "$folder/usr/bin"
  exit 0
fi

echo "prometheus: unpacking prometheus $version into $folder" >&2
mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/.prometheus-download.XXXXXX")
trap 'rm -rf "$work"' EXIT
# apt-get download writes into the current directory; as root it warns that the sandbox user
# cannot access it, which is harmless here.
if ! (cd "$work" && apt-get download -qq "prometheus=$version" >&2); then
  echo "prometheus: download failed, refreshing package lists and retrying" >&2
  apt-get update -qq >&2
  (cd "$work" && apt-get download -qq "prometheus=$version" >&2)
fi
deb=$(ls "$work"/prometheus_*.deb)
dpkg-deb -x "$deb" "$work/root"
for tool in prometheus promtool; do
  [ -x "$work/root/usr/bin/$tool" ] || { echo "prometheus: $deb lacks usr/bin/$tool" >&2; exit 1; }
done
"$work/root/usr/bin/prometheus" --version >&2
rm -rf "$folder"
mv "$work/root" "$folder"
touch "$folder/.complete"
echo "$folder/usr/bin"

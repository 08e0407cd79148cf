#!/usr/bin/env bash
# Builds the test bed's upstream binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) from our Go wrapper modules into a cache folder outside the repo.
# The cache key hashes every wrapper's go.mod/go.sum, this script and `go version`: a hit builds
# nothing, a changed key builds into a fresh folder. Prints the bin folder on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${RLJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rljob-operator}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

key=$( { cat "$here"/kube/go.mod "$here"/kube/go.sum "$here"/kwok/go.mod "$here"/kwok/go.sum \
          "$here"/build.sh; go version; } | sha256sum | cut -c1-16)
bin="$cache_root/bin/$key"
if [ -f "$bin/.complete" ]; then
  echo "tools: cache hit $key" >&2
  echo "$bin"
  exit 0
fi
echo "tools: cache miss $key, building into $bin" >&2
mkdir -p "$bin.partial"

kube_version=$(sed -n 's#^[[:space:]]*k8s\.io/kubernetes \(v[0-9.]*\).*#\1#p' "$here/kube/go.mod" | head -n1)
minor=${kube_version#v1.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

start=$(date +%s)
(cd "$here/kube" && go build -trimpath -ldflags "$ld" -o "$bin.partial/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
(cd "$here/kube" && go build -trimpath -ldflags "-s -w" -o "$bin.partial/etcd" go.etcd.io/etcd/server/v3)
(cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$bin.partial/kwok" sigs.k8s.io/kwok/cmd/kwok)
echo "tools: built in $(( $(date +%s) - start ))s" >&2

rm -rf "$bin"
mv "$bin.partial" "$bin"
touch "$bin/.complete"
echo "$bin"

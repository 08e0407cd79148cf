#!/usr/bin/env bash
# Regenerates tools/kube/go.mod from the chosen k8s tag's own go.mod: one replace per staging
# module (k8s.io/X => k8s.io/X v0.Y.Z) plus the etcd server at the version k8s's etcd client pins.
# Run by hand when bumping KUBE_VERSION; the build never runs it.
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-1.36.3}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
rm -f go.mod go.sum
go mod init rljob.io/tools/kube >/dev/null 2>&1
upstream=$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$upstream")
[ -n "$staging" ] || { echo "no staging replaces found in $upstream" >&2; exit 1; }
for m in $staging; do
  go mod edit -replace="${m}=${m}@v0.${KUBE_VERSION#1.}"
done
etcd=$(sed -n 's#^[[:space:]]*go\.etcd\.io/etcd/client/v3 \(v3\.[0-9.]*\).*#\1#p' "$upstream" | head -n1)
[ -n "$etcd" ] || { echo "no etcd client version in $upstream" >&2; exit 1; }
go mod edit -require="k8s.io/kubernetes@v${KUBE_VERSION}" -require="go.etcd.io/etcd/server/v3@${etcd}"
go get -tool k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3
go mod tidy
echo "tools/kube: k8s v${KUBE_VERSION}, etcd ${etcd}, $(echo "$staging" | wc -w) staging modules"

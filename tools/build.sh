#!/usr/bin/env bash
# Builds the test bed's upstream binaries from our Go wrapper modules (one module per tool) into
# a cache folder outside the repo, and prints a bin folder holding all of them:
#   kube: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#   kwok: kwok
#   s3:   versitygw (the S3-compatible server)
#   helm: helm (chart lint, template and install tests)
#   kueue: kueue (Kueue's controller manager) and kueue-config/ (its CRDs and webhook manifests,
#          copied from the module: the bed installs them)
#   jobset: jobset (JobSet's controller manager) and jobset-config/ (its CRD, and its webhook
#          manifests with the kustomize patches that scope its pod webhooks, from the module)
# Each tool has its own cache key (its go.mod/go.sum, this script and `go version`): a hit
# builds nothing, a changed key rebuilds only that tool. Concurrent runs wait on a lock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${RLJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rljob-operator}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "$cache_root/tools" "$cache_root/bin"
exec 9>"$cache_root/build.lock"
flock 9

go_version=$(go version)
tool_key() { # tool_key TOOL: the cache key of one wrapper module and how it is built (its
  # build function and the shared Go settings), so editing one tool's build rebuilds that tool
  { cat "$here/$1/go.mod" "$here/$1/go.sum"; declare -f "build_$1"
    echo "$GOTOOLCHAIN $CGO_ENABLED $GOFLAGS $go_version"; } | sha256sum | cut -c1-16
}

build_kube() { # build_kube OUT
  local version minor ld p
  version=$(sed -n 's#^[[:space:]]*k8s\.io/kubernetes \(v[0-9.]*\).*#\1#p' "$here/kube/go.mod" | head -n1)
  minor=${version#v1.}; minor=${minor%%.*}
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/kube" && go build -trimpath -ldflags "$ld" -o "$1/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  (cd "$here/kube" && go build -trimpath -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$1/kwok" sigs.k8s.io/kwok/cmd/kwok)
}

build_s3() {
  local vgw=github.com/versity/versitygw version
  version=$(sed -n "s#^[[:space:]]*$vgw \(v[0-9.]*\).*#\1#p" "$here/s3/go.mod" | head -n1)
  (cd "$here/s3" && go build -trimpath -ldflags "-s -w -X main.Version=$version" \
    -o "$1/versitygw" "$vgw/cmd/versitygw")
}

build_helm() { # helm with its version and the Kubernetes minor of its client-go
  local version minor ld p
  version=$(sed -n 's#^[[:space:]]*helm\.sh/helm/v3 \(v[0-9.]*\).*#\1#p' "$here/helm/go.mod" | head -n1)
  minor=$(sed -n 's#^[[:space:]]*k8s\.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$here/helm/go.mod" | head -n1)
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld="$ld -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
  done
  (cd "$here/helm" && go build -trimpath -ldflags "$ld" -o "$1/helm" helm.sh/helm/v3/cmd/helm)
}

build_kueue() { # kueue's manager, and the manifests the bed installs from the same module
  local dir
  (cd "$here/kueue" && go build -trimpath -ldflags "-s -w" -o "$1/kueue" sigs.k8s.io/kueue/cmd/kueue)
  dir=$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  mkdir -p "$1/kueue-config/crds"
  cp "$dir"/config/components/crd/bases/*.yaml "$1/kueue-config/crds/"
  cp "$dir/config/components/webhook/manifests.yaml" "$1/kueue-config/webhooks.yaml"
  chmod -R u+w "$1/kueue-config"
}

build_jobset() { # jobset's manager (the module's root package) and the manifests the bed installs
  local js=sigs.k8s.io/jobset version info commit dir
  version=$(sed -n "s#^[[:space:]]*$js \(v[0-9.]*\).*#\1#p" "$here/jobset/go.mod" | head -n1)
  # the tag's commit as the module proxy recorded it (.info's Origin), for its version and user
  # agent; left at upstream's placeholder when the proxy gave no Origin
  info=$(cd "$here/jobset" && go mod download -json "$js" \
    | sed -n 's/^[[:space:]]*"Info": "\(.*\)",$/\1/p')
  commit=$(sed -n 's/.*"Hash":"\([0-9a-f]\{40\}\)".*/\1/p' "$info")
  (cd "$here/jobset" && go build -trimpath -ldflags "-s -w -X $js/pkg/version.GitVersion=$version \
    ${commit:+-X $js/pkg/version.GitCommit=$commit}" -o "$1/jobset" "$js")
  dir=$(cd "$here/jobset" && go list -m -f '{{.Dir}}' "$js")
  mkdir -p "$1/jobset-config/crds" "$1/jobset-config/webhook/patches"
  cp "$dir"/config/components/crd/bases/*.yaml "$1/jobset-config/crds/"
  cp "$dir"/config/components/webhook/{manifests,kustomization}.yaml "$1/jobset-config/webhook/"
  cp "$dir"/config/components/webhook/patches/*.yaml "$1/jobset-config/webhook/patches/"
  chmod -R u+w "$1/jobset-config"
}

progress() { # progress TOOL PID START: a line a minute while a build runs; its exit status
  local tool=$1 pid=$2 start=$3 ticks=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    ticks=$(( ticks + 1 ))
    if [ $(( ticks % 12 )) -eq 0 ] && kill -0 "$pid" 2>/dev/null; then
      echo "tools: $tool still building, $(( ($(date +%s) - start) / 60 )) min so far" >&2
    fi
  done
  wait "$pid"
}

build_one() { # build_one TOOL: builds one tool into its cache folder, unless it is there
  local tool=$1 key out partial start
  key=$(tool_key "$tool")
  out="$cache_root/tools/$tool-$key"
  if [ -f "$out/.complete" ]; then
    echo "tools: $tool cache hit $key" >&2
    return 0
  fi
  echo "tools: $tool cache miss $key, building (kube, the longest, takes about 25 min on 2 cores)" >&2
  partial=$(mktemp -d "$cache_root/tools/.$tool-XXXXXX")
  start=$(date +%s)
  "build_$tool" "$partial" &
  progress "$tool" "$!" "$start" || { echo "tools: $tool build failed" >&2; rm -rf "$partial"; return 1; }
  echo "tools: $tool built in $(( $(date +%s) - start ))s" >&2
  rm -rf "$out"
  mv "$partial" "$out"
  touch "$out/.complete"
}

# kube is the long build; the others build beside it, one after another, so that the second
# core has work through kube's module downloads and single-threaded link steps.
build_started=$(date +%s)
build_one kube &
kube_pid=$!
failed=0
for tool in kwok s3 helm kueue jobset; do build_one "$tool" || failed=1; done
wait "$kube_pid" || failed=1
[ "$failed" -eq 0 ] || { echo "tools: a build failed (above)" >&2; exit 1; }
echo "tools: ready in $(( $(date +%s) - build_started ))s" >&2
keys=""
for tool in kube kwok s3 helm kueue jobset; do keys="$keys $tool-$(tool_key "$tool")"; done

bin="$cache_root/bin/$(echo "$keys" | sha256sum | cut -c1-16)"
if [ ! -f "$bin/.complete" ]; then
  partial=$(mktemp -d "$cache_root/bin/.bin-XXXXXX")
  for entry in $keys; do
    for binary in "$cache_root/tools/$entry"/*; do ln -s "$binary" "$partial/"; done
  done
  rm -rf "$bin"
  mv "$partial" "$bin"
  touch "$bin/.complete"
fi
echo "$bin"

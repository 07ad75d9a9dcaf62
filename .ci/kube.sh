#!/usr/bin/env bash
# Builds the Kubernetes engine the Kubernetes executor's tests run against,
# and helm for the chart's, and prints the lines that point them at them:
#
#   eval "$(bash .ci/kube.sh)"     # exports TRAINYARD_TEST_KUBE_BIN, TRAINYARD_TEST_HELM
#
# etcd, kube-apiserver, kube-controller-manager and kube-scheduler come from
# the module in tools/kube (k8s.io/kubernetes and etcd's server, from the Go
# module proxy); kwok, which simulates nodes and pods, from its own release.
# They are built once into a directory keyed by their versions and the Go
# version, under ${TRAINYARD_KUBE_CACHE:-$HOME/.cache/trainyard}: about 30
# minutes on 2 cores the first time, nothing afterwards. The tests start
# and stop the daemons themselves.
set -euo pipefail
cd "$(dirname "$0")/.."

kwok_version=v0.8.0
helm_version=v3.21.4
log() { echo "kube: $*" >&2; }

key="$(cat tools/kube/go.mod tools/kube/go.sum tools/kube/etcd/main.go | sha256sum | cut -c1-12)"
dir="${TRAINYARD_KUBE_CACHE:-$HOME/.cache/trainyard}/kube-$(go env GOVERSION)-kwok-$kwok_version-$key"
cmds=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

complete() {
  local c
  for c in "${cmds[@]}"; do [ -x "$dir/$c" ] || return 1; done
}

if ! complete; then
  log "building etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok into $dir"
  log "(about 30 minutes on 2 cores the first time; cached afterwards)"
  start=$SECONDS
  tmp="$dir.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  flags=(-trimpath -buildvcs=false -ldflags "-s -w")
  (cd tools/kube && CGO_ENABLED=0 go build "${flags[@]}" -o "$tmp/" ./etcd \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler) >&2
  CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$kwok_version" >&2
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
  log "built in $((SECONDS - start)) s"
fi

echo "export TRAINYARD_TEST_KUBE_BIN=$dir"

helm_dir="${TRAINYARD_KUBE_CACHE:-$HOME/.cache/trainyard}/helm-$helm_version-$(go env GOVERSION)"
if [ ! -x "$helm_dir/helm" ]; then
  log "building helm $helm_version into $helm_dir (a few minutes the first time)"
  tmp="$helm_dir.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w" \
    "helm.sh/helm/v3/cmd/helm@$helm_version" >&2
  rm -rf "$helm_dir"
  mv "$tmp" "$helm_dir"
  trap - EXIT
fi
echo "export TRAINYARD_TEST_HELM=$helm_dir/helm"

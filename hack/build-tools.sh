#!/usr/bin/env bash
# Builds the local control plane from the Go module proxy into $1 (default bin/).
# The first build takes several minutes on 2 cores; later builds come from Go's cache in seconds.
set -euo pipefail
out=${1:-$(cd "$(dirname "$0")/.." && pwd)/bin}
cd "$(dirname "$0")/tools"
mkdir -p "$out"
step() { printf '==> %s (%s)\n' "$1" "$(date +%T)"; }
step "building etcd (under a minute)"
go build -o "$out/etcd" ./etcd
step "building kube-apiserver (about 5 minutes the first time)"
go build -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
step "building kube-scheduler and kube-controller-manager (about 2 minutes the first time)"
go build -o "$out/" k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager
step "building kwok (about a minute the first time)"
go build -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
touch "$out/etcd" "$out/kube-apiserver" "$out/kube-scheduler" "$out/kube-controller-manager" "$out/kwok"
step "control plane ready in $out"

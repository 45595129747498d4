// Package bench measures nogoo9 against baselines on a local cluster (etcd, kube-apiserver,
// scheduler, controller-manager and kwok on loopback). Every figure is a ratio against a baseline
// measured in the same run, with several rounds interleaved (baseline, candidate, baseline, ...),
// because the machine it runs on is shared and noisy: only side-by-side numbers mean anything.
//
// The entry point is hack/bench/cmd/bench (`make bench`); docs/performance.md explains each figure.
package bench

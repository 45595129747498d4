package controllers

import "k8s.io/client-go/rest"

// UncompressedResponses makes cfg's clients (main.go passes the manager's config) ask the API
// server for uncompressed answers. Since Kubernetes 1.37 (WatchListCompression, beta, on by
// default) kube-apiserver gzips a streaming list's watch to a client that accepts gzip (Go's
// transport asks for it unless told not to), and keeps doing so for every event after the
// initial list: a gzip writer taken from a pool, fed one event, flushed and closed per event,
// 40-60% of what serving watches cost kube-apiserver in the bulk rollouts profiled, and a
// gzip reader per event in nogoo9 (docs/performance.md, "Eighth round"). A bulk upgrade sends
// nogoo9 six or more pod events per workspace. The price is bytes: the initial list of the
// informers and large lists travel uncompressed (2-4 KB per workspace pod in protobuf), which
// inside a cluster is cheaper than the CPU.
func UncompressedResponses(cfg *rest.Config) {
	cfg.DisableCompression = true
}

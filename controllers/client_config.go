package controllers

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// UncompressedResponses makes cfg's clients (main.go passes the manager's config: every client of
// the process) ask the API server for uncompressed answers, when the API server is Kubernetes
// 1.37 or later, and reports whether it did. Since 1.37 (WatchListCompression, beta, on by
// default) kube-apiserver gzips a streaming list's watch to a client that accepts gzip (Go's
// transport asks for it unless told not to), and keeps doing so for every event after the
// initial list: a gzip writer taken from a pool, fed one event, flushed and closed per event,
// 40-60% of what serving watches cost kube-apiserver in the bulk rollouts profiled, and a gzip
// reader per event in nogoo9 (bench/history.md, "Eighth round"). A bulk upgrade sends nogoo9
// six or more pod events per workspace.
//
// The price is bytes, on every watch event as on lists: a running workspace pod's event is about
// 3.2 KB in protobuf against about 1 KB gzipped, and large lists (the informers' initial list,
// template history) travel whole. Between nogoo9 and its API server that is cheaper than the CPU;
// an older API server does not gzip watch events, so there the setting would only cost bytes,
// and cfg is left as it is (so it is when the version cannot be read).
func UncompressedResponses(cfg *rest.Config) (bool, error) {
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 10 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return false, fmt.Errorf("discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return false, fmt.Errorf("read the API server's version: %w", err)
	}
	if !atLeast(v.Major, v.Minor, 1, 37) {
		return false, nil
	}
	cfg.DisableCompression = true
	return true, nil
}

// atLeast reports whether the version major.minor (as the API server reports them: minor may
// carry a suffix, "37+") is at least wantMajor.wantMinor.
func atLeast(major, minor string, wantMajor, wantMinor int) bool {
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(strings.TrimRight(minor, "+"))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > wantMajor || (ma == wantMajor && mi >= wantMinor)
}

package proxy

import (
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
)

// BenchmarkRouterBytesPerWorkspace reports what the router holds per ready workspace, exactly
// (heap allocated after two collections, not a sampled profile): its map entry, the pod list, the
// route and the table's entry, for 10,000 workspaces of one ready pod each, the cache's compact
// pods handed over as the informer hands them (the pods themselves are the cache's and not
// counted). bench/history.md ("Ninth round") quotes it; it asserts nothing.
//
//	go test -run '^$' -bench RouterBytesPerWorkspace -benchtime 1x ./pkg/proxy/
func BenchmarkRouterBytesPerWorkspace(b *testing.B) {
	const n = 10000
	pods := make([]*podcache.Pod, n)
	for i, p := range podcachetest.ReadyWorkspaces(n, "") {
		pods[i] = podcache.Of(p)
	}
	heap := podcachetest.HeapAllocated
	for b.Loop() {
		h := heap()
		r := newRouter(time.Minute, newConnRegistry(logr.Discard()), nil, logr.Discard())
		for _, p := range pods {
			r.upsert(p)
		}
		b.ReportMetric((heap()-h)/n, "router-B/workspace")
		if r.lookup("/ws/user-1/ws-1/") == nil {
			b.Fatal("no route for /ws/user-1/ws-1/")
		}
		runtime.KeepAlive(r)
	}
}

// BenchmarkRouterInitialList10k is the router's share of the start-up (bench/history.md,
// "Twelfth round: cold start"): the informer's initial list of 10,000 ready workspace pods, the
// cache's compact pods, handed to the router one by one.
func BenchmarkRouterInitialList10k(b *testing.B) {
	const n = 10000
	pods := make([]*podcache.Pod, n)
	for i, p := range podcachetest.ReadyWorkspaces(n, "") {
		pods[i] = podcache.Of(p)
	}
	b.ReportAllocs()
	for b.Loop() {
		r := newRouter(time.Minute, newConnRegistry(logr.Discard()), nil, logr.Discard())
		for _, p := range pods {
			r.upsert(p)
		}
		if r.lookup("/ws/user-1/ws-1/") == nil {
			b.Fatal("no route for /ws/user-1/ws-1/")
		}
	}
}

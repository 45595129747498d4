package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// BenchmarkList10k compares, in one run (the machine is shared, so compare ratios, not absolute
// times), an admin's list of 10,000 workspaces encoded as JSON:
//   - views: the Service's list from views kept by informer events (what REST and MCP serve);
//   - describe-per-call: grouping, describing, sorting and encoding every pod per call (what
//     the front end did before the views; the cache read is left out, which favours it).
//
// Half the workspaces wait for the scheduler, so their messages carry the clock note.
func BenchmarkList10k(b *testing.B) {
	const n = 10000
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		owner, id := fmt.Sprintf("user-%d", i%1000), fmt.Sprintf("ws-%05d", i)
		created := t0.Add(time.Duration(i%60) * time.Second)
		if i%2 == 0 {
			pods[i] = pod(workspace.PodName(owner, id), owner, id, "1.0", created, ready)
		} else {
			pods[i] = pod(workspace.PodName(owner, id), owner, id, "1.0", created)
		}
	}
	now := func() time.Time { return t0.Add(time.Hour) }
	tmpl := stubTemplates{"python": "2.0"}
	svc, err := New(Config{Namespace: "ns", Templates: tmpl, Now: now, Pods: syncedInformer{}})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range pods {
		svc.views.OnAdd(p, true)
	}
	ctx := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})

	b.Run("views", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := svc.List(ctx, ListOptions{AllUsers: true})
			if err != nil || l.Len() != n {
				b.Fatalf("%d workspaces, %v", l.Len(), err)
			}
			if err := l.WriteJSON(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("describe-per-call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			groups := workspace.GroupByID(pods)
			out := make([]Workspace, 0, len(groups))
			for _, g := range groups {
				v, _ := tmpl.Get("python")
				out = append(out, workspace.Describe(g, v.Version, now()))
			}
			sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
			if err := json.NewEncoder(io.Discard).Encode(map[string]any{"workspaces": out}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDescribe10k is workspace.Describe over 10,000 one-pod workspaces: what a list that
// builds its values from the pods (rather than views kept per workspace) pays.
func BenchmarkDescribe10k(b *testing.B) {
	const n = 10000
	pods := make([][]*corev1.Pod, n)
	for i := range pods {
		owner, id := fmt.Sprintf("user-%d", i%1000), fmt.Sprintf("ws-%05d", i)
		pods[i] = []*corev1.Pod{pod(workspace.PodName(owner, id), owner, id, "1.0", t0, ready)}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range pods {
			_ = workspace.Describe(p, "", time.Time{})
		}
	}
}

// BenchmarkViewsBytesPerWorkspace reports what the front end's views hold per ready workspace,
// exactly (heap allocated after two collections, not a sampled profile): the entry with its
// place in the id and owner indexes, then its cached JSON after one admin list, for 10,000
// workspaces of one pod each, handed over as the informer hands them (the cache's compact pods,
// not counted). bench/history.md ("Tenth round") quotes it; it asserts nothing but the list.
//
//	go test -run '^$' -bench ViewsBytesPerWorkspace -benchtime 1x ./pkg/frontend/
func BenchmarkViewsBytesPerWorkspace(b *testing.B) {
	const n = 10000
	pods := cachedReadyWorkspaces(n)
	ctx := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	heap := podcachetest.HeapAllocated
	for b.Loop() {
		h0 := heap()
		svc, err := New(Config{Namespace: "ns", Templates: stubTemplates{"python": "2.0"}, Now: func() time.Time { return t0 }, Pods: syncedInformer{}})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range pods {
			svc.views.OnAdd(p, true)
		}
		h1 := heap()
		l, err := svc.List(ctx, ListOptions{AllUsers: true})
		if err != nil || l.Len() != n {
			b.Fatalf("%d workspaces, %v", l.Len(), err)
		}
		if err := l.WriteJSON(io.Discard); err != nil {
			b.Fatal(err)
		}
		h2 := heap()
		// The text copy of an MCP list: each view keeps its values escaped once written.
		if err := l.WriteEscapedJSON(io.Discard); err != nil {
			b.Fatal(err)
		}
		l = nil
		h3 := heap()
		b.ReportMetric((h1-h0)/n, "views-B/workspace")
		b.ReportMetric((h2-h1)/n, "json-B/workspace")
		b.ReportMetric((h3-h2)/n, "escaped-B/workspace")
		runtime.KeepAlive(svc)
	}
}

// BenchmarkViewsInitialList10k is the views' share of the start-up (bench/history.md,
// "Eleventh round: cold start"): the informer's initial list of 10,000 workspace pods, in the
// order the API server streams them (by pod name, not by workspace id), handed to the views, then
// the first list's snapshot.
func BenchmarkViewsInitialList10k(b *testing.B) {
	const n = 10000
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		owner, id := fmt.Sprintf("user-%d", i%100), fmt.Sprintf("ws-%d", i)
		pods[i] = pod(workspace.PodName(owner, id), owner, id, "1.0", t0, ready)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	cached := make([]*podcache.Pod, n)
	for i, p := range pods {
		cached[i] = podcache.Of(p)
	}
	b.ReportAllocs()
	for b.Loop() {
		v := newViews("ns")
		for _, p := range cached {
			v.OnAdd(p, true)
		}
		if all, _ := v.snapshot("", true, "", 0); len(all) != n {
			b.Fatalf("%d workspaces listed, want %d", len(all), n)
		}
	}
}

// BenchmarkViewsInitialListAndFirstJSON10k is the views' whole share of the cold start: the
// informer's initial list of 10,000 workspace pods handed to the views, then the first admin
// list written as JSON (every view encoded for the first time).
func BenchmarkViewsInitialListAndFirstJSON10k(b *testing.B) {
	const n = 10000
	cached := cachedReadyWorkspaces(n)
	ctx := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	b.ReportAllocs()
	for b.Loop() {
		svc, err := New(Config{Namespace: "ns", Templates: stubTemplates{"python": "2.0"}, Now: func() time.Time { return t0 }, Pods: syncedInformer{}})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range cached {
			svc.views.OnAdd(p, true)
		}
		l, err := svc.List(ctx, ListOptions{AllUsers: true})
		if err != nil || l.Len() != n {
			b.Fatalf("%d workspaces, %v", l.Len(), err)
		}
		if err := l.WriteJSON(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// cachedReadyWorkspaces is n Ready one-pod workspaces as the informer hands them: the cache's
// compact pods.
func cachedReadyWorkspaces(n int) []*podcache.Pod {
	pods := make([]*podcache.Pod, n)
	for i, p := range podcachetest.ReadyWorkspaces(n, "ns") {
		pods[i] = podcache.Of(p)
	}
	return pods
}

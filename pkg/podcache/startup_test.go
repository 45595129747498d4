package podcache_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// blockingHandler counts the pods it was handed; each add waits until release is closed.
type blockingHandler struct {
	release chan struct{}
	seen    atomic.Int64
}

func (h *blockingHandler) OnAdd(any, bool)   { <-h.release; h.seen.Add(1) }
func (h *blockingHandler) OnUpdate(any, any) {}
func (h *blockingHandler) OnDelete(any)      {}

// TestStartupGateHoldsControllersUntilReadersHaveTheList runs the gate in a real manager over a
// real API server with workspace pods: a runnable added through Hold (a controller) does not start,
// and the readiness check fails, while a handler added through Readers (the front end's views)
// has not been handed the whole initial list, although the cache itself has synced; once the
// handler has it, the held runnable starts (having seen every pod through the handler) and the
// check passes. A held runnable keeps its leader-election choice.
func TestStartupGateHoldsControllersUntilReadersHaveTheList(t *testing.T) {
	cfg, _ := apiserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ns, pods = "gate", 12
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		if err := c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ws-%d", i), Namespace: ns,
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: fmt.Sprintf("w%d", i)}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "img"}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	opts := podcache.Options(ns)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: clientgoscheme.Scheme, Cache: opts, NewCache: podcache.NewCache,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	gate := podcache.NewStartupGate(mgr.GetCache())
	if err := mgr.Add(gate); err != nil {
		t.Fatal(err)
	}
	inf, err := gate.Readers(mgr).GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	h := &blockingHandler{release: make(chan struct{})}
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	var seenAtStart atomic.Int64
	started := make(chan struct{})
	if err := gate.Hold(mgr).Add(manager.RunnableFunc(func(context.Context) error {
		seenAtStart.Store(h.seen.Load())
		close(started)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	// release lets the handler go; the cleanup calls it too (a failed check returns before the
	// release, and a handler blocked in OnAdd would keep the informer, and the manager, from
	// stopping), then stops the manager and waits for it before the API server goes
	// (cleanups run last registered first).
	release := sync.OnceFunc(func() { close(h.release) })
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		release()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the cache never synced")
	}
	// The cache has synced; the handler holds its first pod. Nothing may start meanwhile: give a
	// premature start a bounded chance to show (the manager starts its runnables right after the
	// sync).
	select {
	case <-started:
		t.Fatal("the held runnable started while a reader's handler did not have the initial list")
	case <-time.After(500 * time.Millisecond):
	}
	if err := gate.Check(nil); err == nil {
		t.Fatal("ready while a reader's handler did not have the initial list")
	}
	release()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the held runnable never started after the handler had the list")
	}
	if got := seenAtStart.Load(); got != pods {
		t.Errorf("the held runnable started when the reader's handler had %d of %d pods", got, pods)
	}
	if err := gate.Check(nil); err != nil {
		t.Errorf("not ready after the gate opened: %v", err)
	}
}

// addRecorder is a manager whose Add records the runnable (the leader-election choice of a held
// runnable is pure logic).
type addRecorder struct {
	manager.Manager
	added []manager.Runnable
}

func (m *addRecorder) Add(r manager.Runnable) error { m.added = append(m.added, r); return nil }

type leaderChoice bool

func (leaderChoice) Start(context.Context) error { return nil }
func (l leaderChoice) NeedLeaderElection() bool  { return bool(l) }

func TestStartupGateHeldRunnableKeepsLeaderElection(t *testing.T) {
	rec := &addRecorder{}
	held := podcache.NewStartupGate(nil).Hold(rec)
	for _, r := range []manager.Runnable{leaderChoice(false), leaderChoice(true), manager.RunnableFunc(func(context.Context) error { return nil })} {
		if err := held.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []bool{false, true, true} {
		l, ok := rec.added[i].(manager.LeaderElectionRunnable)
		if !ok || l.NeedLeaderElection() != want {
			t.Errorf("held runnable %d: NeedLeaderElection = %v (implements it: %v), want %v", i, ok && l.NeedLeaderElection(), ok, want)
		}
	}
}

// neverSynced is a handler registration that never reports the initial list.
type neverSynced struct {
	toolscache.ResourceEventHandlerRegistration
}

func (neverSynced) HasSynced() bool { return false }
func (neverSynced) HasSyncedChecker() toolscache.DoneChecker {
	return neverDone{}
}

type neverDone struct{}

func (neverDone) Name() string          { return "never" }
func (neverDone) Done() <-chan struct{} { return nil }

type fakeInformer struct{ cache.Informer }

func (fakeInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return neverSynced{}, nil
}

// syncedFakeCache has synced and hands out informers whose handlers never get the list.
type syncedFakeCache struct{ cache.Cache }

func (syncedFakeCache) WaitForCacheSync(context.Context) bool { return true }
func (syncedFakeCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return fakeInformer{}, nil
}

type cacheOf struct {
	manager.Manager
	c cache.Cache
}

func (m cacheOf) GetCache() cache.Cache { return m.c }

// TestStartupGateOpensAfterMax checks the bound: a reader's handler that never reports the
// initial list delays the controllers by Max after the cache's sync, not for ever.
func TestStartupGateOpensAfterMax(t *testing.T) {
	c := syncedFakeCache{}
	gate := podcache.NewStartupGate(c)
	gate.Max = 200 * time.Millisecond
	inf, err := gate.Readers(cacheOf{c: c}).GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	go func() { _ = gate.Start(ctx) }()
	if !gate.WaitForCacheSync(ctx) {
		t.Fatal("the gate never opened")
	}
	if waited := time.Since(start); waited < gate.Max {
		t.Errorf("the gate opened after %s, before Max (%s), although a handler never had the list", waited, gate.Max)
	}
}

// TestStartupGateHoldsControllersAfterReady runs the gate with AfterReady in a real manager over a
// real API server: the readiness check passes as soon as the read path has the lists, while a
// held runnable (a controller) starts only AfterReady later, when Released and the Controllers
// waiter (ReleaseAfterSync's) are done too. The bound is checked against the time the gate
// recorded when it opened (OpenedAt), not when this test's goroutine woke up to see it, so a
// loaded machine cannot make the runnable look early.
func TestStartupGateHoldsControllersAfterReady(t *testing.T) {
	cfg, _ := apiserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: clientgoscheme.Scheme, Cache: podcache.Options("default"), NewCache: podcache.NewCache,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	const after = 3 * time.Second
	gate := podcache.NewStartupGate(mgr.GetCache())
	gate.AfterReady = after
	if err := mgr.Add(gate); err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Readers(mgr).GetCache().GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	startedAt := make(chan time.Time, 1)
	if err := gate.Hold(mgr).Add(manager.RunnableFunc(func(context.Context) error {
		startedAt <- time.Now()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	select {
	case <-gate.Opened():
	case <-ctx.Done():
		t.Fatal("never ready")
	}
	if err := gate.Check(nil); err != nil {
		t.Fatalf("the gate opened but the readiness check says %v", err)
	}
	ready := gate.OpenedAt()
	if ready.IsZero() {
		t.Fatal("the gate is open but OpenedAt is zero")
	}
	var started time.Time
	select {
	case started = <-startedAt:
	case <-ctx.Done():
		t.Fatal("the held runnable never started")
	}
	if d := started.Sub(ready); d < after {
		t.Errorf("the held runnable started %s after the replica turned ready, want AfterReady (%s) or more", d, after)
	}
	select {
	case <-gate.Released():
	default:
		t.Error("the held runnable started but Released is not closed")
	}
	if !gate.Controllers().WaitForCacheSync(ctx) {
		t.Error("the Controllers waiter did not return after the release")
	}
}

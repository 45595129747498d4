package controllers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSeenPodsWait: a waiter is released by any event of its pod (added, updated, deleted, or a
// relist's tombstone), by the store already holding the pod, and otherwise gives up at its bound.
func TestSeenPodsWait(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-up", UID: "u1"}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q", UID: "u2"}}
	var empty storeOf
	for _, tc := range []struct {
		name  string
		cache storeOf
		event func(s *seenPods)
		want  bool
	}{
		{name: "added", cache: empty, event: func(s *seenPods) { s.OnAdd(pod, false) }, want: true},
		{name: "updated", cache: empty, event: func(s *seenPods) { s.OnUpdate(pod, pod) }, want: true},
		{name: "deleted", cache: empty, event: func(s *seenPods) { s.OnDelete(pod) }, want: true},
		{name: "tombstone", cache: empty, event: func(s *seenPods) {
			s.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/p-up", Obj: pod})
		}, want: true},
		{name: "already in the store, no event", cache: storeOf{pod}, event: func(*seenPods) {}, want: true},
		{name: "another pod's event: bound reached", cache: empty, event: func(s *seenPods) { s.OnAdd(other, false) }, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeenPods()
			if tc.cache != nil {
				if got := s.wait(context.Background(), tc.cache, pod, 300*time.Millisecond); got != tc.want {
					t.Errorf("wait = %v, want %v", got, tc.want)
				}
				return
			}
			go func() {
				// The event comes once the waiter is registered, as from the informer later on.
				awaitWaiter(s)
				tc.event(s)
			}()
			if got := s.wait(context.Background(), tc.cache, pod, 300*time.Millisecond); got != tc.want {
				t.Errorf("wait = %v, want %v", got, tc.want)
			}
			if len(s.waiters) != 0 {
				t.Errorf("%d waiters left registered", len(s.waiters))
			}
		})
	}
}

// storeOf is an informer store holding pods.
type storeOf []*corev1.Pod

func (s storeOf) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, p := range s {
		if p.Namespace == key.Namespace && p.Name == key.Name {
			p.DeepCopyInto(obj.(*corev1.Pod))
			return nil
		}
	}
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

func (s storeOf) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestSeenPodsNeedRelistsAppliedWhole pins what seenPods relies on in the client-go nogoo9 is
// built with: informers that apply a relist whole (AtomicFIFO, on by default) and in order
// (InOrderInformers). A client-go whose defaults change fails here, rather than making the
// check after a side-by-side create trust a store that a relist is still being applied to.
func TestSeenPodsNeedRelistsAppliedWhole(t *testing.T) {
	if !informersApplyRelistsWhole() {
		t.Fatal("client-go's informers do not apply relists whole by default (AtomicFIFO, InOrderInformers): seenPods would be off; see cache_seen.go")
	}
}

// TestTheCheckAfterACreateWaitsForTheCache: the cache shows the old pod live until it shows the
// new pod, and then the old pod being deleted (the owner's delete, committed before the create,
// arrives in the same event stream). The check must wait for the new pod before it looks, and
// must not ask the API server.
func TestTheCheckAfterACreateWaitsForTheCache(t *testing.T) {
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ws", UID: "u-old"}}
	up := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ws-up-1", UID: "u-up"}}
	deleting := old.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	seen := newSeenPods()
	var cache atomic.Pointer[storeOf]
	cache.Store(&storeOf{old})
	go func() {
		awaitWaiter(seen)
		cache.Store(&storeOf{deleting, up}) // the store first, then the handlers
		seen.OnAdd(up, false)
	}()
	r := &WorkspaceReconciler{Reader: readerFunc(func(ctx context.Context, key client.ObjectKey, obj client.Object) error {
		return cache.Load().Get(ctx, key, obj)
	}), APIReader: readerFunc(func(context.Context, client.ObjectKey, client.Object) error {
		t.Error("the check read the API server")
		return apierrors.NewServiceUnavailable("not here")
	}), seen: seen}
	gone, err := r.deletedBeforeCreate(context.Background(), up, old)
	if err != nil || !gone {
		t.Fatalf("deletedBeforeCreate = %v, %v; want true: the owner's delete came before the create", gone, err)
	}
}

// readerFunc is a client.Reader whose Get is f (List is not used here).
type readerFunc func(ctx context.Context, key client.ObjectKey, obj client.Object) error

func (f readerFunc) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return f(ctx, key, obj)
}

func (readerFunc) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

// awaitWaiter returns once s has a waiter registered, or after 5 s (the waiter then times out
// and its test fails).
func awaitWaiter(s *seenPods) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(s.waiters)
		s.mu.Unlock()
		if n > 0 {
			return
		}
	}
}

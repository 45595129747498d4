package controllers

import (
	"context"
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
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					s.mu.Lock()
					n := len(s.waiters)
					s.mu.Unlock()
					if n > 0 {
						break
					}
				}
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

package podcache

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
)

// TestSeenWait: a waiter is released by any event of its pod (added, updated, deleted, or a
// relist's tombstone), by the store already holding the pod, and otherwise gives up at its bound.
func TestSeenWait(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-up", UID: "u1"}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q", UID: "u2"}}
	var empty podcachetest.Store
	for _, tc := range []struct {
		name  string
		cache podcachetest.Store
		event func(s *Seen)
		want  bool
	}{
		{name: "added", cache: empty, event: func(s *Seen) { s.OnAdd(pod, false) }, want: true},
		{name: "updated", cache: empty, event: func(s *Seen) { s.OnUpdate(pod, pod) }, want: true},
		{name: "deleted", cache: empty, event: func(s *Seen) { s.OnDelete(pod) }, want: true},
		{name: "tombstone", cache: empty, event: func(s *Seen) {
			s.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/p-up", Obj: pod})
		}, want: true},
		{name: "already in the store, no event", cache: podcachetest.Store{pod}, event: func(*Seen) {}, want: true},
		{name: "another pod's event: bound reached", cache: empty, event: func(s *Seen) { s.OnAdd(other, false) }, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSeen()
			if tc.cache != nil {
				if got := s.Wait(context.Background(), tc.cache, pod, bound(tc.want)); got != tc.want {
					t.Errorf("wait = %v, want %v", got, tc.want)
				}
				return
			}
			go func() {
				// The event comes once the waiter is registered, as from the informer later on.
				podcachetest.AwaitWaiting(s)
				tc.event(s)
			}()
			if got := s.Wait(context.Background(), tc.cache, pod, bound(tc.want)); got != tc.want {
				t.Errorf("wait = %v, want %v", got, tc.want)
			}
			if n := s.Waiting(); n != 0 {
				t.Errorf("%d waiters left registered", n)
			}
		})
	}
}

// TestSeenNeedsRelistsAppliedWhole pins what Seen relies on in the client-go nogoo9 is
// built with: informers that apply a relist whole (AtomicFIFO, on by default) and in order
// (InOrderInformers). A client-go whose defaults change fails here, rather than making the
// check after a side-by-side create trust a store that a relist is still being applied to.
func TestSeenNeedsRelistsAppliedWhole(t *testing.T) {
	if !InformersApplyRelistsWhole() {
		t.Fatal("client-go's informers do not apply relists whole by default (AtomicFIFO, InOrderInformers): Seen would be off; see seen.go")
	}
}

// bound is how long a case waits: long for one that must be released (the event may come late on
// a loaded machine), short for one that must reach its bound.
func bound(released bool) time.Duration {
	if released {
		return 10 * time.Second
	}
	return 300 * time.Millisecond
}

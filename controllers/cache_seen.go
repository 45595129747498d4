package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	clientfeatures "k8s.io/client-go/features"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// awaitSeen bounds how long a pass waits for the informer cache to show a pod it has just
// created before it asks the API server instead (seenPods.wait).
const awaitSeen = 5 * time.Second

// seenPods tells a pass when the informer cache has caught up with a pod this process has just
// created. The pod informer is one watch (one per namespace when nogoo9 watches several; an
// upgraded pod is in its old pod's namespace), whose events come in the order the API server
// committed the writes, and the informer applies each event to its store before it hands it to
// the handlers. So once a handler has been given an event of the new pod (its creation, or any
// later one), the store holds every pod write committed before that create: a look at the old
// pod in the cache then tells what a read from the API server right after the create would
// have told about every delete made before the create (checkAfterCreate), without the read.
//
// That holds only while the informer applies a relist to its store whole, before it notifies
// (client-go's AtomicFIFO feature gate, on by default, and InOrderInformers, locked on): with
// AtomicFIFO off, a relist is applied one pod at a time while the handlers already run, so the
// new pod's event can come while the store still shows an old pod that the relist has as
// deleted. With the gate off (KUBE_FEATURE_AtomicFIFO=false in nogoo9's environment), seen is
// left nil (informersApplyRelistsWhole).
//
// It is a ResourceEventHandler of the pod informer (SetupWithManager); nil in tests that plan
// from a fixed view of the cache, which then read from the API server as before.
type seenPods struct {
	mu      sync.Mutex
	waiters map[types.UID]chan struct{}
}

func newSeenPods() *seenPods {
	return &seenPods{waiters: map[types.UID]chan struct{}{}}
}

func (s *seenPods) OnAdd(obj any, _ bool) { s.saw(obj) }
func (s *seenPods) OnUpdate(_, obj any)   { s.saw(obj) }
func (s *seenPods) OnDelete(obj any)      { s.saw(obj) }
func (s *seenPods) saw(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	uid := m.GetUID()
	s.mu.Lock()
	if ch, ok := s.waiters[uid]; ok {
		delete(s.waiters, uid)
		close(ch)
	}
	s.mu.Unlock()
}

// wait reports whether the cache (cache, the store the informer feeds) has shown pod, created by
// this process (its UID from the create's answer), within awaitSeen. False: not seen in time (a
// watch that is being re-established, say), or ctx ended; the caller reads the API server.
func (s *seenPods) wait(ctx context.Context, cache client.Reader, pod *corev1.Pod, bound time.Duration) bool {
	if pod.UID == "" {
		return false
	}
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiters[pod.UID] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.waiters[pod.UID] == ch {
			delete(s.waiters, pod.UID)
		}
		s.mu.Unlock()
	}()
	// The event may have been handed out before the waiter was registered: the store has the
	// pod then (it is updated before the handlers are called).
	var cached corev1.Pod
	if err := cache.Get(ctx, client.ObjectKeyFromObject(pod), &cached); err == nil && cached.UID == pod.UID {
		return true
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// informersApplyRelistsWhole reports whether client-go's informers apply a relist to their
// store in one step, before any handler hears of it, and deliver events in the order of the
// watch: what seenPods relies on.
func informersApplyRelistsWhole() bool {
	g := clientfeatures.FeatureGates()
	return g.Enabled(clientfeatures.AtomicFIFO) && g.Enabled(clientfeatures.InOrderInformers)
}

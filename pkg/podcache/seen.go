package podcache

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	clientfeatures "k8s.io/client-go/features"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AwaitSeen bounds how long a caller waits for the informer cache to show a pod it has just
// created before it asks the API server instead (Seen.Wait).
const AwaitSeen = 5 * time.Second

// Seen tells a caller when the informer cache has caught up with a pod this process has just
// created. The pod informer is one watch (one per namespace when nogoo9 watches several; an
// upgraded pod is in its old pod's namespace), whose events come in the order the API server
// committed the writes, and the informer applies each event to its store before it hands it to
// the handlers. So once a handler has been given an event of the new pod (its creation, or any
// later one), the store holds every pod write committed before that create: a look at the old
// pod in the cache then tells what a read from the API server right after the create would
// have told about every write made before the create, without the read: the upgrade
// controller's check that the owner did not delete the workspace before its side-by-side create
// (controllers, deletedBeforeCreate), and the spawner's check that no other spawn created a pod
// of the same id before its own (pkg/spawner, otherPodWithID). A write committed after the create
// may be missing; each of those checks is built so that the other party's own check, after its
// write, covers that order.
//
// That holds only while the informer applies a relist to its store whole, before it notifies
// (client-go's AtomicFIFO feature gate, on by default, and InOrderInformers, locked on): with
// AtomicFIFO off, a relist is applied one pod at a time while the handlers already run, so the
// new pod's event can come while the store still shows an old pod that the relist has as
// deleted. With the gate off (KUBE_FEATURE_AtomicFIFO=false in nogoo9's environment), WatchSeen
// returns nil and every caller reads the API server (InformersApplyRelistsWhole).
//
// It is a ResourceEventHandler of the pod informer (WatchSeen); a nil *Seen (tests that plan
// from a fixed view of the cache, the gate off) makes callers read the API server.
type Seen struct {
	mu      sync.Mutex
	waiters map[types.UID]chan struct{}
}

// NewSeen returns a Seen with no waiter; it hears of pods once it is a handler of the pod
// informer (WatchSeen does both).
func NewSeen() *Seen {
	return &Seen{waiters: map[types.UID]chan struct{}{}}
}

// WatchSeen returns the Seen handling the events of c's pod informer, or nil when client-go's
// informers do not apply relists whole (InformersApplyRelistsWhole): callers then read the API
// server. Each caller (the upgrade controller, the spawner) has its own: a handler costs a
// lock and a map lookup per pod event.
func WatchSeen(ctx context.Context, c informers) (*Seen, error) {
	if !InformersApplyRelistsWhole() {
		return nil, nil
	}
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	s := NewSeen()
	if _, err := inf.AddEventHandler(s); err != nil {
		return nil, fmt.Errorf("watch the pod informer for the pods this process creates: %w", err)
	}
	return s, nil
}

func (s *Seen) OnAdd(obj any, _ bool) { s.saw(obj) }
func (s *Seen) OnUpdate(_, obj any)   { s.saw(obj) }
func (s *Seen) OnDelete(obj any)      { s.saw(obj) }
func (s *Seen) saw(obj any) {
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

// Wait reports whether the cache (cache, the store the informer feeds) has shown pod, created by
// this process (its UID from the create's answer), within bound. False: not seen in time (a
// watch that is being re-established, say), ctx ended, or s is nil; the caller reads the API
// server.
func (s *Seen) Wait(ctx context.Context, cache client.Reader, pod *corev1.Pod, bound time.Duration) bool {
	if s == nil || pod.UID == "" {
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

// InformersApplyRelistsWhole reports whether client-go's informers apply a relist to their
// store in one step, before any handler hears of it, and deliver events in the order of the
// watch: what Seen relies on.
func InformersApplyRelistsWhole() bool {
	g := clientfeatures.FeatureGates()
	return g.Enabled(clientfeatures.AtomicFIFO) && g.Enabled(clientfeatures.InOrderInformers)
}

// Waiting reports how many callers are waiting in Wait (tests use it to act only once a caller
// waits).
func (s *Seen) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

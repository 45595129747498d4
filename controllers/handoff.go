package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// handoffTTL bounds how long a handed-off pod is kept when the cache never shows its version or a
// later one (the workspace deleted meanwhile, say): past it the cache alone is observed again.
const handoffTTL = 30 * time.Second

// Handoff hands the upgrade intents the front end of this process writes to the upgrade
// controller of this process, so the upgrade starts without waiting for the intent's own watch
// event (docs/upgrades.md, "Tuning for bulk upgrades"). The intent on the pod stays the durable,
// level-triggered record: the handoff only enqueues the workspace early, with the pod as the
// intent's patch answered it, which the controller observes in place of an older cached copy of
// the same pod (same UID, lower resourceVersion). A crash loses nothing: the new leader's watch
// sees the intent. On a replica whose upgrade controller is not running (not the leader) a
// handoff does nothing.
//
// The zero value is not usable; use NewHandoff. A nil *Handoff does nothing.
type Handoff struct {
	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request] // nil while the controller is not running
	pods  map[types.UID]handedPod
}

// handedPod is a pod as the API server answered the intent's patch: full (for a Recreate's
// rollback spec) and stripped as the cache keeps it (for the planner).
type handedPod struct {
	full, stripped *corev1.Pod
	at             time.Time
}

// NewHandoff returns a Handoff; pass it to the front end (frontend.Config.Intents) and to the
// upgrade controller (UpgradeOptions.Handoff) of the same process.
func NewHandoff() *Handoff {
	return &Handoff{pods: map[types.UID]handedPod{}}
}

// UpgradeRequested is called by the front end after it wrote an upgrade intent on pod, with the
// pod the API server answered (the handoff keeps it: the caller must not change it afterwards).
func (h *Handoff) UpgradeRequested(pod *corev1.Pod) {
	if h == nil || pod == nil || pod.UID == "" || pod.ResourceVersion == "" || !workspace.IsWorkspacePod(pod) {
		return
	}
	stripped, err := workspace.StripPod(pod.DeepCopy())
	if err != nil {
		return
	}
	now := time.Now()
	h.mu.Lock()
	q := h.queue
	if q != nil {
		for uid, p := range h.pods {
			if now.Sub(p.at) > handoffTTL {
				delete(h.pods, uid)
			}
		}
		h.pods[pod.UID] = handedPod{full: pod, stripped: stripped.(*corev1.Pod), at: now}
	}
	h.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: workspace.ID(pod)}})
	}
}

// fresher returns the handed-off (stripped) copy of cached when it is a later version of the same
// pod, else cached. Once the cache shows the handed-off version or a later one, the copy is
// dropped.
func (h *Handoff) fresher(cached *corev1.Pod) *corev1.Pod {
	if h == nil {
		return cached
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.pods[cached.UID]
	if !ok {
		return cached
	}
	c, err := resourceversion.CompareResourceVersion(p.stripped.ResourceVersion, cached.ResourceVersion)
	if err != nil || c <= 0 {
		delete(h.pods, cached.UID)
		return cached
	}
	return p.stripped.DeepCopy()
}

// full returns the full pod the API server answered for the handed-off pod old (same UID and
// resourceVersion), or nil.
func (h *Handoff) full(old *corev1.Pod) *corev1.Pod {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.pods[old.UID]
	if !ok || p.full.ResourceVersion != old.ResourceVersion {
		return nil
	}
	return p.full
}

// handoffSource is the controller's source for the handoff: when the controller starts (this
// replica leads) the handoff enqueues into its queue; when it stops, nothing any more.
type handoffSource struct{ h *Handoff }

func (s handoffSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.h.mu.Lock()
	s.h.queue = q
	s.h.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.h.mu.Lock()
		s.h.queue = nil
		s.h.pods = map[types.UID]handedPod{}
		s.h.mu.Unlock()
	}()
	return nil
}

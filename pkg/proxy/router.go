package proxy

import (
	"net/http/httputil"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// router keeps the route table in step with the workspace pods it is told about. Readers (every
// request) take a read lock for a few map lookups; writers (informer events) recompute the routes
// of the one workspace that changed and swap its entries.
type router struct {
	tmu sync.RWMutex
	tbl table

	mu sync.Mutex // guards everything below; never held while tmu is read-held by a request
	// ws holds each workspace's pods (shared with the informer's store: read only) and routes, in
	// one map entry. contested holds the claimants (one target per workspace) of the prefixes
	// more than one workspace claims; a prefix with one claimant has it only in the table. Short
	// slices, and one map entry per workspace and per route: at 10,000 workspaces a map per
	// workspace, and then a second map entry per workspace and per prefix, cost more than the
	// routes themselves (bench/history.md, "Memory per workspace").
	ws        map[wsKey]wsState
	contested map[string][]*target
	// notReady holds a timer per pod that went not-ready; when it fires the pod's WebSockets close.
	notReady map[types.UID]*time.Timer

	grace time.Duration
	now   func() time.Time
	newRP func(*target) *httputil.ReverseProxy
	conns *connRegistry
	log   logr.Logger
}

func newRouter(grace time.Duration, conns *connRegistry, newRP func(*target) *httputil.ReverseProxy, log logr.Logger) *router {
	return &router{
		tbl:       table{routes: map[string]*target{}},
		ws:        map[wsKey]wsState{},
		contested: map[string][]*target{},
		notReady:  map[types.UID]*time.Timer{},
		grace:     grace,
		now:       time.Now,
		newRP:     newRP,
		conns:     conns,
		log:       log,
	}
}

// wsState is what the router keeps of one workspace: its pods (the informer store's podcache.Pod)
// and the routes derived from them.
type wsState struct {
	pods    []*podcache.Pod
	targets []*target
}

// lookup is the request path: the target of the longest route prefix of p (a cleaned path).
func (r *router) lookup(p string) *target {
	r.tmu.RLock()
	t := r.tbl.lookup(p)
	r.tmu.RUnlock()
	return t
}

// lookupWhere is the table's lookupWhere under the read lock.
func (r *router) lookupWhere(p string, keep func(*target) bool) *target {
	r.tmu.RLock()
	t := r.tbl.lookupWhere(p, keep)
	r.tmu.RUnlock()
	return t
}

// route is the target of exactly prefix, or nil (for the redirect of "/ws/u/id" to "/ws/u/id/").
func (r *router) route(prefix string) *target {
	r.tmu.RLock()
	t := r.tbl.routes[prefix]
	r.tmu.RUnlock()
	return t
}

// podAlive reports whether uid is a known pod that is not being deleted, is ready or not ready
// for less than the grace period (its timer still runs), of a workspace that is not Unavailable:
// a WebSocket whose handshake finished after its pod went away, stayed not-ready past the grace
// (the timer that closed the pod's WebSockets has fired already) or its workspace was taken out
// of service is closed at once.
func (r *router) podAlive(key wsKey, uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.ws[key]
	p := podByUID(st.pods, uid)
	if p == nil || p.DeletionTimestamp != nil {
		return false
	}
	if _, graceRuns := r.notReady[uid]; !graceRuns && !isReady(p) {
		return false
	}
	return len(st.targets) == 0 || st.targets[0].status.Phase != workspace.PhaseUnavailable
}

// pod returns the pod uid of workspace key as the router holds it, materialised (its label and
// annotation maps its own, its other slices the cache's: read only), or nil when the router does
// not know it.
func (r *router) pod(key wsKey, uid types.UID) *corev1.Pod {
	r.mu.Lock()
	p := podByUID(r.ws[key].pods, uid)
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Materialize()
}

// upsert records a new or changed workspace pod: a *podcache.Pod (the informer's), or a
// *corev1.Pod, reduced as the cache reduces it (podcache.Of). It knows no earlier version: a pod
// relabelled since it was filed needs update.
func (r *router) upsert(obj any) { r.update(nil, obj) }

// update records a pod's change from before (the informer's old object; nil for a new pod) to
// now (either type, as upsert). A pod is filed under the workspace its labels name (keyOf); when
// that is no longer the one before's labels named (its nogoo9/workspace-id label changed or
// removed, its nogoo9/type label removed), the pod is first taken out of that workspace, so the
// workspace's routes never lead to a pod that is no longer of it (its IP may go to another pod),
// and the WebSockets opened through them are closed.
func (r *router) update(before, now any) {
	pod := podcache.Of(now)
	if pod == nil {
		return
	}
	key, filed := keyOf(pod)
	var prevKey wsKey
	moved := false
	if before != nil {
		if prev := podcache.Of(before); prev != nil {
			var wasFiled bool
			prevKey, wasFiled = keyOf(prev)
			moved = wasFiled && (!filed || prevKey != key)
		}
	}
	if !filed && !moved {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if moved {
		why := "pod left workspace " + prevKey.String()
		if filed {
			why += " for " + key.String()
		}
		r.unfile(prevKey, pod.UID, why)
	}
	if !filed {
		return
	}
	st := r.ws[key]
	st.pods = append(withoutPod(st.pods, pod.UID), pod)
	r.ws[key] = st
	switch {
	case pod.DeletionTimestamp != nil:
		r.stopTimer(pod.UID)
		r.conns.closePod(pod.UID, "pod is being deleted")
	case isReady(pod):
		r.stopTimer(pod.UID)
	default:
		r.startTimer(key, pod.UID)
	}
	r.rebuild(key)
}

// remove forgets a deleted pod (either type, as upsert, or a tombstone of one) and closes its
// WebSockets. The pod is taken out of the workspace it is filed under even when the deleted
// object no longer names it (unfile).
func (r *router) remove(obj any) {
	pod := podcache.Of(obj)
	if pod == nil {
		return
	}
	key, _ := keyOf(pod)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unfile(key, pod.UID, "pod was deleted")
}

// keyOf is the workspace a pod is filed under, and false when it is no workspace pod.
func keyOf(pod *podcache.Pod) (wsKey, bool) {
	if pod == nil || !workspace.IsWorkspaceObject(pod) {
		return wsKey{}, false
	}
	return wsKey{pod.Namespace, workspace.IDOf(pod)}, true
}

// unfile takes pod uid out of the workspace it is filed under, stops its not-ready timer and
// closes its WebSockets (why says so). The pod is looked for under hint (what the event names),
// then, when not there, in every workspace: an event that does not name the workspace the pod was
// filed under (a final state or a tombstone whose labels changed without an update saying so, or
// a caller that gave no earlier version) must still not leave it routed. Informer events name it
// (an update's old object and a delete's object are the version last handed over), so the look
// through every workspace (about 0.2 ms at 10,000, no allocation) is in practice only for a pod
// filed nowhere: the delete of one an update already took out. It is paid there rather than a map
// of every pod to its workspace kept for it (about 90 bytes per workspace, on the router's 384).
// Callers hold mu.
func (r *router) unfile(hint wsKey, uid types.UID, why string) {
	r.stopTimer(uid)
	r.conns.closePod(uid, why)
	key, found := hint, podByUID(r.ws[hint].pods, uid) != nil
	if !found {
		for k, st := range r.ws {
			if podByUID(st.pods, uid) != nil {
				key, found = k, true
				break
			}
		}
	}
	if !found {
		return
	}
	st := r.ws[key]
	st.pods = withoutPod(st.pods, uid)
	r.ws[key] = st
	r.rebuild(key)
}

// startTimer arms the not-ready grace timer of a pod unless it already runs.
func (r *router) startTimer(key wsKey, uid types.UID) {
	if _, ok := r.notReady[uid]; ok {
		return
	}
	r.notReady[uid] = time.AfterFunc(r.grace, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.notReady, uid)
		if p := podByUID(r.ws[key].pods, uid); p != nil && !isReady(p) {
			r.conns.closePod(uid, "pod stayed not-ready longer than the grace period")
		}
	})
}

func (r *router) stopTimer(uid types.UID) {
	if t, ok := r.notReady[uid]; ok {
		t.Stop()
		delete(r.notReady, uid)
	}
}

// rebuild recomputes the routes of workspace key and swaps them into the table; a workspace left
// with no pods is forgotten. Callers hold mu.
func (r *router) rebuild(key wsKey) {
	st := r.ws[key]
	// The pods are materialised for this computation only (the routes keep their strings, none
	// of their maps): into reused memory, not a pod struct and two maps per pod.
	s := podcache.GetScratch()
	targets, errs := routesFor(key, s.Materialize(st.pods), r.now())
	s.Release()
	for _, err := range errs {
		r.log.Info("route left out", "workspace", key.String(), "reason", err.Error())
	}
	old := st.targets
	if len(st.pods) == 0 {
		delete(r.ws, key)
	} else {
		st.targets = targets
		r.ws[key] = st
	}

	// Claims: drop the workspace's old prefixes, add the new ones, then settle each touched prefix.
	touched := make([]string, 0, len(old)+len(targets))
	claims := make(map[string][]*target, len(old)+len(targets))
	for _, t := range old {
		if _, ok := claims[t.prefix]; !ok {
			claims[t.prefix] = r.claimants(t.prefix)
			touched = append(touched, t.prefix)
		}
		claims[t.prefix] = withoutClaim(claims[t.prefix], key)
	}
	for _, t := range targets {
		if _, ok := claims[t.prefix]; !ok {
			claims[t.prefix] = r.claimants(t.prefix)
			touched = append(touched, t.prefix)
		}
		claims[t.prefix] = append(withoutClaim(claims[t.prefix], key), t)
	}
	r.tmu.Lock()
	for _, prefix := range touched {
		list := claims[prefix]
		var best *target
		for _, t := range list {
			if best == nil || wins(t, best) {
				best = t
			}
		}
		if len(list) > 1 {
			r.contested[prefix] = list
		} else {
			delete(r.contested, prefix)
		}
		if best == nil {
			delete(r.tbl.routes, prefix)
			continue
		}
		if len(list) > 1 && best.ws != key {
			r.log.Info("route prefix claimed by two workspaces; the older keeps it", "prefix", prefix, "kept", best.ws.String(), "refused", key.String())
		}
		r.tbl.routes[prefix] = best
		if d := depthOf(prefix); d > r.tbl.maxDepth {
			r.tbl.maxDepth = d
		}
	}
	r.tmu.Unlock()

	if len(targets) > 0 && targets[0].status.Phase == workspace.PhaseUnavailable {
		// An operator took the workspace out of service (maintenance, a False Workspace*
		// condition): its terminals must end too, not only new requests. They are closed after
		// the table changed, so a client that reconnects at once finds the workspace unavailable
		// (closed before, a fast reconnect still reached the old route).
		why := "workspace is unavailable: " + targets[0].status.Reason
		for _, p := range st.pods {
			r.conns.closePod(p.UID, why)
		}
	}
}

// claimants are the targets (one per workspace) that claim prefix: the contested list, or the
// table's one. Callers hold mu (the only writers of the table hold it too).
func (r *router) claimants(prefix string) []*target {
	if list, ok := r.contested[prefix]; ok {
		return list
	}
	if t, ok := r.tbl.routes[prefix]; ok {
		return []*target{t}
	}
	return nil
}

// isReady is workspace.IsReady of a cached pod, of the fields it reads (materialising the pod
// would build its label and annotation maps).
func isReady(p *podcache.Pod) bool {
	return workspace.IsReady(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: p.DeletionTimestamp},
		Status: corev1.PodStatus{Phase: p.Phase, PodIP: p.PodIP, Conditions: p.Conditions}})
}

func podByUID(pods []*podcache.Pod, uid types.UID) *podcache.Pod {
	for _, p := range pods {
		if p.UID == uid {
			return p
		}
	}
	return nil
}

// withoutPod returns pods without the pod uid, as a new slice (readers may hold the old one).
func withoutPod(pods []*podcache.Pod, uid types.UID) []*podcache.Pod {
	out := make([]*podcache.Pod, 0, len(pods)+1)
	for _, p := range pods {
		if p.UID != uid {
			out = append(out, p)
		}
	}
	return out
}

// withoutClaim returns claims without workspace key's, as a new slice.
func withoutClaim(claims []*target, key wsKey) []*target {
	out := make([]*target, 0, len(claims)+1)
	for _, t := range claims {
		if t.ws != key {
			out = append(out, t)
		}
	}
	return out
}

package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// reservationTTL bounds how long a create the cache has not shown yet counts against the cap.
const reservationTTL = 2 * time.Minute

// gate enforces --max-pending-upgrades and --max-concurrent-upgrades. The first counts the
// upgrades whose new pod waits for a node (upgrade.Slot.WaitingForNode: created, not placed by the
// scheduler yet; a Recreate pod behind nogoo9's gate too, as its workspace is down from the old
// pod's deletion until it is placed): each such pod asks the cluster for room it may not have, so
// when pods stop fitting they pile up to the limit and admission stops, and
// while the cluster has room nothing waits (a pod bound to a node frees its slot at once: its
// workspace's reconcile runs on the binding's watch event and wakes waiting workspaces). The
// second counts the upgrades in flight, for who wants to bound total churn or image pulls.
//
// The counts come from the observed state (the workspaces' pods in the cache) plus the creates
// this process made that the cache does not show yet (reservations, like the ReplicaSet
// controller's expectations). The observed part is listed from the cache once, at the first
// admission, and then kept per workspace by every reconcile, which observes that workspace's pods
// anyway (observed): a pod event always brings its workspace's reconcile, so the sets follow the
// cache with the queue's lag, and an admission costs no list of every workspace pod (at 1,000
// workspaces that list, taken under the lock for every admission, serialised the starts of a bulk
// upgrade). A reservation also keeps a stale read from starting a second upgrade of the same
// workspace under another name. The reverse holds too: an upgrade this process has just concluded
// (the old pod deleted, the failed pod deleted, the rollback spec dropped) stops counting at once,
// before the cache shows the write (finished); otherwise the workspaces woken for the freed slot
// would find it still taken and go back to sleep. Waiting workspaces are remembered only to wake
// them early when a slot frees; without that memory (after a restart) they still come back on
// their own timer.
type gate struct {
	max     int // --max-concurrent-upgrades; zero or negative: no cap
	pending int // --max-pending-upgrades; zero or negative: no cap
	reader  client.Reader
	wake    chan<- event.GenericEvent
	// cached, when set, hands out the cache's own workspace pods (podcache.Every.Pods) for the
	// first count; ok false (not synced yet) falls back to a List of reader.
	cached func() (pods []*corev1.Pod, ok bool)

	mu        sync.Mutex
	reserved  map[types.NamespacedName]reservation
	finished  map[types.NamespacedName]time.Time
	slots     map[types.NamespacedName]upgrade.Slot // observed (see the type's comment); only workspaces in flight
	seeded    bool                                  // slots has been listed from the cache once
	waiting   []types.NamespacedName
	isWaiting map[types.NamespacedName]bool
	announced map[types.UID]bool
}

type reservation struct {
	name string
	at   time.Time
}

// admission is the gate's answer to one acquire: ok, or the limit that holds it back.
type admission struct {
	ok bool
	// inFlight and waitingForNode are the counts the answer was made from.
	inFlight, waitingForNode int
	// byPending: held back by --max-pending-upgrades (else by --max-concurrent-upgrades).
	byPending bool
	// stale: held back because this process has just started the same workspace's upgrade under
	// another pod name that the cache does not show yet (a stale read), not by a limit.
	stale bool
}

func newGate(max, pending int, reader client.Reader, wake chan<- event.GenericEvent) *gate {
	return &gate{max: max, pending: pending, reader: reader, wake: wake, reserved: map[types.NamespacedName]reservation{},
		finished: map[types.NamespacedName]time.Time{}, slots: map[types.NamespacedName]upgrade.Slot{},
		isWaiting: map[types.NamespacedName]bool{}, announced: map[types.UID]bool{}}
}

// acquire admits the upgrade of key creating pod name, or says which limit holds it back. Until
// the cache shows the pod, it counts as waiting for a node (upgrade.Slot.WaitingForNode).
func (g *gate) acquire(ctx context.Context, key types.NamespacedName, name string, now time.Time) (admission, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, has := g.reserved[key]; has && now.Sub(r.at) < reservationTTL {
		// Same name: a retry of the create this process made (AlreadyExists makes it harmless).
		// Another name: a stale read; wait until the cache shows the first pod.
		return admission{ok: r.name == name, inFlight: len(g.reserved), stale: r.name != name}, nil
	}
	if g.max <= 0 && g.pending <= 0 {
		delete(g.finished, key)
		g.reserved[key] = reservation{name: name, at: now}
		return admission{ok: true}, nil
	}
	if !g.seeded {
		all, err := g.inFlight(ctx)
		if err != nil {
			return admission{}, err
		}
		g.slots, g.seeded = all, true
	}
	slots := g.slots
	var a admission
	for _, s := range slots {
		a.inFlight++
		if s.WaitingForNode {
			a.waitingForNode++
		}
	}
	for k, at := range g.finished {
		if now.Sub(at) >= reservationTTL {
			delete(g.finished, k)
			continue
		}
		if s, has := slots[k]; has {
			a.inFlight--
			if s.WaitingForNode {
				a.waitingForNode--
			}
		}
	}
	for k, r := range g.reserved {
		if now.Sub(r.at) >= reservationTTL {
			delete(g.reserved, k)
			continue
		}
		s, has := slots[k]
		if !has {
			a.inFlight++
		}
		if !s.WaitingForNode {
			a.waitingForNode++
		}
	}
	switch {
	case g.pending > 0 && a.waitingForNode >= g.pending:
		a.byPending = true
	case g.max > 0 && a.inFlight >= g.max:
	default:
		a.ok = true
	}
	if !a.ok {
		if !g.isWaiting[key] {
			g.isWaiting[key] = true
			g.waiting = append(g.waiting, key)
		}
		return a, nil
	}
	delete(g.finished, key)
	g.reserved[key] = reservation{name: name, at: now}
	if g.isWaiting[key] {
		delete(g.isWaiting, key)
	}
	return a, nil
}

// inFlight lists, from the cache, the workspaces with an upgrade in flight. It reads the cache's
// own pods (cached) where it can: a List copies every pod struct into the PodList, deep copy or
// not (1.2 KB per pod, 12 MB of garbage at 10,000 workspaces).
func (g *gate) inFlight(ctx context.Context) (map[types.NamespacedName]upgrade.Slot, error) {
	if g.cached != nil {
		if pods, ok := g.cached(); ok {
			return upgrade.Slots(pods), nil
		}
	}
	var list corev1.PodList
	if err := g.reader.List(ctx, &list, client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list workspace pods to count upgrades in flight: %w", err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return upgrade.Slots(pods), nil
}

// observed updates key's slot from its pods as the cache shows them, drops key's reservation once
// the cache shows the pod it was for, and its finished mark once the cache no longer shows the
// upgrade in flight. When key stops waiting for a node (its new pod was bound, or the cache now
// shows a reserved pod already placed), it wakes waiting workspaces as a finished upgrade does.
func (g *gate) observed(key types.NamespacedName, pods []*corev1.Pod) {
	slot := upgrade.SlotOf(pods)
	g.mu.Lock()
	r, reserved := g.reserved[key]
	before := g.slots[key].WaitingForNode || reserved
	if slot.InFlight {
		g.slots[key] = slot
	} else {
		delete(g.slots, key)
	}
	if _, has := g.finished[key]; has && !slot.InFlight {
		delete(g.finished, key)
	}
	if reserved {
		for _, p := range pods {
			if p.Name == r.name {
				delete(g.reserved, key)
				reserved = false
				break
			}
		}
	}
	after := slot.WaitingForNode || reserved
	freed := before && !after && g.pending > 0
	g.mu.Unlock()
	if freed {
		g.wakeWaiting()
	}
}

// awaitCreate bounds how long a workspace waits for the cache to show a pod this process has
// just created for it (awaiting) before it is planned again regardless.
const awaitCreate = 5 * time.Second

// awaiting reports whether this process has created (or is creating) upgraded pod name for key
// that the cache does not show yet, and for how much longer to wait for it. A plan made from such
// a view starts the same upgrade again: a create answered AlreadyExists and a read, two round
// trips for nothing on a busy API server. The pod's own watch event brings key back.
func (g *gate) awaiting(key types.NamespacedName, now time.Time) (name string, wait time.Duration, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, has := g.reserved[key]
	if !has {
		return "", 0, false
	}
	if left := awaitCreate - now.Sub(r.at); left > 0 {
		return r.name, left, true
	}
	return "", 0, false
}

// finish records that this process concluded key's upgrade with a write the cache may not show
// yet: it stops counting at once. It also releases key (see release).
func (g *gate) finish(key types.NamespacedName, now time.Time) {
	g.mu.Lock()
	g.finished[key] = now
	g.mu.Unlock()
	g.release(key)
}

// release frees key's reservation (its upgrade ended or never started) and wakes waiting
// workspaces (wakeWaiting).
func (g *gate) release(key types.NamespacedName) {
	g.mu.Lock()
	delete(g.reserved, key)
	g.mu.Unlock()
	g.wakeWaiting()
}

// wakeWaiting wakes waiting workspaces for one freed slot: two, as some of them may have been
// served meanwhile.
func (g *gate) wakeWaiting() {
	g.mu.Lock()
	var wake []types.NamespacedName
	for len(g.waiting) > 0 && len(wake) < 2 {
		k := g.waiting[0]
		g.waiting = g.waiting[1:]
		if g.isWaiting[k] {
			delete(g.isWaiting, k)
			wake = append(wake, k)
		}
	}
	g.mu.Unlock()
	for _, k := range wake {
		select {
		case g.wake <- keyEvent(k):
		default: // full: the waiting workspace comes back on its own timer
		}
	}
}

// forget drops everything about a workspace that has no pods any more.
func (g *gate) forget(key types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.reserved, key)
	delete(g.finished, key)
	delete(g.slots, key)
	delete(g.isWaiting, key)
}

// announce reports whether the "queued" Event for pod uid is still to be recorded (once per pod
// per process: a restart may say it again, which is harmless).
func (g *gate) announce(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.announced[uid] {
		return false
	}
	if len(g.announced) > 100000 {
		g.announced = map[types.UID]bool{}
	}
	g.announced[uid] = true
	return true
}

// waitingCount is the number of workspaces queued behind the limits, for the metrics.
func (g *gate) waitingCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.isWaiting)
}

func ctrlObjectMeta(k types.NamespacedName) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}
}

// deletedTTL bounds how long a pod this process deleted is remembered (deletedPods): the cache
// shows the deletion within a watch event; past this, a pass plans from the cache alone again.
const deletedTTL = time.Minute

// deletedPods remembers the pods (by UID) this process has deleted, like the ReplicaSet
// controller's deletion expectations: a pass planned from a cache that does not show the delete
// yet skips deleting the same pod again. A delete with a UID precondition that succeeded cannot be
// undone, so skipping it loses nothing.
type deletedPods struct {
	mu  sync.Mutex
	uid map[types.UID]time.Time
}

func (d *deletedPods) add(uid types.UID, now time.Time) {
	if uid == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.uid == nil {
		d.uid = map[types.UID]time.Time{}
	}
	for u, at := range d.uid {
		if now.Sub(at) >= deletedTTL {
			delete(d.uid, u)
		}
	}
	d.uid[uid] = now
}

func (d *deletedPods) recent(uid types.UID, now time.Time) bool {
	if uid == "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.uid[uid]
	return ok && now.Sub(at) < deletedTTL
}

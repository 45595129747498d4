package podcache

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// StartupGate orders the start-up so that the read path comes first (bench/history.md,
// "Fifth round"). At 10,000 workspaces the front end's views, the proxy's routes and the template
// registry each take the informer's initial list through their event handlers (a Describe and a
// JSON encoding per workspace for the views) while, without the gate, the controllers make their
// first pass over every workspace and the collector runs at the start-up's low target: on two
// cores they took the CPU the first list needed.
//
// Components that serve reads get their informers through Readers(mgr): every event handler
// they add is remembered. The gate opens once the cache has synced and every remembered handler
// has been handed the initial list (or Max after the gate started waiting, so that a handler that
// never syncs only delays the rest). Runnables added through Hold(mgr) (the controllers) start
// AfterReady after the gate opens. Check is a readiness check that fails until the gate opens,
// so that a replica is ready only when its lists come from the views and its proxy has its routes.
type StartupGate struct {
	// Max bounds the wait for the handlers after the cache has synced (default 30s).
	Max time.Duration
	// AfterReady holds the runnables added through Hold (the controllers) for that long after the
	// gate opened (the replica turned ready), so that the first requests after a start, lists
	// that encode every view, are not served beside the controllers' first pass over every
	// workspace and the collector it keeps busy (bench/history.md, "Tenth round: cold
	// start"). What waits: upgrades in flight, update policies, idle culling and phase Events
	// resume at most AfterReady later. A replica that becomes leader later than that starts its
	// controllers at once. Zero: they start when the gate opens.
	AfterReady time.Duration
	// Started is when the process started (main.go): the gate logs each step of the start-up
	// (the cache's sync, the gate's opening, the controllers' start) with the time since then,
	// the timeline of bench/history.md ("Tenth round: cold start"). Zero: no such logs.
	Started time.Time

	mu   sync.Mutex
	regs []toolscache.ResourceEventHandlerRegistration
	open chan struct{}
	once sync.Once
	// openedAt is when the gate opened: written once before open is closed.
	openedAt time.Time
	base     cache.Cache
	// held is closed AfterReady after open: the held runnables start then.
	held     chan struct{}
	heldOpen sync.Once
	// startedLog logs the controllers' start once.
	startedLog sync.Once
}

// stamp logs one step of the start-up with the time since the process started.
func (g *StartupGate) stamp(ctx context.Context, step string) {
	if g.Started.IsZero() {
		return
	}
	logf.FromContext(ctx).WithName("startup").Info(step, "sinceStart", time.Since(g.Started).Round(time.Millisecond).String())
}

// NewStartupGate returns a closed gate over c (the manager's cache).
func NewStartupGate(c cache.Cache) *StartupGate {
	return &StartupGate{base: c, open: make(chan struct{}), held: make(chan struct{})}
}

// Readers returns mgr whose cache remembers the event handlers added to the informers it hands
// out: set up the read path's components (front end, proxy, templates, UI) with it, before the
// manager starts.
func (g *StartupGate) Readers(mgr manager.Manager) manager.Manager {
	return readersManager{Manager: mgr, c: trackingCache{Cache: mgr.GetCache(), g: g}}
}

// Hold returns mgr whose Add holds every runnable until AfterReady after the gate opens: set up
// the controllers with it. A held runnable keeps its leader-election choice.
func (g *StartupGate) Hold(mgr manager.Manager) manager.Manager {
	return holdingManager{Manager: mgr, g: g}
}

// Opened is closed when the gate opens.
func (g *StartupGate) Opened() <-chan struct{} { return g.open }

// OpenedAt is when the gate opened (zero while it is closed). The held runnables start no
// sooner than AfterReady after it.
func (g *StartupGate) OpenedAt() time.Time {
	select {
	case <-g.open:
		return g.openedAt
	default:
		return time.Time{}
	}
}

// Released is closed when the held runnables may start: AfterReady after the gate opened.
func (g *StartupGate) Released() <-chan struct{} { return g.held }

// Controllers waits, through its WaitForCacheSync, until the held runnables may start (the
// controllers' first pass begins then, on the leader): ReleaseAfterSync lowers the collector's
// target from then on, not while the first requests are served.
func (g *StartupGate) Controllers() interface{ WaitForCacheSync(context.Context) bool } {
	return releasedWaiter{g}
}

type releasedWaiter struct{ g *StartupGate }

func (w releasedWaiter) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-w.g.held:
		return true
	case <-ctx.Done():
		return false
	}
}

// Check is a readiness check (healthz.Checker): it fails until the gate has opened.
func (g *StartupGate) Check(*http.Request) error {
	select {
	case <-g.open:
		return nil
	default:
		return fmt.Errorf("start-up: the views, routes and templates do not hold the informers' initial lists yet")
	}
}

// WaitForCacheSync waits until the gate opens and reports whether it did before ctx ended. It
// makes the gate usable where a cache's sync is waited for (ReleaseAfterSync).
func (g *StartupGate) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-g.open:
		return true
	case <-ctx.Done():
		return false
	}
}

// Start implements manager.Runnable: it waits for the cache and the handlers, opens the gate,
// releases the held runnables AfterReady later and returns. Add the gate to the manager (it runs
// on every replica): without it, held runnables never start.
func (g *StartupGate) Start(ctx context.Context) error {
	g.wait(ctx)
	select {
	case <-g.open:
	default:
		return nil // stopped before it opened
	}
	if g.AfterReady > 0 {
		t := time.NewTimer(g.AfterReady)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil
		}
	}
	g.heldOpen.Do(func() { close(g.held) })
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica serves reads.
func (g *StartupGate) NeedLeaderElection() bool { return false }

func (g *StartupGate) wait(ctx context.Context) {
	if !g.base.WaitForCacheSync(ctx) {
		return
	}
	// Each informer's initial list, as nogoo9's Cache timed it (Cache.Start stamps each sync):
	// only those that have synced. The wait above covered every informer the wrapped cache
	// holds; one it made and then dropped before its sync never syncs and must not hold the gate.
	if c, ok := g.base.(*Cache); ok && !g.Started.IsZero() {
		for _, l := range c.initialLists() {
			if l.inf.HasSynced() && l.waitSynced(ctx) {
				logf.FromContext(ctx).WithName("startup").Info("Initial list", l.keysAndValues(g.Started)...)
			}
		}
	}
	g.stamp(ctx, "Informers synced")
	max := g.Max
	if max <= 0 {
		max = 30 * time.Second
	}
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	g.mu.Lock()
	regs := append([]toolscache.ResourceEventHandlerRegistration(nil), g.regs...)
	g.mu.Unlock()
	for i, r := range regs {
		select {
		case <-r.HasSyncedChecker().Done():
		case <-deadline.C:
			pending := 0
			for _, r := range regs[i:] {
				if !r.HasSynced() {
					pending++
				}
			}
			logf.FromContext(ctx).Info("start-up gate opened without every read-path handler's initial list: /readyz passes and the controllers start AfterReady later; lists may be incomplete until those handlers catch up",
				"waited", max, "handlersPending", pending, "handlers", len(regs))
			g.openGate()
			g.stamp(ctx, "Ready without every read-path handler's initial list")
			return
		case <-ctx.Done():
			return
		}
	}
	g.openGate()
	g.stamp(ctx, "The read path holds the initial lists: ready")
}

func (g *StartupGate) openGate() {
	g.once.Do(func() {
		g.openedAt = time.Now()
		close(g.open)
	})
}

func (g *StartupGate) remember(r toolscache.ResourceEventHandlerRegistration) {
	g.mu.Lock()
	g.regs = append(g.regs, r)
	g.mu.Unlock()
}

type readersManager struct {
	manager.Manager
	c cache.Cache
}

func (m readersManager) GetCache() cache.Cache { return m.c }

type trackingCache struct {
	cache.Cache
	g *StartupGate
}

func (c trackingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return trackingInformer{Informer: i, g: c.g}, nil
}

func (c trackingCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	return trackingInformer{Informer: i, g: c.g}, nil
}

type trackingInformer struct {
	cache.Informer
	g *StartupGate
}

func (i trackingInformer) track(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		i.g.remember(r)
	}
	return r, err
}

func (i trackingInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.track(i.Informer.AddEventHandler(h))
}

func (i trackingInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.track(i.Informer.AddEventHandlerWithResyncPeriod(h, p))
}

func (i trackingInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.track(i.Informer.AddEventHandlerWithOptions(h, o))
}

type holdingManager struct {
	manager.Manager
	g *StartupGate
}

func (m holdingManager) Add(r manager.Runnable) error {
	return m.Manager.Add(heldRunnable{r: r, g: m.g})
}

// heldRunnable starts r once the gate has opened.
type heldRunnable struct {
	r manager.Runnable
	g *StartupGate
}

func (h heldRunnable) Start(ctx context.Context) error {
	if !h.g.Controllers().WaitForCacheSync(ctx) {
		return nil // stopped before the start-up's reads were ready
	}
	h.g.startedLog.Do(func() { h.g.stamp(ctx, "Controllers starting") })
	return h.r.Start(ctx)
}

func (h heldRunnable) NeedLeaderElection() bool {
	if l, ok := h.r.(manager.LeaderElectionRunnable); ok {
		return l.NeedLeaderElection()
	}
	return true // the manager's default for a runnable that does not say
}

package ui

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// ringSize is how many recent changes the hub remembers, so a stream that connects after its page
// was rendered replays what changed in between (more than that: it refreshes the whole list).
const ringSize = 4096

// maxPending bounds a subscriber's pending ids; beyond it the subscriber refreshes everything.
const maxPending = 2048

// Hub fans out "workspace id changed" notices from the pod informer (and "everything changed"
// from the template registry) to the open streams. It carries ids only: a stream reads the
// workspace itself through frontend.Service, with its own caller, so it sees what that caller
// may see and nothing more.
type Hub struct {
	// viewsNamespace is the namespace whose changes the hub hears from the front end's views
	// (FromViews) instead of from the informer: "" for none.
	viewsNamespace string

	mu   sync.Mutex
	seq  uint64
	ring [ringSize]change
	subs map[*Sub]struct{}
}

type change struct {
	seq uint64
	id  string // "" is every workspace (a template changed)
}

// NewHub returns a Hub. Register it on the pod informer (AddEventHandler) and subscribe
// TemplateChanged to the template registry.
func NewHub() *Hub { return &Hub{subs: map[*Sub]struct{}{}} }

// OnAdd, OnUpdate and OnDelete implement toolscache.ResourceEventHandler for the pod informer.
func (h *Hub) OnAdd(obj any, _ bool) { h.onPod(obj) }
func (h *Hub) OnUpdate(oldObj, newObj any) {
	h.onPod(newObj)
	// A pod relabelled out of a workspace (or into another) changes the one it left too.
	if o, ok := oldObj.(metav1.Object); ok {
		if n, ok := newObj.(metav1.Object); !ok || workspace.IDOf(o) != workspace.IDOf(n) || workspace.IsWorkspaceObject(o) != workspace.IsWorkspaceObject(n) {
			h.onPod(oldObj)
		}
	}
}
func (h *Hub) OnDelete(obj any) { h.onPod(obj) }

func (h *Hub) onPod(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(metav1.Object)
	if !ok || !podcache.IsPod(obj) || !workspace.IsWorkspaceObject(p) || p.GetNamespace() == h.viewsNamespace {
		return
	}
	if id := workspace.IDOf(p); id != "" {
		h.changed(id)
	}
}

// FromViews makes the hub hear of changes to ns's workspaces from svc's views, after they apply
// them, instead of from the pod informer: a stream reads that namespace's workspaces from the
// views, and the informer may tell the hub first (frontend.Service.OnViewChange). Call it before
// registering the hub on the informer. Without views it changes nothing.
func (h *Hub) FromViews(svc *frontend.Service) {
	if svc.OnViewChange(h.changed) {
		h.viewsNamespace = svc.HomeNamespace()
	}
}

// TemplateChanged is the template registry's Subscribe callback: a new version can make any
// workspace outdated, so every stream refreshes.
func (h *Hub) TemplateChanged(string) { h.changed("") }

func (h *Hub) changed(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.ring[h.seq%ringSize] = change{seq: h.seq, id: id}
	for s := range h.subs {
		s.add(id)
	}
}

// Seq is the number of the latest change: a page records it, and its stream replays what
// changed after it.
func (h *Hub) Seq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// Subscribe opens a subscription whose pending set already holds the changes after since (or
// "everything", if the hub no longer remembers them all). Close it when done.
func (h *Hub) Subscribe(since uint64) *Sub {
	s := &Sub{hub: h, ids: map[string]struct{}{}, ch: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case since > h.seq:
		s.add("") // a page from before a restart: the numbers mean nothing now
	case h.seq-since >= ringSize:
		s.add("")
	default:
		for n := since + 1; n <= h.seq; n++ {
			s.add(h.ring[n%ringSize].id)
		}
	}
	s.seq = h.seq
	h.subs[s] = struct{}{}
	return s
}

// Sub is one stream's subscription.
type Sub struct {
	hub *Hub
	ch  chan struct{}

	mu  sync.Mutex
	ids map[string]struct{}
	all bool
	seq uint64
}

// add runs under hub.mu.
func (s *Sub) add(id string) {
	s.mu.Lock()
	switch {
	case s.all:
	case id == "" || len(s.ids) >= maxPending:
		s.all, s.ids = true, map[string]struct{}{}
	default:
		s.ids[id] = struct{}{}
	}
	s.seq = s.hub.seq
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// C receives a value when changes are pending.
func (s *Sub) C() <-chan struct{} { return s.ch }

// Pending reports whether Take would return anything.
func (s *Sub) Pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all || len(s.ids) > 0
}

// Take returns and clears the pending changes: the ids, or all when every workspace may have
// changed, and the hub's change number they bring the subscriber up to.
func (s *Sub) Take() (ids []string, all bool, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.ids {
		ids = append(ids, id)
	}
	all, seq = s.all, s.seq
	s.ids, s.all = map[string]struct{}{}, false
	return ids, all, seq
}

// Close ends the subscription.
func (s *Sub) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	delete(s.hub.subs, s)
}

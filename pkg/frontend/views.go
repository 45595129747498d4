package frontend

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// PodInformer is the part of the manager cache's pod informer that the views subscribe to
// (mgr.GetCache().GetInformer(ctx, &corev1.Pod{})).
type PodInformer interface {
	AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
}

// views keeps one ready-made view per workspace, kept current from the pod informer's events. An
// event recomputes only the workspace of the pod that changed (its pods, newest first, and the
// clock note's kind), so a REST list of 10,000 workspaces costs a copy of pointers under a read
// lock and the JSON each view encoded once, instead of grouping every pod and a reflective
// encoding. A list that needs values (MCP, the UI) describes each workspace from its pods (about
// 1.7 µs each): keeping the values too cost about 400 bytes per workspace.
//
// Entries are immutable once published: an event replaces the workspace's *entry, so a reader
// that copied the pointers keeps a consistent snapshot without holding the lock.
type views struct {
	namespace string

	mu      sync.RWMutex
	byID    map[string]*entry
	all     []*entry            // every entry, sorted by id (unless unsorted)
	byOwner map[string][]*entry // each owner's entries, sorted by id (unless unsorted)
	// unsorted says all and byOwner lag byID: the workspaces of the informer's initial list are
	// filed in byID only (an insertion in order moved half the list per workspace: O(n²),
	// 0.07-0.2 s of CPU at 10,000 on the start-up's path, bench/history.md, "Eleventh round:
	// cold start"), and the lists are made from byID and sorted once, by the first read or the
	// first other change, however many pods each workspace has.
	unsorted bool

	// changed, when set (Service.OnViewChange), is called with each workspace id an event
	// changed, after the views have applied it and outside the lock.
	changed atomic.Pointer[func(id string)]

	reg toolscache.ResourceEventHandlerRegistration
}

// entry is the view of one workspace.
type entry struct {
	// template is the registry key of the template the workspace follows (workspace.TemplateKey).
	id, owner, template string
	// pods are the workspace's cached pods (podcache.Pod, the informer store's own: read only),
	// newest first; podList materialises them when a reader needs *corev1.Pod.
	pods []*podcache.Pod
	// clock says how to add the clock-dependent note ("pending for 2m0s") at read time to
	// info(), which has none. The Info itself is not kept: it is a copy of what the pods hold
	// (about 400 bytes per workspace), made again from them when a list needs values (10,000 in
	// about 17 ms); the REST list reads the cached JSON (enc) instead.
	clock clockNote
	// enc caches the JSON encoding for the template version it was made with.
	enc atomic.Pointer[encoded]
}

func newViews(namespace string) *views {
	return &views{namespace: namespace, byID: map[string]*entry{}, byOwner: map[string][]*entry{}}
}

// synced reports whether the informer's initial list has been delivered to the views.
func (v *views) synced() bool { return v.reg != nil && v.reg.HasSynced() }

// OnAdd, OnUpdate and OnDelete implement toolscache.ResourceEventHandler. Create, update and
// delete are one operation: file the pod (or its absence) under its workspace and recompute it.
// The workspace a pod was filed under is read from the event's old object (an update's, or the
// deleted pod: the informer hands each handler the object it last delivered), not from a map of
// every pod's name: that map cost about 100 bytes per workspace (bench/history.md).
func (v *views) OnAdd(obj any, initial bool) { v.setPod(nil, obj, initial) }
func (v *views) OnUpdate(oldObj, newObj any) { v.setPod(oldObj, newObj, false) }
func (v *views) OnDelete(obj any)            { v.setPod(obj, nil, false) }

// workspaceOf is the workspace id obj is filed under in v: "" for none (not a pod, not a
// workspace pod, another namespace).
func (v *views) workspaceOf(obj any) (*podcache.Pod, string) {
	pod := podcache.Of(obj)
	if pod == nil || pod.Namespace != v.namespace || !workspace.IsWorkspaceObject(pod) {
		return pod, ""
	}
	return pod, workspace.IDOf(pod)
}

// setPod files pod now (nil: deleted) under its workspace, and takes the pod as it was before
// (nil: new) out of the workspace it was filed under when that differs. initial says the pod
// comes with the informer's initial list: its workspace's entry is then filed by id only, and the
// next read or other change makes the lists.
func (v *views) setPod(before, now any, initial bool) {
	prev, prevID := v.workspaceOf(before)
	pod, id := v.workspaceOf(now)
	if prevID == "" && id == "" {
		return
	}
	v.mu.Lock()
	if prevID != "" && prevID != id {
		v.rebuild(prevID, withPod(v.byID[prevID], prev.Name, nil))
	}
	if id != "" {
		if initial {
			v.byID[id] = newCachedEntry(withPod(v.byID[id], pod.Name, pod))
			v.unsorted = true
		} else {
			v.rebuild(id, withPod(v.byID[id], pod.Name, pod))
		}
	}
	v.mu.Unlock()
	if fn := v.changed.Load(); fn != nil {
		if prevID != "" && prevID != id {
			(*fn)(prevID)
		}
		if id != "" {
			(*fn)(id)
		}
	}
}

// withPod returns e's pods without the pod called name, plus pod when not nil: a fresh slice.
func withPod(e *entry, name string, pod *podcache.Pod) []*podcache.Pod {
	var out []*podcache.Pod
	if e != nil {
		out = make([]*podcache.Pod, 0, len(e.pods)+1)
		for _, p := range e.pods {
			if p.Name != name {
				out = append(out, p)
			}
		}
	}
	if pod != nil {
		out = append(out, pod)
	}
	return out
}

// sortLists makes the lists from byID, sorted by id, if the initial list left them behind it:
// once, O(n log n). v.mu must be held.
func (v *views) sortLists() {
	if !v.unsorted {
		return
	}
	all := make([]*entry, 0, len(v.byID))
	for _, e := range v.byID {
		all = append(all, e)
	}
	slices.SortFunc(all, func(a, b *entry) int { return strings.Compare(a.id, b.id) })
	byOwner := make(map[string][]*entry, len(v.byOwner))
	for _, e := range all { // in id order, so each owner's list is too
		byOwner[e.owner] = append(byOwner[e.owner], e)
	}
	v.all, v.byOwner, v.unsorted = all, byOwner, false
}

// rebuild publishes the entry of workspace id made from pods (none: the workspace is gone).
// v.mu must be held.
func (v *views) rebuild(id string, pods []*podcache.Pod) {
	v.sortLists()
	old := v.byID[id]
	if len(pods) == 0 {
		if old != nil {
			delete(v.byID, id)
			v.all = removeSorted(v.all, id)
			v.setOwnerList(old.owner, removeSorted(v.byOwner[old.owner], id))
		}
		return
	}
	e := newCachedEntry(pods)
	v.byID[id] = e
	v.all = putSorted(v.all, e)
	if old != nil && old.owner != e.owner {
		v.setOwnerList(old.owner, removeSorted(v.byOwner[old.owner], id))
	}
	v.byOwner[e.owner] = putSorted(v.byOwner[e.owner], e)
}

func (v *views) setOwnerList(owner string, list []*entry) {
	if len(list) == 0 {
		delete(v.byOwner, owner)
		return
	}
	v.byOwner[owner] = list
}

func searchID(list []*entry, id string) (int, bool) {
	i := sort.Search(len(list), func(i int) bool { return list[i].id >= id })
	return i, i < len(list) && list[i].id == id
}

// putSorted replaces the entry with e's id, or inserts e in id order.
func putSorted(list []*entry, e *entry) []*entry {
	i, found := searchID(list, e.id)
	if found {
		list[i] = e
		return list
	}
	list = append(list, nil)
	copy(list[i+1:], list[i:])
	list[i] = e
	return list
}

func removeSorted(list []*entry, id string) []*entry {
	i, found := searchID(list, id)
	if !found {
		return list
	}
	copy(list[i:], list[i+1:])
	list[len(list)-1] = nil
	return list[:len(list)-1]
}

// snapshot copies the entries a list shows, in id order: every workspace, or owner's. after and
// limit page through them (limit 0: no limit); more reports whether entries follow the page.
func (v *views) snapshot(owner string, all bool, after string, limit int) (out []*entry, more bool) {
	v.mu.RLock()
	for v.unsorted {
		v.mu.RUnlock()
		v.mu.Lock()
		v.sortLists()
		v.mu.Unlock()
		v.mu.RLock()
	}
	defer v.mu.RUnlock()
	list := v.all
	if !all {
		list = v.byOwner[owner]
	}
	if after != "" {
		i, found := searchID(list, after)
		if found {
			i++
		}
		list = list[i:]
	}
	if limit > 0 && len(list) > limit {
		list, more = list[:limit], true
	}
	return append([]*entry(nil), list...), more
}

// get returns the entry of workspace id, or nil.
func (v *views) get(id string) *entry {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.byID[id]
}

// newEntry is the entry of one workspace's pods as a List returns them (lists made without the
// views): each is reduced as the cache reduces it.
func newEntry(pods []*corev1.Pod) *entry {
	cached := make([]*podcache.Pod, len(pods))
	for i, p := range pods {
		cached[i] = podcache.Of(p)
	}
	return newCachedEntry(cached)
}

// newCachedEntry is the entry of one workspace's cached pods, in any order.
func newCachedEntry(cached []*podcache.Pod) *entry {
	// The pods are materialised for this computation only (the entry keeps the cached pods and
	// strings): into reused memory, not a pod struct and two maps per pod of the initial list.
	s := podcache.GetScratch()
	defer s.Release()
	pods := workspace.NewestFirst(s.Materialize(cached))
	ordered := make([]*podcache.Pod, len(pods))
	for i, p := range pods {
		for _, c := range cached {
			if c.UID == p.UID && c.Name == p.Name {
				ordered[i] = c
			}
		}
	}
	info := workspace.Describe(pods, "", time.Time{})
	return &entry{
		id: info.ID, owner: info.Owner, template: workspace.JoinTemplateKey(info.TemplateNamespace, info.Template),
		pods: ordered, clock: probeClock(pods, info),
	}
}

func materialize(cached []*podcache.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(cached))
	for i, c := range cached {
		out[i] = c.Materialize()
	}
	return out
}

// podList is the entry's pods, newest first, materialised for this call (read only: their slices
// are the cache's; their label and annotation maps are built for the call).
func (e *entry) podList() []*corev1.Pod { return materialize(e.pods) }

// info is workspace.Describe of the entry's pods with no latest version and the clock at zero:
// its messages carry no clock-dependent note. The pods never change (an event makes a new
// entry), so every call returns the same.
func (e *entry) info() workspace.Info { return e.describe("", time.Time{}) }

// describe is workspace.Describe of the entry's pods, materialised into reused memory for the
// call (Info holds only strings and values).
func (e *entry) describe(latest string, now time.Time) workspace.Info {
	s := podcache.GetScratch()
	defer s.Release()
	return workspace.Describe(s.Materialize(e.pods), latest, now)
}

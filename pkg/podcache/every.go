package podcache

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Every holds a pointer to every cached workspace pod (the store's compact Pod), kept by an event
// handler on the pod informer, for the readers of every workspace at once (the /metrics
// collector, the upgrade gate's first count, the update policies' ticks). A List through the
// cache makes a pod struct and two maps per pod in the PodList, deep copy or not: 1.2 KB per pod,
// 12 MB per /metrics scrape at 10,000 workspaces. Every.Workspaces hands out one workspace's pods
// at a time, materialised into a buffer reused with its label and annotation maps, instead: a
// reader keeps none of them past its call except through Keep, and writes to none of their
// slices, which are the cache's (TestCollectorNeverMutatesTheCache).
//
// The map is keyed by the pod's UID (unique in the cluster, the pod's own string: 24 bytes a slot,
// 36 bytes per pod with the map's room at 10,000 pods, against 78 keyed by namespace and name). A
// deleted pod is found by the UID of the object the informer hands over, which for a watch's
// deletion is the pod's final state, not the object it handed over before; an update whose old
// and new objects differ in UID (a pod deleted and made again under its name while the watch was
// down, seen in a relist) replaces the one with the other (TestEveryFollowsTheInformer).
type Every struct {
	mu     sync.RWMutex
	pods   map[types.UID]*Pod
	synced toolscache.ResourceEventHandlerRegistration
}

// NewEvery registers Every on the pod informer of c (the manager's cache; call before or after
// it starts).
func NewEvery(ctx context.Context, c informers) (*Every, error) {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("pod informer for the list of every workspace: %w", err)
	}
	e := &Every{pods: map[types.UID]*Pod{}}
	e.synced, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.replace(nil, obj) },
		UpdateFunc: e.replace,
		DeleteFunc: func(obj any) { e.replace(obj, nil) },
	})
	if err != nil {
		return nil, fmt.Errorf("watch pods for the list of every workspace: %w", err)
	}
	return e, nil
}

// Synced says whether Every has had the informer's initial list (Pods and Workspaces answer).
func (e *Every) Synced() bool { return e.synced.HasSynced() }

// replace drops the object the informer handed over before (nil: none) and adds the one it hands
// over now (nil: the pod was deleted).
func (e *Every) replace(before, now any) {
	old, p := Of(before), Of(now)
	if old == nil && p == nil {
		return
	}
	e.mu.Lock()
	if old != nil {
		delete(e.pods, old.UID)
	}
	if p != nil {
		e.pods[p.UID] = p
	}
	e.mu.Unlock()
}

// Pods returns every cached workspace pod, materialised (Pod.Materialize: its slices shared with
// the cache, read only; a pod struct and two maps each), or ok false until the informer has handed over its initial list.
// Readers of every workspace use Workspaces, which makes no pod struct per pod.
func (e *Every) Pods() (pods []*corev1.Pod, ok bool) {
	if !e.Synced() {
		return nil, false
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	pods = make([]*corev1.Pod, 0, len(e.pods))
	for _, p := range e.pods {
		pods = append(pods, p.Materialize())
	}
	return pods, true
}

// Keep returns a copy of a pod that Workspaces handed to fn, for fn to keep past its call: the
// pod struct and its label and annotation maps, which Workspaces reuses for the next workspace.
func Keep(p *corev1.Pod) *corev1.Pod {
	c := *p
	c.Labels, c.Annotations = maps.Clone(p.Labels), maps.Clone(p.Annotations)
	return &c
}

// Workspaces calls fn with the pods of each cached workspace (one namespace and workspace id),
// newest first, or returns false (without calling fn) until the informer has handed over its
// initial list. The pods are materialised into a buffer reused from one call of fn to the next:
// fn reads them and keeps none of them, nor their label and annotation maps, which are reused
// too (their strings and other slices it may keep: they are the cache's, read only). At 10,000
// workspaces a call allocates the sorted list of pointers, not a pod struct nor two maps per pod
// (12 MB and 14 MB per /metrics scrape).
func (e *Every) Workspaces(fn func(pods []*corev1.Pod)) bool {
	if !e.Synced() {
		return false
	}
	e.mu.RLock()
	all := make([]*Pod, 0, len(e.pods))
	for _, p := range e.pods {
		if workspace.IsWorkspaceObject(p) {
			all = append(all, p)
		}
	}
	e.mu.RUnlock()
	slices.SortFunc(all, func(a, b *Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(workspace.IDOf(a), workspace.IDOf(b)))
	})
	var buf []corev1.Pod
	var maps [][2]map[string]string // buf's label and annotation maps, reused likewise
	var group []*corev1.Pod
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].Namespace == all[i].Namespace && workspace.IDOf(all[j]) == workspace.IDOf(all[i]) {
			j++
		}
		if n := j - i; cap(buf) < n {
			buf = make([]corev1.Pod, n)
			maps = append(maps, make([][2]map[string]string, n-len(maps))...)
		}
		group = group[:0]
		for k, p := range all[i:j] {
			p.materializeInto(&buf[k], maps[k][0], maps[k][1])
			if buf[k].Labels != nil {
				maps[k][0] = buf[k].Labels
			}
			if buf[k].Annotations != nil {
				maps[k][1] = buf[k].Annotations
			}
			group = append(group, &buf[k])
		}
		fn(workspace.NewestFirst(group))
		i = j
	}
	return true
}

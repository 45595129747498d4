package podcache

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// Every holds a pointer to every cached workspace pod, kept by an event handler on the pod
// informer, for the readers of every workspace at once (the /metrics collector, the upgrade
// gate's first count). A List through controller-runtime's cache copies each pod struct into the
// PodList, deep copy or not (client.UnsafeDisableDeepCopy spares only the maps and slices): 1.2 KB
// per pod, 12 MB per /metrics scrape at 10,000 workspaces. Every hands out the cache's own objects
// instead. They are read only: write to one and the cache is wrong
// (TestCollectorNeverMutatesTheCache).
//
// The map is keyed by the pod's UID (unique in the cluster, the pod's own string: 24 bytes a slot,
// 36 bytes per pod with the map's room at 10,000 pods, against 78 keyed by namespace and name). A
// deleted pod is found by the UID of the object the informer hands over, which for a watch's
// deletion is the pod's final state, not the object it handed over before; an update whose old
// and new objects differ in UID (a pod deleted and made again under its name while the watch was
// down, seen in a relist) replaces the one with the other (TestEveryFollowsTheInformer).
type Every struct {
	mu     sync.RWMutex
	pods   map[types.UID]*corev1.Pod
	synced toolscache.ResourceEventHandlerRegistration
}

// NewEvery registers Every on the pod informer of c (the manager's cache; call before or after
// it starts).
func NewEvery(ctx context.Context, c informers) (*Every, error) {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("pod informer for the list of every workspace: %w", err)
	}
	e := &Every{pods: map[types.UID]*corev1.Pod{}}
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

// replace drops the object the informer handed over before (nil: none) and adds the one it hands
// over now (nil: the pod was deleted).
func (e *Every) replace(before, now any) {
	if t, ok := before.(toolscache.DeletedFinalStateUnknown); ok {
		before = t.Obj
	}
	old, _ := before.(*corev1.Pod)
	p, _ := now.(*corev1.Pod)
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

// Pods returns every cached workspace pod (the cache's own objects: read only, never written),
// or ok false until the informer has handed over its initial list.
func (e *Every) Pods() (pods []*corev1.Pod, ok bool) {
	if !e.synced.HasSynced() {
		return nil, false
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	pods = make([]*corev1.Pod, 0, len(e.pods))
	for _, p := range e.pods {
		pods = append(pods, p)
	}
	return pods, true
}

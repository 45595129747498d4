package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A workspace pod's node (docs/reliability.md, "A node that disappears"). The controller watches
// Nodes (metadata only: name and existence are all it reads) so that the deletion of a Node
// wakes every workspace with a pod bound to it, and the lifecycle planner replaces those pods
// before the cluster's pod GC deletes them (about 40 s later) and the workspace with them.

// indexNodeName is the pod field index of spec.nodeName.
const indexNodeName = "nogoo9.spec.nodeName"

func podNodeName(o client.Object) []string {
	if n := podcache.NodeName(o); n != "" && workspace.IsWorkspaceObject(o) {
		return []string{n}
	}
	return nil
}

// nodeMeta is the metadata-only Node object the cache holds.
func nodeMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	return m
}

// nodeRequests maps a Node to the workspaces with a pod bound to it.
func (r *WorkspaceReconciler) nodeRequests(ctx context.Context, obj client.Object) []reconcile.Request {
	var list corev1.PodList
	if err := r.Reader.List(ctx, &list, client.MatchingFields{indexNodeName: obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List pods of a node", "node", obj.GetName())
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var out []reconcile.Request
	for i := range list.Items {
		p := &list.Items[i]
		k := types.NamespacedName{Namespace: p.Namespace, Name: workspace.ID(p)}
		if !seen[k] {
			seen[k] = true
			out = append(out, reconcile.Request{NamespacedName: k})
		}
	}
	return out
}

// goneNodes returns the nodes that running pods of the workspace are bound to and that no longer
// exist. A node missing from the cache is confirmed with a read from the API server: a pod may be
// bound to a node the Node watch has not delivered yet, and a pod is never replaced on a cache's
// word alone.
func (r *WorkspaceReconciler) goneNodes(ctx context.Context, pods []*corev1.Pod) (map[string]bool, error) {
	var gone map[string]bool
	checked := map[string]bool{}
	for _, p := range pods {
		n := p.Spec.NodeName
		if n == "" || p.DeletionTimestamp != nil || workspace.IsStoppedPod(p) || checked[n] {
			continue
		}
		checked[n] = true
		// Only whether it exists matters: no copy of its metadata (every pass of every workspace
		// asks, a bulk upgrade's passes included). The set of cached node names answers without
		// a lookup in the cache; a node it does not show (not delivered to its handler yet, or
		// a reconciler set up without it) is looked up as before.
		if r.nodes.has(n) {
			continue
		}
		err := r.Reader.Get(ctx, client.ObjectKey{Name: n}, nodeMeta(), client.UnsafeDisableDeepCopy)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read node %s of pod %s from the cache: %w", n, p.Name, err)
		}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: n}, nodeMeta()); {
		case apierrors.IsNotFound(err):
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[n] = true
		case err != nil:
			return nil, fmt.Errorf("read node %s of pod %s: %w", n, p.Name, err)
		}
	}
	return gone, nil
}

// deleteLostPod deletes a pod whose node is gone with grace period 0 (no kubelet will ever confirm
// a graceful delete), with its UID as precondition, once the copy that keeps the workspace (Keep)
// is confirmed on the API server.
func (r *WorkspaceReconciler) deleteLostPod(ctx context.Context, a lifecycle.Action) (bool, error) {
	var keep corev1.Pod
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(a.Keep), &keep); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read pod %s before deleting lost pod %s: %w", a.Keep.Name, a.Pod.Name, err)
	}
	if keep.UID != a.Keep.UID || keep.DeletionTimestamp != nil {
		return false, nil
	}
	// As the planner saw it: a write on the pod since (a person's pin or maintenance, which the
	// copy was just given from the version the planner saw) fails the delete, and the next pass
	// carries it (lifecycle.retire) instead of losing it with the pod.
	pre := client.Preconditions{UID: &a.Pod.UID}
	if rv := a.Pod.ResourceVersion; rv != "" {
		pre.ResourceVersion = &rv
	}
	err := r.Client.Delete(ctx, a.Pod, pre, client.GracePeriodSeconds(0))
	if apierrors.IsConflict(err) && pre.ResourceVersion != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Lost pod changed before its delete; re-planning", "pod", klog.KObj(a.Pod))
		return false, nil
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return true, nil // the pod GC (or a person) was first
	}
	if err != nil {
		return false, fmt.Errorf("delete lost pod %s: %w", a.Pod.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted pod of a lost node", "pod", klog.KObj(a.Pod), "node", a.Pod.Spec.NodeName, "keep", klog.KObj(&keep))
	r.lifecycleEvent(a)
	return true, nil
}

// nodeNames is the set of the Nodes the cache holds, by name, kept by a handler of the Node
// (metadata) informer. The node check asks it first: controller-runtime's Get of a cached Node
// copies it, managed fields included, whatever the caller asks (its multi-namespace cache, the
// one nogoo9 runs with a list of namespaces, drops Get's UnsafeDisableDeepCopy for cluster-scoped
// kinds), once per pass of every workspace: 1-2.5% of nogoo9's CPU samples in a bulk upgrade
// (bench/history.md, "Ninth round"). A nil set has no node.
//
// A node leaves the set before its deletion wakes the workspaces on it (gone): the handler does
// both, in that order, so the pass that the wake brings sees the node gone. The controller's own
// Node watch wakes them too, possibly before the handler has run: such a pass still sees the
// node, and the handler's wake brings the one that acts.
type nodeNames struct {
	mu    sync.RWMutex
	names map[string]struct{}
	gone  func(name string)
}

// watchNodeNames returns the set of the Nodes c caches, kept by a handler of c's Node metadata
// informer; gone is called with the name of each node deleted, after the set dropped it.
func watchNodeNames(ctx context.Context, c interface {
	GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error)
}, gone func(name string)) (*nodeNames, error) {
	inf, err := c.GetInformer(ctx, nodeMeta())
	if err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	s := &nodeNames{names: map[string]struct{}{}, gone: gone}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.set(obj, true) },
		UpdateFunc: func(_, obj any) { s.set(obj, true) },
		DeleteFunc: func(obj any) { s.set(obj, false) },
	}); err != nil {
		return nil, fmt.Errorf("watch the node informer: %w", err)
	}
	return s, nil
}

func (s *nodeNames) set(obj any, present bool) {
	name := ""
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, name = t.Obj, t.Key // a Node is cluster-scoped: its key is its name
	}
	if m, err := meta.Accessor(obj); err == nil {
		name = m.GetName()
	}
	if name == "" {
		// Nothing to file: a node the set cannot name is looked up in the cache, as without it.
		ctrl.Log.WithName("node-names").Error(fmt.Errorf("unexpected %T", obj), "a Node event without a name")
		return
	}
	s.mu.Lock()
	if present {
		s.names[name] = struct{}{}
	} else {
		delete(s.names, name)
	}
	s.mu.Unlock()
	if !present && s.gone != nil {
		s.gone(name)
	}
}

func (s *nodeNames) has(name string) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.names[name]
	return ok
}

// nodeGone wakes every workspace with a pod bound to node name (nodeRequests), in the
// background: on a replica that is not the leader nobody reads the channel, and the sends give
// up after a minute (a new leader reconciles every workspace when it starts anyway).
func (r *WorkspaceReconciler) nodeGone(name string) {
	go func() {
		ctx := context.Background()
		timeout := time.NewTimer(time.Minute)
		defer timeout.Stop()
		for _, req := range r.nodeRequests(ctx, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}) {
			select {
			case r.wake <- keyEvent(req.NamespacedName):
			case <-timeout.C:
				return
			}
		}
	}()
}

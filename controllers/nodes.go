package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
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
		// asks, a bulk upgrade's passes included).
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
	err := r.Client.Delete(ctx, a.Pod, client.Preconditions{UID: &a.Pod.UID}, client.GracePeriodSeconds(0))
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

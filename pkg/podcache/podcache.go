// Package podcache is how nogoo9 caches what it watches: which objects, filtered and stripped how
// (Options, Pods), and the field index on workspace pods that the controllers and the front end
// share (IndexWorkspaceID). main.go, the integration tests and the benchmarks all build their
// caches from here, so they cache exactly what production caches.
package podcache

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Pods is the cache entry for pods: only workspace pods, stripped of what nogoo9 never reads, so a
// cluster's other pods cost nothing.
func Pods() cache.ByObject {
	return cache.ByObject{
		Label:     labels.SelectorFromSet(labels.Set{workspace.LabelType: workspace.TypeWorkspace}),
		Transform: workspace.StripPod,
	}
}

// Options is the manager's cache: namespace's workspace pods (Pods), template ConfigMaps and
// PersistentVolumeClaims, stripped of managed fields.
func Options(namespace string) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: Pods(),
			&corev1.ConfigMap{}: {
				Label:     labels.SelectorFromSet(labels.Set{workspace.LabelPodTemplate: "true"}),
				Transform: workspace.StripManagedFields,
			},
			&corev1.PersistentVolumeClaim{}: {Transform: workspace.StripManagedFields},
		},
	}
}

// IndexWorkspaceID is the pod field index holding the workspace id, so one workspace's pods are
// listed without scanning every cached pod.
const IndexWorkspaceID = "nogoo9.workspaceID"

// WorkspaceID is the IndexWorkspaceID index function.
func WorkspaceID(o client.Object) []string {
	if p, ok := o.(*corev1.Pod); ok && workspace.IsWorkspacePod(p) {
		return []string{workspace.ID(p)}
	}
	return nil
}

// indexed records the indexers that already have IndexWorkspaceID: several components register
// it on one manager, and registering a name twice is an error.
var indexed sync.Map

// AddWorkspaceIDIndex registers IndexWorkspaceID on idx once; later calls for the same idx do
// nothing. Call it before the cache starts.
func AddWorkspaceIDIndex(ctx context.Context, idx client.FieldIndexer) error {
	if _, done := indexed.LoadOrStore(idx, true); done {
		return nil
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, IndexWorkspaceID, WorkspaceID); err != nil {
		indexed.Delete(idx)
		return fmt.Errorf("index pods by workspace id: %w", err)
	}
	return nil
}

// OptionsFor is Options over several namespaces (--namespaces): the same objects, stripped the
// same way, in each. OptionsFor([]string{ns}) equals Options(ns).
func OptionsFor(namespaces []string) cache.Options {
	o := Options(namespaces[0])
	for _, ns := range namespaces[1:] {
		o.DefaultNamespaces[ns] = cache.Config{}
	}
	return o
}

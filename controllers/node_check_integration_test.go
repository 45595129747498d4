package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
)

// TestTheNodeCheckCopiesNoNode: every pass of every workspace asks whether the nodes of its pods
// still exist (docs/reliability.md, "A node that disappears"). With the cache nogoo9 runs (one
// per watched namespace: controller-runtime's multi-namespace cache), controller-runtime's Get
// of a Node copies the cached object, managed fields included, whatever the caller asks: the
// check asks the set of cached node names first, which copies nothing. The answer stays the
// same: a cached node exists; a node neither the cache nor the API server has is gone, and so is
// a node deleted since, which also wakes the workspaces on it.
func TestTheNodeCheckCopiesNoNode(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "node-check")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-check-%d", time.Now().UnixNano()),
		Labels: map[string]string{"kubernetes.io/hostname": "node-check", "topology.kubernetes.io/zone": "z1"}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	// A second writer, so the node carries two managed-fields entries, as a real one does.
	if err := c.Patch(ctx, node, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"node.alpha.kubernetes.io/ttl":"0"}}}`)), client.FieldOwner("kubelet")); err != nil {
		t.Fatal(err)
	}

	mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
		// Two namespaces, so the cache is a multi-namespace cache, as nogoo9's.
		o.Cache = podcache.OptionsFor([]string{ns, newNamespace(t, c, "node-check-other")})
	})
	managerSeq.Lock()
	managerSeq.n++
	name := fmt.Sprintf("node-check-%d", managerSeq.n)
	managerSeq.Unlock()
	r := &WorkspaceReconciler{Client: c, Reader: mgr.GetCache(), APIReader: mgr.GetAPIReader(), Templates: &fakeTemplates{},
		Recorder: record.NewFakeRecorder(10), Opts: UpgradeOptions{Name: name}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, mgr)

	on := func(n string) []*corev1.Pod {
		return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: corev1.PodSpec{NodeName: n}}}
	}
	waitFor(t, 30*time.Second, "node "+node.Name+" in the set of cached nodes", func() bool { return r.nodes.has(node.Name) })
	gone, err := r.goneNodes(ctx, on(node.Name))
	if err != nil || len(gone) != 0 {
		t.Fatalf("goneNodes(pod on %s, which exists) = %v, %v; want none gone", node.Name, gone, err)
	}
	gone, err = r.goneNodes(ctx, on("node-check-never-existed"))
	if err != nil || !gone["node-check-never-existed"] {
		t.Fatalf("goneNodes(pod on a node that never existed) = %v, %v; want it gone", gone, err)
	}

	// What this avoids: a cache Get of the node (controller-runtime's lookups and the copy of
	// its metadata, managed fields among it) costs dozens of allocations; the set none.
	pods := on(node.Name)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := r.goneNodes(ctx, pods); err != nil {
			t.Fatal(err)
		}
	})
	var copied float64
	{
		meta := nodeMeta()
		if err := mgr.GetCache().Get(ctx, client.ObjectKey{Name: node.Name}, meta); err != nil {
			t.Fatal(err)
		}
		if len(meta.ManagedFields) < 2 {
			t.Fatalf("the cached node has %d managed-fields entries, want at least 2 (the test's premise)", len(meta.ManagedFields))
		}
		copied = testing.AllocsPerRun(200, func() {
			_ = mgr.GetCache().Get(ctx, client.ObjectKey{Name: node.Name}, nodeMeta(), client.UnsafeDisableDeepCopy)
		})
	}
	if allocs > copied/2 {
		t.Errorf("the node check allocates %.0f times per call, more than half of what a cache Get that copies the node costs (%.0f): it copies the node", allocs, copied)
	}
	t.Logf("node check: %.0f allocations per call; a cache Get of the node: %.0f", allocs, copied)

	// The node goes: the set drops it, the check finds it gone (the API server confirms).
	if err := c.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node "+node.Name+" dropped from the set of cached nodes", func() bool { return !r.nodes.has(node.Name) })
	gone, err = r.goneNodes(ctx, on(node.Name))
	if err != nil || !gone[node.Name] {
		t.Fatalf("goneNodes(pod on deleted node %s) = %v, %v; want it gone", node.Name, gone, err)
	}
}

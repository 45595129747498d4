package controllers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestAPassFromACacheBehindItsOwnDeleteDoesNotDeleteAgain: a Recreate start creates the new pod
// and deletes the old one in one pass. The new pod's watch event usually brings the workspace
// back before the cache shows the old pod's deletion; planned from that view, the pass used to
// read the new pod from the API server and delete the old pod again (two round trips for nothing
// on a busy API server, and the pass that removes the gate once the old pod is gone waited behind
// them). It now knows the pod is deleted and does neither; once the cache shows the old pod gone,
// the gate is removed as before.
func TestAPassFromACacheBehindItsOwnDeleteDoesNotDeleteAgain(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	cw := watchClient(t, cfg)
	// The deleted pod stays terminating, as on a real node, until released.
	ns, reg, old, claims := outdatedWorkspace(t, c, "own-delete", "hal", "vault", corev1.ReadWriteOncePod, true)
	var deletes atomic.Int32
	hooked := interceptor.NewClient(cw, interceptor.Funcs{
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes.Add(1)
			return cl.Delete(ctx, obj, opts...)
		},
	})
	api := &countingReader{Reader: c}
	r := snapshotReconciler("own-delete-test", hooked, snapshotCache{pods: []*corev1.Pod{old}, claims: claims}, api, reg, record.NewFakeRecorder(100), nil)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "vault"}}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("start pass: %v", err)
	}
	if got := deletes.Load(); got != 1 {
		t.Fatalf("the Recreate start made %d deletes, want 1 (the old pod)", got)
	}
	up := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: workspace.NextPodName(old, "v2")}, up); err != nil {
		t.Fatal(err)
	}

	// The cache shows the new pod but not yet the old pod's deletion.
	r.Reader = snapshotCache{pods: []*corev1.Pod{old, up}, claims: claims}
	reads := api.gets.Load()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("pass from a cache behind the delete: %v", err)
	}
	if got := deletes.Load(); got != 1 {
		t.Errorf("a pass from a cache behind this process's delete deleted again: %d deletes in all, want 1", got)
	}
	if got := api.gets.Load() - reads; got != 0 {
		t.Errorf("a pass from a cache behind this process's delete read %d pods from the API server, want 0", got)
	}

	// The old pod goes; the cache shows only the new pod: the gate is removed.
	if err := c.Patch(ctx, old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	r.Reader = snapshotCache{pods: []*corev1.Pod{up}, claims: claims}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("pass after the old pod is gone: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(up), up); err != nil {
		t.Fatal(err)
	}
	for _, g := range up.Spec.SchedulingGates {
		if g.Name == workspace.GateVolumeRelease {
			t.Errorf("the new pod is still gated after the old pod is gone")
		}
	}

	// Past deletedTTL the pod is no longer remembered: a pass plans from the cache alone again.
	if r.deleted.recent(old.UID, time.Now().Add(deletedTTL)) {
		t.Errorf("pod %s still remembered as deleted after %s", old.Name, deletedTTL)
	}
}

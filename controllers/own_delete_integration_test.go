package controllers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/spawner"
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
	cw, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("own-delete-%d", time.Now().UnixNano())
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	reg := &fakeTemplates{}
	reg.set(ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod))
	tmpl, _ := reg.Get("ide")
	old, claims, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: "hal", ID: "vault", Namespace: ns}, workspace.PodName("hal", "vault"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range claims {
		cl.Namespace = ns
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	old.Namespace = ns
	old.Annotations[workspace.AnnUpgradeRequested] = "true"
	// The kubelet's part: the deleted pod stays terminating, as on a real node, until released.
	old.Finalizers = []string{"test.nogoo9/hold"}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Patch(ctx, old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	reg.set(ideTemplate("v2", "ide:2", corev1.ReadWriteOncePod))
	var deletes atomic.Int32
	hooked := interceptor.NewClient(cw, interceptor.Funcs{
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes.Add(1)
			return cl.Delete(ctx, obj, opts...)
		},
	})
	api := &countingReader{Reader: c}
	r := &WorkspaceReconciler{Client: hooked, Reader: snapshotCache{pods: []*corev1.Pod{old}, claims: claims}, APIReader: api,
		Templates: reg, Recorder: record.NewFakeRecorder(100), Opts: UpgradeOptions{Name: "own-delete-test"}}
	r.Opts.defaults()
	r.wake = make(chan event.GenericEvent, 16)
	r.gate = newGate(0, r.Reader, r.wake)
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

package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestHandoffStartsTheUpgradeBeforeTheCacheShowsTheIntent: the front end hands the pod its intent
// patch answered to the upgrade controller of the same process, which enqueues the workspace at
// once and plans from that pod while the cache still shows the pod without the intent (here a
// snapshot from before the patch: the watch event has not arrived). A Recreate start then also
// needs no read of the old pod's full spec: the patch's answer is it. What the cache shows later
// than the handed-off pod wins, and a workspace deleted right after the create stays deleted.
func TestHandoffStartsTheUpgradeBeforeTheCacheShowsTheIntent(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	cw, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		mode corev1.PersistentVolumeAccessMode // "": side by side; ReadWriteOncePod: Recreate
		// notLeading: the controller's handoff source was never started (another replica leads).
		notLeading bool
		// laterWrite: the cache shows a write made after the intent (the handed-off pod is older).
		laterWrite bool
		// ownerDeletes runs right after the upgraded pod's create.
		ownerDeletes bool
		wantUpgraded bool
		wantReads    int32
	}{
		{name: "side by side: started from the handed-off pod", wantUpgraded: true, wantReads: 1},
		{name: "recreate: started from the handed-off pod, no read of the full spec", mode: corev1.ReadWriteOncePod, wantUpgraded: true, wantReads: 0},
		{name: "recreate: the cache shows a later write, which wins (full spec read)", mode: corev1.ReadWriteOncePod, laterWrite: true, wantUpgraded: true, wantReads: 1},
		{name: "recreate: the owner deletes the workspace right after the create: the new pod goes too", mode: corev1.ReadWriteOncePod, ownerDeletes: true, wantReads: 1},
		{name: "not leading: the handoff does nothing, the watch brings the intent later", notLeading: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("handoff-%d-%d", i, time.Now().UnixNano())
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			reg := &fakeTemplates{}
			reg.set(ideTemplate("v1", "ide:1", tc.mode))
			tmpl, _ := reg.Get("ide")
			old, claims, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: "gus", ID: "desk", Namespace: ns}, workspace.PodName("gus", "desk"))
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
			if err := c.Create(ctx, old); err != nil {
				t.Fatal(err)
			}
			stale := old.DeepCopy() // the cache: the pod without the intent
			reg.set(ideTemplate("v2", "ide:2", tc.mode))
			newName := workspace.NextPodName(old, "v2")

			h := NewHandoff()
			queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer queue.ShutDown()
			if !tc.notLeading {
				sctx, stop := context.WithCancel(ctx)
				defer stop()
				if err := (handoffSource{h}).Start(sctx, queue); err != nil {
					t.Fatal(err)
				}
			}
			// The front end's intent patch (frontend.Service.upgrade), then the handoff.
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"2026-12-01T00:00:00Z",%q:%q}}}`,
				workspace.AnnUpgradeRequested, workspace.AnnUpgradePod, newName)
			answered := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: old.Name}}
			if err := c.Patch(ctx, answered, client.RawPatch(types.MergePatchType, patch)); err != nil {
				t.Fatal(err)
			}
			h.UpgradeRequested(answered)
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "desk"}}
			if tc.notLeading {
				if n := queue.Len(); n != 0 {
					t.Errorf("a handoff on a replica that does not lead enqueued %d requests, want 0", n)
				}
			} else {
				if n := queue.Len(); n != 1 {
					t.Fatalf("queue holds %d requests after the handoff, want 1", n)
				}
				if got, _ := queue.Get(); got != req {
					t.Errorf("handoff enqueued %v, want %v", got, req)
				}
			}
			if tc.laterWrite {
				// An operator's label written after the intent: the cache shows it (and the intent).
				var live corev1.Pod
				if err := c.Get(ctx, client.ObjectKeyFromObject(old), &live); err != nil {
					t.Fatal(err)
				}
				live.Labels["test.nogoo9/later"] = "yes"
				if err := c.Update(ctx, &live); err != nil {
					t.Fatal(err)
				}
				stale = live.DeepCopy()
				workspace.StripPod(stale)
			}

			hooked := interceptor.NewClient(cw, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					err := cl.Create(ctx, obj, opts...)
					if err == nil && obj.GetName() == newName && tc.ownerDeletes {
						if derr := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); derr != nil {
							t.Errorf("owner's delete: %v", derr)
						}
					}
					return err
				},
			})
			api := &countingReader{Reader: c}
			r := &WorkspaceReconciler{Client: hooked, Reader: snapshotCache{pods: []*corev1.Pod{stale}, claims: claims}, APIReader: api,
				Templates: reg, Recorder: record.NewFakeRecorder(100), Opts: UpgradeOptions{Name: "handoff-test", Handoff: h}}
			r.Opts.defaults()
			r.wake = make(chan event.GenericEvent, 16)
			r.gate = newGate(0, r.Reader, r.wake)
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatalf("reconcile: %v", err)
			}

			var up corev1.Pod
			err = c.Get(ctx, types.NamespacedName{Namespace: ns, Name: newName}, &up)
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if upgraded := err == nil && up.DeletionTimestamp == nil; upgraded != tc.wantUpgraded {
				t.Errorf("upgraded pod %s live after the pass = %v, want %v", newName, upgraded, tc.wantUpgraded)
			}
			if got := api.gets.Load(); got != tc.wantReads {
				t.Errorf("reads from the API server = %d, want %d", got, tc.wantReads)
			}
			if tc.wantUpgraded && tc.mode != "" {
				if up.Annotations[workspace.AnnRollbackSpec] == "" {
					t.Errorf("Recreate pod %s has no rollback spec", newName)
				}
				if err := r.Opts.Keys.VerifySpec(&up); err != nil {
					t.Errorf("the record signed from the handed-off pod does not verify: %v", err)
				}
				back, err := upgrade.RollbackPod(&up, "back", nil)
				if err != nil || back.Spec.Containers[0].Image != "ide:1" || back.Spec.Volumes[0].PersistentVolumeClaim == nil {
					t.Errorf("the rollback spec taken from the handed-off pod does not restore the old pod: %v, %+v", err, back)
				}
				var left corev1.Pod
				switch err := c.Get(ctx, client.ObjectKeyFromObject(old), &left); {
				case apierrors.IsNotFound(err):
				case err != nil:
					t.Fatal(err)
				case left.DeletionTimestamp == nil:
					t.Errorf("old pod %s is still live after a Recreate start", old.Name)
				}
			}
			if tc.laterWrite {
				if h.full(old) != nil || len(h.pods) != 0 {
					t.Errorf("the handed-off pod is kept after the cache showed a later version")
				}
			}
		})
	}
}

package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A pod Kubernetes deletes for a disruption (DisruptionTarget=True) is copied, and the check after
// the create (stopUndone) does not take the eviction's delete for the owner's: the copy stays,
// also when the evicted pod is removed during the copy, and starts once the evicted pod is gone. A
// pod being deleted without the condition is the owner's delete: no copy.
func TestEvictedPodCopiedAndNotUndone(t *testing.T) {
	tmpl := ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod) // a claim: the copy waits for it
	tests := []struct {
		name       string
		disrupted  bool
		goneInCopy bool // the kubelet finishes the delete just as the copy is created
		wantCopy   bool
	}{
		{name: "evicted, still terminating: the copy stays, gated while the pod is there", disrupted: true, wantCopy: true},
		{name: "evicted, gone during the copy: the copy stays and starts", disrupted: true, goneInCopy: true, wantCopy: true},
		{name: "deleted by its owner (no DisruptionTarget): no copy", disrupted: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			run := racePod(t, tmpl, nil)
			run.Spec.NodeName = "node-a"
			run.Finalizers = []string{"example.com/hold"} // a delete leaves it terminating, as a kubelet's grace period does
			if tt.disrupted {
				run.Status.Conditions = append(run.Status.Conditions, corev1.PodCondition{
					Type: lifecycle.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"})
			}
			finish := func(ctx context.Context, cl client.Client) {
				var p corev1.Pod
				if err := cl.Get(ctx, client.ObjectKeyFromObject(run), &p); err != nil {
					t.Fatalf("read the evicted pod: %v", err)
				}
				p.Finalizers = nil
				if err := cl.Update(ctx, &p); err != nil {
					t.Fatalf("finish the evicted pod's delete: %v", err)
				}
			}
			api := raceAPI([]client.Object{run}, func(ctx context.Context, cl client.WithWatch, obj client.Object) {
				if tt.goneInCopy && obj.GetName() == lifecycle.StoppedPodName(run) {
					finish(ctx, cl)
				}
			})
			if err := api.Delete(ctx, run.DeepCopy()); err != nil {
				t.Fatalf("the eviction's delete: %v", err)
			}
			r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)

			racePass(t, r, racePods(t, api), tmpl) // creates the copy
			racePass(t, r, racePods(t, api), tmpl) // waits for the claim, or starts it
			live := raceLive(racePods(t, api))
			if !tt.wantCopy {
				if len(live) != 0 {
					t.Fatalf("live pods = %v after the owner's delete, want none", raceNames(live))
				}
				return
			}
			if len(live) != 1 || live[0].Name != lifecycle.StoppedPodName(run) {
				t.Fatalf("live pods = %v, want the copy %s", raceNames(live), lifecycle.StoppedPodName(run))
			}
			cp := live[0]
			if cp.Annotations[workspace.AnnStopRequested] != "" || workspace.ID(cp) != "demo" || workspace.Owner(cp) != "jane" {
				t.Fatalf("copy %s: stop intent %q, id %q, owner %q", cp.Name, cp.Annotations[workspace.AnnStopRequested], workspace.ID(cp), workspace.Owner(cp))
			}
			if !tt.goneInCopy {
				if !workspace.IsStoppedPod(cp) {
					t.Fatal("the copy started while the evicted pod still mounts its claim")
				}
				finish(ctx, api)
				racePass(t, r, racePods(t, api), tmpl)
				live = raceLive(racePods(t, api))
				if len(live) != 1 {
					t.Fatalf("live pods = %v, want the copy", raceNames(live))
				}
				cp = live[0]
			}
			if workspace.IsStoppedPod(cp) {
				t.Error("the copy is still gated once the evicted pod is gone; want it started")
			}
		})
	}
}

// A stop's copy made while a drain evicts the running pod (the eviction lands between the pass's
// read and its create) stays: the check after the create (stopUndone) reads the pod in full and
// takes its delete for the eviction, not for the owner's. Before, it removed the copy, and the
// workspace was lost when the evicted pod was gone before the next pass could copy it.
func TestAStopCopyMadeDuringAnEvictionStays(t *testing.T) {
	ctx := context.Background()
	tmpl := ideTemplate("v1", "ide:1", "")
	run := racePod(t, tmpl, map[string]string{workspace.AnnStopRequested: "by jane"})
	run.Finalizers = []string{"example.com/hold"} // a delete leaves it terminating, as a kubelet's grace period does
	api := raceAPI([]client.Object{run}, func(ctx context.Context, cl client.WithWatch, obj client.Object) {
		if obj.GetName() != lifecycle.StoppedPodName(run) {
			return
		}
		var p corev1.Pod
		if err := cl.Get(ctx, client.ObjectKeyFromObject(run), &p); err != nil {
			t.Fatalf("read the running pod: %v", err)
		}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: lifecycle.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"})
		if err := cl.Status().Update(ctx, &p); err != nil {
			t.Fatalf("the eviction's condition: %v", err)
		}
		if err := cl.Delete(ctx, &p); err != nil {
			t.Fatalf("the eviction's delete: %v", err)
		}
	})
	r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)

	racePass(t, r, racePods(t, api), tmpl) // creates the stop's copy, meanwhile the drain evicts the pod
	var cp corev1.Pod
	if err := api.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: lifecycle.StoppedPodName(run)}, &cp); err != nil {
		t.Fatalf("the stop's copy %s: %v (removed as if the owner had deleted the workspace)", lifecycle.StoppedPodName(run), err)
	}
	if cp.DeletionTimestamp != nil || !workspace.IsStoppedPod(&cp) || workspace.Owner(&cp) != "jane" {
		t.Fatalf("the stop's copy: deleting %v, stopped %v, owner %q", cp.DeletionTimestamp != nil, workspace.IsStoppedPod(&cp), workspace.Owner(&cp))
	}
}

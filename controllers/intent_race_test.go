package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A pass that plans from a stale cache (its own delete of a failed upgrade pod not yet observed)
// re-plans the failure and clears the intent again. An intent written since then (the owner's
// next upgrade, seconds later) must survive: clearing an intent is conditional on having seen it.
func TestClearingAnIntentNeverRemovesOneWrittenSince(t *testing.T) {
	_, c := startAPIServer(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws-a", Namespace: "default",
			Annotations: map[string]string{workspace.AnnUpgradeRequested: "first"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	stale := pod.DeepCopy() // what the cache still holds

	// The owner asks again: a new intent on the pod.
	patch := []byte(`{"metadata":{"annotations":{"` + workspace.AnnUpgradeRequested + `":"second"}}}`)
	if err := c.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}

	r := &WorkspaceReconciler{Client: c}
	done, err := r.patchPod(ctx, stale, map[string]string{workspace.AnnLastUpgradeError: "Upgrade failed"},
		[]string{workspace.AnnUpgradeRequested, workspace.AnnUpgradePod, workspace.AnnUpgradeStartedAt})
	if err != nil {
		t.Fatal(err)
	}
	if done {
		t.Errorf("a patch planned from a stale pod was applied; want it refused so the move is re-planned")
	}
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[workspace.AnnUpgradeRequested]; v != "second" {
		t.Errorf("intent = %q after a stale clear, want the new intent %q kept", v, "second")
	}

	// From a fresh read the same clear goes through.
	done, err = r.patchPod(ctx, &got, nil, []string{workspace.AnnUpgradeRequested})
	if err != nil || !done {
		t.Fatalf("clear from a fresh read: done=%v err=%v", done, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if _, has := got.Annotations[workspace.AnnUpgradeRequested]; has {
		t.Errorf("the intent survived a clear planned from a fresh read")
	}
}

// The same holds for the patch that ends an upgrade (it removes nogoo9/upgrade-started-at): a
// pass planned from a stale pod must not overwrite the outcome the previous pass recorded.
func TestEndingAnUpgradeNeverOverwritesALaterOutcome(t *testing.T) {
	_, c := startAPIServer(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws-b-up", Namespace: "default",
			Annotations: map[string]string{workspace.AnnUpgradeStartedAt: "2026-01-01T00:00:00Z"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:2"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	stale := pod.DeepCopy()
	// The previous pass ended the upgrade with its own outcome.
	first := "Upgrade failed: refused rollback pod"
	patch := []byte(`{"metadata":{"annotations":{"` + workspace.AnnUpgradeStartedAt + `":null,"` + workspace.AnnLastUpgradeError + `":"` + first + `"}}}`)
	if err := c.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	r := &WorkspaceReconciler{Client: c}
	done, err := r.patchPod(ctx, stale, map[string]string{workspace.AnnLastUpgradeError: "a second, stale outcome"},
		[]string{workspace.AnnUpgradeStartedAt, workspace.AnnUpgradeHMAC})
	if err != nil {
		t.Fatal(err)
	}
	if done {
		t.Errorf("a patch ending the upgrade from a stale pod was applied; want it refused")
	}
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[workspace.AnnLastUpgradeError]; v != first {
		t.Errorf("last-upgrade-error = %q, want the first outcome %q kept", v, first)
	}
}

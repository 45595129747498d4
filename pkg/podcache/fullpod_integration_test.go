package podcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestFullPodServesAKeptSpecAtItsVersionOnly: over a real kube-apiserver, the cache hands out a
// workspace pod in full (its spec as the API server has it) while the pod carries the upgrade
// intent and mounts a claim, and only for the UID and resourceVersion it holds; once the intent
// is gone, the spec is no longer kept.
func TestFullPodServesAKeptSpecAtItsVersionOnly(t *testing.T) {
	ctx, _, c, ca := newPodCache(t, "team-a")
	go func() { _ = ca.Start(ctx) }()
	fp := ca.(interface {
		FullPod(ctx context.Context, key client.ObjectKey, uid types.UID, rv string, out *corev1.Pod) bool
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws-demo", Namespace: "team-a",
			Labels:      map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo"},
			Annotations: map[string]string{workspace.AnnOwner: "alice", workspace.AnnUpgradeRequested: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "img:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
			Volumes: []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home-demo"}}}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(pod)
	// waitCached waits (bounded) until the cache holds the pod at rv.
	waitCached := func(rv string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var got corev1.Pod
			if err := ca.Get(ctx, key, &got); err == nil && got.ResourceVersion == rv {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cache did not show pod %s at resourceVersion %s within 30s", key, rv)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCached(pod.ResourceVersion)

	var live corev1.Pod
	if err := c.Get(ctx, key, &live); err != nil {
		t.Fatal(err)
	}
	var full corev1.Pod
	if !fp.FullPod(ctx, key, pod.UID, pod.ResourceVersion, &full) {
		t.Fatal("FullPod: not kept for a pod with the intent and a claim, at the cached version")
	}
	if d := cmp.Diff(live.Spec, full.Spec); d != "" {
		t.Errorf("kept spec differs from the API server's (-API server +cache):\n%s", d)
	}
	if full.Name != pod.Name || full.UID != pod.UID || full.Annotations[workspace.AnnOwner] != "alice" || full.Labels[workspace.LabelWorkspaceID] != "demo" {
		t.Errorf("FullPod's metadata is not the pod's: %+v", full.ObjectMeta)
	}
	if fp.FullPod(ctx, key, pod.UID, pod.ResourceVersion+"0", &corev1.Pod{}) {
		t.Error("FullPod answered for a resourceVersion the cache does not hold")
	}
	if fp.FullPod(ctx, key, "other-uid", pod.ResourceVersion, &corev1.Pod{}) {
		t.Error("FullPod answered for another UID")
	}
	if fp.FullPod(ctx, client.ObjectKey{Namespace: "team-a", Name: "absent"}, pod.UID, pod.ResourceVersion, &corev1.Pod{}) {
		t.Error("FullPod answered for a pod the cache does not hold")
	}

	patch := []byte(`{"metadata":{"annotations":{"` + workspace.AnnUpgradeRequested + `":null}}}`)
	if err := c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	waitCached(pod.ResourceVersion)
	if fp.FullPod(ctx, key, pod.UID, pod.ResourceVersion, &corev1.Pod{}) {
		t.Error("FullPod still answers once the intent is gone: the spec is kept only while it is there")
	}
}

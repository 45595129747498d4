package controllers

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPodDeletesKeepTheirPreconditions: the upgrade controller's pod deletes (podDeletes, through
// client-go's typed client in protobuf instead of controller-runtime's Delete) carry the same
// preconditions and give the same answers: a delete naming another UID or an older
// resourceVersion is refused with a Conflict and leaves the pod; one naming the pod's UID and
// resourceVersion removes it; a repeat is NotFound; other kinds are deleted as before.
func TestPodDeletesKeepTheirPreconditions(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "deletes")
	sent := &contentTypes{part: "/pods/"}
	wrapped := rest.CopyConfig(cfg)
	wrapped.WrapTransport = sent.wrap
	w := podDeletesFor(t, c, wrapped)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide:1"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	uid, rv := pod.UID, pod.ResourceVersion
	older := fmt.Sprint(mustAtoi(t, rv) - 1)
	other := types.UID("00000000-0000-0000-0000-000000000000")
	for _, tc := range []struct {
		name string
		pre  client.Preconditions
	}{
		{"another pod's UID", client.Preconditions{UID: &other}},
		{"the pod's UID with an older resourceVersion", client.Preconditions{UID: &uid, ResourceVersion: &older}},
	} {
		if err := w.Delete(ctx, pod, tc.pre); !apierrors.IsConflict(err) {
			t.Errorf("delete with %s: got %v, want a Conflict", tc.name, err)
		}
		var live corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &live); err != nil || live.DeletionTimestamp != nil {
			t.Fatalf("after a refused delete with %s the pod must stay: %v, %+v", tc.name, err, live.DeletionTimestamp)
		}
	}
	if err := w.Delete(ctx, pod, client.Preconditions{UID: &uid, ResourceVersion: &rv}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete with the pod's UID and resourceVersion: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the unscheduled pod should be gone after its delete: %v", err)
	}
	if err := w.Delete(ctx, pod, client.Preconditions{UID: &uid}); !apierrors.IsNotFound(err) {
		t.Errorf("repeated delete: got %v, want NotFound", err)
	}
	for _, s := range sent.list() {
		if s != http.MethodDelete+" application/vnd.kubernetes.protobuf" {
			t.Errorf("pod delete sent as %q, want protobuf", s)
		}
	}
	if len(sent.list()) != 4 {
		t.Errorf("pod deletes through the typed client: %d, want 4 (%v)", len(sent.list()), sent.list())
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-kind", Namespace: ns}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, cm, client.Preconditions{UID: ptr.To(cm.UID)}); err != nil {
		t.Fatalf("delete of a ConfigMap: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap should be gone: %v", err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}

// TestPodDeletesKeepDryRunAndGrace: the options the upgrade controller passes reach the API
// server through podDeletes: a dry run leaves a pod on a node as it was, and grace 0 (how the pods
// of a node that is gone are removed, nodes.go) removes it at once instead of marking it
// terminating for the kubelet.
func TestPodDeletesKeepDryRunAndGrace(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "grace")
	w := podDeletesFor(t, c, cfg)
	// On a node, the API server deletes gracefully unless told grace 0.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws", Namespace: ns},
		Spec:       corev1.PodSpec{NodeName: "gone-node", Containers: []corev1.Container{{Name: "ide", Image: "ide:1"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, client.DryRunAll); err != nil {
		t.Fatalf("dry-run delete: %v", err)
	}
	var live corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &live); err != nil || live.DeletionTimestamp != nil {
		t.Fatalf("a dry-run delete must leave the pod: %v, deletion timestamp %v", err, live.DeletionTimestamp)
	}
	if err := w.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &live); !apierrors.IsNotFound(err) {
		t.Errorf("grace 0 on a pod on a node: want it gone at once, got %v (deletion timestamp %v)", err, live.DeletionTimestamp)
	}
}

// podDeletesFor returns the upgrade controller's pod deletes over cfg, other kinds through c.
func podDeletesFor(t *testing.T, c client.Client, cfg *rest.Config) client.Client {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newPodDeletes(c, cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

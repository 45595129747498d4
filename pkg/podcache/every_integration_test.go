package podcache_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestEveryFollowsTheInformer runs Every on controller-runtime's cache over a real kube-apiserver,
// in two namespaces with the same pod names in both, through adds, updates, deletions and a pod
// deleted and made again under its name: after each step Every hands out exactly the workspace
// pods the API server has (namespace, name and UID), each once. Every is keyed by UID and a
// watch's deletion hands over the pod's final state, not the object handed over before: an
// Every keyed by the object itself keeps every deleted pod, and this test fails on it.
func TestEveryFollowsTheInformer(t *testing.T) {
	namespaces := []string{"team-a", "team-b"}
	ctx, _, c, ca := newPodCache(t, namespaces...)
	every, err := podcache.NewEvery(ctx, ca)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()

	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "img"}}},
		}
	}
	// want is what the API server has: every workspace pod of both namespaces.
	want := func() []string {
		var out []string
		for _, ns := range namespaces {
			var l corev1.PodList
			if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace}); err != nil {
				t.Fatal(err)
			}
			for _, p := range l.Items {
				out = append(out, fmt.Sprintf("%s/%s/%s", p.Namespace, p.Name, p.UID))
			}
		}
		slices.Sort(out)
		return out
	}
	got := func() ([]string, bool) {
		pods, ok := every.Pods()
		var out []string
		for _, p := range pods {
			out = append(out, fmt.Sprintf("%s/%s/%s", p.Namespace, p.Name, p.UID))
		}
		slices.Sort(out)
		return out, ok
	}
	step := func(what string) {
		t.Helper()
		w := want()
		for {
			g, ok := got()
			if ok && slices.Equal(g, w) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("after %s: Every has %v (synced %v), the API server %v", what, g, ok, w)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	for _, ns := range namespaces {
		for _, name := range []string{"one", "two", "three"} {
			if err := c.Create(ctx, pod(ns, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	step("creating three pods in each namespace")

	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "one"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{workspace.AnnMaintenance: "disk migration"}
	if err := c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	step("updating team-a/one")

	for _, key := range []client.ObjectKey{{Namespace: "team-a", Name: "two"}, {Namespace: "team-b", Name: "three"}} {
		if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	step("deleting team-a/two and team-b/three")

	old := p.UID
	if err := c.Delete(ctx, &p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, pod("team-a", "one")); err != nil {
		t.Fatal(err)
	}
	step("deleting team-a/one and making it again")
	if g, _ := got(); slices.ContainsFunc(g, func(s string) bool { return s == "team-a/one/"+string(old) }) {
		t.Errorf("Every still hands out the deleted team-a/one (%s): %v", old, g)
	}
}

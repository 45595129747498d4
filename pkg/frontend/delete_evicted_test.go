package frontend

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The owner deletes a workspace whose pod a drain is evicting (its preStop can run for minutes).
// The delete removes the gated copy the controller made of the evicted pod, and the controller
// would make it again (its name is free once the copy is gone) and bring the deleted workspace
// back, unless the 75 s sweep of this one replica caught it. The delete marks the evicted pod
// nogoo9/deleted-at, and the planner makes no copy of a pod so marked. A workspace whose pods
// are all live is deleted as before, with no request more.
func TestDeleteMarksAPodAlreadyBeingEvicted(t *testing.T) {
	target := lifecycle.Target{Found: true, Version: "2.0"}
	// noCopy checks that the planner, on the workspace's pods as the API server lists them, makes
	// no copy: the workspace stays deleted.
	noCopy := func(t *testing.T, api *liveAPI) {
		t.Helper()
		var list corev1.PodList
		if err := api.k8s.List(api.ctx, &list, client.InNamespace(api.ns), client.MatchingLabels{workspace.LabelWorkspaceID: "a1"}); err != nil {
			t.Fatal(err)
		}
		pods := make([]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			pods[i] = &list.Items[i]
		}
		if m := lifecycle.Plan(pods, target, time.Now(), lifecycle.Config{}); len(m.Actions) != 0 {
			t.Fatalf("after the delete the controller plans %s %+v on %d pods; want no move", m.State, m.Actions, len(pods))
		}
	}
	marked := func(t *testing.T, p *corev1.Pod) {
		t.Helper()
		at, err := time.Parse(time.RFC3339, p.Annotations[workspace.AnnDeletedAt])
		if err != nil || time.Since(at) > time.Minute {
			t.Fatalf("pod %s has %s=%q (%v); want the time of the delete", p.Name, workspace.AnnDeletedAt, p.Annotations[workspace.AnnDeletedAt], err)
		}
	}

	// cached is a snapshot of the pods named as the API server has them now (the fake cache wants
	// a finalizer on a pod being deleted).
	cached := func(t *testing.T, api *liveAPI, names ...string) client.Reader {
		t.Helper()
		pods := make([]*corev1.Pod, len(names))
		for i, n := range names {
			pods[i] = api.get(t, n)
			if pods[i].DeletionTimestamp != nil {
				pods[i].Finalizers = append(pods[i].Finalizers, "test/cache")
			}
		}
		return fakeCache(pods...)
	}

	// bound is the workspace's pod bound to a node of its own: its graceful delete then waits for
	// a kubelet, as on a real node.
	bound := func(t *testing.T, api *liveAPI) *corev1.Pod {
		t.Helper()
		run := api.create(t, pod("ws-a1", "alice", "a1", "2.0", t0))
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: api.ns + "-node"}}
		if err := api.k8s.Create(api.ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = api.k8s.Delete(context.Background(), node) })
		if err := api.k8s.SubResource("binding").Create(api.ctx, run, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: api.ns},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node.Name},
		}); err != nil {
			t.Fatal(err)
		}
		return run
	}
	// evicting is the bound pod evicted through the Eviction API, as kubectl drain does.
	evicting := func(t *testing.T, api *liveAPI) *corev1.Pod {
		t.Helper()
		run := bound(t, api)
		if err := api.k8s.SubResource("eviction").Create(api.ctx, run, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: api.ns},
		}); err != nil {
			t.Fatal(err)
		}
		run = api.get(t, run.Name)
		if run.DeletionTimestamp == nil || !lifecycle.Disrupted(run) {
			t.Fatalf("the evicted pod is not being deleted with DisruptionTarget=True: %+v", run.Status.Conditions)
		}
		return run
	}

	t.Run("the evicted pod's gated copy exists: the copy is deleted and the evicted pod marked, so no copy is made again", func(t *testing.T) {
		api := newLiveAPI(t)
		run := evicting(t, api)
		cp, err := lifecycle.StoppedPod(run, lifecycle.StoppedPodName(run), map[string]string{workspace.AnnStoppedFromUID: string(run.UID)})
		if err != nil {
			t.Fatal(err)
		}
		if err := api.k8s.Create(api.ctx, cp); err != nil {
			t.Fatal(err)
		}
		svc := api.service(t, cached(t, api, run.Name, cp.Name), nil)
		if _, err := svc.Delete(aliceCtx, "a1"); err != nil {
			t.Fatal(err)
		}
		if err := api.k8s.Get(api.ctx, client.ObjectKeyFromObject(cp), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the copy %s is still there (%v)", cp.Name, err)
		}
		marked(t, api.get(t, run.Name))
		noCopy(t, api)
	})

	t.Run("no copy yet: the evicted pod is marked and none is made", func(t *testing.T) {
		api := newLiveAPI(t)
		run := evicting(t, api)
		svc := api.service(t, cached(t, api, run.Name), nil)
		if _, err := svc.Delete(aliceCtx, "a1"); err != nil {
			t.Fatal(err)
		}
		marked(t, api.get(t, run.Name))
		noCopy(t, api)
	})

	t.Run("a workspace whose pods are live is deleted with no patch, and its pods carry no mark", func(t *testing.T) {
		api := newLiveAPI(t)
		// A bound pod waits for its kubelet: the second pass of the delete sees it being deleted.
		run := bound(t, api)
		svc := api.service(t, api.snapshot(t, run.Name), nil)
		before := api.count(http.MethodPatch)
		if r, err := svc.Delete(aliceCtx, "a1"); err != nil || len(r.Pods) != 1 {
			t.Fatalf("Delete() = %+v, %v", r, err)
		}
		if n := api.count(http.MethodPatch) - before; n != 0 {
			t.Errorf("the delete sent %d patches; want none", n)
		}
		p := api.get(t, run.Name)
		if p.DeletionTimestamp == nil {
			t.Fatal("the pod is not being deleted")
		}
		if v, ok := p.Annotations[workspace.AnnDeletedAt]; ok {
			t.Errorf("the live pod the delete deleted carries %s=%q", workspace.AnnDeletedAt, v)
		}
	})
}

// The same with the fake client (no API server): a pod being evicted when the delete meets it is
// marked, its copy deleted.
func TestDeleteMarksAPodAlreadyGoing(t *testing.T) {
	evicted := pod("ws-a1", "alice", "a1", "1.0", t0, ready, deletedAt(t0.Add(time.Hour)))
	evicted.Finalizers = []string{"test/hold"}
	evicted.Status.Conditions = append(evicted.Status.Conditions, corev1.PodCondition{Type: lifecycle.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"})
	cp := pod("ws-a1-copy", "alice", "a1", "1.0", t0.Add(time.Hour), annotated(workspace.AnnStoppedFromUID, string(evicted.UID)))
	api := fakeCache(evicted, cp)
	svc := servicesWith(t, func(c *Config) { c.Client, c.APIReader, c.DeleteSweep = api, api, -1 }, evicted, cp)["per-call"]
	if _, err := svc.Delete(aliceCtx, "a1"); err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(evicted), &got); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Hour).UTC().Format(time.RFC3339); got.Annotations[workspace.AnnDeletedAt] != want {
		t.Errorf("the evicted pod has %s=%q; want %q", workspace.AnnDeletedAt, got.Annotations[workspace.AnnDeletedAt], want)
	}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(cp), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the copy is still there (%v)", err)
	}
}

package frontend

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A controller killed between creating a workspace's next pod and the re-read that would have
// deleted it (the old pod was going) leaves that pod behind when its create lands after the
// delete's last list. The delete's sweep deletes it, and what is made from it, but never a pod of
// the workspace spawned anew under the same id.
func TestADeleteSweepsAPodMadeFromOneItDeleted(t *testing.T) {
	old := pod("ws-a1", "alice", "a1", "1.0", t0, ready)
	// Another pod of the workspace, being evicted (its node drained) as the owner deletes it.
	evicted := pod("ws-a1-ev", "alice", "a1", "1.0", t0, ready, deletedAt(t0.Add(time.Hour)))
	evicted.Finalizers = []string{"test/hold"}
	api := fakeCache(old, evicted)
	svc := servicesWith(t, func(c *Config) { c.Client, c.APIReader, c.DeleteSweep = api, api, 800*time.Millisecond }, old)["per-call"]
	ctx := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	if _, err := svc.Delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}

	// After the delete answered: the workspace spawned anew, then the dead controller's upgrade
	// pod and a stopped copy made from that one.
	fresh := pod("ws-a1-fresh", "alice", "a1", "2.0", t0.Add(2*time.Hour), ready)
	late := pod(workspace.NextPodName(old, "2.0"), "alice", "a1", "2.0", t0.Add(time.Hour), annotated(
		workspace.AnnUpgradeFrom, old.Name, workspace.AnnUpgradeFromUID, string(old.UID), workspace.AnnUpgradeFromVersion, "1.0",
		workspace.AnnUpgradeStrategy, workspace.StrategyRecreate))
	copyOfLate := pod("ws-a1-stopped", "alice", "a1", "2.0", t0.Add(time.Hour), annotated(workspace.AnnStoppedFromUID, string(late.UID)))
	copyOfEvicted := pod("ws-a1-ev-copy", "alice", "a1", "1.0", t0.Add(time.Hour), annotated(workspace.AnnStoppedFromUID, string(evicted.UID)))
	for _, p := range []*corev1.Pod{fresh, late, copyOfLate, copyOfEvicted} {
		if err := api.Create(context.Background(), p.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}

	exists := func(p *corev1.Pod) bool {
		err := api.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for exists(late) || exists(copyOfLate) || exists(copyOfEvicted) {
		if time.Now().After(deadline) {
			t.Fatalf("pods made from the deleted workspace's pods still exist 10 s after the delete (late %v, its copy %v, the evicted pod's copy %v)",
				exists(late), exists(copyOfLate), exists(copyOfEvicted))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !exists(fresh) {
		t.Error("the sweep deleted the pod of the workspace spawned anew under the same id")
	}
}

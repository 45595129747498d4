package upgrade

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// onNode binds a pod to node.
func onNode(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

// evictedBy marks a pod as Kubernetes deletes it for a disruption (the Eviction API): a deletion
// timestamp and DisruptionTarget=True, dated with the delete.
func evictedBy(reason string) podOpt {
	return func(p *corev1.Pod) {
		ts := metav1.NewTime(t0)
		p.DeletionTimestamp = &ts
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "DisruptionTarget", Status: corev1.ConditionTrue,
			Reason: reason, LastTransitionTime: ts})
	}
}

// TestARecreatePodOnALostNodeFailsAtOnce: a Recreate upgrade's new pod bound to a Node that no
// longer exists (the lifecycle planner marked it nogoo9/node-lost) never becomes Ready, and the
// pod GC force-deletes it about 40 s after the Node went: the upgrade fails at once and rolls
// back, instead of waiting for its deadline with nothing left to roll back from.
func TestARecreatePodOnALostNodeFailsAtOnce(t *testing.T) {
	old := with(wsPod(workspace.PodName(testOwner, testID), "uid-old", "v1", t0.Add(-time.Hour)), claim("home"))
	rwo := map[string]*corev1.PersistentVolumeClaim{"home": pvc("home", corev1.ReadWriteOnce)}
	target := Target{Found: true, Name: "python", Version: "v2"}
	lost := ann(workspace.AnnNodeLost, "node node-a of pod ... no longer exists (seen 2026-11-29T09:59:50Z); the workspace is being moved to another node with its claims")
	newRe := func(opts ...podOpt) *corev1.Pod {
		return with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-up", "v2", Recreate, t0.Add(-2*time.Minute)), opts...)
	}

	t.Run("its old pod gone: rolled back at once, the failure says the node is gone", func(t *testing.T) {
		up := newRe(pending, onNode("node-a"), lost)
		m := Plan(Observed{Pods: []*corev1.Pod{up}, Claims: rwo}, target, t0, Config{Keys: testKeys})
		if len(m.Actions) != 1 || m.Actions[0].Kind != CreateRollbackPod {
			t.Fatalf("state %s, RequeueAfter %s, actions %q: waits for the deadline while the pod GC deletes the workspace's only pod", m.State, m.RequeueAfter, summary(m))
		}
		if got := m.Actions[0].Annotations[workspace.AnnLastUpgradeError]; !strings.Contains(got, ReasonNodeLost) || !strings.Contains(got, "node-a") {
			t.Errorf("%s = %q, does not say the node is lost", workspace.AnnLastUpgradeError, got)
		}
	})
	t.Run("its old pod still live (a record not verified): failed as side-by-side, the old pod keeps serving", func(t *testing.T) {
		up := newRe(pending, onNode("node-a"), lost)
		m := Plan(Observed{Pods: []*corev1.Pod{with(old.DeepCopy(), ready), up}, Claims: map[string]*corev1.PersistentVolumeClaim{"home": pvc("home", corev1.ReadWriteMany)}},
			target, t0, Config{Keys: RandomKeyring()})
		var deleted bool
		for _, a := range m.Actions {
			deleted = deleted || a.Kind == DeletePod && a.Pod == up && a.Result == ResultFailed
		}
		if !deleted {
			t.Fatalf("actions %q: the new pod on a lost node is not failed", summary(m))
		}
	})
	t.Run("Ready before the node went: the upgrade succeeded, nothing is rolled back (the lifecycle planner moves the pod)", func(t *testing.T) {
		up := newRe(ready, onNode("node-a"), lost)
		m := Plan(Observed{Pods: []*corev1.Pod{up}, Claims: rwo}, target, t0, Config{Keys: testKeys})
		if len(m.Actions) != 1 || m.Actions[0].Kind != PatchPod || m.Actions[0].Result != ResultSucceeded {
			t.Fatalf("actions %q, want the upgrade concluded", summary(m))
		}
	})
	t.Run("no mark: waits for its deadline as before", func(t *testing.T) {
		up := newRe(pending, onNode("node-a"))
		m := Plan(Observed{Pods: []*corev1.Pod{up}, Claims: rwo}, target, t0, Config{Keys: testKeys})
		if len(m.Actions) != 0 || m.RequeueAfter != 8*time.Minute {
			t.Fatalf("actions %q, RequeueAfter %s; want a wait of 8m", summary(m), m.RequeueAfter)
		}
	})
}

// TestAnEvictedRecreatePodIsRolledBack: Kubernetes evicts a Recreate upgrade's new pod before it
// is Ready, its old pod gone. The pod's record (the previous spec) goes with it, so the upgrade
// fails and rolls back from it (a copy of the pod would run the new version with no record and no
// rollback). The lifecycle planner decides that the delete is an eviction to act on (PlanEvicted
// gets the pod it would copy); this planner decides whether it is an upgrade's to end.
func TestAnEvictedRecreatePodIsRolledBack(t *testing.T) {
	old := with(wsPod(workspace.PodName(testOwner, testID), "uid-old", "v1", t0.Add(-time.Hour)), claim("home"))
	newRe := func(opts ...podOpt) *corev1.Pod {
		return with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-up", "v2", Recreate, t0.Add(-2*time.Minute)), opts...)
	}
	for _, tc := range []struct {
		name     string
		up       *corev1.Pod
		keys     *Keyring
		rollback bool
	}{
		{name: "not Ready yet: rolled back, the failure names the eviction",
			up: newRe(pending, onNode("node-a"), evictedBy("EvictionByEvictionAPI")), keys: testKeys, rollback: true},
		{name: "crash-looping: rolled back",
			up: newRe(waiting("CrashLoopBackOff", "back-off"), onNode("node-a"), evictedBy("DeletionByTaintManager")), keys: testKeys, rollback: true},
		{name: "Ready but not confirmed yet: the new version ran, it is no failure (the copy keeps it)",
			up: newRe(ready, onNode("node-a"), evictedBy("EvictionByEvictionAPI")), keys: testKeys},
		{name: "the upgrade concluded (no started-at): an ordinary pod, copied",
			up: newRe(pending, onNode("node-a"), evictedBy("EvictionByEvictionAPI"), func(p *corev1.Pod) { delete(p.Annotations, workspace.AnnUpgradeStartedAt) }), keys: testKeys},
		{name: "a side-by-side new pod: no record to roll back from",
			up: with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-up", "v2", SideBySide, t0.Add(-2*time.Minute)), pending, evictedBy("EvictionByEvictionAPI")), keys: testKeys},
		{name: "a record nogoo9 cannot verify (a restart without --integrity-key-file): copied, not rolled back on its strength",
			up: newRe(pending, onNode("node-a"), evictedBy("EvictionByEvictionAPI")), keys: RandomKeyring()},
		{name: "a rollback pod: nothing to roll back to",
			up: with(upgraded(old, workspace.RollbackPodName(old), "uid-rb", "v1", Rollback, t0.Add(-2*time.Minute)), pending, evictedBy("EvictionByEvictionAPI")), keys: testKeys},
		{name: "a live pod is no eviction",
			up: newRe(pending, onNode("node-a")), keys: testKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := PlanEvicted(tc.up, t0, Config{Keys: tc.keys})
			if ok != tc.rollback {
				t.Fatalf("PlanEvicted = %v (%q), want %v", ok, summary(m), tc.rollback)
			}
			if !ok {
				return
			}
			if len(m.Actions) != 1 || m.Actions[0].Kind != CreateRollbackPod || m.Actions[0].Pod != tc.up || m.Actions[0].Name != RollbackPodName(tc.up) {
				t.Fatalf("actions %q, want the rollback pod of %s", summary(m), tc.up.Name)
			}
			text := m.Actions[0].Annotations[workspace.AnnLastUpgradeError]
			reason := tc.up.Status.Conditions[len(tc.up.Status.Conditions)-1].Reason
			if !strings.Contains(text, ReasonEvicted) || !strings.Contains(text, reason) {
				t.Errorf("%s = %q, does not name the eviction (%s)", workspace.AnnLastUpgradeError, text, reason)
			}
			if m.Actions[0].Result != ResultFailed {
				t.Errorf("result %q, want %q", m.Actions[0].Result, ResultFailed)
			}
		})
	}
}

package upgrade

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// PlanEvicted is the move for head, a pod Kubernetes is deleting for a disruption that the
// lifecycle planner would copy to keep the workspace (no pod of it is live; lifecycle.Plan decides
// that the delete is an eviction and not its owner's), when head is the new pod of a Recreate
// upgrade that was never Ready: the upgrade fails and the previous pod comes back from head's
// record (rollBack). A copy of head would run the new version with neither the record (bound to
// head's name) nor a deadline, so never roll back; the rollback pod waits behind the volume gate
// (RollbackPod) until head has released the claims. ok is false for any other pod, and for a
// record nogoo9 cannot verify (written by someone else, or signed before a restart without
// --integrity-key-file): the copy keeps the workspace, as it does for any evicted pod.
//
// A new pod that was Ready ran the new version: its eviction is no failure, and its copy keeps it.
func PlanEvicted(head *corev1.Pod, now time.Time, cfg Config) (Move, bool) {
	why, disrupted := disruptionReason(head)
	if !disrupted || head.DeletionTimestamp == nil || Strategy(head.Annotations[workspace.AnnUpgradeStrategy]) != Recreate ||
		head.Annotations[workspace.AnnUpgradeFrom] == "" || head.Annotations[workspace.AnnUpgradeStartedAt] == "" || readyCondition(head) {
		return Move{}, false
	}
	if _, err := cfg.Keys.VerifyRecord(head); err != nil {
		return Move{}, false
	}
	f := Failure{At: now, Reason: ReasonEvicted,
		Message: fmt.Sprintf("Kubernetes deleted pod %s for a disruption (%s) before it was Ready", head.Name, why)}
	return rollBack(head, f, now, StartedAt(head)), true
}

// disruptionReason is the reason of p's DisruptionTarget=True condition, if it has one.
func disruptionReason(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			return c.Reason, c.Status == corev1.ConditionTrue
		}
	}
	return "", false
}

// readyCondition reports whether p was running and Ready when it was last seen, being deleted or
// not (workspace.IsReady counts no pod being deleted).
func readyCondition(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

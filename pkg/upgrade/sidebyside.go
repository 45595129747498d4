package upgrade

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// planSideBySide drives an upgrade whose new pod (head) runs next to the old one: when head is
// Ready the old pod goes (the intent goes with it); when head fails or misses the deadline, the
// error is written on the old pod, which keeps serving, and head goes.
func planSideBySide(head *corev1.Pod, live []*corev1.Pod, now time.Time, cfg Config) Move {
	old := OldPod(head, live)
	started := StartedAt(head)
	if workspace.IsReady(head) {
		return succeed(head, live, now, started)
	}
	if f, failed := Failed(head, now, cfg); failed {
		return failSideBySide(head, old, f, now, started)
	}
	return Move{State: StateUpgrading, RequeueAfter: Deadline(head, cfg).Sub(now)}
}

// succeed deletes the pod the Ready head replaces (the upgrade is done; its Event and result go
// with that delete) and any other older pod of the same workspace. A pod that only carries the
// workspace's id or owner (relabelled into it with kubectl) is not the workspace's and stays, as
// in planDuplicates.
func succeed(head *corev1.Pod, live []*corev1.Pod, now, started time.Time) Move {
	m := Move{State: StateUpgrading}
	old := OldPod(head, live)
	if old != nil {
		// What a person wrote on the pod that served goes over to the one that takes over.
		if c := carryPersonKeys(head, old); c != nil {
			m.Actions = append(m.Actions, *c)
		}
		a := Action{Kind: DeletePod, Pod: old, Keep: head, MatchVersion: true}
		a.Result, a.Duration = ResultSucceeded, nonNegative(now.Sub(started))
		a.Strategy = strategyOf(head)
		a.EventType, a.Reason = corev1.EventTypeNormal, ReasonUpgradeSucceeded
		a.Message = fmt.Sprintf("Upgraded workspace %s from pod %s (version %s) to pod %s (version %s) in %s.",
			workspace.ID(head), old.Name, workspace.TemplateVersion(old), head.Name, workspace.TemplateVersion(head), a.Duration.Round(time.Second))
		a.EventOn = head // the pod that stays
		m.Actions = append(m.Actions, a)
	}
	for _, p := range live[1:] {
		if p == old || workspace.Owner(p) != workspace.Owner(head) || !workspace.NameMatchesIdentity(p) {
			continue
		}
		m.Actions = append(m.Actions, Action{Kind: DeletePod, Pod: p, Keep: head, MatchVersion: true})
	}
	return m
}

// failSideBySide records the failure on old and deletes head. The record comes first: a crash
// between the two leaves the intent cleared, so the deleted pod is not created again. The record
// is written even when it is already there, and the delete names old as the pod that stays: the
// controller stops the move when old turns out to be gone or going (a stale cache can show an old
// pod that a Recreate upgrade has already deleted).
func failSideBySide(head, old *corev1.Pod, f Failure, now, started time.Time) Move {
	m := Move{State: StateUpgrading}
	text := FailureText(f.At, f.Reason, f.Message)
	if old != nil {
		m.Actions = append(m.Actions, Action{Kind: PatchPod, Pod: old,
			Annotations: map[string]string{workspace.AnnLastUpgradeError: text},
			Remove:      IntentKeys()})
	}
	target := head
	if old != nil {
		target = old
	}
	// The delete is matched to the head the planner saw (MatchVersion): a pass from a cache that
	// shows the record written but not yet the delete (both this move's) would otherwise delete the
	// terminating head again and record the failure twice (its Event and metric); the conflict
	// makes it re-plan from the next event instead.
	m.Actions = append(m.Actions, Action{Kind: DeletePod, Pod: head, Keep: old, MatchVersion: true,
		Result: ResultFailed, Duration: nonNegative(now.Sub(started)), Strategy: strategyOf(head),
		EventType: corev1.EventTypeWarning, Reason: ReasonUpgradeFailed,
		Message: fmt.Sprintf("Upgrade of workspace %s to version %s failed: %s: %s; deleted pod %s, pod %s keeps serving.",
			workspace.ID(head), workspace.TemplateVersion(head), f.Reason, f.Message, head.Name, target.Name),
		EventOn: target})
	return m
}

func nonNegative(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// strategyOf is the strategy stamped on an upgraded pod (SideBySide when unknown).
func strategyOf(up *corev1.Pod) Strategy {
	if s := Strategy(up.Annotations[workspace.AnnUpgradeStrategy]); s == Recreate || s == Rollback {
		return s
	}
	return SideBySide
}

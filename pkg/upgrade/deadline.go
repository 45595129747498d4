package upgrade

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TerminalReasons are container waiting reasons that never heal by waiting: an upgrade whose new
// pod shows one fails at once instead of at the deadline. (A pod in phase Failed is terminal too.)
// ImagePullBackOff, ErrImagePull and CrashLoopBackOff are not here: a registry hiccup or a slow
// dependency can heal, so they wait for the deadline.
var TerminalReasons = map[string]bool{
	"InvalidImageName":           true,
	"ErrImageNeverPull":          true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
}

// ReasonDeadlineExceeded is the failure reason when nothing more specific is known.
const ReasonDeadlineExceeded = "ProgressDeadlineExceeded"

// Failure reasons of a Recreate upgrade whose new pod never ran.
const (
	// ReasonRecordNotVerified: the old pod is still live and holds a single-writer claim, and the
	// upgrade record cannot be verified, so nogoo9 neither deletes the old pod nor starts the new
	// one next to it.
	ReasonRecordNotVerified = "UpgradeRecordNotVerified"
	// ReasonVolumeNotReleased: a terminating pod still held the volume after the deadline and its
	// grace period.
	ReasonVolumeNotReleased = "VolumeNotReleased"
)

// Failure reasons of an upgrade whose new pod Kubernetes takes away before it is Ready.
const (
	// ReasonNodeLost: the new pod is bound to a Node that no longer exists (the lifecycle planner
	// marked it workspace.AnnNodeLost). No kubelet will run it, and the pod GC force-deletes it
	// about 40 s after the Node went, with the record of a Recreate upgrade on it: the upgrade
	// fails at once, while there is a record to roll back from.
	ReasonNodeLost = "NodeLost"
	// ReasonEvicted: Kubernetes is deleting the new pod of a Recreate upgrade for a disruption (a
	// drain's eviction, the taint manager, preemption) before it was Ready (PlanEvicted).
	ReasonEvicted = "Evicted"
)

// Failure is why an upgraded pod failed.
type Failure struct {
	At      time.Time
	Reason  string
	Message string
}

// StartedAt is when the upgrade that created up started: nogoo9/upgrade-started-at (written with
// the controller's clock just before the create) or the pod's creation time (written by the API
// server), whichever is later. A started-at someone back-dated by hand cannot make an upgrade
// fail before its time.
func StartedAt(up *corev1.Pod) time.Time {
	created := up.CreationTimestamp.Time
	if t, err := time.Parse(time.RFC3339, up.Annotations[workspace.AnnUpgradeStartedAt]); err == nil && t.After(created) {
		return t
	}
	return created
}

// Deadline is when up must be Ready.
func Deadline(up *corev1.Pod, cfg Config) time.Time {
	return StartedAt(up).Add(cfg.timeout())
}

// Failed reports whether the upgraded pod up has failed at now: it shows a terminal reason, its
// phase is Failed, it is not Ready on a Node that no longer exists, or the deadline passed without
// it being Ready.
func Failed(up *corev1.Pod, now time.Time, cfg Config) (Failure, bool) {
	if up.Annotations[workspace.AnnNodeLost] != "" && !workspace.IsReady(up) {
		return Failure{At: now, Reason: ReasonNodeLost,
			Message: fmt.Sprintf("node %s of pod %s no longer exists, so pod %s never became Ready", up.Spec.NodeName, up.Name, up.Name)}, true
	}
	reason, msg, terminal := FailureReason(up)
	if terminal {
		return Failure{At: now, Reason: reason, Message: msg}, true
	}
	deadline := Deadline(up, cfg)
	if now.Before(deadline) {
		return Failure{}, false
	}
	if reason == "" {
		reason = ReasonDeadlineExceeded
		msg = fmt.Sprintf("pod %s was not Ready within %s", up.Name, cfg.timeout())
	} else {
		msg = fmt.Sprintf("%s (pod %s not Ready within %s)", msg, up.Name, cfg.timeout())
	}
	// The deadline, not now, dates the failure: a repeated pass writes the same text.
	return Failure{At: deadline, Reason: reason, Message: msg}, true
}

// FailureReason collects the most telling reason a pod is not Ready from its status: a container
// waiting (ErrImagePull, ImagePullBackOff, CrashLoopBackOff ...), a last termination (OOMKilled,
// Error with exit code), a Failed phase, or an unschedulable pod. terminal says it will not heal.
func FailureReason(p *corev1.Pod) (reason, message string, terminal bool) {
	if p.Status.Phase == corev1.PodFailed {
		r := p.Status.Reason
		if r == "" {
			r = "PodFailed"
		}
		m := p.Status.Message
		if m == "" {
			m = "pod " + p.Name + " failed"
		}
		return r, m, true
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			m := w.Message
			if m == "" {
				m = "container " + cs.Name + " is waiting"
			} else {
				m = "container " + cs.Name + ": " + m
			}
			if t := cs.LastTerminationState.Terminated; t != nil && w.Reason == "CrashLoopBackOff" {
				m += fmt.Sprintf(" (last exit: %s, code %d)", t.Reason, t.ExitCode)
			}
			return w.Reason, m, TerminalReasons[w.Reason]
		}
	}
	for _, cs := range statuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return t.Reason, fmt.Sprintf("container %s exited with code %d", cs.Name, t.ExitCode), false
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.Reason != "" && t.Reason != "Completed" {
			return t.Reason, fmt.Sprintf("container %s last exited with code %d", cs.Name, t.ExitCode), false
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			return c.Reason, c.Message, false
		}
	}
	return "", "", false
}

// FailureText is the nogoo9/last-upgrade-error value.
func FailureText(at time.Time, reason, message string) string {
	return fmt.Sprintf("Upgrade failed at %s: %s: %s", at.UTC().Format(time.RFC3339), reason, message)
}

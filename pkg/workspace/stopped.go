package workspace

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Reasons of the phase of a stopped, stopping or starting workspace.
const (
	ReasonStopped  = "Stopped"
	ReasonStopping = "Stopping"
	ReasonStarting = "Starting"
)

// IsStoppedPod reports whether pod is held by the stop gate (GateStopped): a fact about its spec
// (it asks for no node, a gate cannot be added twice), not that nogoo9 stopped it. Whether pod
// is a stopped pod nogoo9 made is IsStoppedCopy.
func IsStoppedPod(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == GateStopped })
}

// IsStoppedCopy reports whether pod is a stopped pod nogoo9 made (lifecycle.StoppedPod): held by
// the stop gate and naming the pod it was copied from (AnnStoppedFromUID; a start removes both in
// one patch). The gate alone is not enough: a template's spec could carry it (the template policy
// refuses that now; an older release's template may), and such a pod (a new workspace's, or an
// upgrade's new pod) is no stopped workspace: nothing starts it, so it is not "Starting", and an
// upgrade's new pod born with it is still an upgrade on its way in. The phase (stoppedPhase),
// the lifecycle planner and the upgrade gate's count of pods waiting for a node all use this.
func IsStoppedCopy(pod *corev1.Pod) bool {
	return IsStoppedPod(pod) && pod.Annotations[AnnStoppedFromUID] != ""
}

// StopIntent returns the stop intent of the workspace of pods: AnnStopRequested on any live pod
// (the newest first, so its value is the one reported).
func StopIntent(pods []*corev1.Pod) (string, bool) {
	for _, p := range sortedCopy(pods) {
		if p.DeletionTimestamp != nil {
			continue
		}
		if v, ok := p.Annotations[AnnStopRequested]; ok && v != "" {
			return v, true
		}
	}
	return "", false
}

// IsStopped reports whether the workspace of pods is stopped or stopping: it has the stop intent
// (phase Stopped, or Unavailable when maintenance outranks it). Quota counts it as stopped.
func IsStopped(pods []*corev1.Pod) bool {
	st, ok := stoppedPhase(sortedCopy(pods))
	return ok && st.Phase == PhaseStopped
}

// StopMessage is the message of a stopped workspace for the intent's value v.
func StopMessage(v string) string {
	if v == "" || v == "true" || isTimestamp(v) {
		return "the workspace is stopped; start it to use it again"
	}
	return v + "; start it to use it again"
}

// stoppedPhase reports Stopped (with reason Stopping while a running pod is still there) when
// the workspace has a stop intent, and Scheduling/Starting while a stopped pod waits for its
// gate to be removed. A stopped pod is one nogoo9 made (IsStoppedCopy): a pod born with the stop
// gate counts as running, as for the lifecycle planner. pods are sorted newest first.
func stoppedPhase(pods []*corev1.Pod) (Status, bool) {
	var gated, running *corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if IsStoppedCopy(p) {
			if gated == nil {
				gated = p
			}
		} else if running == nil {
			running = p
		}
	}
	if v, ok := StopIntent(pods); ok {
		if running != nil {
			return Status{Phase: PhaseStopped, Reason: ReasonStopping, Message: fmt.Sprintf("pod %s is stopping: %s", running.Name, StopMessage(v))}, true
		}
		return Status{Phase: PhaseStopped, Reason: ReasonStopped, Message: StopMessage(v)}, true
	}
	if gated != nil && running == nil {
		return Status{Phase: PhaseScheduling, Reason: ReasonStarting, Message: fmt.Sprintf("pod %s is starting", gated.Name)}, true
	}
	return Status{}, false
}

func isTimestamp(v string) bool {
	_, err := time.Parse(time.RFC3339, v)
	return err == nil
}

package workspace

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Reasons Phase reports besides the kubelet's and scheduler's own (ErrImagePull, Unschedulable...),
// which it passes through unchanged.
const (
	ReasonNoPods            = "NoPods"
	ReasonDeleting          = "Deleting"
	ReasonMaintenance       = "Maintenance"
	ReasonUpgradeRequested  = "UpgradeRequested"
	ReasonUpgradeInProgress = "UpgradeInProgress"
	ReasonPodFailed         = "PodFailed"
	ReasonPodCompleted      = "PodCompleted"
	ReasonRunning           = "Running"
	ReasonPending           = "Pending"
	ReasonContainersNotRdy  = "ContainersNotReady"
	ReasonReadinessGates    = "ReadinessGatesPending"
	// ReasonNodeLost: the active pod is bound to a Node that no longer exists (AnnNodeLost).
	ReasonNodeLost = "NodeLost"
	// ReasonVolumeRelease: the pod on its way in (a Recreate's new pod, a rollback pod) waits
	// behind GateVolumeRelease for another pod of the workspace to release the volume they share.
	// It is the new pod's own phase, inside an Upgrading message.
	ReasonVolumeRelease = "WaitingForVolumeRelease"
	// reasonSchedulingGated is the scheduler's PodScheduled=False reason for a pod with
	// scheduling gates; it stays until the scheduler looks at the pod again after the last gate
	// is removed.
	reasonSchedulingGated = "SchedulingGated"
)

// terminalWaitingReasons are container waiting reasons that do not heal by themselves: the pod
// must be replaced (fixed template, upgrade, or delete and respawn). ErrImagePull and
// ImagePullBackOff are not here: a registry blip or a pushed-late tag heals, so they stay
// Initializing with the kubelet's message.
var terminalWaitingReasons = map[string]bool{
	"CrashLoopBackOff":           true,
	"InvalidImageName":           true,
	"ErrImageNeverPull":          true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"PreCreateHookError":         true,
	"PreStartHookError":          true,
}

// Phase derives a workspace's phase from all of its pods (any order; the caller's slice is never
// reordered). It is pure: the same pods and now give the same answer. now only shapes messages
// ("pending for 2m0s", "grace period ended 1m0s ago"), never the phase.
//
// Precedence, first match wins (see docs/phases.md for why):
//
//  1. Terminating: every pod is being deleted (or there is no pod at all: NoPods).
//  2. Unavailable: a live pod carries nogoo9/maintenance (reason Maintenance, message = its value),
//     the active pod carries nogoo9/node-lost (reason NodeLost: its node is gone), or the active
//     pod has a condition "Workspace*" that is False (reason and message from it), unless the
//     active pod is on its way in (see 4): it serves nothing yet.
//  3. Stopped: a live pod carries the stop intent nogoo9/stop-requested (reason Stopping while a
//     running pod is still there); a stopped pod nogoo9 made (IsStoppedCopy) without it is
//     Scheduling/Starting.
//  4. Upgrading: the active pod carries the intent nogoo9/upgrade-requested, or a live pod with
//     nogoo9/upgrade-from that is not Ready yet is on its way in: its upgrade is in flight
//     (UpgradeInFlight), or it still waits behind nogoo9/volume-release (a rollback pod whose
//     failed pod is terminating).
//  5. Failed: the active pod's phase is Failed or Succeeded, or one of its containers waits for a
//     terminal reason (CrashLoopBackOff, InvalidImageName, CreateContainerConfigError, ...).
//  6. Ready: the active pod is Running, has an IP and is Ready.
//  7. Scheduling: the active pod is not bound to a node (reason from PodScheduled=False).
//  8. Initializing: anything else: scheduled, init containers or containers not ready yet.
func Phase(pods []*corev1.Pod, now time.Time) Status {
	return phaseSorted(sortedCopy(pods), now)
}

// sortedCopy returns pods newest first, without touching the caller's order: when pods already are
// newest first (GroupByID's groups are), it is returned as it is and nothing is allocated.
func sortedCopy(pods []*corev1.Pod) []*corev1.Pod {
	for i := 1; i < len(pods); i++ {
		if newerThan(pods[i], pods[i-1]) {
			cp := make([]*corev1.Pod, len(pods))
			copy(cp, pods)
			return NewestFirst(cp)
		}
	}
	return pods
}

// newerThan is exactly NewestFirst's order: a sorts before b. Creation times have one-second
// resolution, so the upgrade-from link decides a tie before the name does.
func newerThan(a, b *corev1.Pod) bool {
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if !ta.Equal(&tb) {
		return tb.Before(&ta)
	}
	if a.Annotations[AnnUpgradeFrom] == b.Name {
		return true
	}
	if b.Annotations[AnnUpgradeFrom] == a.Name {
		return false
	}
	return a.Name > b.Name
}

// phaseSorted is Phase for pods already sorted newest first.
func phaseSorted(pods []*corev1.Pod, now time.Time) Status {
	if len(pods) == 0 {
		return Status{Phase: PhaseTerminating, Reason: ReasonNoPods, Message: "the workspace has no pods left"}
	}
	active := Active(pods)
	if active.DeletionTimestamp != nil {
		// Active prefers a live pod, so the active pod being deleted means every pod is.
		msg := fmt.Sprintf("pod %s is being deleted", active.Name)
		if over := now.Sub(active.DeletionTimestamp.Time); over > 0 {
			msg += fmt.Sprintf("; its grace period ended %s ago, the node may be unreachable", over.Round(time.Second))
		}
		return Status{Phase: PhaseTerminating, Reason: ReasonDeleting, Message: msg}
	}

	if st, ok := unavailable(pods, active); ok {
		return st
	}
	if st, ok := stoppedPhase(pods); ok {
		return st
	}
	if st, ok := upgrading(pods, active, now); ok {
		return st
	}
	return podPhase(active, now)
}

// unavailable reports an operator's maintenance annotation on any live pod, or a False Workspace*
// condition on the active pod. Conditions of a pod that is still on its way in (an upgrade's new
// pod, which is the active one in a Recreate: the old pod is gone) do not count: that pod does not
// serve yet (a storage checker writes False while it mounts); upgrading names the condition.
func unavailable(pods []*corev1.Pod, active *corev1.Pod) (Status, bool) {
	if v, ok := maintenance(pods, active); ok {
		if v == "" || v == "true" {
			v = "the workspace is in maintenance"
		}
		return Status{Phase: PhaseUnavailable, Reason: ReasonMaintenance, Message: v}, true
	}
	// The gate alone (IsStoppedPod, not IsStoppedCopy): a gated pod is on no node, lost or not.
	if v := active.Annotations[AnnNodeLost]; v != "" && !IsStoppedPod(active) {
		return Status{Phase: PhaseUnavailable, Reason: ReasonNodeLost, Message: v}, true
	}
	if onTheWayIn(active, pods) {
		return Status{}, false
	}
	if c := falseWorkspaceCondition(active); c != nil {
		reason := c.Reason
		if reason == "" {
			reason = string(c.Type)
		}
		msg := c.Message
		if msg == "" {
			msg = fmt.Sprintf("condition %s is False", c.Type)
		}
		return Status{Phase: PhaseUnavailable, Reason: reason, Message: msg}, true
	}
	return Status{}, false
}

// falseWorkspaceCondition is p's first condition "Workspace*" that is False, or nil.
func falseWorkspaceCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if strings.HasPrefix(string(c.Type), ConditionPrefix) && c.Status == corev1.ConditionFalse {
			return c
		}
	}
	return nil
}

// maintenance returns the value of nogoo9/maintenance on the active pod, else on any other live
// pod (an operator who annotated the old pod of a running upgrade still means the workspace).
func maintenance(pods []*corev1.Pod, active *corev1.Pod) (string, bool) {
	if v, ok := active.Annotations[AnnMaintenance]; ok {
		return v, true
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			if v, ok := p.Annotations[AnnMaintenance]; ok {
				return v, true
			}
		}
	}
	return "", false
}

// upgrading reports an upgrade in flight: the intent on the active pod, or an upgraded pod
// (nogoo9/upgrade-from) on its way in (onTheWayIn). Its message carries the new pod's own
// progress, so "Upgrading: ErrImagePull ..." is visible while the old pod still serves, and a
// False Workspace* condition of the new pod, which does not make the workspace Unavailable.
func upgrading(pods []*corev1.Pod, active *corev1.Pod, now time.Time) (Status, bool) {
	if p := incomingPod(pods, active); p != nil {
		sub := podPhase(p, now)
		if hasGate(p, GateVolumeRelease) {
			sub = volumeRelease(p, pods, now)
		}
		replacing := p.Annotations[AnnUpgradeFrom]
		if p.Annotations[AnnUpgradeStrategy] == StrategyRollback {
			replacing = "failed pod " + replacing
		}
		msg := fmt.Sprintf("pod %s (version %s) is replacing %s: %s", p.Name, TemplateVersion(p), replacing, sub.Phase)
		if sub.Reason != "" {
			msg += ": " + sub.Reason
		}
		if sub.Message != "" {
			msg += ": " + sub.Message
		}
		if c := falseWorkspaceCondition(p); c != nil {
			msg += fmt.Sprintf("; condition %s is False", c.Type)
			if c.Reason != "" {
				msg += ": " + c.Reason
			}
			if c.Message != "" {
				msg += ": " + c.Message
			}
		}
		return Status{Phase: PhaseUpgrading, Reason: ReasonUpgradeInProgress, Message: msg}, true
	}
	if active.Annotations[AnnUpgradeRequested] != "" {
		msg := fmt.Sprintf("an upgrade of pod %s (version %s) was requested", active.Name, TemplateVersion(active))
		if target := active.Annotations[AnnUpgradePod]; target != "" {
			msg += "; the new pod will be " + target
		}
		return Status{Phase: PhaseUpgrading, Reason: ReasonUpgradeRequested, Message: msg}, true
	}
	return Status{}, false
}

// incomingPod is the upgraded pod on its way in (onTheWayIn), the active pod or newer than it
// (an older leftover is not an upgrade in flight).
func incomingPod(pods []*corev1.Pod, active *corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if !onTheWayIn(p, pods) {
			continue
		}
		if p == active || newerThan(p, active) {
			return p
		}
	}
	return nil
}

// onTheWayIn reports whether p is an upgraded pod (nogoo9/upgrade-from) that does not serve yet:
// live, not Ready, and either its upgrade is in flight (UpgradeInFlight) or it still waits behind
// nogoo9/volume-release. AnnUpgradeFrom alone is history (it stays after a successful upgrade).
// The gate covers a rollback pod whose failed pod is being deleted: that upgrade is not "in
// flight" any more (the planner's view, which this does not change), but the pod cannot start
// before the failed pod has released the volume, for the whole grace period. A gate is only ever
// removed, so a pod that still has it never ran.
func onTheWayIn(p *corev1.Pod, pods []*corev1.Pod) bool {
	if p.DeletionTimestamp != nil || IsReady(p) || p.Annotations[AnnUpgradeFrom] == "" {
		return false
	}
	return hasGate(p, GateVolumeRelease) || UpgradeInFlight(p, pods)
}

// volumeRelease is the phase of p, a pod on its way in that waits behind GateVolumeRelease: it
// names the pod that holds a claim p mounts (live or terminating: a pod is gone for the scheduler
// only once the API server removed it), else the pod p replaces if it is still there.
func volumeRelease(p *corev1.Pod, pods []*corev1.Pod, now time.Time) Status {
	st := Status{Phase: PhaseScheduling, Reason: ReasonVolumeRelease,
		Message: fmt.Sprintf("waiting for nogoo9 to remove the scheduling gate %s", GateVolumeRelease)}
	if h := volumeHolder(p, pods); h != nil {
		st.Message = fmt.Sprintf("waiting for pod %s to release its volume", h.Name)
		if h.DeletionTimestamp != nil {
			st.Message += "; it is being deleted"
		}
	}
	if age := now.Sub(p.CreationTimestamp.Time); !p.CreationTimestamp.IsZero() && age >= time.Second {
		st.Message += fmt.Sprintf(" (pending for %s)", age.Round(time.Second))
	}
	return st
}

// volumeHolder is the newest other pod among pods that mounts a claim p mounts, else the pod p
// replaces (nogoo9/upgrade-from) if it is among pods, else nil.
func volumeHolder(p *corev1.Pod, pods []*corev1.Pod) *corev1.Pod {
	claims := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.PersistentVolumeClaim.ClaimName] = true
		}
	}
	var from *corev1.Pod
	for _, q := range pods {
		if q == p {
			continue
		}
		for _, v := range q.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && claims[v.PersistentVolumeClaim.ClaimName] {
				return q
			}
		}
		if from == nil && q.Name == p.Annotations[AnnUpgradeFrom] {
			from = q
		}
	}
	return from
}

func hasGate(p *corev1.Pod, name string) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == name {
			return true
		}
	}
	return false
}

// podPhase is the phase of a single live pod: Failed, Ready, Scheduling or Initializing.
func podPhase(p *corev1.Pod, now time.Time) Status {
	switch p.Status.Phase {
	case corev1.PodFailed:
		reason := p.Status.Reason // e.g. Evicted
		if reason == "" {
			reason = ReasonPodFailed
		}
		msg := p.Status.Message
		if msg == "" {
			msg = "pod " + p.Name + " failed" + terminatedDetail(p)
		}
		return Status{Phase: PhaseFailed, Reason: reason, Message: msg}
	case corev1.PodSucceeded:
		return Status{Phase: PhaseFailed, Reason: ReasonPodCompleted, Message: "pod " + p.Name + " exited" + terminatedDetail(p) + "; a workspace is expected to keep running"}
	}
	if c, s := waitingContainer(p, terminalWaitingReasons); c != "" {
		return Status{Phase: PhaseFailed, Reason: s.Reason, Message: containerMessage(c, s)}
	}
	if IsReady(p) {
		return Status{Phase: PhaseReady, Reason: ReasonRunning, Message: "pod " + p.Name + " is ready"}
	}
	if p.Spec.NodeName == "" && !conditionTrue(p, corev1.PodScheduled) {
		st := Status{Phase: PhaseScheduling, Reason: ReasonPending, Message: "waiting for the scheduler"}
		// SchedulingGated with no gate left is stale: the last gate was removed and the scheduler
		// has not looked at the pod since (it rewrites the condition when it does).
		if c := condition(p, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse &&
			(c.Reason != reasonSchedulingGated || len(p.Spec.SchedulingGates) > 0) {
			if c.Reason != "" {
				st.Reason = c.Reason
			}
			if c.Message != "" {
				st.Message = c.Message
			}
		}
		if age := now.Sub(p.CreationTimestamp.Time); !p.CreationTimestamp.IsZero() && age >= time.Second {
			st.Message += fmt.Sprintf(" (pending for %s)", age.Round(time.Second))
		}
		return st
	}
	return initializing(p)
}

// initializing explains why a scheduled pod is not ready: the first waiting init container, then
// the first waiting container (image pulls, container creation), then containers running but not
// ready, then readiness gates.
func initializing(p *corev1.Pod) Status {
	if c, s := waitingContainer(p, nil); c != "" {
		if s.Reason == "PodInitializing" {
			if ic := runningInit(p); ic != "" {
				return Status{Phase: PhaseInitializing, Reason: s.Reason, Message: "init container " + ic + " is running"}
			}
		}
		return Status{Phase: PhaseInitializing, Reason: s.Reason, Message: containerMessage(c, s)}
	}
	var notReady []string
	for i := range p.Status.ContainerStatuses {
		if cs := &p.Status.ContainerStatuses[i]; !cs.Ready {
			notReady = append(notReady, cs.Name)
		}
	}
	if len(notReady) > 0 {
		return Status{Phase: PhaseInitializing, Reason: ReasonContainersNotRdy,
			Message: fmt.Sprintf("pod %s: containers not ready: %s", p.Name, strings.Join(notReady, ", "))}
	}
	var gates []string
	for _, g := range p.Spec.ReadinessGates {
		if !conditionTrue(p, g.ConditionType) {
			gates = append(gates, string(g.ConditionType))
		}
	}
	if len(gates) > 0 {
		return Status{Phase: PhaseInitializing, Reason: ReasonReadinessGates,
			Message: fmt.Sprintf("pod %s: waiting for readiness gates: %s", p.Name, strings.Join(gates, ", "))}
	}
	msg := "pod " + p.Name + " is starting"
	if c := condition(p, corev1.PodReady); c != nil && c.Message != "" {
		msg += ": " + c.Message
	}
	return Status{Phase: PhaseInitializing, Reason: ReasonPending, Message: msg}
}

// waitingContainer returns the first init container, then container, that is waiting with a
// reason in only (any reason when only is nil). Init containers that already ran are skipped.
func waitingContainer(p *corev1.Pod, only map[string]bool) (string, *corev1.ContainerStateWaiting) {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			w := list[i].State.Waiting
			if w == nil || w.Reason == "" {
				continue
			}
			if only == nil || only[w.Reason] {
				return list[i].Name, w
			}
		}
	}
	return "", nil
}

// runningInit names the init container that is running, if any.
func runningInit(p *corev1.Pod) string {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].State.Running != nil {
			return p.Status.InitContainerStatuses[i].Name
		}
	}
	return ""
}

func containerMessage(container string, w *corev1.ContainerStateWaiting) string {
	if w.Message == "" {
		return "container " + container + ": " + w.Reason
	}
	return "container " + container + ": " + w.Message
}

// terminatedDetail names the first container that terminated with an error, for Failed messages.
func terminatedDetail(p *corev1.Pod) string {
	for i := range p.Status.ContainerStatuses {
		if t := p.Status.ContainerStatuses[i].State.Terminated; t != nil {
			return fmt.Sprintf(" (container %s exited with code %d: %s)", p.Status.ContainerStatuses[i].Name, t.ExitCode, t.Reason)
		}
	}
	return ""
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func conditionTrue(p *corev1.Pod, t corev1.PodConditionType) bool {
	c := condition(p, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

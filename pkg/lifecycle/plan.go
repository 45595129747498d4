package lifecycle

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/updatepolicy"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Event reasons, in pairs, on workspace pods.
const (
	ReasonStopping  = "WorkspaceStopping"
	ReasonStopped   = "WorkspaceStopped"
	ReasonStarting  = "WorkspaceStarting"
	ReasonStarted   = "WorkspaceStarted"
	ReasonCulled    = "WorkspaceCulled"
	ReasonStartHeld = "WorkspaceStartHeld"
	// ReasonNodeLost (Warning): the node of the workspace's pod is gone; the pod is replaced.
	ReasonNodeLost = "NodeLost"
	// ReasonNodeLostReplaced: the lost pod was removed; its copy starts on another node.
	ReasonNodeLostReplaced = "NodeLostReplaced"
	// ReasonEvictionReplaced (Normal): the workspace's pod is being deleted by Kubernetes for a
	// disruption (a drain's eviction, the taint manager, preemption, the pod GC); its gated copy
	// keeps the workspace and starts on another node once the pod has released its claims.
	ReasonEvictionReplaced = "EvictionReplaced"
	// ReasonUntrustedAnnotations (Warning), the upgrade planner's reason for the same finding: a
	// live pod of the workspace is not one nogoo9 named for the owner and id it carries, or its
	// pods have two owners (a pod relabelled into it); nothing is created, deleted or patched.
	ReasonUntrustedAnnotations = upgrade.ReasonUntrustedAnnotations
)

// Target is what the planner needs of the workspace's template.
type Target struct {
	// Found is false when the template does not exist (a start then stays on its version).
	Found bool
	// Version is the template's current version.
	Version string
	// Annotations are the template's (update policy, idle timeout).
	Annotations map[string]string
	// GoneNodes are the nodes, among those the workspace's pods are bound to, that no longer
	// exist (the controller confirms each with the API server): a pod bound to one is lost.
	GoneNodes map[string]bool
}

// Config is the planner's tuning.
type Config struct {
	// IdleTimeout is the default idle timeout (--idle-timeout); 0 turns culling off for
	// templates without nogoo9/idle-timeout.
	IdleTimeout time.Duration
}

// ActionKind says what an Action does.
type ActionKind string

const (
	// CreateStoppedPod creates, named Name, the stopped copy of Pod (read in full from the API
	// server): same labels, annotations and spec, held by the stop gate.
	CreateStoppedPod ActionKind = "CreateStoppedPod"
	// Ungate removes the stop gate from Pod (resourceVersion precondition) and the stop
	// bookkeeping annotations, and stamps nogoo9/started-at with the time (IdleSince: the start
	// is activity).
	Ungate ActionKind = "Ungate"
	// CreateStartedPod builds a pod from the template's latest version for the identity of the
	// stopped Pod, named Name; the stopped pod is deleted next.
	CreateStartedPod ActionKind = "CreateStartedPod"
	// DeletePod deletes Pod, as the planner saw it (UID and resourceVersion preconditions: a pod
	// written since, say a stop intent or a maintenance that lands on it, is re-planned rather
	// than deleted with the write), after checking that Keep still exists.
	DeletePod ActionKind = "DeletePod"
	// PatchPod merge-patches Pod's annotations (Set, and Remove), with Pod's resourceVersion as
	// precondition.
	PatchPod ActionKind = "PatchPod"
	// EventOnly records the Event on Pod (once per pod version: the controller remembers it).
	EventOnly ActionKind = "Event"
)

// Action is one write. The controller records the Event (EventType, Reason, Message) only when
// the write actually happened.
type Action struct {
	Kind ActionKind
	Pod  *corev1.Pod
	Keep *corev1.Pod
	Name string
	Set  map[string]string
	// Remove, on a PatchPod, are annotations to remove.
	Remove []string
	// Culled marks the patch that stops an idle workspace (counted in the culled metric).
	Culled bool
	// NodeLost marks the actions that replace a pod whose node is gone: CreateStoppedPod copies
	// it without a stop intent, DeletePod deletes it at once (grace period 0: no kubelet is left
	// to run its preStop or confirm the delete).
	NodeLost bool
	// Evicted marks the CreateStoppedPod that copies a pod Kubernetes is deleting for a
	// disruption (DisruptionTarget=True): the source is being deleted, and the copy, without a
	// stop intent unless the pod had one, is all the workspace keeps.
	Evicted                    bool
	EventType, Reason, Message string
}

// Move is the outcome of one pass.
type Move struct {
	// State names where the workspace is (logs).
	State string
	// Actions are applied in order; the controller stops at the first that does not happen.
	Actions []Action
	// Hold tells the controller not to run the upgrade planner in this pass: the workspace is
	// stopped, stopping or starting, and only this planner moves it.
	Hold bool
	// RequeueAfter asks for a pass then (the idle deadline).
	RequeueAfter time.Duration
}

// StoppedPodName is the deterministic name of the stopped pod that replaces running: a create
// repeated after a crash or a stale read fails with AlreadyExists.
func StoppedPodName(running *corev1.Pod) string {
	return workspace.UpgradePodName(workspace.Owner(running), workspace.ID(running), "stop@"+string(running.UID))
}

// StartedPodName is the deterministic name of the pod a start on the template's latest version
// creates for stopped. It is derived from stopped's UID alone, not from the version: a pass
// planned from a cache that does not show the first start's pod yet, after the template moved on,
// repeats the create under the same name and fails with AlreadyExists, instead of making a second
// running pod that mounts the same claims.
func StartedPodName(stopped *corev1.Pod) string {
	return workspace.UpgradePodName(workspace.Owner(stopped), workspace.ID(stopped), "start@"+string(stopped.UID))
}

// startedPodNameWithVersion is the name releases before stop 52 gave the pod a start on version
// created for stopped; a name check still accepts it for pods they made.
func startedPodNameWithVersion(stopped *corev1.Pod, version string) string {
	return workspace.UpgradePodName(workspace.Owner(stopped), workspace.ID(stopped), "start@"+string(stopped.UID)+"@"+version)
}

// Plan decides the next lifecycle move of one workspace from all its pods (any order).
//
// Rules, first match wins (docs/lifecycle.md has the reasons):
//   - no live pod, and every pod being deleted carries DisruptionTarget=True (Kubernetes evicts
//     it: a drain, the taint manager, preemption) or was retired by nogoo9 in favour of one that
//     does (an upgrade's old pod, a failed upgrade's new pod: retired): copy one as a gated pod,
//     which then starts like a stopped pod once no pod being deleted mounts its claims
//     (planEvicted; docs/reliability.md).
//   - no live pod: nothing (delete in progress).
//   - a live pod nogoo9 did not name for the owner and id it carries, or live pods of two owners
//     (a pod relabelled into the workspace): instead of any write, a Warning; no culling
//     (trustProblem).
//   - a running pod bound to a node that is gone: mark it (phase Unavailable, NodeLost), copy it
//     as a gated pod, delete it with grace period 0; the copy then starts like a stopped pod
//     (planNodeLost; docs/reliability.md).
//   - stop intent, an upgrade already started: copy the intent onto every live pod that lacks it,
//     then let the upgrade end (the stop follows on whichever pod stays).
//   - stop intent: copy the intent onto the serving pod if another pod carries it (a stop
//     written on the stopped pod a start on the latest version replaces), create the stopped copy
//     of the serving pod, then delete the serving pod (grace period and preStop apply); extra
//     stopped pods go, the newest stays.
//   - no intent, a stopped pod: under maintenance, wait; with a running pod (a stop cancelled
//     half-way, or a start on the latest version) delete the stopped pod; else start: on the
//     latest version when the update policy is on-start or an upgrade was requested, else
//     remove the gate; a start waits while a pod being deleted still mounts one of the stopped
//     pod's claims.
//   - running and idle past its timeout: write the stop intent with the reason (culling).
//
// Every delete of a pod that another replaces is preceded by the patch that gives the pod that
// stays what a person wrote on the one that goes (retire), and is conditional on the pod as the
// planner saw it.
func Plan(pods []*corev1.Pod, t Target, now time.Time, cfg Config) Move {
	pods = workspace.NewestFirst(append([]*corev1.Pod(nil), pods...))
	m := plan(pods, t, now, cfg)
	if !m.Hold && !writes(m) {
		return m // nothing to do: the upgrade planner has its own checks
	}
	on, problem := trustProblem(pods, evictedToCopy(pods) != nil)
	switch {
	case problem == "":
		return m
	case len(m.Actions) == 1 && m.Actions[0].Culled:
		// Not idleness but a stranger: no cull and no Warning, so the upgrade planner still runs
		// (it has its own checks for duplicates, and adopts and upgrades a pod of the original
		// product, which nogoo9 did not name either).
		return Move{State: "Running"}
	}
	return Move{State: "Untrusted", Hold: true, Actions: []Action{{Kind: EventOnly, Pod: on,
		EventType: corev1.EventTypeWarning, Reason: ReasonUntrustedAnnotations, Message: problem}}}
}

func plan(pods []*corev1.Pod, t Target, now time.Time, cfg Config) Move {
	var live, gated, running []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		live = append(live, p)
		if stoppedPod(p) {
			gated = append(gated, p)
		} else {
			running = append(running, p)
		}
	}
	if len(live) == 0 {
		if m, ok := planEvicted(pods, now); ok {
			return m
		}
		return Move{State: "Deleting", Hold: len(pods) > 0 && anyGated(pods)}
	}
	if m, ok := planNodeLost(pods, gated, running, t.GoneNodes, now); ok {
		return m
	}
	if reason, ok := workspace.StopIntent(live); ok {
		return planStop(pods, live, gated, running, reason, now)
	}
	if len(gated) > 0 {
		return planStart(pods, gated, running, t, now)
	}
	return planCull(pods, running, t, now, cfg)
}

func anyGated(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if stoppedPod(p) {
			return true
		}
	}
	return false
}

// stoppedPod reports whether p is a stopped pod nogoo9 made (StoppedPod): held by the stop gate
// and naming the pod it was copied from (workspace.IsStoppedCopy, which the phase and the upgrade
// gate use too). The gate alone is not enough: a template's spec could carry it (the template
// policy refuses that now; older versions may), and an upgrade's new pod born with it taken for a
// stopped pod had the old pod take its stale settings, then was deleted and re-created by the
// upgrade, forever.
func stoppedPod(p *corev1.Pod) bool {
	return workspace.IsStoppedCopy(p)
}

// writes reports whether m changes anything (more than an Event).
func writes(m Move) bool {
	for _, a := range m.Actions {
		if a.Kind != EventOnly {
			return true
		}
	}
	return false
}

// trustProblem says why nogoo9 must not act on the workspace of pods (sorted with NewestFirst),
// and on which pod to say so, or "" when it may. Labels and annotations are input (a kubectl user
// with patch pods can relabel any pod into a workspace); a name is set at creation. So every live
// pod must carry the name nogoo9 gives to a pod of the owner and id it claims
// (workspace.NameMatchesIdentity), and all must have one owner: nogoo9 names the stopped copy of a
// relabelled pod after that pod's own owner, and a spawn race can leave two owners' pods.
//
// With evicted (no live pod; planEvicted copies one of the pods being deleted), the pods being
// deleted count as live: a stranger relabelled into a workspace and then evicted would otherwise
// get a copy under a name nogoo9 gives the workspace, and the check would trust that copy.
func trustProblem(pods []*corev1.Pod, evicted bool) (*corev1.Pod, string) {
	var first *corev1.Pod // the oldest live pod: another owner's pod is the newcomer
	for i := len(pods) - 1; i >= 0; i-- {
		p := pods[i]
		if p.DeletionTimestamp != nil && !evicted {
			continue
		}
		if !workspace.NameMatchesIdentity(p) {
			return p, fmt.Sprintf("Pod %s carries workspace %s of %s, but nogoo9 did not create it for that workspace (its name is not %s or an upgrade of it); nogoo9 stops, starts and deletes nothing for the workspace on its strength: remove its %s label or delete it.",
				p.Name, workspace.ID(p), workspace.Owner(p), workspace.PodName(workspace.Owner(p), workspace.ID(p)), workspace.LabelWorkspaceID)
		}
		if first == nil {
			first = p
		} else if workspace.Owner(p) != workspace.Owner(first) {
			return p, fmt.Sprintf("Pods %s of %s and %s of %s both carry workspace %s; nogoo9 stops, starts and deletes neither on its strength: remove the %s label from the pod that is not the workspace's, or delete it.",
				first.Name, workspace.Owner(first), p.Name, workspace.Owner(p), workspace.ID(p), workspace.LabelWorkspaceID)
		}
	}
	return nil, ""
}

// upgradeStarted is a live pod whose upgrade has not ended (the upgrade controller owns it).
func upgradeStarted(pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Annotations[workspace.AnnUpgradeFrom] != "" && workspace.UpgradeInFlight(p, pods) {
			return p
		}
	}
	return nil
}

func planStop(pods, live, gated, running []*corev1.Pod, reason string, now time.Time) Move {
	if up := upgradeStarted(pods); up != nil && len(running) > 0 {
		// The upgrade controller is between two pods and will delete one of them: the intent
		// must be on whichever stays.
		for _, p := range live {
			if p.Annotations[workspace.AnnStopRequested] == "" {
				return Move{State: "StopWaitsForUpgrade", Hold: true, Actions: []Action{{
					Kind: PatchPod, Pod: p, Set: map[string]string{workspace.AnnStopRequested: reason},
				}}}
			}
		}
		return Move{State: "StopWaitsForUpgrade"}
	}
	if len(running) == 0 {
		if len(gated) > 1 {
			// Two stopped pods (the stop of a pod that a start on the latest version made from
			// the older one): the newest stays, with what a person wrote on the older one, which
			// every writer has seen; it goes last, so its values are the ones that stay. Not its
			// upgrade intent: the start on the latest version answered that.
			gone, keep := oldestAndNewest(gated)
			return Move{State: "Stopped", Hold: true, Actions: retire(gone, keep, workspace.PersonSettingKeys, Action{})}
		}
		return Move{State: "Stopped", Hold: true}
	}
	serving := workspace.Active(running)
	if serving.Annotations[workspace.AnnStopRequested] == "" {
		// The intent is on another pod of the workspace: typically the stopped pod that a start
		// on the latest version is replacing, written by a front end whose cache did not show
		// the new pod yet. The pod that serves is the one to stop: it gets the intent first (the
		// stopped copy is made from it as the API server has it).
		return Move{State: "Stopping", Hold: true, Actions: []Action{{
			Kind: PatchPod, Pod: serving, Set: map[string]string{workspace.AnnStopRequested: reason},
		}}}
	}
	for _, g := range gated {
		if g.Annotations[workspace.AnnStoppedFromUID] == string(serving.UID) {
			// The stopped copy exists (this pass or an earlier one, before a crash): it takes over
			// what a person wrote on the running pod since it was made, then the node is
			// released. A normal delete: the kubelet runs preStop within the grace period.
			return Move{State: "Stopping", Hold: true, Actions: retire(serving, g, stoppedCarried, Action{
				EventType: corev1.EventTypeNormal, Reason: ReasonStopped,
				Message: fmt.Sprintf("Workspace %s stopped: pod %s is being deleted, pod %s keeps its identity and claims without a node.", workspace.ID(serving), serving.Name, g.Name),
			})}
		}
	}
	return Move{State: "Stopping", Hold: true, Actions: []Action{{
		Kind: CreateStoppedPod, Pod: serving, Name: StoppedPodName(serving),
		Set: map[string]string{
			workspace.AnnStoppedFromUID: string(serving.UID),
			workspace.AnnStoppedAt:      now.UTC().Format(time.RFC3339),
			workspace.AnnStopRequested:  reason,
		},
		EventType: corev1.EventTypeNormal, Reason: ReasonStopping,
		Message: fmt.Sprintf("Stopping workspace %s: %s.", workspace.ID(serving), workspace.StopMessage(reason)),
	}}}
}

func planStart(pods, gated, running []*corev1.Pod, t Target, now time.Time) Move {
	stopped := gated[0]
	if len(running) > 0 {
		// A stop undone before its running pod went, or a start on the latest version whose new
		// pod exists: the stopped pod has served its purpose.
		keep := workspace.Active(running)
		gone := gated[len(gated)-1]
		if gone.Annotations[workspace.AnnStoppedFromUID] == string(keep.UID) {
			// A stop undone: the running pod is the original, the one every writer has seen
			// (its copy is newer), so it keeps its own values.
			return Move{State: "Starting", Hold: true, Actions: []Action{{Kind: DeletePod, Pod: gone, Keep: keep}}}
		}
		var ev Action
		if keep.Annotations[workspace.AnnStartedFromUID] == string(gone.UID) {
			ev.EventType, ev.Reason = corev1.EventTypeNormal, ReasonStarted
			ev.Message = fmt.Sprintf("Workspace %s started on version %s as pod %s.", workspace.ID(keep), workspace.TemplateVersion(keep), keep.Name)
		}
		// A start on the latest version: the new pod takes over what a person wrote on the
		// stopped pod since it was built (a pin, a maintenance), then the stopped pod goes.
		return Move{State: "Starting", Hold: true, Actions: retire(gone, keep, workspace.PersonSettingKeys, ev)}
	}
	if len(gated) > 1 {
		gone, keep := oldestAndNewest(gated)
		return Move{State: "Starting", Hold: true, Actions: retire(gone, keep, workspace.PersonSettingKeys, Action{})}
	}
	if reason, ok := workspace.InMaintenance(pods); ok {
		return Move{State: "StartHeldForMaintenance", Hold: true, Actions: []Action{{Kind: EventOnly, Pod: stopped,
			EventType: corev1.EventTypeNormal, Reason: ReasonStartHeld,
			Message: fmt.Sprintf("Start of workspace %s waits: it is in maintenance (%s); it starts when the maintenance is lifted.", workspace.ID(stopped), reason)}}}
	}
	if holder, claim := claimHeld(pods, stopped); holder != nil {
		// The pod being deleted (an evicted pod, a stopped workspace's running pod) may still
		// have the volume attached on its node: a start now would wait on another node for the
		// attach (ReadWriteOnce) or not be scheduled at all (ReadWriteOncePod), and a pod that
		// never terminates (an unreachable node) would keep it forever. Its delete wakes the
		// workspace.
		return Move{State: "StartWaitsForClaims", Hold: true, Actions: []Action{{Kind: EventOnly, Pod: stopped,
			EventType: corev1.EventTypeNormal, Reason: ReasonStartHeld,
			Message: fmt.Sprintf("Start of workspace %s waits: pod %s, being deleted, still mounts claim %s; it starts when that pod is gone.", workspace.ID(stopped), holder.Name, claim)}}}
	}
	if t.Found && t.Version != "" && t.Version != workspace.TemplateVersion(stopped) && startOnLatest(stopped, t) {
		name := StartedPodName(stopped)
		return Move{State: "Starting", Hold: true, Actions: []Action{{
			Kind: CreateStartedPod, Pod: stopped, Name: name,
			Set:       map[string]string{workspace.AnnStartedFromUID: string(stopped.UID)},
			EventType: corev1.EventTypeNormal, Reason: ReasonStarting,
			Message: fmt.Sprintf("Starting workspace %s on the template's latest version %s (was %s) as pod %s.", workspace.ID(stopped), t.Version, workspace.TemplateVersion(stopped), name),
		}}}
	}
	return Move{State: "Starting", Hold: true, Actions: []Action{{
		Kind: Ungate, Pod: stopped,
		EventType: corev1.EventTypeNormal, Reason: ReasonStarted,
		Message: fmt.Sprintf("Workspace %s started: pod %s (version %s) is released to the scheduler.", workspace.ID(stopped), stopped.Name, workspace.TemplateVersion(stopped)),
	}}}
}

// startOnLatest: an upgrade was requested before the stop (the stop pre-empted it; the start
// honours it), or the update policies say so (updatepolicy.StartOnLatest: the pod's policy, else
// the template's, is on-start and the pod is not pinned; an unreadable setting starts it as it was).
func startOnLatest(stopped *corev1.Pod, t Target) bool {
	if stopped.Annotations[workspace.AnnUpgradeRequested] != "" {
		return true
	}
	latest, err := updatepolicy.StartOnLatest(updatepolicy.SettingsOf(stopped, t.Annotations))
	return err == nil && latest
}

func planCull(pods, running []*corev1.Pod, t Target, now time.Time, cfg Config) Move {
	timeout, _ := IdleTimeout(t.Annotations, cfg.IdleTimeout)
	if timeout <= 0 {
		return Move{State: "Running"}
	}
	if upgradeStarted(pods) != nil {
		return Move{State: "Running"}
	}
	if _, ok := workspace.InMaintenance(pods); ok {
		// An operator's hold: the operator decides when it runs.
		return Move{State: "Running"}
	}
	p := workspace.Active(running)
	since := IdleSince(p)
	idle := now.Sub(since)
	if idle < timeout {
		return Move{State: "Running", RequeueAfter: timeout - idle}
	}
	reason := fmt.Sprintf("stopped after %s without activity (idle timeout %s)", idle.Truncate(time.Second), timeout)
	return Move{State: "Idle", Hold: true, Actions: []Action{{
		Kind: PatchPod, Pod: p, Set: map[string]string{workspace.AnnStopRequested: reason}, Culled: true,
		EventType: corev1.EventTypeNormal, Reason: ReasonCulled,
		Message: fmt.Sprintf("Workspace %s %s; start it to use it again.", workspace.ID(p), reason),
	}}}
}

// planNodeLost replaces a running pod whose node is gone (GoneNodes), in three passes: mark it
// with nogoo9/node-lost (the phase says NodeLost, the proxy stops routing), create its gated copy
// (same labels, annotations, spec: same id, owner, version, paths, claims; the stop intent only
// if it had one), then delete it with grace period 0 once the copy exists. The copy, with no stop
// intent, is then started by planStart (gate removed, scheduled on another node).
//
// It replaces only a workspace whose one running pod is lost and that no upgrade is moving: with
// two running pods (an upgrade or a start in flight) it only marks the lost ones, and the
// planner that owns those pods (the upgrade's deadline, planStart) decides.
func planNodeLost(pods, gated, running []*corev1.Pod, gone map[string]bool, now time.Time) (Move, bool) {
	if len(gone) == 0 {
		return Move{}, false
	}
	var lost []*corev1.Pod
	for _, p := range running {
		if p.Spec.NodeName != "" && gone[p.Spec.NodeName] {
			lost = append(lost, p)
		}
	}
	if len(lost) == 0 {
		return Move{}, false
	}
	for _, p := range lost {
		if p.Annotations[workspace.AnnNodeLost] == "" {
			msg := fmt.Sprintf("node %s of pod %s no longer exists (seen %s); the workspace is being moved to another node with its claims", p.Spec.NodeName, p.Name, now.UTC().Format(time.RFC3339))
			return Move{State: "NodeLost", Hold: true, Actions: []Action{{
				Kind: PatchPod, Pod: p, Set: map[string]string{workspace.AnnNodeLost: msg},
				EventType: corev1.EventTypeWarning, Reason: ReasonNodeLost,
				Message: fmt.Sprintf("Workspace %s: %s.", workspace.ID(p), msg),
			}}}, true
		}
	}
	if len(running) > 1 || upgradeStarted(pods) != nil {
		return Move{}, false
	}
	p := lost[0]
	for _, g := range gated {
		if g.Annotations[workspace.AnnStoppedFromUID] == string(p.UID) {
			return Move{State: "NodeLost", Hold: true, Actions: retire(p, g, stoppedCarried, Action{
				NodeLost:  true,
				EventType: corev1.EventTypeNormal, Reason: ReasonNodeLostReplaced,
				Message: fmt.Sprintf("Workspace %s: pod %s on lost node %s was deleted; pod %s keeps its identity and claims and starts on another node.", workspace.ID(p), p.Name, p.Spec.NodeName, g.Name),
			})}, true
		}
	}
	return Move{State: "NodeLost", Hold: true, Actions: []Action{{
		Kind: CreateStoppedPod, Pod: p, Name: StoppedPodName(p), NodeLost: true,
		Set: map[string]string{workspace.AnnStoppedFromUID: string(p.UID)},
	}}}, true
}

// DisruptionTarget is the pod condition Kubernetes sets (True) on a pod it deletes for a
// disruption: EvictionByEvictionAPI (a drain), DeletionByTaintManager (an unreachable or tainted
// node), PreemptionByScheduler, DeletionByPodGC, TerminationByKubelet. A delete by the owner
// (nogoo9's front end) or by a person with kubectl carries none.
const DisruptionTarget = corev1.DisruptionTarget

// Disrupted reports whether p is being deleted by Kubernetes for a disruption: a deletion
// timestamp and DisruptionTarget=True. Any reason counts: each of them deletes the pod.
func Disrupted(p *corev1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == DisruptionTarget {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// evictedToCopy is the pod planEvicted copies among pods (sorted with NewestFirst), or nil: none
// of them is live, all are being deleted, and each was deleted for a disruption (evicted) or was
// retired by nogoo9 in favour of one that was (retired). Any other pod being deleted without the
// condition means an owner or a person deletes the workspace (their delete reaches every pod), so
// nothing is copied; so does a pod the owner's delete met already going, which the front end
// marks (workspace.AnnDeletedAt) whatever condition it carries. A stopped pod has no node to be
// evicted from and is never copied. Of several (a drain that evicts both pods of an upgrade in
// flight), the oldest running pod: the one the upgrade came from, whose requested upgrade the
// copy keeps for its start.
func evictedToCopy(pods []*corev1.Pod) *corev1.Pod {
	var pick *corev1.Pod
	for _, p := range pods {
		if OwnerDeleted(p) {
			return nil
		}
		if !evicted(p) {
			if p.DeletionTimestamp == nil || !retired(p, pods) {
				return nil
			}
			continue
		}
		if !workspace.IsStoppedPod(p) {
			pick = p // pods are newest first: the last is the oldest
		}
	}
	return pick
}

// OwnerDeleted reports whether p is being deleted and the owner's delete of the workspace met it
// so (workspace.AnnDeletedAt, written by the front end on a pod already going, before it deletes
// the others). The marker on a pod not being deleted means nothing: such a pod is live, and a live
// pod is never copied as an eviction's. Exported for the check the controller makes on the pod as
// the API server has it before it creates an eviction's copy.
func OwnerDeleted(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && p.Annotations[workspace.AnnDeletedAt] != ""
}

// evicted reports whether p is being deleted for a disruption (Disrupted) with the condition
// dated with the delete (disruptionSkew), not added later to a pod already being deleted.
func evicted(p *corev1.Pod) bool {
	if !Disrupted(p) {
		return false
	}
	at, ok := disruptedAt(p)
	return !ok || !at.After(deleteAsked(p).Add(disruptionSkew))
}

// disruptionSkew bounds how much later than the delete it caused the DisruptionTarget condition
// of a disrupted pod may be dated. Kubernetes marks a pod and deletes it in one go: the Eviction
// API in one request, the taint manager, the scheduler and the pod GC from their own clocks. A
// condition dated later than that was added to a pod already being deleted (an eviction of a pod
// its owner deleted: the Eviction API marks a terminating pod too) and does not make that delete
// a disruption. The front end's delete sweep (75 s) removes a copy made within the bound.
const disruptionSkew = 30 * time.Second

// retired reports whether r, being deleted without DisruptionTarget, was replaced by nogoo9 with
// a pod of pods that Kubernetes then deleted for a disruption (or that was itself retired so, in
// turn: two upgrades within one long preStop), as the pods show:
//   - the pod that replaced r names r's UID (an upgrade, a rollback, a start on the latest
//     version) under the name nogoo9 derives from it (madeFrom): r went after it, a side-by-side
//     upgrade's old pod once the new one was Ready, a Recreate's old pod, a start's stopped pod;
//   - or r is the new pod of a failed side-by-side upgrade (failedUpgrade): the pod it was made
//     from, which stays, carries the failure, recorded after r was made.
//
// And r's delete was asked for no later than that pod's (deleteAsked): nogoo9 deletes a pod in
// favour of another only after reading that one live from the API server, while the owner's
// delete of a workspace whose last pod is already being evicted comes after the eviction. And the
// other pod's condition came with its delete, not after (disruptionSkew): the owner's delete of
// every pod, then an eviction of the terminating one (any user allowed pods/eviction can), is
// still the owner's delete. The links are bookkeeping only nogoo9 may write (the admission
// policy), and each is checked against the name the API server fixed at creation.
func retired(r *corev1.Pod, pods []*corev1.Pod) bool {
	return retiredAmong(r, pods, map[*corev1.Pod]bool{})
}

func retiredAmong(r *corev1.Pod, pods []*corev1.Pod, seen map[*corev1.Pod]bool) bool {
	seen[r] = true
	for _, q := range pods {
		if seen[q] || q.DeletionTimestamp == nil || deleteAsked(r).After(deleteAsked(q)) || !(madeFrom(q, r) || failedUpgrade(r, q)) {
			continue
		}
		if evicted(q) || retiredAmong(q, pods, seen) {
			return true
		}
	}
	return false
}

// madeFrom reports whether nogoo9 made q from old: q names old's UID as the pod it upgrades
// (workspace.UpgradeLinkProblem: the name derived from old's UID and q's version, or for a
// rollback from old's UID, and the same owner, id and user) or as the stopped pod it starts
// (StartedPodName, or the name of releases before stop 52), or q is old's copy (a stop's, an
// eviction's, a lost node's) under the name StoppedPodName derives from old's UID, of the same
// owner and id: a start ungates the copy of a workspace without claims at once, and the ungate
// drops the stopped-from-uid the copy had, while old may still be terminating.
func madeFrom(q, old *corev1.Pod) bool {
	uid := string(old.UID)
	if uid == "" {
		return false
	}
	if q.Annotations[workspace.AnnUpgradeFromUID] == uid && workspace.UpgradeLinkProblem(q, old) == "" {
		return true
	}
	if q.Name == StoppedPodName(old) && workspace.Owner(q) == workspace.Owner(old) && workspace.ID(q) == workspace.ID(old) {
		return true
	}
	return q.Annotations[workspace.AnnStartedFromUID] == uid &&
		(q.Name == StartedPodName(old) || q.Name == startedPodNameWithVersion(old, workspace.TemplateVersion(q)))
}

// failedUpgrade reports whether head is the new pod of an upgrade of old that nogoo9 ended as
// failed (upgrade.failSideBySide): head names old's UID as the pod it upgrades, under the name
// nogoo9 derives from it, and old, which keeps serving, carries the failure
// (nogoo9/last-upgrade-error, written before head is deleted) dated no earlier than head's
// creation, so it is head's failure and not an earlier one.
func failedUpgrade(head, old *corev1.Pod) bool {
	if old.UID == "" || head.Annotations[workspace.AnnUpgradeFromUID] != string(old.UID) || workspace.UpgradeLinkProblem(head, old) != "" {
		return false
	}
	at := updatepolicy.FailedAt(old.Annotations[workspace.AnnLastUpgradeError])
	return !at.IsZero() && !at.Before(head.CreationTimestamp.Time)
}

// deleteAsked is when p's delete was asked for: its deletion timestamp less the grace period the
// delete gave it (the API server sets both).
func deleteAsked(p *corev1.Pod) time.Time {
	t := p.DeletionTimestamp.Time
	if g := p.DeletionGracePeriodSeconds; g != nil && *g > 0 {
		t = t.Add(-time.Duration(*g) * time.Second)
	}
	return t
}

// disruptedAt is when p was marked DisruptionTarget=True, if the condition says.
func disruptedAt(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == DisruptionTarget {
			return c.LastTransitionTime.Time, !c.LastTransitionTime.IsZero()
		}
	}
	return time.Time{}, false
}

// planEvicted keeps a workspace whose pods Kubernetes is deleting for a disruption (Disrupted,
// evictedToCopy): it creates the gated copy of the evicted pod, as planNodeLost does (same
// labels, annotations, spec: same id, owner, version, paths, claims; the stop intent only if it
// had one), under the deterministic name StoppedPodName gives it, so a repeat fails with
// AlreadyExists. The next pass sees the copy live and starts it (planStart), once the evicted pod
// no longer mounts its claims. The evicted pod is left to its delete: its grace period and
// preStop apply, and the drain waits for it.
func planEvicted(pods []*corev1.Pod, now time.Time) (Move, bool) {
	p := evictedToCopy(pods)
	if p == nil {
		return Move{}, false
	}
	name := StoppedPodName(p)
	var why string
	for _, c := range p.Status.Conditions {
		if c.Type == DisruptionTarget {
			why = c.Reason
		}
	}
	return Move{State: "Evicted", Hold: true, Actions: []Action{{
		Kind: CreateStoppedPod, Pod: p, Name: name, Evicted: true,
		Set:       map[string]string{workspace.AnnStoppedFromUID: string(p.UID)},
		EventType: corev1.EventTypeNormal, Reason: ReasonEvictionReplaced,
		Message: fmt.Sprintf("Workspace %s: Kubernetes is deleting pod %s (%s, seen %s); pod %s keeps its identity and claims and starts on another node once pod %s is gone.",
			workspace.ID(p), p.Name, why, now.UTC().Format(time.RFC3339), name, p.Name),
	}}}, true
}

// claimHeld is a pod of the workspace being deleted that mounts a claim stopped mounts, and the
// claim, or nil.
func claimHeld(pods []*corev1.Pod, stopped *corev1.Pod) (*corev1.Pod, string) {
	mine := map[string]bool{}
	for _, v := range stopped.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			mine[v.PersistentVolumeClaim.ClaimName] = true
		}
	}
	if len(mine) == 0 {
		return nil, ""
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil || p.UID == stopped.UID {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && mine[v.PersistentVolumeClaim.ClaimName] {
				return p, v.PersistentVolumeClaim.ClaimName
			}
		}
	}
	return nil, ""
}

// stoppedCarried are the keys a stopped pod takes over, set, changed or removed, from the pod it
// was copied from or replaces: the workspace's settings, and a requested upgrade, which a stopped
// workspace keeps for its start (StoppedPod copies it too).
var stoppedCarried = append(append([]string(nil), workspace.PersonSettingKeys...), workspace.AnnUpgradeRequested)

// retire is the actions that replace gone by keep: keep takes over what a person wrote on gone
// (workspace.CarriedOver of keys), then gone is deleted (del: its Event and flags) as the planner
// saw it: a write on gone that lands after this plan fails the delete, and the next pass carries
// it. The upgrade intent goes over only where keys say (a stopped pod keeps it; a start on the
// latest version answered it).
//
// gone and keep must have one owner (Plan holds a workspace with two first): what one owner
// wrote never lands on another's pod, and no pod is deleted in favour of another owner's.
func retire(gone, keep *corev1.Pod, keys []string, del Action) []Action {
	if workspace.Owner(gone) != workspace.Owner(keep) {
		return nil
	}
	var out []Action
	if set, remove := workspace.CarriedOver(gone, keep, keys); len(set) > 0 || len(remove) > 0 {
		out = append(out, Action{Kind: PatchPod, Pod: keep, Set: set, Remove: remove})
	}
	del.Kind, del.Pod, del.Keep = DeletePod, gone, keep
	return append(out, del)
}

// oldestAndNewest are the oldest and the newest of several stopped pods (sorted with NewestFirst):
// the one to delete first and the one to keep. Creation times have one-second resolution, so a
// stop right after a start on the latest version can make the stopped copy of the new pod exactly
// as "old" as the stopped pod the new pod came from; the copy then says it descends from that pod
// (it keeps the new pod's nogoo9/started-from-uid), and lineage decides before the name does.
func oldestAndNewest(gated []*corev1.Pod) (oldest, newest *corev1.Pod) {
	oldest, newest = gated[len(gated)-1], gated[0]
	if descends(oldest, newest) {
		oldest, newest = newest, oldest
	}
	return oldest, newest
}

// descends reports whether p was made from old: its stopped copy, or the pod a start on the
// latest version made from it, or a copy of that pod.
func descends(p, old *corev1.Pod) bool {
	uid := string(old.UID)
	return uid != "" && (p.Annotations[workspace.AnnStoppedFromUID] == uid || p.Annotations[workspace.AnnStartedFromUID] == uid)
}

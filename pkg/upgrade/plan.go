package upgrade

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Strategy is how a workspace is moved to a new pod; it is stamped on the upgraded pod as
// nogoo9/upgrade-strategy.
type Strategy string

const (
	// SideBySide starts the new pod next to the old one and deletes the old one once the new one
	// is Ready: no outage. Used when no claim is ReadWriteOnce or ReadWriteOncePod.
	SideBySide Strategy = "SideBySide"
	// Recreate creates the new pod (it waits on the volume), then deletes the old one so the
	// volume is released. The new pod carries the old spec (nogoo9/rollback-spec) until it is Ready.
	Recreate Strategy = workspace.StrategyRecreate
	// Rollback marks the pod that brings a failed Recreate upgrade back on the previous spec.
	Rollback Strategy = "Rollback"
)

// Event reasons, in pairs, as the Events on workspace pods carry them.
const (
	ReasonUpgradeRequested      = "UpgradeRequested"
	ReasonUpgradeStarted        = "UpgradeStarted"
	ReasonUpgradeSucceeded      = "UpgradeSucceeded"
	ReasonUpgradeFailed         = "UpgradeFailed"
	ReasonUpgradeNotNeeded      = "UpgradeNotNeeded"
	ReasonInvalidUpgradeRequest = "InvalidUpgradeRequest"
	ReasonDuplicateRemoved      = "DuplicatePodRemoved"
	// ReasonUntrustedAnnotations: a pod's upgrade bookkeeping is not what nogoo9 wrote; nothing
	// is created or deleted on its strength.
	ReasonUntrustedAnnotations = "UntrustedAnnotations"
)

// Result labels of a finished upgrade (for metrics).
const (
	ResultSucceeded = "succeeded"
	ResultFailed    = "failed"
)

// Config is the planner's tuning.
type Config struct {
	// Timeout is how long an upgraded pod may take to become Ready (--upgrade-timeout).
	Timeout time.Duration
	// Keys verify the records of Recreate upgrades (workspace.AnnUpgradeHMAC). Without a
	// verified record, the old pod is never deleted before the new one is Ready, and the new pod
	// never starts next to it on a single-writer claim (the upgrade fails instead).
	Keys *Keyring
}

// DefaultTimeout is the upgrade deadline when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Minute

func (c Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// Target is what the planner needs to know of the workspace's template.
type Target struct {
	// Found is false when the template does not exist (deleted, or never valid).
	Found bool
	// Name and Version of the template's current valid version.
	Name    string
	Version string
}

// Observed is everything known about one workspace: all its pods (live and terminating, in any
// order) and the claims of the namespace they mount, by name.
type Observed struct {
	Pods   []*corev1.Pod
	Claims map[string]*corev1.PersistentVolumeClaim
}

// ActionKind says what an Action does.
type ActionKind string

const (
	// CreateUpgradePod builds a pod from the template for the identity of Source, named Name,
	// with Annotations added; for Recreate the controller also stores Source's full spec
	// (read from the API server) as nogoo9/rollback-spec.
	CreateUpgradePod ActionKind = "CreateUpgradePod"
	// CreateRollbackPod rebuilds the previous pod from Source's nogoo9/rollback-spec (read from
	// the API server), named Name, with Annotations added.
	CreateRollbackPod ActionKind = "CreateRollbackPod"
	// DeletePod deletes Pod with its UID as precondition.
	DeletePod ActionKind = "DeletePod"
	// PatchPod merge-patches Pod's annotations: Set and Remove (nogoo9's keys only).
	PatchPod ActionKind = "PatchPod"
	// Event records an Event on Pod.
	Event ActionKind = "Event"
	// RemoveGate removes the scheduling gate Gate from Pod (a Recreate-upgraded pod whose old pod
	// is gone): the scheduler may place it now. Annotations, if any, are set in the same patch.
	RemoveGate ActionKind = "RemoveGate"
)

// Action is one write. A move is a short list of them, applied in order; the controller stops at
// the first error and the next pass re-plans from what it observes.
type Action struct {
	Kind ActionKind
	// Pod is the target of DeletePod, PatchPod and Event; the source of the create actions.
	Pod *corev1.Pod
	// Name of the pod to create.
	Name string
	// Strategy of the upgrade a create starts, or that a Result concludes.
	Strategy Strategy
	// Annotations added to a created pod; Set and Remove for PatchPod; set on Pod, on RemoveGate,
	// in the patch that removes the gate.
	Annotations map[string]string
	Remove      []string
	// EventType (corev1.EventTypeNormal/Warning), Reason and Message of an Event. A DeletePod or
	// create may carry an Event too: it is recorded only when the write actually happened (not
	// NotFound / AlreadyExists), so a repeated move after a stale read does not say it twice.
	EventType, Reason, Message string
	// EventOn is the pod the Event is recorded on when it is not Pod (e.g. the pod that stays).
	EventOn *corev1.Pod
	// Result, when set on a write, is the outcome of an upgrade that this write concludes
	// (counted once, when the write actually happened), with its Duration.
	Result   string
	Duration time.Duration
	// Keep, on a DeletePod, is the pod that stays and serves instead. The controller reads it from
	// the API server first and stops the move unless it exists and is not being deleted: a stale
	// cache must never make nogoo9 delete the last pod of a workspace. A Keep without UID is the
	// pod an earlier action of the same move creates (named by Name, replacing Pod): the create's
	// success proves it exists; without it, the move has already stopped.
	Keep *corev1.Pod
	// NeedsSlot marks a create that starts a new upgrade: the controller admits it only within
	// --max-pending-upgrades and --max-concurrent-upgrades (see Slot).
	NeedsSlot bool
	// MatchVersion, on a DeletePod, makes Pod's resourceVersion a precondition too: the pod is
	// deleted only as the planner saw it (e.g. with the maintenance carried over).
	MatchVersion bool
	// CheckedByDelete, on CreateUpgradePod, says that the move deletes Pod next, with its UID and
	// resourceVersion as preconditions. That delete succeeds only if Pod was live and unchanged
	// after the create, so it stands for the read of Pod that otherwise follows the create (was
	// the workspace deleted meanwhile?); when it fails, the controller makes that read.
	CheckedByDelete bool
	// Gate, on CreateUpgradePod, is a scheduling gate the new pod is created with; on RemoveGate,
	// the gate to remove.
	Gate string
}

// State names where a workspace is, for logs and metrics.
type State string

const (
	StateIdle          State = "Idle"
	StateRequested     State = "Requested"
	StateUpgrading     State = "Upgrading"
	StateRollingBack   State = "RollingBack"
	StateDuplicates    State = "Duplicates"
	StateNoPods        State = "NoPods"
	StateWaitDuplicate State = "WaitingForNewestPod"
	// StateUntrusted: the bookkeeping on the workspace's pods is not what nogoo9 wrote (a person
	// edited it); the controller only reports it.
	StateUntrusted State = "Untrusted"
)

// Move is the next move for one workspace: the writes of one pass.
type Move struct {
	State   State
	Actions []Action
	// RequeueAfter, when non-zero, asks to look again then even if nothing changes (a deadline).
	RequeueAfter time.Duration
}

// Plan computes the next move of the workspace observed in obs, towards template target, at now.
func Plan(obs Observed, target Target, now time.Time, cfg Config) Move {
	live := liveOrdered(obs.Pods)
	if len(live) == 0 {
		return Move{State: StateNoPods}
	}
	head := live[0]
	if InFlight(head, live) {
		if problem := workspace.UpgradeLinkProblem(head, linkedPod(head, live)); problem != "" {
			return untrusted(head, fmt.Sprintf("Pod %s claims to replace pod %s, but %s; nogoo9 creates and deletes nothing on its strength: remove the %s* annotations from pod %s.",
				head.Name, head.Annotations[workspace.AnnUpgradeFrom], problem, workspace.Prefix+"upgrade-", head.Name))
		}
		switch Strategy(head.Annotations[workspace.AnnUpgradeStrategy]) {
		case Rollback:
			return planRollback(head, live)
		case Recreate:
			return planRecreate(head, live, obs.Pods, obs.Claims, now, cfg)
		default:
			return planSideBySide(head, live, now, cfg)
		}
	}
	if gated(head) {
		// A restored pod (RollbackPod) whose failed pod is gone from the live ones: it starts
		// once no pod, terminating ones included, holds a claim it mounts. Nothing else is done
		// with the workspace before then (it is not Ready, and serves nothing).
		m := Move{State: StateRollingBack}
		if !volumesHeld(head, obs.Pods) {
			m.Actions = []Action{{Kind: RemoveGate, Pod: head, Gate: workspace.GateVolumeRelease}}
		}
		return m
	}
	if len(live) > 1 {
		return planDuplicates(head, live)
	}
	return planIdle(head, obs, target, now)
}

// planDuplicates handles more than one live pod and no upgrade in flight: once the newest is
// Ready, the older ones of the same owner go (one older pod: after what a person wrote on it went
// over to the newest); until then nothing is touched (the newest may still become Ready). A pod
// of another owner that shares the id is never deleted here.
func planDuplicates(head *corev1.Pod, live []*corev1.Pod) Move {
	if !workspace.IsReady(head) {
		return Move{State: StateWaitDuplicate}
	}
	if !workspace.NameMatchesIdentity(head) {
		// Only nogoo9 names pods after (owner, id): a pod relabelled into this workspace, or
		// re-annotated with its owner, must not make nogoo9 delete the workspace's pod.
		return untrusted(head, fmt.Sprintf("Pod %s carries workspace %s of %s, but nogoo9 did not create it for that workspace (its name is not %s); nogoo9 deletes no other pod of the workspace on its strength: remove its %s label or delete it.",
			head.Name, workspace.ID(head), workspace.Owner(head), workspace.PodName(workspace.Owner(head), workspace.ID(head)), workspace.LabelWorkspaceID))
	}
	p := Move{State: StateDuplicates}
	var olds []*corev1.Pod
	for _, old := range live[1:] {
		// Of the same owner and named for this workspace: a pod of the owner's other workspace
		// relabelled into this one is not a duplicate of it.
		if workspace.Owner(old) == workspace.Owner(head) && workspace.NameMatchesIdentity(old) {
			olds = append(olds, old)
		}
	}
	for _, old := range olds {
		del := Action{EventType: corev1.EventTypeNormal, Reason: ReasonDuplicateRemoved,
			Message: fmt.Sprintf("Deleted pod %s: pod %s of the same workspace is newer and Ready.", old.Name, head.Name)}
		if len(olds) == 1 {
			// One older pod: it is the one every writer has seen; what a person wrote on it goes
			// over to the pod that stays (cutover). Of several, no one is the authority.
			p.Actions = append(p.Actions, cutover(head, old, del)...)
			continue
		}
		del.Kind, del.Pod, del.Keep = DeletePod, old, head
		p.Actions = append(p.Actions, del)
	}
	return p
}

// untrusted is the move for a workspace whose bookkeeping nogoo9 did not write: a Warning on
// the pod, nothing else.
func untrusted(on *corev1.Pod, msg string) Move {
	return Move{State: StateUntrusted, Actions: []Action{{Kind: Event, Pod: on, EventType: corev1.EventTypeWarning,
		Reason: ReasonUntrustedAnnotations, Message: msg}}}
}

// linkedPod is the live pod named by up's nogoo9/upgrade-from, whatever its UID, or nil.
func linkedPod(up *corev1.Pod, live []*corev1.Pod) *corev1.Pod {
	from := up.Annotations[workspace.AnnUpgradeFrom]
	for _, p := range live {
		if p != up && p.Name == from {
			return p
		}
	}
	return nil
}

// carryPersonKeys is the patch that gives head what a person wrote on old before old goes
// (workspace.CarriedOver of the workspace's settings, and a stop intent), or nil when they agree;
// a pin written on old during the upgrade, say, must keep the update policy from moving the
// workspace again. Never the upgrade intent: this upgrade is its answer. old's values are the
// cache's; the delete that follows carries old's resourceVersion, so a write on old since then
// makes the delete fail and the next pass carry the new value.
func carryPersonKeys(head, old *corev1.Pod) *Action {
	set, remove := workspace.CarriedOver(old, head, workspace.PersonSettingKeys)
	if len(set) == 0 && len(remove) == 0 {
		return nil
	}
	return &Action{Kind: PatchPod, Pod: head, Annotations: set, Remove: remove}
}

// cutover is the move's actions that retire old in favour of head: carry what a person wrote on
// old, then delete old (with its resourceVersion as precondition).
func cutover(head, old *corev1.Pod, del Action) []Action {
	var out []Action
	if c := carryPersonKeys(head, old); c != nil {
		out = append(out, *c)
	}
	del.Kind, del.Pod, del.Keep, del.MatchVersion = DeletePod, old, head, true
	return append(out, del)
}

// planIdle handles a single live pod with no upgrade in flight: act on its intent, if any.
func planIdle(cur *corev1.Pod, obs Observed, target Target, now time.Time) Move {
	if _, has := cur.Annotations[workspace.AnnOwner]; !has {
		if owner := workspace.Owner(cur); owner != "" {
			// A pod of the original format: adopt it by stamping the owner its user-sub names.
			return Move{State: StateIdle, Actions: []Action{{Kind: PatchPod, Pod: cur, Annotations: map[string]string{workspace.AnnOwner: owner}}}}
		}
	}
	raw, ok := cur.Annotations[workspace.AnnUpgradeRequested]
	if !ok {
		return Move{State: StateIdle, Actions: clearCompanions(cur)}
	}
	clearIntent := IntentKeys()
	intent := ParseIntent(raw)
	if !intent.Valid {
		return Move{State: StateIdle, Actions: []Action{
			{Kind: PatchPod, Pod: cur, Remove: clearIntent},
			{Kind: Event, Pod: cur, EventType: corev1.EventTypeWarning, Reason: ReasonInvalidUpgradeRequest,
				Message: fmt.Sprintf("Ignored and removed %s=%q on pod %s: %s.", workspace.AnnUpgradeRequested, raw, cur.Name, intent.Problem)},
		}}
	}
	if !target.Found {
		tmpl := workspace.TemplateKey(cur)
		msg := fmt.Sprintf("template %q of pod %s was not found: restore the template or spawn a new workspace from an existing one", tmpl, cur.Name)
		return failStart(cur, "TemplateNotFound", msg, now)
	}
	if workspace.TemplateVersion(cur) == target.Version {
		return Move{State: StateIdle, Actions: []Action{
			{Kind: PatchPod, Pod: cur, Remove: clearIntent},
			{Kind: Event, Pod: cur, EventType: corev1.EventTypeNormal, Reason: ReasonUpgradeNotNeeded,
				Message: fmt.Sprintf("Pod %s already runs version %s of template %s; nothing to upgrade.", cur.Name, target.Version, target.Name)},
		}}
	}
	strategy, why := ChooseStrategy(cur, obs.Claims)
	name := UpgradePodName(cur, target.Version)
	m := Move{State: StateRequested}
	if strategy == SideBySide && cur.Annotations[workspace.AnnUpgradePod] != name {
		// Record the name (a person wrote only the intent, or another name): the front end
		// answers with it while the old pod serves. A Recreate deletes cur at once.
		m.Actions = append(m.Actions, Action{Kind: PatchPod, Pod: cur, Annotations: map[string]string{workspace.AnnUpgradePod: name}})
	}
	ann := map[string]string{
		workspace.AnnUpgradeFrom:        cur.Name,
		workspace.AnnUpgradeFromUID:     string(cur.UID),
		workspace.AnnUpgradeFromVersion: workspace.TemplateVersion(cur),
		workspace.AnnUpgradeStrategy:    string(strategy),
		workspace.AnnUpgradeStartedAt:   now.UTC().Format(time.RFC3339),
	}
	if v, ok := cur.Annotations[workspace.AnnMaintenance]; ok {
		ann[workspace.AnnMaintenance] = v
	}
	gate := ""
	if strategy == Recreate {
		// Scheduled before the old pod is gone, the new pod would be unschedulable (the volume is
		// taken) and wait out the scheduler's backoff once it is free: it waits behind a gate
		// instead, which the next pass removes when the old pod is gone (planRecreate).
		gate = workspace.GateVolumeRelease
	}
	m.Actions = append(m.Actions, Action{
		Kind: CreateUpgradePod, Pod: cur, Name: name, Strategy: strategy, NeedsSlot: true,
		Annotations: ann, Gate: gate, CheckedByDelete: strategy == Recreate,
		EventType: corev1.EventTypeNormal, Reason: ReasonUpgradeStarted,
		Message: fmt.Sprintf("Upgrading pod %s from version %s to %s of template %s: created pod %s (%s, %s).",
			cur.Name, workspace.TemplateVersion(cur), target.Version, target.Name, name, strategy, why),
	})
	if strategy == Recreate {
		// The new pod cannot start before the old one releases the volume: delete it in the same
		// pass, right after the create succeeded, instead of a watch round trip later. The pod
		// that stays is the one just created (Keep names it; its UID is not known yet).
		m.Actions = append(m.Actions, Action{Kind: DeletePod, Pod: cur, Keep: createdStub(cur, name), MatchVersion: true})
	}
	return m
}

// clearCompanions is the patch that removes what was written next to an intent that is gone, or
// nil. A person withdraws a request with kubectl by removing the intent alone (admission keeps
// people from removing the rest); left over, a nogoo9/target-version would send the next request,
// which may name no version, to the old one. The patch names the intent too, though the pod has
// none: the controller then makes the pod's resourceVersion a precondition, so an intent written
// since, with its own companions in the same patch, is never stripped of them.
func clearCompanions(cur *corev1.Pod) []Action {
	var stale []string
	for _, k := range intentCompanions {
		if _, has := cur.Annotations[k]; has {
			stale = append(stale, k)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return []Action{{Kind: PatchPod, Pod: cur, Remove: append([]string{workspace.AnnUpgradeRequested}, stale...)}}
}

// createdStub stands for the pod named name that the same move creates to replace cur: the
// controller knows its UID only once the create succeeded (see Action.Keep).
func createdStub(cur *corev1.Pod, name string) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace = name, cur.Namespace
	p.Annotations = map[string]string{workspace.AnnUpgradeFrom: cur.Name, workspace.AnnUpgradeFromUID: string(cur.UID)}
	return p
}

// FailStart is the move that ends an upgrade that could not even start (no template, a template
// that does not build for this workspace, a name conflict): the error is recorded on the pod, which
// keeps serving, and the intent is cleared.
func FailStart(cur *corev1.Pod, reason, message string, now time.Time) []Action {
	return failStart(cur, reason, message, now).Actions
}

func failStart(cur *corev1.Pod, reason, message string, now time.Time) Move {
	text := FailureText(now, reason, message)
	return Move{State: StateIdle, Actions: []Action{
		{Kind: PatchPod, Pod: cur,
			Annotations: map[string]string{workspace.AnnLastUpgradeError: text},
			Remove:      IntentKeys(),
			Result:      ResultFailed},
		{Kind: Event, Pod: cur, EventType: corev1.EventTypeWarning, Reason: ReasonUpgradeFailed,
			Message: fmt.Sprintf("Upgrade of pod %s failed: %s: %s.", cur.Name, reason, message)},
	}}
}

// UpgradePodName is the name of the pod that replaces cur at version: always the deterministic
// name seeded by cur's UID and the version (workspace.NextPodName, which the front end records in
// nogoo9/upgrade-pod too), so a repeated create hits AlreadyExists and a later pass can tell the
// pod nogoo9 made from a pod someone annotated to look like it. A different recorded name is
// ignored (and overwritten).
func UpgradePodName(cur *corev1.Pod, version string) string {
	return workspace.NextPodName(cur, version)
}

// RollbackPodName is the deterministic name of the pod that brings back the spec stored on failed.
func RollbackPodName(failed *corev1.Pod) string { return workspace.RollbackPodName(failed) }

// OldPod is the live pod that up replaces (nogoo9/upgrade-from with a matching UID), or nil.
func OldPod(up *corev1.Pod, live []*corev1.Pod) *corev1.Pod { return workspace.UpgradeOldPod(up, live) }

// InFlight reports whether up is an upgraded pod whose upgrade has not concluded: the pod it
// replaces is still live, or (Recreate) it has not been confirmed Ready yet.
func InFlight(up *corev1.Pod, live []*corev1.Pod) bool { return workspace.UpgradeInFlight(up, live) }

// Slot is what a workspace's upgrade holds of the upgrade gate's two limits.
type Slot struct {
	// InFlight: an upgraded pod whose upgrade has not concluded (--max-concurrent-upgrades).
	InFlight bool
	// WaitingForNode: that pod is not on a node yet (--max-pending-upgrades): it is not being
	// deleted, has no node (spec.nodeName, which only a binding, i.e. the scheduler, sets after the
	// create) and is not a stopped pod nogoo9 made (workspace.IsStoppedCopy: a stopped pod asks for
	// no node at all). The stop gate alone does not exempt it: a new pod born with the gate from an
	// older release's template is not a stopped workspace, and its workspace waits (down, in a
	// Recreate) like any other. A Recreate pod behind nogoo9's own gate (GateVolumeRelease)
	// counts: it waits for the old pod to go and then for a node, and its workspace is down from
	// the old pod's deletion until it is placed, so the limit also bounds how many workspaces a
	// bulk Recreate takes down at once (the room it frees may not fit the new version, or be taken
	// by other pods first).
	WaitingForNode bool
}

// SlotOf classifies one workspace's pods (live or not; any order).
func SlotOf(group []*corev1.Pod) Slot {
	var live []*corev1.Pod
	for _, p := range group {
		if p.DeletionTimestamp == nil && workspace.IsWorkspacePod(p) {
			live = append(live, p)
		}
	}
	var s Slot
	for _, p := range live {
		// Bookkeeping someone forged does not take a slot (see UpgradeLinkProblem).
		if p.Annotations[workspace.AnnUpgradeFrom] == "" || !InFlight(p, live) || workspace.UpgradeLinkProblem(p, linkedPod(p, live)) != "" {
			continue
		}
		s.InFlight = true
		if waitsForNode(p) {
			s.WaitingForNode = true
		}
	}
	return s
}

// waitsForNode reports whether up is not on a node yet and will ask the scheduler for one (see
// Slot.WaitingForNode).
func waitsForNode(up *corev1.Pod) bool {
	if up.Spec.NodeName != "" || workspace.IsStoppedCopy(up) {
		return false
	}
	return up.Status.Phase != corev1.PodSucceeded && up.Status.Phase != corev1.PodFailed
}

// Slots returns the slot of every workspace among pods (any mix of workspaces) that holds one:
// its keys (namespace/id) are the workspaces with an upgrade in flight.
func Slots(pods []*corev1.Pod) map[types.NamespacedName]Slot {
	byKey := map[types.NamespacedName][]*corev1.Pod{}
	for _, p := range pods {
		if workspace.IsWorkspacePod(p) && p.DeletionTimestamp == nil {
			k := types.NamespacedName{Namespace: p.Namespace, Name: workspace.ID(p)}
			byKey[k] = append(byKey[k], p)
		}
	}
	out := map[types.NamespacedName]Slot{}
	for k, group := range byKey {
		if s := SlotOf(group); s.InFlight {
			out[k] = s
		}
	}
	return out
}

// liveOrdered returns the pods not being deleted, logically newest first: a pod that replaces
// another (nogoo9/upgrade-from, matching UID) comes before it whatever the timestamps say (they
// have one-second resolution), then newer creation time, then name.
func liveOrdered(pods []*corev1.Pod) []*corev1.Pod {
	var live []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	depth := make(map[*corev1.Pod]int, len(live))
	var depthOf func(p *corev1.Pod, guard int) int
	depthOf = func(p *corev1.Pod, guard int) int {
		if d, ok := depth[p]; ok {
			return d
		}
		d := 0
		if guard < len(live) {
			if old := OldPod(p, live); old != nil {
				d = 1 + depthOf(old, guard+1)
			}
		}
		depth[p] = d
		return d
	}
	for _, p := range live {
		depthOf(p, 0)
	}
	sort.SliceStable(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if depth[a] != depth[b] {
			return depth[a] > depth[b]
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		return a.Name > b.Name
	})
	return live
}

// Outdated reports whether pod was built from another version than the template's current one.
// A pod whose template is gone is not outdated: there is nothing to upgrade to.
func Outdated(pod *corev1.Pod, target Target) bool {
	return target.Found && workspace.TemplateVersion(pod) != target.Version
}

package upgrade

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// summary renders a move as one line per action, for table comparisons.
func summary(m Move) []string {
	var out []string
	for i, a := range m.Actions {
		s := string(a.Kind)
		switch a.Kind {
		case CreateUpgradePod, CreateRollbackPod:
			s += fmt.Sprintf(" %s from %s %s", a.Name, a.Pod.Name, a.Strategy)
		case DeletePod:
			s += " " + a.Pod.Name
		case PatchPod:
			var set []string
			for k := range a.Annotations {
				set = append(set, k)
			}
			s += fmt.Sprintf(" %s set=%v remove=%v", a.Pod.Name, set, a.Remove)
		case Event:
			s += " " + a.Pod.Name
		case RemoveGate:
			s += " " + a.Pod.Name
			if len(a.Annotations) > 0 {
				s += fmt.Sprintf(" set=%v", slices.Sorted(maps.Keys(a.Annotations)))
			}
		}
		if a.Gate != "" {
			s += " gate=" + a.Gate
		}
		if a.CheckedByDelete {
			// Only true if the next action deletes the same pod as the planner saw it: that
			// delete is the controller's check that the pod was still live after the create.
			if i+1 < len(m.Actions) && m.Actions[i+1].Kind == DeletePod && m.Actions[i+1].Pod == a.Pod && m.Actions[i+1].MatchVersion {
				s += " checked-by-delete"
			} else {
				s += " checked-by-delete WITHOUT A DELETE OF " + a.Pod.Name + " AS SEEN NEXT"
			}
		}
		if a.Reason != "" {
			on := a.Pod
			if a.EventOn != nil {
				on = a.EventOn
			}
			s += fmt.Sprintf(" [%s %s on %s]", a.EventType, a.Reason, on.Name)
		}
		if a.Result != "" {
			s += " result=" + a.Result
		}
		out = append(out, s)
	}
	return out
}

func TestPlanStates(t *testing.T) {
	cfg := Config{Timeout: 10 * time.Minute, Keys: testKeys}
	target := Target{Found: true, Name: "python", Version: "v2"}
	now := t0.Add(time.Minute)
	old := func(opts ...podOpt) *corev1.Pod {
		return with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), opts...)
	}
	intent := ann(workspace.AnnUpgradeRequested, "true")
	sbsName := workspace.UpgradePodName(testOwner, testID, "uid-old@v2")
	newSBS := func(opts ...podOpt) *corev1.Pod {
		return with(upgraded(old(), sbsName, "uid-new", "v2", SideBySide, t0), opts...)
	}
	newRe := func(opts ...podOpt) *corev1.Pod {
		return with(upgraded(old(claim("data")), sbsName, "uid-new", "v2", Recreate, t0), opts...)
	}
	rollbackName := workspace.UpgradePodName(testOwner, testID, "rollback@uid-new")
	removeIntent := "remove=[nogoo9/upgrade-requested nogoo9/upgrade-pod nogoo9/upgrade-started-at nogoo9/target-version nogoo9/auto-upgrade]"
	recordName := "PatchPod ws-old set=[nogoo9/upgrade-pod] remove=[]"
	firstName := workspace.PodName(testOwner, testID)
	dupName := workspace.UpgradePodName(testOwner, testID, "stale-dup")
	named := func(name string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Name = name } }
	afterDeadline := t0.Add(11 * time.Minute)
	rwo := map[string]*corev1.PersistentVolumeClaim{"data": pvc("data", corev1.ReadWriteOnce)}

	tests := []struct {
		name    string
		pods    []*corev1.Pod
		claims  map[string]*corev1.PersistentVolumeClaim
		target  *Target
		now     time.Time
		state   State
		want    []string
		requeue time.Duration
	}{
		{name: "no pods at all (deleted by its owner) is left alone", state: StateNoPods},
		{name: "only terminating pods are left alone", pods: []*corev1.Pod{old(terminating)}, state: StateNoPods},
		{name: "a single Ready pod without intent is idle", pods: []*corev1.Pod{old(ready)}, state: StateIdle},
		{name: "an outdated pod without intent is not upgraded", pods: []*corev1.Pod{old(ready)}, state: StateIdle},
		{name: "a target version left after a person removed only the intent (a cancelled rollback) is removed, so a later request cannot go to it",
			pods: []*corev1.Pod{old(ready, ann(workspace.AnnTargetVersion, "v0"))}, state: StateIdle,
			want: []string{"PatchPod ws-old set=[] remove=[nogoo9/upgrade-requested nogoo9/target-version]"}},
		{name: "every companion left without its intent (pod name, target version, policy mark) goes in one patch that names the absent intent for the resourceVersion precondition",
			pods:  []*corev1.Pod{old(ready, ann(workspace.AnnUpgradePod, sbsName), ann(workspace.AnnTargetVersion, "v0"), ann(workspace.AnnAutoUpgrade, "when-idle"))},
			state: StateIdle,
			want:  []string{"PatchPod ws-old set=[] remove=[nogoo9/upgrade-requested nogoo9/upgrade-pod nogoo9/target-version nogoo9/auto-upgrade]"}},
		{name: "a target version next to an intent is the request's own and stays",
			pods: []*corev1.Pod{old(ready, intent, ann(workspace.AnnUpgradePod, sbsName), ann(workspace.AnnTargetVersion, "v2"))}, state: StateRequested,
			want: []string{"CreateUpgradePod " + sbsName + " from ws-old SideBySide [Normal UpgradeStarted on ws-old]"}},
		{name: "garbage intent is removed with a Warning Event",
			pods: []*corev1.Pod{old(ready, ann(workspace.AnnUpgradeRequested, "please!"))}, state: StateIdle,
			want: []string{"PatchPod ws-old set=[] " + removeIntent, "Event ws-old [Warning InvalidUpgradeRequest on ws-old]"}},
		{name: "intent false is removed with a Warning Event, not taken as a request",
			pods: []*corev1.Pod{old(ready, ann(workspace.AnnUpgradeRequested, "false"))}, state: StateIdle,
			want: []string{"PatchPod ws-old set=[] " + removeIntent, "Event ws-old [Warning InvalidUpgradeRequest on ws-old]"}},
		{name: "intent for a template that is gone records the error and clears the intent",
			pods: []*corev1.Pod{old(ready, intent)}, target: &Target{}, state: StateIdle,
			want: []string{"PatchPod ws-old set=[nogoo9/last-upgrade-error] " + removeIntent + " result=failed", "Event ws-old [Warning UpgradeFailed on ws-old]"}},
		{name: "intent on a pod already at the current version is cleared",
			pods: []*corev1.Pod{old(ready, intent)}, target: &Target{Found: true, Name: "python", Version: "v1"}, state: StateIdle,
			want: []string{"PatchPod ws-old set=[] " + removeIntent, "Event ws-old [Normal UpgradeNotNeeded on ws-old]"}},
		{name: "kubectl intent without claims records the deterministic pod name, then starts a side-by-side upgrade with it",
			pods: []*corev1.Pod{old(ready, intent)}, state: StateRequested,
			want: []string{recordName, "CreateUpgradePod " + sbsName + " from ws-old SideBySide [Normal UpgradeStarted on ws-old]"}},
		{name: "API intent with the deterministic pod name recorded writes nothing before the create",
			pods:  []*corev1.Pod{old(ready, ann(workspace.AnnUpgradeRequested, "2026-11-29T09:00:00Z"), ann(workspace.AnnUpgradePod, sbsName))},
			state: StateRequested,
			want:  []string{"CreateUpgradePod " + sbsName + " from ws-old SideBySide [Normal UpgradeStarted on ws-old]"}},
		{name: "another recorded pod name, even inside the workspace prefix, is replaced by the deterministic one",
			pods:  []*corev1.Pod{old(ready, ann(workspace.AnnUpgradeRequested, "2026-11-29T09:00:00Z"), ann(workspace.AnnUpgradePod, workspace.PodName(testOwner, testID)+"-up-abcde"))},
			state: StateRequested,
			want:  []string{recordName, "CreateUpgradePod " + sbsName + " from ws-old SideBySide [Normal UpgradeStarted on ws-old]"}},
		{name: "a recorded pod name outside the workspace prefix is ignored for the deterministic one",
			pods:  []*corev1.Pod{old(ready, intent, ann(workspace.AnnUpgradePod, "kube-system-pod"))},
			state: StateRequested,
			want:  []string{recordName, "CreateUpgradePod " + sbsName + " from ws-old SideBySide [Normal UpgradeStarted on ws-old]"}},
		{name: "a ReadWriteOnce claim makes it a recreate",
			pods: []*corev1.Pod{old(ready, intent, claim("data"))}, claims: rwo, state: StateRequested,
			want: []string{"CreateUpgradePod " + sbsName + " from ws-old Recreate gate=nogoo9/volume-release checked-by-delete [Normal UpgradeStarted on ws-old]", "DeletePod ws-old"}},
		{name: "a ReadWriteOncePod claim makes it a recreate",
			pods:   []*corev1.Pod{old(ready, intent, claim("data"))},
			claims: map[string]*corev1.PersistentVolumeClaim{"data": pvc("data", corev1.ReadWriteOncePod)}, state: StateRequested,
			want: []string{"CreateUpgradePod " + sbsName + " from ws-old Recreate gate=nogoo9/volume-release checked-by-delete [Normal UpgradeStarted on ws-old]", "DeletePod ws-old"}},
		{name: "a ReadWriteMany claim stays side-by-side",
			pods:   []*corev1.Pod{old(ready, intent, claim("data"))},
			claims: map[string]*corev1.PersistentVolumeClaim{"data": pvc("data", corev1.ReadWriteMany)}, state: StateRequested,
			want: []string{recordName, "CreateUpgradePod " + sbsName + " from ws-old SideBySide [Normal UpgradeStarted on ws-old]"}},
		{name: "a claim that is not observed is taken as single-writer",
			pods: []*corev1.Pod{old(ready, intent, claim("data"))}, state: StateRequested,
			want: []string{"CreateUpgradePod " + sbsName + " from ws-old Recreate gate=nogoo9/volume-release checked-by-delete [Normal UpgradeStarted on ws-old]", "DeletePod ws-old"}},

		// Side-by-side, after each single action.
		{name: "side-by-side: new pod pending before the deadline waits until the deadline",
			pods: []*corev1.Pod{old(ready, intent), newSBS(pending)}, state: StateUpgrading, requeue: 9 * time.Minute},
		{name: "side-by-side: new pod pulling the image before the deadline waits",
			pods: []*corev1.Pod{old(ready, intent), newSBS(waiting("ImagePullBackOff", "back-off"))}, state: StateUpgrading, requeue: 9 * time.Minute},
		{name: "side-by-side: new pod Ready deletes the old pod, success recorded on the new pod",
			pods: []*corev1.Pod{old(ready, intent), newSBS(ready)}, state: StateUpgrading,
			want: []string{"DeletePod ws-old [Normal UpgradeSucceeded on " + sbsName + "] result=succeeded"}},
		{name: "side-by-side: old pod terminating after success leaves nothing to do",
			pods: []*corev1.Pod{old(ready, intent, terminating), newSBS(ready)}, state: StateIdle},
		{name: "side-by-side: new pod Ready alone is the finished upgrade",
			pods: []*corev1.Pod{newSBS(ready)}, state: StateIdle},
		{name: "side-by-side: deadline passed with ErrImagePull records the error on the old pod then deletes the new one",
			pods: []*corev1.Pod{old(ready, intent), newSBS(waiting("ErrImagePull", "pull access denied"))}, now: afterDeadline, state: StateUpgrading,
			want: []string{"PatchPod ws-old set=[nogoo9/last-upgrade-error] " + removeIntent,
				"DeletePod " + sbsName + " [Warning UpgradeFailed on ws-old] result=failed"}},
		{name: "side-by-side: InvalidImageName fails before the deadline",
			pods: []*corev1.Pod{old(ready, intent), newSBS(waiting("InvalidImageName", "bad ref"))}, state: StateUpgrading,
			want: []string{"PatchPod ws-old set=[nogoo9/last-upgrade-error] " + removeIntent,
				"DeletePod " + sbsName + " [Warning UpgradeFailed on ws-old] result=failed"}},
		{name: "side-by-side: crash after recording the failure records it again, then deletes the new pod",
			pods: []*corev1.Pod{old(ready, ann(workspace.AnnLastUpgradeError, FailureText(t0.Add(10*time.Minute), ReasonDeadlineExceeded, "pod "+sbsName+" was not Ready within 10m0s"))), newSBS(pending)},
			now:  afterDeadline, state: StateUpgrading,
			want: []string{"PatchPod ws-old set=[nogoo9/last-upgrade-error] " + removeIntent,
				"DeletePod " + sbsName + " [Warning UpgradeFailed on ws-old] result=failed"}},
		{name: "side-by-side: after the failed pod is gone the old pod is idle with its error",
			pods: []*corev1.Pod{old(ready, ann(workspace.AnnLastUpgradeError, "x")), newSBS(pending, terminating)}, now: afterDeadline, state: StateIdle},
		{name: "side-by-side: an intent on the old pod never starts a second new pod",
			pods: []*corev1.Pod{old(ready, intent), newSBS(pending)}, target: &Target{Found: true, Name: "python", Version: "v3"}, state: StateUpgrading, requeue: 9 * time.Minute},
		{name: "side-by-side: new pod Ready deletes the pod it replaces with the success, and an older pod of the same workspace, never a pod relabelled into it",
			pods: []*corev1.Pod{old(ready, intent), newSBS(ready),
				// Newer than the old pod, so ordered right after the new one.
				with(wsPod(workspace.PodName("mallory", "mine"), "uid-mallory", "v1", t0.Add(-30*time.Minute)), ready, ann(workspace.AnnOwner, "mallory")),
				with(wsPod(workspace.PodName(testOwner, "other"), "uid-jane-other", "v1", t0.Add(-20*time.Minute)), ready),
				with(wsPod(firstName, "uid-dup", "v1", t0.Add(-2*time.Hour)), ready)},
			state: StateUpgrading,
			want:  []string{"DeletePod ws-old [Normal UpgradeSucceeded on " + sbsName + "] result=succeeded", "DeletePod " + firstName}},
		{name: "side-by-side: a new pod on the same second as the old one is still recognised as the newer",
			pods: []*corev1.Pod{with(wsPod("zz-old", "uid-old", "v1", t0), ready, intent),
				with(upgraded(with(wsPod("zz-old", "uid-old", "v1", t0)), sbsName, "uid-new", "v2", SideBySide, t0), ready)},
			state: StateUpgrading, want: []string{"DeletePod zz-old [Normal UpgradeSucceeded on " + sbsName + "] result=succeeded"}},

		// Recreate, after each single action.
		{name: "recreate: new pod created, old still live: delete the old pod to release the volume",
			pods: []*corev1.Pod{old(ready, intent, claim("data")), newRe(pending)}, claims: rwo, state: StateUpgrading,
			want: []string{"DeletePod ws-old"}},
		{name: "recreate: old pod terminating, new pod pending waits until the deadline",
			pods: []*corev1.Pod{old(ready, intent, claim("data"), terminating), newRe(pending)}, claims: rwo, state: StateUpgrading, requeue: 9 * time.Minute},
		{name: "recreate: old pod terminating, new pod still behind the scheduling gate waits: the volume is not free yet (until the deadline and the old pod's default grace period)",
			pods: []*corev1.Pod{old(ready, intent, claim("data"), terminating), newRe(pending, gatedPod)}, claims: rwo, state: StateUpgrading, requeue: 9*time.Minute + 30*time.Second},
		{name: "recreate: old pod still terminating past the deadline (a 12-minute preStop hook) does not fail the new pod behind the gate: it waits for the old pod's grace period more",
			pods: []*corev1.Pod{old(ready, intent, claim("data"), terminating, graceSeconds(720)), newRe(pending, gatedPod)}, claims: rwo,
			now: afterDeadline, state: StateUpgrading, requeue: 11 * time.Minute},
		{name: "recreate: old pod still terminating past the deadline and its grace period (stuck) rolls back: the wait is bounded",
			pods: []*corev1.Pod{old(ready, intent, claim("data"), terminating, graceSeconds(720)), newRe(pending, gatedPod)}, claims: rwo,
			now: t0.Add(22 * time.Minute), state: StateRollingBack,
			want: []string{"CreateRollbackPod " + rollbackName + " from " + sbsName + " Rollback [Warning UpgradeFailed on " + sbsName + "] result=failed"}},
		{name: "recreate: old pod gone only after the deadline: the gate goes and the deadline starts again, in one patch",
			pods: []*corev1.Pod{newRe(pending, gatedPod)}, claims: rwo, now: afterDeadline, state: StateUpgrading, requeue: 10 * time.Minute,
			want: []string{"RemoveGate " + sbsName + " set=[nogoo9/upgrade-started-at] gate=nogoo9/volume-release"}},
		{name: "recreate: old pod gone, new pod behind the scheduling gate: remove the gate so the scheduler places it at once, and the deadline starts then",
			pods: []*corev1.Pod{newRe(pending, gatedPod)}, claims: rwo, state: StateUpgrading, requeue: 10 * time.Minute,
			want: []string{"RemoveGate " + sbsName + " set=[nogoo9/upgrade-started-at] gate=nogoo9/volume-release"}},
		{name: "recreate: the gate survives the cache's stripping, so a restarted controller removes it too",
			pods: []*corev1.Pod{stripped(newRe(pending, gatedPod))}, claims: rwo, state: StateUpgrading, requeue: 10 * time.Minute,
			want: []string{"RemoveGate " + sbsName + " set=[nogoo9/upgrade-started-at] gate=nogoo9/volume-release"}},
		{name: "recreate: a record nogoo9 cannot verify (signed before a restart without --integrity-key-file) while the old pod holds the ReadWriteOnce claim fails at once: the new pod never passes the gate, the old pod keeps serving",
			pods: []*corev1.Pod{old(ready, intent, claim("data")), newRe(pending, gatedPod, ann(workspace.AnnUpgradeHMAC, "v1:forged"))}, claims: rwo,
			state: StateUpgrading,
			want: []string{"PatchPod ws-old set=[nogoo9/last-upgrade-error] " + removeIntent,
				"DeletePod " + sbsName + " [Warning UpgradeFailed on ws-old] result=failed"}},
		{name: "recreate: a record nogoo9 cannot verify and a claim that is not observed (taken as single-writer) fails at once too",
			pods:  []*corev1.Pod{old(ready, intent, claim("data")), newRe(pending, gatedPod, ann(workspace.AnnUpgradeHMAC, "v1:forged"))},
			state: StateUpgrading,
			want: []string{"PatchPod ws-old set=[nogoo9/last-upgrade-error] " + removeIntent,
				"DeletePod " + sbsName + " [Warning UpgradeFailed on ws-old] result=failed"}},
		{name: "recreate: a record nogoo9 did not sign, the shared claim ReadWriteMany, proceeds side by side: the new pod is let through the gate",
			pods:   []*corev1.Pod{old(ready, intent, claim("data")), newRe(pending, gatedPod, ann(workspace.AnnUpgradeHMAC, "v1:forged"))},
			claims: map[string]*corev1.PersistentVolumeClaim{"data": pvc("data", corev1.ReadWriteMany)},
			state:  StateUpgrading, requeue: 10 * time.Minute,
			want: []string{"Event " + sbsName + " [Warning UntrustedAnnotations on " + sbsName + "]", "RemoveGate " + sbsName + " set=[nogoo9/upgrade-started-at] gate=nogoo9/volume-release"}},
		{name: "recreate: a record nogoo9 did not sign, no claim shared with the old pod, proceeds side by side: the new pod is let through the gate",
			pods: []*corev1.Pod{old(ready, intent), with(newRe(pending, gatedPod, ann(workspace.AnnUpgradeHMAC, "v1:forged")), func(p *corev1.Pod) {
				p.Spec.Volumes = nil
				claim("scratch")(p)
			})}, claims: rwo,
			state: StateUpgrading, requeue: 10 * time.Minute,
			want: []string{"Event " + sbsName + " [Warning UntrustedAnnotations on " + sbsName + "]", "RemoveGate " + sbsName + " set=[nogoo9/upgrade-started-at] gate=nogoo9/volume-release"}},
		{name: "recreate: old pod gone, new pod Ready drops the rollback spec",
			pods: []*corev1.Pod{newRe(ready)}, claims: rwo, state: StateUpgrading,
			want: []string{"PatchPod " + sbsName + " set=[] remove=[nogoo9/rollback-spec nogoo9/upgrade-started-at] [Normal UpgradeSucceeded on " + sbsName + "] result=succeeded"}},
		{name: "recreate: after the rollback spec is dropped the workspace is idle",
			pods: []*corev1.Pod{with(newRe(ready), func(p *corev1.Pod) { delete(p.Annotations, workspace.AnnUpgradeStartedAt) })}, state: StateIdle},
		{name: "recreate: old pod gone, deadline passed: roll back to the previous spec",
			pods: []*corev1.Pod{newRe(waiting("ImagePullBackOff", "back-off"))}, now: afterDeadline, state: StateRollingBack,
			want: []string{"CreateRollbackPod " + rollbackName + " from " + sbsName + " Rollback [Warning UpgradeFailed on " + sbsName + "] result=failed"}},
		{name: "recreate: new pod failed while the old pod is still live: old pod keeps serving",
			pods: []*corev1.Pod{old(ready, intent, claim("data")), newRe(waiting("CreateContainerConfigError", "secret missing"))}, state: StateUpgrading,
			want: []string{"PatchPod ws-old set=[nogoo9/last-upgrade-error] " + removeIntent,
				"DeletePod " + sbsName + " [Warning UpgradeFailed on ws-old] result=failed"}},
		{name: "rollback: rollback pod created, failed pod still live: delete the failed pod",
			pods: []*corev1.Pod{newRe(waiting("ImagePullBackOff", "")), with(upgraded(newRe(), rollbackName, "uid-rb", "v1", Rollback, afterDeadline), pending)},
			now:  afterDeadline, state: StateRollingBack, want: []string{"DeletePod " + sbsName}},
		{name: "rollback: a restored pod behind the gate waits while the failed pod, terminating, still holds the volume",
			pods: []*corev1.Pod{newRe(waiting("ImagePullBackOff", ""), terminating), with(upgraded(newRe(), rollbackName, "uid-rb", "v1", Rollback, afterDeadline), pending, gatedPod)},
			now:  afterDeadline, state: StateRollingBack},
		{name: "rollback: a restored pod behind the gate is let through once the failed pod is gone",
			pods: []*corev1.Pod{with(upgraded(newRe(), rollbackName, "uid-rb", "v1", Rollback, afterDeadline), pending, gatedPod)},
			now:  afterDeadline, state: StateRollingBack, want: []string{"RemoveGate " + rollbackName + " gate=nogoo9/volume-release"}},
		{name: "rollback: rollback pod alone is idle even while it starts",
			pods: []*corev1.Pod{with(upgraded(newRe(), rollbackName, "uid-rb", "v1", Rollback, afterDeadline), pending)}, now: afterDeadline, state: StateIdle},

		// Duplicates.
		{name: "duplicates: newest Ready deletes the older pods",
			pods: []*corev1.Pod{old(ready, named(dupName)), with(wsPod(firstName, "uid-dup", "v1", t0), ready)}, state: StateDuplicates,
			want: []string{"DeletePod " + dupName + " [Normal DuplicatePodRemoved on " + dupName + "]"}},
		{name: "duplicates: what a person wrote on the one older pod goes to the newest before the older goes",
			pods: []*corev1.Pod{old(ready, named(dupName), ann(workspace.AnnPinned, "true")), with(wsPod(firstName, "uid-dup", "v1", t0), ready)}, state: StateDuplicates,
			want: []string{"PatchPod " + firstName + " set=[nogoo9/pinned] remove=[]", "DeletePod " + dupName + " [Normal DuplicatePodRemoved on " + dupName + "]"}},
		{name: "duplicates: a pod of the owner's other workspace relabelled into this one is not a duplicate of it",
			pods: []*corev1.Pod{old(ready, named(workspace.PodName(testOwner, "other"))), with(wsPod(firstName, "uid-dup", "v1", t0), ready)}, state: StateDuplicates},
		{name: "duplicates: a pod of another owner sharing the id is never deleted",
			pods: []*corev1.Pod{old(ready, ann(workspace.AnnOwner, "mallory")), with(wsPod(firstName, "uid-dup", "v1", t0), ready)}, state: StateDuplicates},
		{name: "duplicates: newest not Ready yet is waited for",
			pods: []*corev1.Pod{old(ready), with(wsPod("ws-dup", "uid-dup", "v1", t0), pending)}, state: StateWaitDuplicate},
		{name: "duplicates: a leftover upgraded pod whose old pod UID differs is not an upgrade in flight",
			pods: []*corev1.Pod{with(wsPod("ws-old", "uid-other", "v1", t0.Add(-time.Hour)), ready), newSBS(pending)}, state: StateWaitDuplicate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg := target
			if tt.target != nil {
				tg = *tt.target
			}
			n := now
			if !tt.now.IsZero() {
				n = tt.now
			}
			m := Plan(Observed{Pods: tt.pods, Claims: tt.claims}, tg, n, cfg)
			if m.State != tt.state {
				t.Errorf("state = %s, want %s", m.State, tt.state)
			}
			if got := summary(m); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("actions:\n got  %q\n want %q", got, tt.want)
			}
			for _, a := range m.Actions {
				if a.Kind == DeletePod && (a.Keep == nil || a.Keep.Name == a.Pod.Name || a.Keep.DeletionTimestamp != nil) {
					t.Errorf("DeletePod %s must name a live pod that stays (Keep), got %v", a.Pod.Name, a.Keep)
				}
			}
			if m.RequeueAfter != tt.requeue {
				t.Errorf("requeueAfter = %s, want %s", m.RequeueAfter, tt.requeue)
			}
		})
	}
}

func TestPlanCreateCarriesTheUpgradeRecord(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0), ready, ann(workspace.AnnUpgradeRequested, "true"))
	m := Plan(Observed{Pods: []*corev1.Pod{old}}, Target{Found: true, Name: "python", Version: "v2"}, t0, Config{})
	if len(m.Actions) != 2 || m.Actions[1].Kind != CreateUpgradePod {
		t.Fatalf("actions = %v", summary(m))
	}
	m.Actions = m.Actions[1:]
	want := map[string]string{
		workspace.AnnUpgradeFrom: "ws-old", workspace.AnnUpgradeFromUID: "uid-old", workspace.AnnUpgradeFromVersion: "v1",
		workspace.AnnUpgradeStrategy: "SideBySide", workspace.AnnUpgradeStartedAt: t0.Format(time.RFC3339),
	}
	if got := m.Actions[0].Annotations; !reflect.DeepEqual(got, want) {
		t.Errorf("annotations = %v, want %v", got, want)
	}
	if !m.Actions[0].NeedsSlot {
		t.Errorf("a create that starts an upgrade must need a concurrency slot")
	}
}

func TestFailureTextIsStableAcrossRepeatedPasses(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), ready, ann(workspace.AnnUpgradeRequested, "true"))
	up := with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", SideBySide, t0), waiting("ErrImagePull", "pull access denied"))
	cfg := Config{Timeout: 10 * time.Minute}
	a := Plan(Observed{Pods: []*corev1.Pod{old, up}}, Target{Found: true, Version: "v2"}, t0.Add(11*time.Minute), cfg)
	b := Plan(Observed{Pods: []*corev1.Pod{old, up}}, Target{Found: true, Version: "v2"}, t0.Add(15*time.Minute), cfg)
	ta, tb := a.Actions[0].Annotations[workspace.AnnLastUpgradeError], b.Actions[0].Annotations[workspace.AnnLastUpgradeError]
	if ta != tb {
		t.Errorf("failure text changed between passes: %q vs %q", ta, tb)
	}
	want := "Upgrade failed at 2026-11-29T10:10:00Z: ErrImagePull: container ide: pull access denied (pod " + up.Name + " not Ready within 10m0s)"
	if ta != want {
		t.Errorf("failure text = %q, want %q", ta, want)
	}
}

// A delete that concludes an upgrade (its Event and metric) deletes the pod only as the planner saw
// it: a second pass from a cache that shows the first pass's record but not yet its delete then
// gets a conflict instead of deleting the terminating pod again and concluding twice (seen once in
// the e2e suite as nogoo9_upgrades_total{result="failed"} = 2 for one failed upgrade).
func TestConcludingDeletesMatchThePodAsSeen(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), ready, ann(workspace.AnnUpgradeRequested, "true"))
	recorded := with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), ready,
		ann(workspace.AnnLastUpgradeError, FailureText(t0.Add(10*time.Minute), ReasonDeadlineExceeded, "not Ready")))
	up := func() *corev1.Pod {
		return upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", SideBySide, t0)
	}
	cfg := Config{Timeout: 10 * time.Minute}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
	}{
		{name: "deadline passed with ErrImagePull", pods: []*corev1.Pod{old, with(up(), waiting("ErrImagePull", "denied"))}},
		{name: "InvalidImageName", pods: []*corev1.Pod{old, with(up(), waiting("InvalidImageName", "bad ref"))}},
		{name: "the failure already recorded on the old pod", pods: []*corev1.Pod{recorded, with(up(), waiting("ErrImagePull", "denied"))}},
		{name: "the new pod Ready", pods: []*corev1.Pod{old, with(up(), ready)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Plan(Observed{Pods: tc.pods}, Target{Found: true, Version: "v2"}, t0.Add(11*time.Minute), cfg)
			concluded := 0
			for _, a := range m.Actions {
				if a.Kind == DeletePod && a.Result != "" {
					concluded++
					if !a.MatchVersion {
						t.Errorf("the delete of %s concludes the upgrade (%s) without matching the pod as seen: %v", a.Pod.Name, a.Result, summary(m))
					}
				}
			}
			if concluded != 1 {
				t.Fatalf("%d concluding deletes, want 1: %v", concluded, summary(m))
			}
		})
	}
}

func TestParseIntent(t *testing.T) {
	tests := []struct {
		in    string
		valid bool
	}{
		{"true", true}, {"True", true}, {" yes ", true}, {"1", true}, {"2026-11-29T09:00:00Z", true},
		{"", false}, {"false", false}, {"no", false}, {"0", false}, {"please", false}, {"2026-13-45", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			got := ParseIntent(tt.in)
			if got.Valid != tt.valid {
				t.Errorf("valid = %v, want %v", got.Valid, tt.valid)
			}
			if !got.Valid && got.Problem == "" {
				t.Errorf("an invalid intent must say why")
			}
		})
	}
}

func TestFailureReason(t *testing.T) {
	tests := []struct {
		name     string
		pod      *corev1.Pod
		reason   string
		terminal bool
	}{
		{"pending without status says nothing", with(wsPod("p", "u", "v", t0), pending), "", false},
		{"image pull error waits for the deadline", with(wsPod("p", "u", "v", t0), waiting("ErrImagePull", "denied")), "ErrImagePull", false},
		{"invalid image name is terminal", with(wsPod("p", "u", "v", t0), waiting("InvalidImageName", "bad")), "InvalidImageName", true},
		{"config error is terminal", with(wsPod("p", "u", "v", t0), waiting("CreateContainerConfigError", "no secret")), "CreateContainerConfigError", true},
		{"container creating is not a reason", with(wsPod("p", "u", "v", t0), waiting("ContainerCreating", "")), "", false},
		{"crash loop names the last exit", with(wsPod("p", "u", "v", t0), waiting("CrashLoopBackOff", "back-off"), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}
		}), "CrashLoopBackOff", false},
		{"oom killed running container", with(wsPod("p", "u", "v", t0), func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", LastTerminationState: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
		}), "OOMKilled", false},
		{"failed phase is terminal", with(wsPod("p", "u", "v", t0), func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "Evicted" }), "Evicted", true},
		{"unschedulable", with(wsPod("p", "u", "v", t0), func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes"}}
		}), "Unschedulable", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, msg, term := FailureReason(tt.pod)
			if r != tt.reason || term != tt.terminal {
				t.Errorf("FailureReason = %q, %q, %v; want %q, terminal %v", r, msg, term, tt.reason, tt.terminal)
			}
			if r != "" && msg == "" {
				t.Errorf("a reason needs a message")
			}
			if strings.Contains(tt.name, "crash") && !strings.Contains(msg, "OOMKilled") {
				t.Errorf("message %q does not name the last exit", msg)
			}
		})
	}
}

func TestRollbackSpecRoundTrip(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0), claim("data"), ann(workspace.AnnUpgradeRequested, "true"),
		ann(workspace.AnnUpgradePod, "ws-x-up-abcde"), func(p *corev1.Pod) {
			p.Spec.NodeName = "node-1"
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x1y2z"})
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "kube-api-access-x1y2z", MountPath: "/var/run/secrets"}}
		})
	spec, err := RollbackSpec(old)
	if err != nil {
		t.Fatal(err)
	}
	failed := upgraded(old, "ws-new", "uid-new", "v2", Recreate, t0)
	failed.Annotations[workspace.AnnRollbackSpec] = spec
	// Someone edits the owner on the failed pod's template: the rollback still keeps the original.
	p, err := RollbackPod(failed, "ws-rb", map[string]string{workspace.AnnUpgradeStrategy: string(Rollback)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "ws-rb" || p.Namespace != "ns" || p.Spec.NodeName != "" {
		t.Errorf("name/namespace/node = %s/%s/%s", p.Namespace, p.Name, p.Spec.NodeName)
	}
	if workspace.TemplateVersion(p) != "v1" || p.Spec.Containers[0].Image != "ide:v1" {
		t.Errorf("rollback pod is not the previous version: %s %s", workspace.TemplateVersion(p), p.Spec.Containers[0].Image)
	}
	if _, ok := p.Annotations[workspace.AnnUpgradeRequested]; ok {
		t.Errorf("rollback pod inherited the intent")
	}
	// The failed pod may still run on the volume: the restored one waits for it behind the gate.
	if !gated(p) {
		t.Errorf("rollback pod mounting claim data has no %s gate: %v", workspace.GateVolumeRelease, p.Spec.SchedulingGates)
	}
	if len(p.Spec.Volumes) != 1 || len(p.Spec.Containers[0].VolumeMounts) != 1 {
		t.Errorf("token volume not dropped: %v %v", p.Spec.Volumes, p.Spec.Containers[0].VolumeMounts)
	}
	if workspace.Owner(p) != testOwner || p.Annotations[workspace.AnnWorkspacePath] != "/ws/jane/demo/" {
		t.Errorf("identity lost: %v", p.Annotations)
	}

	for name, bad := range map[string]string{"missing": "", "not json": "{", "another workspace": `{"metadata":{"labels":{"nogoo9/workspace-id":"other"}},"spec":{"containers":[{"name":"a"}]}}`} {
		f := failed.DeepCopy()
		f.Annotations[workspace.AnnRollbackSpec] = bad
		if _, err := RollbackPod(f, "x", nil); err == nil {
			t.Errorf("%s rollback spec: no error", name)
		}
	}
}

func TestSlotsHoldTheWorkspacesWithAnUpgradeInFlight(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0), ready)
	up := upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", SideBySide, t0)
	other := with(wsPod("ws-b", "uid-b", "v1", t0), ready, func(p *corev1.Pod) { p.Labels[workspace.LabelWorkspaceID] = "b" })
	doneRe := with(wsPod("ws-c", "uid-c", "v2", t0), func(p *corev1.Pod) {
		p.Labels[workspace.LabelWorkspaceID] = "c"
		p.Annotations[workspace.AnnUpgradeFrom] = "gone"
		p.Annotations[workspace.AnnUpgradeStrategy] = string(Recreate)
	})
	re := with(doneRe.DeepCopy(), func(p *corev1.Pod) {
		p.Labels[workspace.LabelWorkspaceID] = "d"
		p.Annotations[workspace.AnnUpgradeFromUID] = "uid-gone"
		p.Annotations[workspace.AnnUpgradeStartedAt] = t0.Format(time.RFC3339)
		p.Name = workspace.UpgradePodName(testOwner, "d", "uid-gone@v2")
	})
	// Someone's hand-written copy of the same bookkeeping on a pod nogoo9 did not name so.
	forged := with(re.DeepCopy(), func(p *corev1.Pod) { p.Name, p.Labels[workspace.LabelWorkspaceID] = "ws-e", "e" })
	got := Slots([]*corev1.Pod{old, up, other, doneRe, re, forged})
	if _, a := got[keyOf(up)]; !a || len(got) != 2 {
		t.Errorf("in flight = %v, want demo and d (forged bookkeeping takes no slot)", got)
	}
	if _, d := got[keyOf(re)]; !d {
		t.Errorf("in flight = %v, want demo and d (forged bookkeeping takes no slot)", got)
	}
}

// gatedPod is a pod created behind nogoo9's scheduling gate.
func gatedPod(p *corev1.Pod) {
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: workspace.GateVolumeRelease})
}

// stripped is p as the controller's cache holds it.
func stripped(p *corev1.Pod) *corev1.Pod {
	s, _ := workspace.StripPod(p.DeepCopy())
	return s.(*corev1.Pod)
}

func TestSlotOfTellsAnUpgradeWaitingForANodeFromOnePlaced(t *testing.T) {
	onNode := func(p *corev1.Pod) { p.Spec.NodeName = "node-1" }
	old := func() *corev1.Pod { return with(wsPod("ws-old", "uid-old", "v1", t0), ready, onNode) }
	next := func(s Strategy, opts ...podOpt) *corev1.Pod {
		o := old()
		return with(upgraded(o, workspace.NextPodName(o, "v2"), "uid-new", "v2", s, t0.Add(time.Second)), opts...)
	}
	// A Recreate whose old pod is gone: its record alone keeps it in flight until confirmed.
	recreateAlone := func(opts ...podOpt) *corev1.Pod {
		p := with(wsPod(workspace.UpgradePodName(testOwner, testID, "uid-old@v2"), "uid-new", "v2", t0), func(p *corev1.Pod) {
			p.Annotations[workspace.AnnUpgradeFrom] = "ws-old"
			p.Annotations[workspace.AnnUpgradeFromUID] = "uid-old"
			p.Annotations[workspace.AnnUpgradeStrategy] = string(Recreate)
			p.Annotations[workspace.AnnUpgradeStartedAt] = t0.Format(time.RFC3339)
		})
		return with(p, opts...)
	}
	otherGate := func(p *corev1.Pod) {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "example.com/quota"})
	}
	notWorkspace := func(p *corev1.Pod) { delete(p.Labels, workspace.LabelType) }
	stopGate := func(p *corev1.Pod) {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: workspace.GateStopped})
	}
	stopLineage := func(p *corev1.Pod) { p.Annotations[workspace.AnnStoppedFromUID] = "uid-old" }
	failedUnbound := func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want Slot
	}{
		{"a workspace without an upgrade holds nothing", []*corev1.Pod{old()}, Slot{}},
		{"a side-by-side pod just created, no node yet, waits for a node", []*corev1.Pod{old(), next(SideBySide, pending)}, Slot{InFlight: true, WaitingForNode: true}},
		{"a side-by-side pod bound to a node (still pulling) is in flight but placed", []*corev1.Pod{old(), next(SideBySide, pending, onNode)}, Slot{InFlight: true}},
		{"a side-by-side pod Ready on its node is in flight until the old pod goes", []*corev1.Pod{old(), next(SideBySide, ready, onNode)}, Slot{InFlight: true}},
		{"a Recreate pod behind nogoo9's gate counts as waiting: the old pod first, then a node", []*corev1.Pod{old(), next(Recreate, gatedPod)}, Slot{InFlight: true, WaitingForNode: true}},
		{"a Recreate pod whose gate is gone and has no node waits for a node", []*corev1.Pod{recreateAlone(pending)}, Slot{InFlight: true, WaitingForNode: true}},
		{"a Recreate pod bound to a node is placed", []*corev1.Pod{recreateAlone(pending, onNode)}, Slot{InFlight: true}},
		{"a stopped pod nogoo9 made (stop gate and lineage) asks for no node", []*corev1.Pod{old(), next(SideBySide, stopGate, stopLineage)}, Slot{InFlight: true}},
		// The stop gate alone is no stopped pod: born with it from an older release's template, the
		// pod is the workspace's only way back and waits, its workspace down.
		{"a Recreate pod born with the stop gate behind nogoo9's gate waits for a node", []*corev1.Pod{old(), next(Recreate, gatedPod, stopGate)}, Slot{InFlight: true, WaitingForNode: true}},
		{"a Recreate pod born with the stop gate, its old pod gone, waits for a node", []*corev1.Pod{recreateAlone(pending, stopGate)}, Slot{InFlight: true, WaitingForNode: true}},
		{"someone else's scheduling gate still means no node: it waits", []*corev1.Pod{old(), next(SideBySide, otherGate)}, Slot{InFlight: true, WaitingForNode: true}},
		{"a new pod being deleted holds nothing", []*corev1.Pod{old(), next(SideBySide, terminating)}, Slot{}},
		{"a new pod that failed without a node waits for nothing", []*corev1.Pod{old(), next(SideBySide, failedUnbound)}, Slot{InFlight: true}},
		{"a concluded side-by-side upgrade (old pod gone) holds nothing, node or not", []*corev1.Pod{next(SideBySide, pending)}, Slot{}},
		{"forged bookkeeping on a pod nogoo9 did not name so holds nothing", []*corev1.Pod{old(), with(next(SideBySide, pending), func(p *corev1.Pod) { p.Name = "ws-forged" })}, Slot{}},
		{"a pod without the workspace label is not the workspace's", []*corev1.Pod{old(), next(SideBySide, pending, notWorkspace)}, Slot{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SlotOf(tc.pods); got != tc.want {
				t.Errorf("SlotOf = %+v, want %+v", got, tc.want)
			}
			// The cache's stripped pods classify the same.
			var s []*corev1.Pod
			for _, p := range tc.pods {
				s = append(s, stripped(p))
			}
			if got := SlotOf(s); got != tc.want {
				t.Errorf("SlotOf(stripped) = %+v, want %+v", got, tc.want)
			}
			all := Slots(append(s, with(wsPod("ws-b", "uid-b", "v1", t0), ready, func(p *corev1.Pod) { p.Labels[workspace.LabelWorkspaceID] = "b" })))
			if got := all[keyOf(old())]; got != tc.want || len(all) > 1 {
				t.Errorf("Slots = %+v, want only %s: %+v", all, keyOf(old()), tc.want)
			}
		})
	}
}

// TestRecreateFailuresOfANewPodThatNeverRanSayWhy: the two ways a Recreate's new pod fails without
// having run write on the pod that stays what happened and what to do.
func TestRecreateFailuresOfANewPodThatNeverRanSayWhy(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), ready, claim("data"), ann(workspace.AnnUpgradeRequested, "true"))
	up := with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", Recreate, t0), pending, gatedPod)
	claims := map[string]*corev1.PersistentVolumeClaim{"data": pvc("data", corev1.ReadWriteOnce)}
	errorOf := func(t *testing.T, m Move) string {
		t.Helper()
		for _, a := range m.Actions {
			if v := a.Annotations[workspace.AnnLastUpgradeError]; v != "" {
				return v
			}
		}
		t.Fatalf("no %s written: %q", workspace.AnnLastUpgradeError, summary(m))
		return ""
	}

	t.Run("a record signed with the key of a process before a restart", func(t *testing.T) {
		// The default install: every process signs with a random key of its own.
		m := Plan(Observed{Pods: []*corev1.Pod{old, up}, Claims: claims}, Target{Found: true, Version: "v2"}, t0.Add(time.Minute),
			Config{Timeout: 10 * time.Minute, Keys: RandomKeyring()})
		got := errorOf(t, m)
		for _, want := range []string{"UpgradeRecordNotVerified", "--integrity-key-file", "claim data", "request the upgrade again"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s = %q, does not say %q", workspace.AnnLastUpgradeError, got, want)
			}
		}
		for _, a := range m.Actions {
			if a.Kind == RemoveGate {
				t.Errorf("the new pod is let through the gate while the old pod holds its ReadWriteOnce claim: %q", summary(m))
			}
		}
	})
	t.Run("an old pod that does not terminate within its grace period", func(t *testing.T) {
		gone := with(old.DeepCopy(), terminating, graceSeconds(720))
		m := Plan(Observed{Pods: []*corev1.Pod{gone, up}, Claims: claims}, Target{Found: true, Version: "v2"}, t0.Add(30*time.Minute),
			Config{Timeout: 10 * time.Minute, Keys: testKeys})
		got := errorOf(t, m)
		want := "Upgrade failed at 2026-11-29T10:22:00Z: VolumeNotReleased: pod ws-old still held claim data after the deadline and its grace period of 12m0s, so pod " + up.Name + " never started"
		if got != want {
			t.Errorf("%s = %q, want %q", workspace.AnnLastUpgradeError, got, want)
		}
	})
}

package workspace

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatedPod is a stopped pod nogoo9 made, as the scheduler leaves it: Pending, PodScheduled=False
// SchedulingGated, the stop gate in its spec, and the UID of the pod it was copied from.
func gatedPod(name string, created time.Time, intent string) *corev1.Pod {
	p := gateOnly(pendingPod(name, created))
	p.Annotations[AnnStoppedFromUID] = "uid-long-gone"
	p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionFalse, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")}
	if intent != "" {
		p.Annotations[AnnStopRequested] = intent
	}
	return p
}

// gateOnly gives p the stop gate and nothing else, as the scheduler leaves it: a pod born with the
// gate from a template's spec (an older release's template; the policy refuses it now), not a
// stopped pod nogoo9 made.
func gateOnly(p *corev1.Pod) *corev1.Pod {
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: GateStopped})
	p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionFalse, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")}
	return p
}

func withIntent(p *corev1.Pod, v string) *corev1.Pod {
	p.Annotations[AnnStopRequested] = v
	return p
}

func TestPhaseOfStoppedWorkspaces(t *testing.T) {
	running := func() *corev1.Pod {
		p := scheduled("ws-jane-demo", t0.Add(-time.Hour))
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "127.1.0.9"
		p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue, "", ""), cond(corev1.PodScheduled, corev1.ConditionTrue, "", "")}
		p.Status.ContainerStatuses = nil
		return p
	}
	terminatingPod := func(p *corev1.Pod) *corev1.Pod {
		ts := metav1.NewTime(t0)
		p.DeletionTimestamp = &ts
		return p
	}
	cases := []struct {
		name              string
		pods              []*corev1.Pod
		phase             PhaseName
		reason, inMessage string
	}{
		{"a running pod with the stop intent is Stopping, and says why", []*corev1.Pod{withIntent(running(), "stopped by its owner at 2026-03-01 10:00 UTC")},
			PhaseStopped, ReasonStopping, "stopped by its owner"},
		{"the stopped pod next to the running one: still Stopping", []*corev1.Pod{withIntent(running(), "true"), gatedPod("ws-jane-demo-up-s", t0, "true")},
			PhaseStopped, ReasonStopping, "start it to use it again"},
		{"the stopped pod next to the terminating running one: Stopped", []*corev1.Pod{terminatingPod(withIntent(running(), "x")), gatedPod("ws-jane-demo-up-s", t0, "stopped after 31m0s without activity (idle timeout 30m0s)")},
			PhaseStopped, ReasonStopped, "without activity"},
		{"only the stopped pod: Stopped, not Scheduling", []*corev1.Pod{gatedPod("ws-jane-demo-up-s", t0, "true")},
			PhaseStopped, ReasonStopped, "the workspace is stopped"},
		{"the stopped pod without the intent (a start): Scheduling, Starting", []*corev1.Pod{gatedPod("ws-jane-demo-up-s", t0, "")},
			PhaseScheduling, ReasonStarting, "is starting"},
		{"maintenance outranks Stopped", []*corev1.Pod{func() *corev1.Pod {
			p := gatedPod("ws-jane-demo-up-s", t0, "true")
			p.Annotations[AnnMaintenance] = "disk move"
			return p
		}()}, PhaseUnavailable, ReasonMaintenance, "disk move"},
		{"Stopped outranks an upgrade requested before the stop", []*corev1.Pod{func() *corev1.Pod {
			p := gatedPod("ws-jane-demo-up-s", t0, "true")
			p.Annotations[AnnUpgradeRequested] = "true"
			return p
		}()}, PhaseStopped, ReasonStopped, ""},
		{"deleting a stopped workspace: Terminating", []*corev1.Pod{terminatingPod(gatedPod("ws-jane-demo-up-s", t0, "true"))},
			PhaseTerminating, ReasonDeleting, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Phase(tc.pods, t0)
			if st.Phase != tc.phase || st.Reason != tc.reason || !strings.Contains(st.Message, tc.inMessage) {
				t.Fatalf("Phase = %+v, want %s/%s with %q in the message", st, tc.phase, tc.reason, tc.inMessage)
			}
			// A stopped workspace in maintenance is still stopped for the quota (no node).
			want := tc.phase == PhaseStopped || tc.reason == ReasonMaintenance
			if got := IsStopped(tc.pods); got != want {
				t.Errorf("IsStopped = %v, want %v", got, want)
			}
		})
	}
}

func TestStripPodKeepsTheStopGate(t *testing.T) {
	obj, _ := StripPod(gatedPod("p", t0, "true"))
	if !IsStoppedCopy(obj.(*corev1.Pod)) {
		t.Fatal("the cache's stripped pod lost the stop gate: every reader would take a stopped workspace for a pending one")
	}
}

func TestIsStoppedCopyNeedsTheStopLineage(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"a stopped pod nogoo9 made: the gate and the UID of the pod it copies", gatedPod("p", t0, "true"), true},
		{"the gate alone (born with it from a template)", gateOnly(pendingPod("p", t0)), false},
		{"the lineage alone (started: the gate is removed with it, or never had it)", annotate(pendingPod("p", t0), AnnStoppedFromUID, "uid-x"), false},
		{"an empty lineage", annotate(gateOnly(pendingPod("p", t0)), AnnStoppedFromUID, ""), false},
		{"a pod without annotations", &corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: GateStopped}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsStoppedCopy(tc.pod); got != tc.want {
				t.Errorf("IsStoppedCopy = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPhaseOfPodsBornWithTheStopGate: the stop gate alone, from the spec of an older release's
// template (the template policy refuses it now), does not make a stopped pod: such a pod is not
// "Starting" forever (nothing starts it: the lifecycle planner does not take it for a stopped
// pod), and a Recreate's new pod born with it is an upgrade on its way in.
func TestPhaseOfPodsBornWithTheStopGate(t *testing.T) {
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name      string
		pods      []*corev1.Pod
		phase     PhaseName
		reason    string
		inMessage string
	}{
		{"a new workspace's pod born with the gate is Scheduling, gated, not Starting",
			[]*corev1.Pod{gateOnly(pendingPod("ws-jane-demo", t0))},
			PhaseScheduling, "SchedulingGated", "non-empty scheduling gates"},
		{"a Recreate's new pod born with the stop gate, behind the volume-release gate, old pod terminating: Upgrading",
			[]*corev1.Pod{
				deleting(running("a", t0.Add(-time.Hour)), now.Add(20*time.Second)),
				gateOnly(recreateHead(withGate(pendingPod("b", t0), GateVolumeRelease), "a", t0)),
			},
			PhaseUpgrading, ReasonUpgradeInProgress, "pod b (version 2.0.0) is replacing a"},
		{"the same with the old pod gone and the volume-release gate removed: Upgrading, held by the stop gate",
			[]*corev1.Pod{gateOnly(recreateHead(pendingPod("b", t0), "a", t0))},
			PhaseUpgrading, ReasonUpgradeInProgress, "SchedulingGated"},
		{"a stop intent with only a pod born with the gate: Stopping (the planner makes the stopped copy)",
			[]*corev1.Pod{withIntent(gateOnly(pendingPod("ws-jane-demo", t0)), "true")},
			PhaseStopped, ReasonStopping, "pod ws-jane-demo is stopping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Phase(tc.pods, now)
			if st.Phase != tc.phase || st.Reason != tc.reason || !strings.Contains(st.Message, tc.inMessage) {
				t.Fatalf("Phase = %+v, want %s/%s with %q in the message", st, tc.phase, tc.reason, tc.inMessage)
			}
		})
	}
}

func withGate(p *corev1.Pod, name string) *corev1.Pod {
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: name})
	return p
}

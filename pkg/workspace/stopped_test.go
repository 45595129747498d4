package workspace

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatedPod is a stopped pod as the scheduler leaves it: Pending, PodScheduled=False
// SchedulingGated, the stop gate in its spec.
func gatedPod(name string, created time.Time, intent string) *corev1.Pod {
	p := pendingPod(name, created)
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: GateStopped}}
	p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionFalse, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")}
	if intent != "" {
		p.Annotations[AnnStopRequested] = intent
	}
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
	if !IsStoppedPod(obj.(*corev1.Pod)) {
		t.Fatal("the cache's stripped pod lost the stop gate: every reader would take a stopped workspace for a pending one")
	}
}

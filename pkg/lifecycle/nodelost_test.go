package lifecycle

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func onNode(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

// TestPlanNodeLost walks the replacement of a pod whose node is gone, pass by pass, and the cases
// where the planner must not replace.
func TestPlanNodeLost(t *testing.T) {
	gone := map[string]bool{"node-a": true}
	lostTarget := Target{Found: true, Version: "v1", GoneNodes: gone}
	run := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"))

	t.Run("a pod on a node that still exists is left alone", func(t *testing.T) {
		m := Plan([]*corev1.Pod{wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-b"))}, lostTarget, t0, Config{})
		if len(m.Actions) != 0 || m.State == "NodeLost" {
			t.Fatalf("got %+v, want no move", m)
		}
	})

	t.Run("first pass marks the lost pod, the phase says NodeLost and the proxy's Unavailable", func(t *testing.T) {
		m := Plan([]*corev1.Pod{run}, lostTarget, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != PatchPod || !m.Hold {
			t.Fatalf("got %+v, want one PatchPod", m)
		}
		a := m.Actions[0]
		msg := a.Set[workspace.AnnNodeLost]
		if !strings.Contains(msg, "node-a") || a.Reason != ReasonNodeLost || a.EventType != corev1.EventTypeWarning {
			t.Fatalf("got %+v", a)
		}
		marked := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), ann(workspace.AnnNodeLost, msg))
		st := workspace.Phase([]*corev1.Pod{marked}, t0)
		if st.Phase != workspace.PhaseUnavailable || st.Reason != workspace.ReasonNodeLost || st.Message != msg {
			t.Fatalf("phase %+v, want Unavailable/NodeLost", st)
		}
	})

	marked := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), ann(workspace.AnnNodeLost, "node node-a ... gone"))
	t.Run("second pass copies it as a gated pod under the stop copy's deterministic name, without a stop intent", func(t *testing.T) {
		m := Plan([]*corev1.Pod{marked}, lostTarget, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != CreateStoppedPod || !m.Actions[0].NodeLost {
			t.Fatalf("got %+v, want CreateStoppedPod", m)
		}
		a := m.Actions[0]
		if a.Name != StoppedPodName(marked) || a.Set[workspace.AnnStoppedFromUID] != "uid-run" || a.Set[workspace.AnnStopRequested] != "" {
			t.Fatalf("got %+v", a)
		}
		cp, err := StoppedPod(marked, a.Name, a.Set)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cp.Annotations[workspace.AnnNodeLost]; ok || cp.Spec.NodeName != "" || !workspace.IsStoppedPod(cp) {
			t.Fatalf("copy %+v keeps the mark or the node", cp)
		}
	})

	cp := wsPod(StoppedPodName(marked), "uid-copy", "v1", t0.Add(1), gated, ann(workspace.AnnStoppedFromUID, "uid-run"))
	t.Run("third pass deletes the lost pod (grace 0), keeping the copy; the phase still says NodeLost", func(t *testing.T) {
		pods := []*corev1.Pod{marked, cp}
		m := Plan(pods, lostTarget, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != DeletePod || !m.Actions[0].NodeLost || m.Actions[0].Pod != marked || m.Actions[0].Keep != cp {
			t.Fatalf("got %+v, want DeletePod of the lost pod keeping the copy", m)
		}
		if st := workspace.Phase(pods, t0); st.Reason != workspace.ReasonNodeLost {
			t.Fatalf("phase %+v, want NodeLost", st)
		}
	})

	t.Run("then the copy starts like a stopped pod: the gate is removed", func(t *testing.T) {
		m := Plan([]*corev1.Pod{cp}, lostTarget, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != Ungate || m.Actions[0].Pod != cp {
			t.Fatalf("got %+v, want Ungate of the copy", m)
		}
	})

	t.Run("a stopping workspace whose pod is lost keeps its stop intent on the copy and stays stopped", func(t *testing.T) {
		stopping := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), stopIntent, ann(workspace.AnnNodeLost, "gone"))
		m := Plan([]*corev1.Pod{stopping}, lostTarget, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != CreateStoppedPod {
			t.Fatalf("got %+v", m)
		}
		c, _ := StoppedPod(stopping, m.Actions[0].Name, m.Actions[0].Set)
		if c.Annotations[workspace.AnnStopRequested] == "" {
			t.Fatal("the copy lost the stop intent")
		}
		m = Plan([]*corev1.Pod{wsPod(c.Name, "uid-c", "v1", t0, gated, stopIntent)}, lostTarget, t0, Config{})
		if len(m.Actions) != 0 || m.State != "Stopped" {
			t.Fatalf("got %+v, want Stopped", m)
		}
	})

	t.Run("an upgrade in flight is only marked: the upgrade planner owns its two pods", func(t *testing.T) {
		up := wsPod(named("up002"), "uid-up", "v2", t0.Add(1), onNode("node-b"), upgradedFrom(marked))
		m := Plan([]*corev1.Pod{marked, up}, lostTarget, t0, Config{})
		for _, a := range m.Actions {
			if a.Kind == DeletePod || a.Kind == CreateStoppedPod {
				t.Fatalf("got %+v, want no replacement during an upgrade", m)
			}
		}
		if m.Hold {
			t.Fatal("held: the upgrade planner must run")
		}
	})

	t.Run("a gated pod is never lost: it has no node", func(t *testing.T) {
		m := Plan([]*corev1.Pod{wsPod(named("stop1"), "uid-s", "v1", t0, gated, stopIntent, onNode("node-a"))}, lostTarget, t0, Config{})
		if m.State != "Stopped" {
			t.Fatalf("got %+v", m)
		}
	})
}

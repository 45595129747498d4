package lifecycle

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// disrupted marks p as Kubernetes marks a pod it deletes for a disruption (reason: the
// DisruptionTarget reason, "EvictionByEvictionAPI" for a drain).
func disrupted(reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		terminating(p)
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason})
	}
}

func claim(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "home", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}})
	}
}

// TestPlanEvicted walks the replacement of a pod Kubernetes deletes for a disruption (a drain, the
// taint manager, preemption), and the deletes that must stay deletes.
func TestPlanEvicted(t *testing.T) {
	target := Target{Found: true, Version: "v1"}
	evicted := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), claim("home-demo"), disrupted("EvictionByEvictionAPI"))

	for _, reason := range []string{"EvictionByEvictionAPI", "DeletionByTaintManager", "PreemptionByScheduler", "DeletionByPodGC", "TerminationByKubelet"} {
		t.Run("a running pod being deleted with DisruptionTarget "+reason+" is copied as a gated pod without a stop intent", func(t *testing.T) {
			p := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), claim("home-demo"), disrupted(reason))
			m := Plan([]*corev1.Pod{p}, target, t0, Config{})
			if len(m.Actions) != 1 || !m.Hold {
				t.Fatalf("got %+v, want one held action", m)
			}
			a := m.Actions[0]
			if a.Kind != CreateStoppedPod || !a.Evicted || a.NodeLost || a.Pod != p || a.Name != StoppedPodName(p) {
				t.Fatalf("got %+v, want CreateStoppedPod of the evicted pod under its stop copy's name", a)
			}
			if a.Set[workspace.AnnStoppedFromUID] != "uid-run" || a.Set[workspace.AnnStopRequested] != "" {
				t.Fatalf("set %v, want the source's UID and no stop intent", a.Set)
			}
			if a.EventType != corev1.EventTypeNormal || a.Reason != ReasonEvictionReplaced || !strings.Contains(a.Message, reason) || !strings.Contains(a.Message, a.Name) {
				t.Fatalf("event %s %s %q", a.EventType, a.Reason, a.Message)
			}
			cp, err := StoppedPod(p, a.Name, a.Set)
			if err != nil {
				t.Fatal(err)
			}
			if !workspace.IsStoppedCopy(cp) || cp.Spec.NodeName != "" || workspace.ID(cp) != "demo" || workspace.Owner(cp) != "jane" ||
				len(cp.Spec.Volumes) != 1 || cp.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "home-demo" || cp.Annotations[workspace.AnnStopRequested] != "" {
				t.Fatalf("copy %+v does not keep the workspace", cp)
			}
		})
	}

	t.Run("the same pass repeated plans the same name: a second create fails with AlreadyExists", func(t *testing.T) {
		a := Plan([]*corev1.Pod{evicted}, target, t0, Config{}).Actions[0]
		b := Plan([]*corev1.Pod{evicted}, target, t0.Add(5e9), Config{}).Actions[0]
		if a.Name != b.Name {
			t.Fatalf("names %s and %s", a.Name, b.Name)
		}
	})

	t.Run("a pod being deleted without DisruptionTarget is the owner's or a person's delete: nothing", func(t *testing.T) {
		p := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), claim("home-demo"), terminating)
		m := Plan([]*corev1.Pod{p}, target, t0, Config{})
		if len(m.Actions) != 0 || m.State != "Deleting" {
			t.Fatalf("got %+v, want Deleting and no move", m)
		}
	})

	t.Run("DisruptionTarget=False is no disruption: nothing", func(t *testing.T) {
		p := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), disrupted("EvictionByEvictionAPI"))
		p.Status.Conditions[len(p.Status.Conditions)-1].Status = corev1.ConditionFalse
		if m := Plan([]*corev1.Pod{p}, target, t0, Config{}); len(m.Actions) != 0 {
			t.Fatalf("got %+v, want no move", m)
		}
	})

	t.Run("a disrupted pod that is not being deleted yet is left alone: the workspace still runs", func(t *testing.T) {
		p := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), disrupted("EvictionByEvictionAPI"))
		p.DeletionTimestamp = nil
		if m := Plan([]*corev1.Pod{p}, target, t0, Config{}); len(m.Actions) != 0 || m.State == "Evicted" {
			t.Fatalf("got %+v, want no move", m)
		}
	})

	t.Run("one evicted pod and one deleted by a person: the workspace is being deleted, nothing", func(t *testing.T) {
		up := wsPod(named("up002"), "uid-up", "v2", t0.Add(1), onNode("node-b"), upgradedFrom(evicted), terminating)
		if m := Plan([]*corev1.Pod{evicted, up}, target, t0, Config{}); len(m.Actions) != 0 {
			t.Fatalf("got %+v, want no move", m)
		}
	})

	t.Run("an evicted pod beside a live one (an upgrade in flight) is the upgrade planner's", func(t *testing.T) {
		up := wsPod(named("up002"), "uid-up", "v2", t0.Add(1), onNode("node-b"), upgradedFrom(evicted))
		m := Plan([]*corev1.Pod{evicted, up}, target, t0, Config{})
		for _, a := range m.Actions {
			if a.Kind == CreateStoppedPod {
				t.Fatalf("got %+v, want no copy while a pod of the workspace lives", m)
			}
		}
	})

	t.Run("both pods of an upgrade evicted: the pod the upgrade came from is copied, with its requested upgrade", func(t *testing.T) {
		old := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), claim("home-demo"), ann(workspace.AnnUpgradeRequested, "true"), disrupted("EvictionByEvictionAPI"))
		up := wsPod(named("up002"), "uid-up", "v2", t0.Add(1), onNode("node-a"), upgradedFrom(old), disrupted("EvictionByEvictionAPI"))
		m := Plan([]*corev1.Pod{up, old}, target, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != CreateStoppedPod || m.Actions[0].Pod != old {
			t.Fatalf("got %+v, want the copy of the old pod", m)
		}
		cp, _ := StoppedPod(old, m.Actions[0].Name, m.Actions[0].Set)
		if cp.Annotations[workspace.AnnUpgradeRequested] == "" {
			t.Fatal("the copy lost the requested upgrade")
		}
	})

	t.Run("an evicted pod with a stop intent keeps it on the copy, which stays stopped", func(t *testing.T) {
		p := wsPod(base, "uid-run", "v1", t0, ready(t0), onNode("node-a"), stopIntent, disrupted("EvictionByEvictionAPI"))
		m := Plan([]*corev1.Pod{p}, target, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != CreateStoppedPod {
			t.Fatalf("got %+v", m)
		}
		cp, _ := StoppedPod(p, m.Actions[0].Name, m.Actions[0].Set)
		if cp.Annotations[workspace.AnnStopRequested] == "" {
			t.Fatal("the copy lost the stop intent")
		}
		cpPod := wsPod(cp.Name, "uid-c", "v1", t0, gated, stopIntent, ann(workspace.AnnStoppedFromUID, "uid-run"))
		if m := Plan([]*corev1.Pod{cpPod, p}, target, t0, Config{}); len(m.Actions) != 0 || m.State != "Stopped" {
			t.Fatalf("got %+v, want Stopped", m)
		}
	})

	t.Run("a stranger relabelled into the workspace and evicted is not copied: a Warning instead", func(t *testing.T) {
		p := wsPod("someone-elses-pod", "uid-x", "v1", t0, ready(t0), onNode("node-a"), disrupted("EvictionByEvictionAPI"))
		m := Plan([]*corev1.Pod{p}, target, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != EventOnly || m.Actions[0].Reason != ReasonUntrustedAnnotations {
			t.Fatalf("got %+v, want only the untrusted Warning", m)
		}
	})

	cp := wsPod(StoppedPodName(evicted), "uid-copy", "v1", t0.Add(1), gated, claim("home-demo"), ann(workspace.AnnStoppedFromUID, "uid-run"))
	t.Run("the copy waits while the evicted pod still mounts its claim", func(t *testing.T) {
		m := Plan([]*corev1.Pod{cp, evicted}, target, t0, Config{})
		if !m.Hold || m.State != "StartWaitsForClaims" {
			t.Fatalf("got %+v, want a held wait", m)
		}
		for _, a := range m.Actions {
			if a.Kind != EventOnly {
				t.Fatalf("got %+v, want no write while the claim is held", m)
			}
			if a.EventType != corev1.EventTypeNormal || !strings.Contains(a.Message, evicted.Name) || !strings.Contains(a.Message, "home-demo") {
				t.Fatalf("event %+v", a)
			}
		}
	})

	t.Run("a copy whose claims the evicted pod does not mount starts at once", func(t *testing.T) {
		other := wsPod(StoppedPodName(evicted), "uid-copy", "v1", t0.Add(1), gated, claim("other"), ann(workspace.AnnStoppedFromUID, "uid-run"))
		m := Plan([]*corev1.Pod{other, evicted}, target, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != Ungate {
			t.Fatalf("got %+v, want Ungate", m)
		}
	})

	t.Run("once the evicted pod is gone the copy starts like a stopped pod: the gate is removed", func(t *testing.T) {
		m := Plan([]*corev1.Pod{cp}, target, t0, Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != Ungate || m.Actions[0].Pod != cp {
			t.Fatalf("got %+v, want Ungate of the copy", m)
		}
	})

	t.Run("a start on the latest version waits for the claim too", func(t *testing.T) {
		pinned := wsPod(cp.Name, "uid-copy", "v1", t0.Add(1), gated, claim("home-demo"), ann(workspace.AnnStoppedFromUID, "uid-run"), ann(workspace.AnnUpgradeRequested, "true"))
		m := Plan([]*corev1.Pod{pinned, evicted}, v2, t0, Config{})
		for _, a := range m.Actions {
			if a.Kind != EventOnly {
				t.Fatalf("got %+v, want no start while the claim is held", m)
			}
		}
		if m := Plan([]*corev1.Pod{pinned}, v2, t0, Config{}); len(m.Actions) != 1 || m.Actions[0].Kind != CreateStartedPod {
			t.Fatalf("got %+v, want CreateStartedPod once the pod is gone", m)
		}
	})
}

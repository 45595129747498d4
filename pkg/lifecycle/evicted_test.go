package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			if !workspace.CreatedAt(cp).Equal(p.CreationTimestamp.Time) || cp.Annotations[workspace.AnnWorkspaceCreatedAt] == "" {
				t.Fatalf("copy says its workspace was created %v (%q), want the evicted pod's creation %v", workspace.CreatedAt(cp), cp.Annotations[workspace.AnnWorkspaceCreatedAt], p.CreationTimestamp.Time)
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

// deletedAt marks p as being deleted, the delete asked for at with the default grace period, as
// the API server records it (deletion timestamp = at + grace period).
func deletedAt(at time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		grace := int64(30)
		ts := metav1.NewTime(at.Add(time.Duration(grace) * time.Second))
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
	}
}

// evictedAt marks p as a drain's eviction marks it at at: DisruptionTarget=True, then the delete.
func evictedAt(at time.Time) func(*corev1.Pod) {
	return markedAt(at, at)
}

// markedAt is a delete asked for at deleted, and DisruptionTarget=True dated marked.
func markedAt(deleted, marked time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		deletedAt(deleted)(p)
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.NewTime(marked)})
	}
}

// TestPlanEvictedAfterNogoo9RetiredAPod: a pod that nogoo9 deleted in favour of another (an
// upgrade's old pod, a failed upgrade's new pod, a start's stopped pod) may still be terminating
// (its preStop can run for minutes) when a drain evicts the pod that replaced it. That delete is
// not the owner's: the workspace survives as a copy of the evicted pod. Before, the retired pod,
// without DisruptionTarget, read as an owner's delete and the workspace was lost. The owner's
// delete, whatever the order, still deletes the workspace.
func TestPlanEvictedAfterNogoo9RetiredAPod(t *testing.T) {
	target := Target{Found: true, Version: "v2"}
	created := t0.Add(-time.Hour)
	sideBySide := ann(workspace.AnnUpgradeStrategy, "SideBySide")
	old := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(base, "uid-old", "v1", created, append([]func(*corev1.Pod){ready(created), onNode("node-a"), claim("home-demo")}, opts...)...)
	}
	up := func(from *corev1.Pod, opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(workspace.NextPodName(from, "v2"), "uid-up", "v2", t0.Add(-20*time.Minute),
			append([]func(*corev1.Pod){onNode("node-a"), claim("home-demo"), upgradedFrom(from), sideBySide}, opts...)...)
	}
	failure := func(at time.Time) func(*corev1.Pod) {
		return ann(workspace.AnnLastUpgradeError, "Upgrade failed at "+at.UTC().Format(time.RFC3339)+": ErrImagePull: container ide: not found")
	}
	stoppedAt := wsPod(named("stop1"), "uid-stop", "v1", created, gated, ann(workspace.AnnUpgradeRequested, "true"), claim("home-demo"))

	copies := func(want *corev1.Pod) func(t *testing.T, pods []*corev1.Pod, m Move) {
		return func(t *testing.T, pods []*corev1.Pod, m Move) {
			if len(m.Actions) != 1 || m.Actions[0].Kind != CreateStoppedPod || !m.Actions[0].Evicted || m.Actions[0].Pod != want || m.Actions[0].Name != StoppedPodName(want) {
				t.Fatalf("got %q, want the copy of %s", actionLines(m), want.Name)
			}
		}
	}
	nothing := func(t *testing.T, pods []*corev1.Pod, m Move) {
		if len(m.Actions) != 0 || m.State != "Deleting" {
			t.Fatalf("got %s %q, want Deleting and no move", m.State, actionLines(m))
		}
	}
	startedFrom := func(s *corev1.Pod, name string) *corev1.Pod {
		return wsPod(name, "uid-started", "v2", t0.Add(-20*time.Minute), onNode("node-a"), claim("home-demo"),
			ann(workspace.AnnStartedFromUID, string(s.UID)), evictedAt(t0))
	}
	withStoppedGone := func(s *corev1.Pod) *corev1.Pod {
		s = s.DeepCopy()
		deletedAt(t0.Add(-10 * time.Minute))(s)
		return s
	}

	succeededOld := old(deletedAt(t0.Add(-10 * time.Minute)))
	succeededUp := up(succeededOld, ready(t0.Add(-15*time.Minute)), evictedAt(t0))
	failedUp := up(old(), deletedAt(t0.Add(-10*time.Minute)))
	failedOld := old(failure(t0.Add(-10*time.Minute)), evictedAt(t0))
	recreated := wsPod(workspace.NextPodName(old(), "v2"), "uid-up", "v2", t0.Add(-20*time.Minute), onNode("node-a"), claim("home-demo"),
		upgradedFrom(old()), ann(workspace.AnnUpgradeStrategy, workspace.StrategyRecreate), deletedAt(t0.Add(-10*time.Minute)))
	rollback := wsPod(workspace.RollbackPodName(recreated), "uid-back", "v1", t0.Add(-9*time.Minute), onNode("node-a"), claim("home-demo"),
		upgradedFrom(recreated), ann(workspace.AnnUpgradeStrategy, workspace.StrategyRollback), failure(t0.Add(-10*time.Minute)), evictedAt(t0))
	ownerFirst := old(deletedAt(t0.Add(5 * time.Second)))
	forged := wsPod(named("up002"), "uid-up", "v2", t0.Add(-20*time.Minute), onNode("node-a"), upgradedFrom(succeededOld), sideBySide, evictedAt(t0))
	stoppedGone := withStoppedGone(stoppedAt)
	// A claimless workspace's stop: its copy, ungated by the start at once (no claim to wait for),
	// no longer names the running pod it was made from (the ungate drops stopped-from-uid).
	stoppedRun := old(deletedAt(t0.Add(-10 * time.Minute)))
	startedCopy := wsPod(StoppedPodName(stoppedRun), "uid-copy", "v1", t0.Add(-10*time.Minute), onNode("node-b"), evictedAt(t0))
	strangerCopy := wsPod(StoppedPodName(stoppedRun), "uid-copy", "v1", t0.Add(-10*time.Minute), onNode("node-b"), evictedAt(t0),
		ann(workspace.AnnOwner, "mallory"))
	first := old(deletedAt(t0.Add(-20 * time.Minute)))
	second := wsPod(workspace.NextPodName(first, "v2"), "uid-up", "v2", t0.Add(-30*time.Minute), onNode("node-a"), upgradedFrom(first), sideBySide, deletedAt(t0.Add(-10*time.Minute)))
	third := wsPod(workspace.NextPodName(second, "v3"), "uid-up3", "v3", t0.Add(-15*time.Minute), onNode("node-a"), upgradedFrom(second), sideBySide, evictedAt(t0))

	cases := []struct {
		name  string
		pods  []*corev1.Pod
		check func(t *testing.T, pods []*corev1.Pod, m Move)
	}{
		{"a side-by-side upgrade succeeded and its old pod is still terminating when a drain evicts the new pod: the new pod is copied",
			[]*corev1.Pod{succeededUp, succeededOld}, copies(succeededUp)},
		{"a side-by-side upgrade failed and its new pod is still terminating when a drain evicts the old pod, which carries the failure: the old pod is copied",
			[]*corev1.Pod{failedUp, failedOld}, copies(failedOld)},
		{"two upgrades within the first old pod's preStop, both old pods still terminating, the newest pod evicted: the newest pod is copied",
			[]*corev1.Pod{third, second, first}, copies(third)},
		{"a failed Recreate upgrade's new pod still terminating when a drain evicts its rollback pod: the rollback pod is copied",
			[]*corev1.Pod{rollback, recreated}, copies(rollback)},
		{"a start on the latest version's stopped pod still being deleted when a drain evicts the started pod: the started pod is copied",
			[]*corev1.Pod{startedFrom(stoppedGone, StartedPodName(stoppedGone)), stoppedGone}, nil},
		{"the same with the started pod's name of releases before stop 52 (the stopped pod's UID and the version)",
			[]*corev1.Pod{startedFrom(stoppedGone, startedPodNameWithVersion(stoppedGone, "v2")), stoppedGone}, nil},
		{"a claimless workspace started while its stopped running pod still terminates, then the started copy evicted: the copy is copied",
			[]*corev1.Pod{startedCopy, stoppedRun}, nil},
		{"the same copy's name on a pod of another owner: nothing",
			[]*corev1.Pod{strangerCopy, stoppedRun}, nothing},
		{"the new pod evicted first, then the owner deletes the workspace (the old pod, the one still live): nothing",
			[]*corev1.Pod{up(ownerFirst, ready(t0), evictedAt(t0)), ownerFirst}, nothing},
		{"the owner deletes the workspace, then someone evicts the new pod while it terminates (the condition comes after its delete): nothing",
			[]*corev1.Pod{up(succeededOld, ready(t0), markedAt(t0, t0.Add(time.Minute))), succeededOld}, nothing},
		{"a pod names the terminating pod as the one it upgrades under a name nogoo9 does not derive from it: nothing",
			[]*corev1.Pod{forged, succeededOld}, nothing},
		{"an upgrade's new pod deleted without the condition, the old pod evicted, no failure recorded (a person deleted the new pod): nothing",
			[]*corev1.Pod{failedUp, old(evictedAt(t0))}, nothing},
		{"the same with a failure recorded before the new pod was made (an earlier upgrade's): nothing",
			[]*corev1.Pod{failedUp, old(failure(t0.Add(-time.Hour)), evictedAt(t0))}, nothing},
		{"a stopped pod deleted without the condition beside an evicted pod it was not started into: nothing",
			[]*corev1.Pod{wsPod(named("other"), "uid-started", "v2", t0.Add(-20*time.Minute), onNode("node-a"), ann(workspace.AnnStartedFromUID, "uid-else"), evictedAt(t0)), stoppedGone}, nothing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := Plan(tc.pods, target, t0, Config{})
			if tc.check == nil {
				copies(tc.pods[0])(t, tc.pods, m)
				return
			}
			tc.check(t, tc.pods, m)
		})
	}
}

// TestPlanEvictedOwnerDeleteMet: the owner deletes the workspace while its pod is being evicted
// (its preStop can run for minutes). The front end deletes the gated copy, if one was made, and
// marks the evicted pod (nogoo9/deleted-at); the copy's name is free again, and without the mark
// the next pass made the copy again and the deleted workspace came back, unless the front end's
// sweep, in one replica's memory for 75 s, caught it. The mark on a pod not being deleted changes
// nothing.
func TestPlanEvictedOwnerDeleteMet(t *testing.T) {
	target := Target{Found: true, Version: "v1"}
	deleted := ann(workspace.AnnDeletedAt, t0.Add(time.Minute).Format(time.RFC3339))
	running := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(base, "uid-run", "v1", t0.Add(-time.Hour), append([]func(*corev1.Pod){ready(t0.Add(-time.Hour)), onNode("node-a"), claim("home-demo")}, opts...)...)
	}
	nothing := func(t *testing.T, m Move) {
		t.Helper()
		if len(m.Actions) != 0 || m.State != "Deleting" {
			t.Fatalf("got %s %q, want Deleting and no move", m.State, actionLines(m))
		}
	}

	t.Run("an evicted pod the owner's delete met, its copy deleted: no copy again", func(t *testing.T) {
		nothing(t, Plan([]*corev1.Pod{running(evictedAt(t0), deleted)}, target, t0.Add(2*time.Minute), Config{}))
	})
	t.Run("the same with the deleted copy still listed as being deleted", func(t *testing.T) {
		p := running(evictedAt(t0), deleted)
		cp := wsPod(StoppedPodName(p), "uid-copy", "v1", t0.Add(time.Second), gated, claim("home-demo"), ann(workspace.AnnStoppedFromUID, "uid-run"), deletedAt(t0.Add(time.Minute)))
		nothing(t, Plan([]*corev1.Pod{cp, p}, target, t0.Add(2*time.Minute), Config{}))
	})
	t.Run("an evicted pod the owner's delete met before any copy was made: no copy", func(t *testing.T) {
		nothing(t, Plan([]*corev1.Pod{running(disrupted("DeletionByTaintManager"), deleted)}, target, t0, Config{}))
	})
	t.Run("a drain evicts an upgrade's new pod while the old pod nogoo9 retired terminates, and the owner's delete met the old one: no copy", func(t *testing.T) {
		old := running(deletedAt(t0.Add(-10*time.Minute)), deleted)
		up := wsPod(workspace.NextPodName(old, "v2"), "uid-up", "v2", t0.Add(-20*time.Minute), onNode("node-a"), claim("home-demo"),
			upgradedFrom(old), ann(workspace.AnnUpgradeStrategy, "SideBySide"), ready(t0.Add(-15*time.Minute)), evictedAt(t0))
		nothing(t, Plan([]*corev1.Pod{up, old}, Target{Found: true, Version: "v2"}, t0, Config{}))
	})
	t.Run("the owner deletes the live pod, then a drain evicts it while it terminates (the condition a minute after the delete): no copy", func(t *testing.T) {
		nothing(t, Plan([]*corev1.Pod{running(markedAt(t0, t0.Add(time.Minute)))}, target, t0.Add(2*time.Minute), Config{}))
	})
	t.Run("the same within the skew is still an eviction: copied (the delete's sweep removes it)", func(t *testing.T) {
		p := running(markedAt(t0, t0.Add(10*time.Second)))
		m := Plan([]*corev1.Pod{p}, target, t0.Add(time.Minute), Config{})
		if len(m.Actions) != 1 || m.Actions[0].Kind != CreateStoppedPod || m.Actions[0].Pod != p {
			t.Fatalf("got %q, want the copy", actionLines(m))
		}
	})

	// A pod not being deleted with the mark (none the front end writes; only nogoo9 may write it)
	// plans as the pod without it, and a copy made from it does not carry it.
	lost := map[string]bool{"node-a": true}
	for _, tc := range []struct {
		name   string
		pods   func(opts ...func(*corev1.Pod)) []*corev1.Pod
		target Target
	}{
		{"a running pod with a stop intent", func(o ...func(*corev1.Pod)) []*corev1.Pod { return []*corev1.Pod{running(append(o, stopIntent)...)} }, target},
		{"a stopped pod to start", func(o ...func(*corev1.Pod)) []*corev1.Pod {
			return []*corev1.Pod{wsPod(named("stop1"), "uid-stop", "v1", t0.Add(-time.Hour), append([]func(*corev1.Pod){gated, claim("home-demo")}, o...)...)}
		}, target},
		{"a running pod on a lost node", func(o ...func(*corev1.Pod)) []*corev1.Pod { return []*corev1.Pod{running(o...)} }, Target{Found: true, Version: "v1", GoneNodes: lost}},
		{"a running pod beside an evicted one (an upgrade in flight)", func(o ...func(*corev1.Pod)) []*corev1.Pod {
			old := running(evictedAt(t0))
			return []*corev1.Pod{wsPod(workspace.NextPodName(old, "v2"), "uid-up", "v2", t0.Add(-time.Minute), append([]func(*corev1.Pod){onNode("node-b"), upgradedFrom(old)}, o...)...), old}
		}, target},
	} {
		t.Run("the mark on a live pod changes nothing: "+tc.name, func(t *testing.T) {
			want, got := Plan(tc.pods(), tc.target, t0, Config{}), Plan(tc.pods(deleted), tc.target, t0, Config{})
			if w, g := strings.Join(actionLines(want), "\n"), strings.Join(actionLines(got), "\n"); want.State != got.State || w != g {
				t.Fatalf("with the mark %s %q, without %s %q", got.State, g, want.State, w)
			}
			for _, a := range got.Actions {
				if a.Kind != CreateStoppedPod {
					continue
				}
				cp, err := StoppedPod(a.Pod, a.Name, a.Set)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := cp.Annotations[workspace.AnnDeletedAt]; ok {
					t.Fatal("the copy carries nogoo9/deleted-at")
				}
			}
		})
	}
}

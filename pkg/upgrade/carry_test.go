package upgrade

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestCutoverCarriesWhatAPersonWrote: the new pod was built with the old pod's values of its
// time; what a person wrote on the old pod since (a pin, an update policy or window, a
// maintenance, a stop) goes to the new pod before the old one is deleted, and the delete is
// conditional on the old pod as the planner saw it. The upgrade intent is not carried: the
// upgrade answers it.
func TestCutoverCarriesWhatAPersonWrote(t *testing.T) {
	cfg := Config{Timeout: 10 * time.Minute, Keys: testKeys}
	old := func(opts ...podOpt) *corev1.Pod {
		return with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), append([]podOpt{ready}, opts...)...)
	}
	name := workspace.UpgradePodName(testOwner, testID, "uid-old@v2")
	sbs := func(opts ...podOpt) *corev1.Pod {
		return with(upgraded(old(), name, "uid-new", "v2", SideBySide, t0), append([]podOpt{ready}, opts...)...)
	}
	recreate := func(opts ...podOpt) *corev1.Pod {
		return with(upgraded(old(claim("data")), name, "uid-new", "v2", Recreate, t0), append([]podOpt{pending}, opts...)...)
	}
	pinned := ann(workspace.AnnPinned, "true")
	type carried struct {
		set    map[string]string
		remove []string
	}
	cases := []struct {
		name string
		old  *corev1.Pod
		up   *corev1.Pod
		want *carried // nil: no patch before the delete
	}{
		{"a pin written on the old pod after the new one was built goes to the new pod before the old one is deleted",
			old(pinned), sbs(), &carried{set: map[string]string{workspace.AnnPinned: "true"}}},
		{"an update policy and window written on the old pod go too",
			old(ann(workspace.AnnUpdatePolicy, "window"), ann(workspace.AnnUpdateWindow, "Sat 02:00-04:00 UTC")), sbs(),
			&carried{set: map[string]string{workspace.AnnUpdatePolicy: "window", workspace.AnnUpdateWindow: "Sat 02:00-04:00 UTC"}}},
		{"a pin and policy removed from the old pod are removed from the new pod",
			old(), sbs(pinned, ann(workspace.AnnUpdatePolicy, "manual")), &carried{remove: []string{workspace.AnnPinned, workspace.AnnUpdatePolicy}}},
		{"a changed update window replaces the new pod's",
			old(ann(workspace.AnnUpdateWindow, "daily 03:00-04:00 UTC")), sbs(ann(workspace.AnnUpdateWindow, "Sat 02:00-04:00 UTC")),
			&carried{set: map[string]string{workspace.AnnUpdateWindow: "daily 03:00-04:00 UTC"}}},
		{"a stop written on the old pod goes to the new pod (never removed from it)",
			old(ann(workspace.AnnStopRequested, "for the weekend")), sbs(), &carried{set: map[string]string{workspace.AnnStopRequested: "for the weekend"}}},
		{"a stop only on the new pod stays: while any live pod carries it the workspace is stopped",
			old(), sbs(ann(workspace.AnnStopRequested, "for the weekend")), nil},
		{"the upgrade intent is not carried: this upgrade answers it",
			old(ann(workspace.AnnUpgradeRequested, "true")), sbs(), nil},
		{"the same values on both pods need no write",
			old(pinned), sbs(pinned), nil},
		{"a Recreate upgrade's cutover carries the pin too",
			old(claim("data"), pinned), recreate(), &carried{set: map[string]string{workspace.AnnPinned: "true"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := Plan(Observed{Pods: []*corev1.Pod{c.old, c.up}, Claims: map[string]*corev1.PersistentVolumeClaim{"data": pvc("data", corev1.ReadWriteOnce)}},
				Target{Found: true, Name: "python", Version: "v2"}, t0.Add(time.Minute), cfg)
			var patch *Action
			deleted := false
			for i := range m.Actions {
				a := &m.Actions[i]
				switch {
				case a.Kind == PatchPod && a.Pod.Name == c.up.Name:
					if deleted {
						t.Errorf("the new pod is patched after the old one is deleted")
					}
					patch = a
				case a.Kind == DeletePod && a.Pod.Name == c.old.Name:
					deleted = true
					if !a.MatchVersion {
						t.Errorf("the old pod must be deleted only as seen (resourceVersion precondition)")
					}
				}
			}
			if !deleted {
				t.Fatalf("the old pod is not deleted: %q", summary(m))
			}
			switch {
			case c.want == nil && patch != nil:
				t.Fatalf("unexpected patch of the new pod: set %v remove %v", patch.Annotations, patch.Remove)
			case c.want != nil && patch == nil:
				t.Fatalf("no patch of the new pod before the delete: %q", summary(m))
			case c.want != nil:
				if len(c.want.set) > 0 && !reflect.DeepEqual(patch.Annotations, c.want.set) || len(c.want.set) == 0 && len(patch.Annotations) > 0 {
					t.Errorf("set %v, want %v", patch.Annotations, c.want.set)
				}
				if !reflect.DeepEqual(patch.Remove, c.want.remove) {
					t.Errorf("remove %v, want %v", patch.Remove, c.want.remove)
				}
			}
		})
	}
}

package podcache_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
)

// TestScratchMaterializesAsMaterialize: a Scratch reused across the fixtures' workspaces, in
// both orders and with pods of many shapes in the same slot one after another (more labels, then
// fewer; claims, then none; container statuses, then none; a rare part, then none), returns
// exactly what Materialize returns each time: nothing of an earlier pod is left in its memory.
// The views and the routes describe each workspace from it (bench/history.md, "Twelfth round:
// cold start").
func TestScratchMaterializesAsMaterialize(t *testing.T) {
	var groups [][]*podcache.Pod
	for _, ws := range podcachetest.Workspaces() {
		var g []*podcache.Pod
		for _, p := range ws.Pods {
			g = append(g, podcache.Of(p))
		}
		groups = append(groups, g)
	}
	// A pod with more of everything than the fixtures' (two container statuses, two claims, more
	// labels and annotations), so a slot that held it holds more than the next pod needs.
	big := podcachetest.Ready()
	big.Status.ContainerStatuses = append(big.Status.ContainerStatuses, corev1.ContainerStatus{Name: "sidecar", Ready: true})
	big.Spec.Volumes = append(big.Spec.Volumes,
		corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-a"}}},
		corev1.Volume{Name: "b", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-b", ReadOnly: true}}})
	big.Labels["extra"], big.Annotations["extra"] = "label", "annotation"
	groups = append(groups, []*podcache.Pod{podcache.Of(big)})
	var all []*podcache.Pod
	for _, g := range groups {
		all = append(all, g...)
	}
	for i := range all { // one pod at a time in slot 0, every shape after every other
		groups = append(groups, all[i:i+1])
	}
	for i := len(groups) - 1; i >= 0; i-- { // and back again
		groups = append(groups, groups[i])
	}
	s := podcache.GetScratch()
	for round := range 2 { // the second round with the Scratch given back and taken again
		for i, g := range groups {
			got := s.Materialize(g)
			if len(got) != len(g) {
				t.Fatalf("round %d, group %d: %d pods materialised, want %d", round, i, len(got), len(g))
			}
			for j, p := range g {
				if d := cmp.Diff(p.Materialize(), got[j]); d != "" {
					t.Fatalf("round %d, group %d, pod %s: the Scratch's pod differs (-Materialize +Scratch):\n%s", round, i, p.Name, d)
				}
			}
		}
		s.Release()
		s = podcache.GetScratch()
	}
	s.Release()
}

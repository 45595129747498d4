package podcache_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
)

// TestScratchMaterializesAsMaterialize: a Scratch reused across the fixtures' workspaces, in
// both orders and with pods of many shapes in the same slot one after another (more labels, then
// fewer; claims, then none; container statuses, then none; a rare part, then none), returns
// exactly what Materialize returns each time: nothing of an earlier pod is left in its memory.
// The views and the routes describe each workspace from it (docs/performance.md, "Twelfth round:
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

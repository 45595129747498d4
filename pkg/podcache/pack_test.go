package podcache

import (
	"testing"
	"unsafe"

	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestTransformPacksAPodsOwnStrings checks that the strings a cached pod owns (name, UID,
// resourceVersion, unshared label and annotation values, pod IP, messages) sit in one allocation
// of exactly their total length, with their values unchanged, and that shared values stay
// interned (docs/performance.md, "Ninth round").
func TestTransformPacksAPodsOwnStrings(t *testing.T) {
	for _, w := range podcachetest.Workspaces() {
		for _, full := range w.Pods {
			want := full.DeepCopy()
			o, err := Transform(full.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			p := o.(*Pod)
			own := []string{p.Name, string(p.UID), p.ResourceVersion, p.PodIP, p.Message,
				p.Labels[workspace.LabelWorkspaceID], p.Annotations[workspace.AnnWorkspacePath]}
			if p.Name != want.Name || string(p.UID) != string(want.UID) || p.PodIP != want.Status.PodIP ||
				p.Labels[workspace.LabelWorkspaceID] != want.Labels[workspace.LabelWorkspaceID] ||
				p.Annotations[workspace.AnnWorkspacePath] != want.Annotations[workspace.AnnWorkspacePath] {
				t.Fatalf("%s/%s: packed strings changed: %+v", w.Name, want.Name, p.ObjectMeta)
			}
			lo, hi := uintptr(0), uintptr(0)
			total := 0
			visitOwnStrings(p, func(s string) string {
				total += len(s)
				if s == "" {
					return s
				}
				a := uintptr(unsafe.Pointer(unsafe.StringData(s)))
				if lo == 0 || a < lo {
					lo = a
				}
				if e := a + uintptr(len(s)); e > hi {
					hi = e
				}
				return s
			})
			if int(hi-lo) != total {
				t.Errorf("%s/%s: the pod's own strings (%d bytes: %q...) span %d bytes, want one block of exactly their length", w.Name, want.Name, total, own, hi-lo)
			}
			if v := p.Labels[workspace.LabelTemplate]; v != "" && unsafe.StringData(v) != unsafe.StringData(intern(v)) {
				t.Errorf("%s/%s: the template label's value is not the interned copy", w.Name, want.Name)
			}
		}
	}
}

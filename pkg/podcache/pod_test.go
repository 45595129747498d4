package podcache_test

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
)

// TestPodDeepCopyIsIndependent: the stored Pod's DeepCopyObject returns a *podcache.Pod equal to
// it, and writing into every map, slice and pointer of the copy (and of the copy's materialised
// pod) leaves the original as it was. The cache's Get and List hand out materialised deep copies.
func TestPodDeepCopyIsIndependent(t *testing.T) {
	for _, ws := range podcachetest.Workspaces() {
		for _, full := range ws.Pods {
			o, err := podcache.Transform(full.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			orig := o.(*podcache.Pod)
			before := orig.Materialize().DeepCopy()
			c, ok := orig.DeepCopyObject().(*podcache.Pod)
			if !ok {
				t.Fatalf("%s: DeepCopyObject returned a %T", ws.Name, orig.DeepCopyObject())
			}
			// Every field, the unexported labels and annotations included.
			if d := cmp.Diff(orig, c, cmp.Exporter(func(reflect.Type) bool { return true })); d != "" {
				t.Fatalf("%s: the copy differs (-orig +copy):\n%s", ws.Name, d)
			}
			m := c.Materialize()
			m.Labels["x"] = "y"
			m.Annotations["x"] = "y"
			for i := range m.Status.Conditions {
				m.Status.Conditions[i].Message = "changed"
			}
			for _, sts := range [][]corev1.ContainerStatus{m.Status.ContainerStatuses, m.Status.InitContainerStatuses} {
				for i := range sts {
					if w := sts[i].State.Waiting; w != nil {
						w.Reason = "changed"
					}
					if r := sts[i].LastTerminationState.Terminated; r != nil {
						r.Reason = "changed"
					}
					if sts[i].Started != nil {
						*sts[i].Started = !*sts[i].Started
					}
				}
			}
			for i := range m.Spec.Volumes {
				m.Spec.Volumes[i].PersistentVolumeClaim.ClaimName = "changed"
			}
			for i := range m.Spec.SchedulingGates {
				m.Spec.SchedulingGates[i].Name = "changed"
			}
			for i := range m.Spec.ReadinessGates {
				m.Spec.ReadinessGates[i].ConditionType = "changed"
			}
			if len(m.OwnerReferences) > 0 {
				m.OwnerReferences[0].Name = "changed"
			}
			if len(m.Finalizers) > 0 {
				m.Finalizers[0] = "changed"
			}
			if d := cmp.Diff(before, orig.Materialize()); d != "" {
				t.Errorf("%s: a write into the copy reached the original (-before +after):\n%s", ws.Name, d)
			}
		}
	}
}

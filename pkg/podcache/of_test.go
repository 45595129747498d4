package podcache

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// TestOfPodSaysWhyItFoundNoPod: ReadWorkspace's error for a store entry that is no pod names
// what the store holds and how to build the cache, and a pod (either form, a tombstone's too)
// is no error.
func TestOfPodSaysWhyItFoundNoPod(t *testing.T) {
	full := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ws-a"}}
	for _, obj := range []any{full, Of(full), toolscache.DeletedFinalStateUnknown{Key: "ns/ws-a", Obj: Of(full)}} {
		if p, err := ofPod(obj); err != nil || p == nil || p.Name != "ws-a" {
			t.Errorf("ofPod(%T) = %v, %v; want the pod", obj, p, err)
		}
	}
	for _, tc := range []struct {
		obj  any
		want string
	}{
		{&corev1.ConfigMap{}, "the pod store holds a *v1.ConfigMap, not a pod: build the cache with podcache.NewCache and podcache.Options"},
		{(*corev1.Pod)(nil), "the pod store holds a *v1.Pod, not a pod"},
		{nil, "the pod store holds a <nil>, not a pod"},
	} {
		if p, err := ofPod(tc.obj); p != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ofPod(%T) = %v, %v; want an error saying %q", tc.obj, p, err, tc.want)
		}
	}
}

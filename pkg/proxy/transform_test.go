package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestRoutesReadOnlyWhatTheCacheKeeps is pkg/podcache's TestTransformKeepsWhatEveryReaderReads
// for the proxy: the routes of every workspace state, from full pods and from the pods as the
// informer's transform leaves them, must be the same.
func TestRoutesReadOnlyWhatTheCacheKeeps(t *testing.T) {
	for _, ws := range podcachetest.Workspaces() {
		t.Run(ws.Name, func(t *testing.T) {
			cached := make([]*corev1.Pod, len(ws.Pods))
			for i, p := range ws.Pods {
				o, err := podcache.Transform(p.DeepCopy())
				if err != nil {
					t.Fatal(err)
				}
				cached[i] = o.(*podcache.Pod).Materialize()
			}
			key := wsKey{"ns", workspace.ID(ws.Pods[0])}
			for _, d := range []time.Duration{0, time.Minute, time.Hour} {
				now := podcachetest.T0.Add(d)
				full, fullErrs := routesFor(key, ws.Pods, now)
				got, gotErrs := routesFor(key, cached, now)
				if diff := cmp.Diff(fmt.Sprintf("%+v %v", deref(full), fullErrs), fmt.Sprintf("%+v %v", deref(got), gotErrs)); diff != "" {
					t.Errorf("routes at T0+%s differ on the cached pods (-full +cached):\n%s", d, diff)
				}
			}
		})
	}
}

// deref prints each target's fields (a target holds an atomic pointer: it is not copied).
func deref(ts []*target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = fmt.Sprintf("%+v", t)
		if t.status != nil { // the status by value: the pointer differs from run to run
			out[i] += fmt.Sprintf(" status=%+v", *t.status)
		}
		out[i] = strings.ReplaceAll(out[i], fmt.Sprintf("status:%p", t.status), "")
	}
	return out
}

// TestIsReadyAsTheMaterialisedPod: the router's isReady, which reads a cached pod's fields
// without materialising it, answers as workspace.IsReady of the materialised pod in every state.
func TestIsReadyAsTheMaterialisedPod(t *testing.T) {
	for _, ws := range podcachetest.Workspaces() {
		for _, p := range ws.Pods {
			c := podcache.Of(p)
			if got, want := isReady(c), workspace.IsReady(c.Materialize()); got != want {
				t.Errorf("%s, pod %s: isReady %v, workspace.IsReady %v", ws.Name, p.Name, got, want)
			}
		}
	}
}

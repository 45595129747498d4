package lifecycle

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// world is the API server of one workspace as the controller's writes change it, with the same
// preconditions: creates fail on an existing name, deletes check the pod to keep and the UID,
// patches check the resourceVersion.
type world struct {
	pods map[string]*corev1.Pod
	rv   int
	uid  int
	now  time.Time
}

func (w *world) bump(p *corev1.Pod) {
	w.rv++
	p.ResourceVersion = strconv.Itoa(w.rv)
}

func (w *world) create(p *corev1.Pod) {
	if _, ok := w.pods[p.Name]; ok {
		return // AlreadyExists: an earlier attempt made it
	}
	w.uid++
	p.UID = types.UID(fmt.Sprintf("uid-%d", w.uid))
	p.CreationTimestamp = metav1.NewTime(w.now)
	w.now = w.now.Add(time.Second)
	w.bump(p)
	w.pods[p.Name] = p
}

func (w *world) snapshot() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(w.pods))
	for _, p := range w.pods {
		out = append(out, p.DeepCopy())
	}
	return out
}

func (w *world) live() []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range w.pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// apply performs a, as the controller does, against the current world.
func (w *world) apply(a Action) {
	cur, ok := w.pods[a.Pod.Name]
	sameVersion := ok && cur.UID == a.Pod.UID && cur.ResourceVersion == a.Pod.ResourceVersion
	switch a.Kind {
	case CreateStoppedPod:
		if !ok || cur.UID != a.Pod.UID || cur.DeletionTimestamp != nil || cur.Annotations[workspace.AnnStopRequested] == "" {
			return
		}
		s, err := StoppedPod(cur, a.Name, a.Set)
		if err != nil {
			panic(err)
		}
		w.create(s)
	case CreateStartedPod:
		if !ok || cur.UID != a.Pod.UID || cur.DeletionTimestamp != nil {
			return
		}
		n := cur.DeepCopy()
		n.Name, n.Spec.SchedulingGates = a.Name, nil
		n.Annotations[workspace.AnnTemplateVersion] = "v2"
		delete(n.Annotations, workspace.AnnUpgradeRequested)
		delete(n.Annotations, workspace.AnnStoppedFromUID)
		for k, v := range a.Set {
			n.Annotations[k] = v
		}
		n.Status = corev1.PodStatus{}
		w.create(n)
	case DeletePod:
		keep, kok := w.pods[a.Keep.Name]
		if !kok || keep.UID != a.Keep.UID || keep.DeletionTimestamp != nil {
			return // the pod to keep is gone: never delete the last one
		}
		if ok && cur.UID == a.Pod.UID && cur.DeletionTimestamp == nil {
			ts := metav1.NewTime(w.now)
			cur.DeletionTimestamp = &ts
			w.bump(cur)
		}
	case Ungate:
		if sameVersion {
			cur.Spec.SchedulingGates = nil
			delete(cur.Annotations, workspace.AnnStoppedAt)
			delete(cur.Annotations, workspace.AnnStoppedFromUID)
			w.bump(cur)
		}
	case PatchPod:
		if sameVersion {
			for k, v := range a.Set {
				cur.Annotations[k] = v
			}
			w.bump(cur)
		}
	}
}

// Many random runs of stop and start with the intent flipping at any moment, the controller
// planning from a stale view or crashing between its writes, and the kubelet removing deleted pods
// and making pods Ready in any order. After every step the workspace has a live pod with its
// identity; once the person stops flipping, it settles where the intent says, with one pod.
func TestStopStartSimulation(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 14))
		w := &world{pods: map[string]*corev1.Pod{}, now: t0}
		first := wsPod("ws-jane-demo", "", "v1", t0, ready(t0))
		first.Spec.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-home"}}}}
		w.create(first)
		target := Target{Found: true, Version: "v1"}
		if rng.IntN(3) == 0 {
			target = Target{Found: true, Version: "v2", Annotations: map[string]string{workspace.AnnUpdatePolicy: "on-start"}}
		}
		var stale []*corev1.Pod
		check := func(step int, what string) {
			live := w.live()
			if len(live) == 0 {
				t.Fatalf("seed %d step %d (%s): the workspace has no live pod left", seed, step, what)
			}
			for _, p := range w.pods {
				if workspace.Owner(p) != "jane" || p.Annotations[workspace.AnnWorkspacePath] != "/ws/jane/demo/" || len(p.Spec.Volumes) != 1 {
					t.Fatalf("seed %d step %d (%s): pod %s lost the workspace's identity or claim", seed, step, what, p.Name)
				}
			}
		}
		wantStopped := false
		for step := range 60 {
			settle := step >= 40
			switch r := rng.IntN(10); {
			case r < 2 && !settle: // a person flips the intent on every live pod
				wantStopped = !wantStopped
				for _, p := range w.live() {
					if wantStopped {
						p.Annotations[workspace.AnnStopRequested] = "by hand"
					} else {
						delete(p.Annotations, workspace.AnnStopRequested)
					}
					w.bump(p)
				}
				check(step, "flip")
			case r < 4: // the kubelet: a deleted pod goes, or a schedulable pod becomes Ready
				for name, p := range w.pods {
					if p.DeletionTimestamp != nil {
						delete(w.pods, name)
						break
					}
					if !workspace.IsStoppedPod(p) && !workspace.IsReady(p) {
						ready(w.now)(p)
						w.bump(p)
						break
					}
				}
				check(step, "kubelet")
			default: // a controller pass, from a stale view now and then, crashing half-way sometimes
				view := w.snapshot()
				if stale != nil && rng.IntN(4) == 0 {
					view = stale
				}
				stale = w.snapshot()
				m := Plan(view, target, w.now, Config{})
				for i, a := range m.Actions {
					if i > 0 && rng.IntN(3) == 0 {
						break // kill -9 between two writes
					}
					w.apply(a)
					check(step, string(a.Kind))
				}
			}
		}
		// Settle: the controller and the kubelet run until nothing changes.
		for range 40 {
			m := Plan(w.snapshot(), target, w.now, Config{})
			for _, a := range m.Actions {
				w.apply(a)
				check(99, string(a.Kind))
			}
			for name, p := range w.pods {
				if p.DeletionTimestamp != nil {
					delete(w.pods, name)
				} else if !workspace.IsStoppedPod(p) && !workspace.IsReady(p) {
					ready(w.now)(p)
					w.bump(p)
				}
			}
		}
		live := w.live()
		if len(live) != 1 {
			t.Fatalf("seed %d: settled with %d live pods, want 1", seed, len(live))
		}
		if got := workspace.IsStoppedPod(live[0]); got != wantStopped {
			t.Fatalf("seed %d: settled with pod %s stopped=%v, want %v", seed, live[0].Name, got, wantStopped)
		}
	}
}

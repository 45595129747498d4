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

// apply performs a, as the controller does, against the current world. happened is false when
// the controller would stop the move there (a precondition failed, the pod to keep is gone).
func (w *world) apply(a Action) (happened bool) {
	cur, ok := w.pods[a.Pod.Name]
	sameVersion := ok && cur.UID == a.Pod.UID && cur.ResourceVersion == a.Pod.ResourceVersion
	switch a.Kind {
	case CreateStoppedPod:
		if !ok || cur.UID != a.Pod.UID || cur.DeletionTimestamp != nil || cur.Annotations[workspace.AnnStopRequested] == "" {
			return false
		}
		s, err := StoppedPod(cur, a.Name, a.Set)
		if err != nil {
			panic(err)
		}
		w.create(s)
	case CreateStartedPod:
		if !ok || cur.UID != a.Pod.UID || cur.DeletionTimestamp != nil {
			return false
		}
		// As spawner.BuildPod and upgrade.PreserveIdentity make it: the identity and the
		// workspace's update choices, none of the stopped pod's intents or maintenance.
		n := cur.DeepCopy()
		n.Name, n.Spec.SchedulingGates = a.Name, nil
		n.Annotations[workspace.AnnTemplateVersion] = "v2"
		for _, k := range []string{workspace.AnnUpgradeRequested, workspace.AnnStoppedFromUID, workspace.AnnStoppedAt, workspace.AnnStopRequested, workspace.AnnMaintenance} {
			delete(n.Annotations, k)
		}
		for k, v := range a.Set {
			n.Annotations[k] = v
		}
		n.Status = corev1.PodStatus{}
		w.create(n)
	case DeletePod:
		keep, kok := w.pods[a.Keep.Name]
		if !kok || keep.UID != a.Keep.UID || keep.DeletionTimestamp != nil {
			return false // the pod to keep is gone: never delete the last one
		}
		if ok && cur.UID == a.Pod.UID && cur.ResourceVersion != a.Pod.ResourceVersion {
			return false // changed since the plan (resourceVersion precondition): re-plan
		}
		if sameVersion && cur.DeletionTimestamp == nil {
			ts := metav1.NewTime(w.now)
			cur.DeletionTimestamp = &ts
			w.bump(cur)
		}
	case Ungate:
		if !sameVersion {
			return false
		}
		cur.Spec.SchedulingGates = nil
		delete(cur.Annotations, workspace.AnnStoppedAt)
		delete(cur.Annotations, workspace.AnnStoppedFromUID)
		cur.Annotations[workspace.AnnStartedAt] = w.now.UTC().Format(time.RFC3339) // as controllers' ungate
		w.bump(cur)
	case PatchPod:
		if !sameVersion {
			return false
		}
		for _, k := range a.Remove {
			delete(cur.Annotations, k)
		}
		for k, v := range a.Set {
			cur.Annotations[k] = v
		}
		w.bump(cur)
	}
	return true
}

// frontEndWrite is a write through the front end: it patches every live pod its cache (view)
// shows, which may lag (a pod the controller made since is not in it); with none left live, the
// person tries again on what is there now (or uses kubectl with a label selector).
func (w *world) frontEndWrite(view []*corev1.Pod, write func(p *corev1.Pod)) {
	var hit []*corev1.Pod
	for _, v := range view {
		if p, ok := w.pods[v.Name]; ok && p.UID == v.UID && p.DeletionTimestamp == nil && v.DeletionTimestamp == nil {
			hit = append(hit, p)
		}
	}
	if len(hit) == 0 {
		hit = w.live()
	}
	for _, p := range hit {
		write(p)
		w.bump(p)
	}
}

// Many random runs of stop and start with the intent flipping at any moment, the controller
// planning from a stale view or crashing between its writes, and the kubelet removing deleted pods
// and making pods Ready in any order. A stop, a pin and a maintenance are written through a front
// end whose cache lags (only the pods it shows get the write); a start removes the intent from
// every live pod (kubectl with a label selector, as documented). Now and then mallory, who may
// patch pods, relabels her own running pod into the workspace (sometimes with jane as its owner),
// until an admin removes the label (at the latest when the writes stop). After every step the
// workspace has a live pod of jane's with its identity, and mallory's pod is neither deleted nor
// copied; once the person stops writing, it settles where the intent says, with one pod that
// carries the person's last pin and maintenance.
func TestStopStartSimulation(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 14))
		w := &world{pods: map[string]*corev1.Pod{}, now: t0}
		first := wsPod(base, "", "v1", t0, ready(t0))
		first.Spec.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-home"}}}}
		w.create(first)
		target := Target{Found: true, Version: "v1"}
		if rng.IntN(3) == 0 {
			target = Target{Found: true, Version: "v2", Annotations: map[string]string{workspace.AnnUpdatePolicy: "on-start"}}
		}
		var stale []*corev1.Pod
		front := w.snapshot()       // the front end's cache
		last := map[string]string{} // the person's last write of each setting ("": removed)
		intruder := ""              // mallory's pod, while it carries the workspace's label
		check := func(step int, what string) {
			janes := 0
			for _, p := range w.pods {
				if p.Name == intruder {
					if p.DeletionTimestamp != nil {
						t.Fatalf("seed %d step %d (%s): mallory's pod %s relabelled into the workspace is being deleted", seed, step, what, p.Name)
					}
					continue
				}
				if workspace.Owner(p) != "jane" || p.Annotations[workspace.AnnWorkspacePath] != "/ws/jane/demo/" || len(p.Spec.Volumes) != 1 || p.Spec.Containers[0].Image == "mallory:1" {
					t.Fatalf("seed %d step %d (%s): pod %s lost the workspace's identity or claim, or is a copy of mallory's pod", seed, step, what, p.Name)
				}
				if p.DeletionTimestamp == nil {
					janes++
				}
			}
			if janes == 0 {
				t.Fatalf("seed %d step %d (%s): the workspace has no live pod of jane's left", seed, step, what)
			}
		}
		wantStopped := false
		for step := range 60 {
			settle := step >= 40
			if rng.IntN(3) == 0 {
				front = w.snapshot()
			}
			if !settle && intruder == "" && rng.IntN(15) == 0 {
				// Mallory relabels her own Ready pod (nogoo9 named it for her workspace "mine")
				// into the workspace, with her own owner, or with jane's written over it.
				x := wsPod(workspace.PodName("mallory", "mine"), "", "v1", w.now, ready(w.now))
				x.Spec.Containers[0].Image = "mallory:1"
				if rng.IntN(2) == 0 {
					x.Annotations[workspace.AnnOwner], x.Labels[workspace.LabelUserSub] = "mallory", "mallory"
				}
				w.create(x)
				intruder = x.Name
				check(step, "relabel")
			}
			if intruder != "" && (settle || rng.IntN(8) == 0) {
				// An admin, told by the Warning, removes the label: the pod leaves the workspace.
				delete(w.pods, intruder)
				intruder = ""
			}
			switch r := rng.IntN(12); {
			case r < 2 && !settle: // a person flips the intent
				wantStopped = !wantStopped
				if wantStopped {
					w.frontEndWrite(front, func(p *corev1.Pod) { p.Annotations[workspace.AnnStopRequested] = "by hand" })
				} else {
					for _, p := range w.live() {
						delete(p.Annotations, workspace.AnnStopRequested)
						w.bump(p)
					}
				}
				check(step, "flip")
			case r < 4 && !settle: // a person pins or unpins, or sets or lifts a maintenance
				k := []string{workspace.AnnPinned, workspace.AnnMaintenance}[rng.IntN(2)]
				v := ""
				if rng.IntN(2) == 0 {
					v = fmt.Sprintf("by hand at step %d", step)
				}
				last[k] = v
				w.frontEndWrite(front, func(p *corev1.Pod) {
					if v == "" {
						delete(p.Annotations, k)
					} else {
						p.Annotations[k] = v
					}
				})
				check(step, "setting")
			case r < 6: // the kubelet: a deleted pod goes, or a schedulable pod becomes Ready
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
					happened := w.apply(a)
					check(step, string(a.Kind))
					if !happened {
						break
					}
				}
			}
		}
		// Settle: the controller and the kubelet run until nothing changes.
		for range 40 {
			m := Plan(w.snapshot(), target, w.now, Config{})
			for _, a := range m.Actions {
				happened := w.apply(a)
				check(99, string(a.Kind))
				if !happened {
					break
				}
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
		// A start waits for a maintenance to end: a workspace in maintenance may stay stopped.
		held := last[workspace.AnnMaintenance] != "" && !wantStopped
		if got := workspace.IsStoppedPod(live[0]); got != wantStopped && !held {
			t.Fatalf("seed %d: settled with pod %s stopped=%v, want %v", seed, live[0].Name, got, wantStopped)
		}
		for k, want := range last {
			if got := live[0].Annotations[k]; got != want {
				t.Fatalf("seed %d: settled with pod %s %s=%q, want the person's last write %q", seed, live[0].Name, k, got, want)
			}
		}
	}
}

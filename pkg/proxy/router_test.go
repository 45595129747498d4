package proxy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestRouterTableFollowsRandomPodEventsWithContestedPrefixes drives the router, through the
// proxy's event handler, with random pod events of workspaces that claim the same prefixes (a path
// moved, a pod replaced, deleted, turning ready, relabelled into another workspace or out of every
// one, deleted as a tombstone or with a final state that no longer names its workspace) and checks
// after every step that the table is what routesFor over each workspace's pods gives, with every
// prefix going to its oldest claimant, that only prefixes with two or more claimants keep a
// claimant list, that each workspace holds exactly its pods, and that a forgotten workspace leaves
// nothing.
func TestRouterTableFollowsRandomPodEventsWithContestedPrefixes(t *testing.T) {
	prefixes := []string{"/p/a/", "/p/b/", "/p/c/"}
	ids := []string{"w1", "w2", "w3", "w4"}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		r := p.router
		r.now = func() time.Time { return t0 }
		h := p.EventHandler()
		model := map[wsKey]map[types.UID]*corev1.Pod{} // the pods each workspace has now
		// latest is every pod that exists as the handler last saw it, a workspace pod or not.
		latest := map[types.UID]*corev1.Pod{}
		for step := range 300 {
			id := ids[rng.IntN(len(ids))]
			key := wsKey{"default", id}
			var desc string
			switch pods := model[key]; {
			case len(pods) > 0 && rng.IntN(3) == 0:
				pod := pods[pickUID(rng, pods)]
				modelUnfile(model, pod)
				delete(latest, pod.UID)
				switch rng.IntN(4) {
				case 0:
					h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: pod.Namespace + "/" + pod.Name, Obj: pod})
					desc = "delete " + pod.Name + " (tombstone)"
				case 1:
					// A final state that names no workspace (a caller's, not the informer's).
					final := pod.DeepCopy()
					delete(final.Labels, workspace.LabelWorkspaceID)
					h.OnDelete(final)
					desc = "delete " + pod.Name + " (final state without its id)"
				default:
					h.OnDelete(pod)
					desc = "delete " + pod.Name
				}
			case len(pods) > 0 && rng.IntN(3) == 0:
				old := pods[pickUID(rng, pods)]
				moved := old.DeepCopy()
				switch n := rng.IntN(len(ids) + 2); {
				case n < len(ids):
					moved.Labels[workspace.LabelWorkspaceID] = ids[n] // its own id too, now and then
					desc = fmt.Sprintf("relabel %s from %s to %s", old.Name, id, ids[n])
				case n == len(ids):
					delete(moved.Labels, workspace.LabelWorkspaceID)
					desc = fmt.Sprintf("relabel %s from %s to no id", old.Name, id)
				default:
					delete(moved.Labels, workspace.LabelType)
					desc = fmt.Sprintf("relabel %s from %s to no type", old.Name, id)
				}
				modelUnfile(model, old)
				modelFile(model, moved)
				latest[moved.UID] = moved
				h.OnUpdate(old, moved)
			default:
				n := rng.IntN(2) // a workspace has one or two pods
				name := fmt.Sprintf("%s-%d", id, n)
				ann := map[string]string{
					workspace.AnnWorkspacePath: prefixes[rng.IntN(len(prefixes))],
					workspace.AnnPreviewPath:   "-",
				}
				if rng.IntN(4) == 0 {
					ann[workspace.AnnPreviewPath] = prefixes[rng.IntN(len(prefixes))] + "preview/"
					ann[workspace.AnnPreviewPort] = "3000"
				}
				// Ages differ per workspace, so the oldest claimant is well defined.
				age := time.Duration(10*(1+indexOf(ids, id))+n) * time.Minute
				pod := wsPod(name, age, fmt.Sprintf("10.0.%d.%d", indexOf(ids, id), n+1), rng.IntN(2) == 0, ann)
				pod.Labels[workspace.LabelWorkspaceID] = id
				pod.UID = types.UID("uid-" + name)
				desc = fmt.Sprintf("upsert %s on %s", name, ann[workspace.AnnWorkspacePath])
				if old, ok := latest[pod.UID]; ok {
					// The pod exists, perhaps relabelled elsewhere: labelled back, with this version.
					modelUnfile(model, old)
					modelFile(model, pod)
					latest[pod.UID] = pod
					h.OnUpdate(old, pod)
				} else {
					modelFile(model, pod)
					latest[pod.UID] = pod
					h.OnAdd(pod, false)
				}
			}
			checkRouterAgainstModel(t, r, model, fmt.Sprintf("seed %d step %d (%s)", seed, step, desc))
			if t.Failed() {
				return
			}
		}
	}
}

// pickUID is one of pods' uids, chosen by rng in a fixed order.
func pickUID(rng *rand.Rand, pods map[types.UID]*corev1.Pod) types.UID {
	uids := make([]string, 0, len(pods))
	for uid := range pods {
		uids = append(uids, string(uid))
	}
	sort.Strings(uids)
	return types.UID(uids[rng.IntN(len(uids))])
}

// modelFile adds pod to the model's workspace its labels name, if it is a workspace pod.
func modelFile(model map[wsKey]map[types.UID]*corev1.Pod, pod *corev1.Pod) {
	if !workspace.IsWorkspaceObject(pod) {
		return
	}
	key := wsKey{pod.Namespace, workspace.IDOf(pod)}
	if model[key] == nil {
		model[key] = map[types.UID]*corev1.Pod{}
	}
	model[key][pod.UID] = pod
}

// modelUnfile takes pod (the version filed) out of the model.
func modelUnfile(model map[wsKey]map[types.UID]*corev1.Pod, pod *corev1.Pod) {
	if !workspace.IsWorkspaceObject(pod) {
		return
	}
	key := wsKey{pod.Namespace, workspace.IDOf(pod)}
	delete(model[key], pod.UID)
	if len(model[key]) == 0 {
		delete(model, key)
	}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func checkRouterAgainstModel(t *testing.T, r *router, model map[wsKey]map[types.UID]*corev1.Pod, at string) {
	t.Helper()
	// What the table must be: for each prefix, the oldest workspace claiming it.
	want := map[string]*target{}
	claimants := map[string]int{}
	for key, pods := range model {
		list := make([]*corev1.Pod, 0, len(pods))
		for _, p := range pods {
			list = append(list, p)
		}
		targets, _ := routesFor(key, list, t0)
		for _, tg := range targets {
			claimants[tg.prefix]++
			if cur := want[tg.prefix]; cur == nil || wins(tg, cur) {
				want[tg.prefix] = tg
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.tbl.routes) != len(want) {
		t.Errorf("%s: table has %d prefixes, want %d (%v)", at, len(r.tbl.routes), len(want), keysOf(want))
	}
	for prefix, w := range want {
		got := r.tbl.routes[prefix]
		if got == nil || got.ws != w.ws || got.podName != w.podName || got.addr != w.addr || *got.status != *w.status || got.kind != w.kind {
			t.Errorf("%s: %s routes to %+v, want workspace %s pod %q addr %q %s", at, prefix, got, w.ws, w.podName, w.addr, w.status.Phase)
		}
	}
	for prefix, list := range r.contested {
		if len(list) < 2 || claimants[prefix] != len(list) {
			t.Errorf("%s: contested %s holds %d claimants, want %d (only for two or more)", at, prefix, len(list), claimants[prefix])
		}
	}
	for prefix, n := range claimants {
		if _, ok := r.contested[prefix]; n > 1 && !ok {
			t.Errorf("%s: %s has %d claimants but no claimant list", at, prefix, n)
		}
	}
	if len(r.ws) != len(model) {
		t.Errorf("%s: router keeps %d workspaces, want %d", at, len(r.ws), len(model))
	}
	for key, st := range r.ws {
		if len(st.pods) != len(model[key]) {
			t.Errorf("%s: router files %d pods under %s, want %d", at, len(st.pods), key, len(model[key]))
		}
		for _, p := range st.pods {
			if _, ok := model[key][p.UID]; !ok {
				t.Errorf("%s: router files pod %s under %s, which it is not of", at, p.Name, key)
			}
		}
	}
}

func keysOf(m map[string]*target) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// relabelProxy is a proxy fed through its event handler (as Setup wires it) with workspace demo's
// ready pod x (10.0.0.2, whose route is checked to go to it) and, with twoPods, an older ready
// pod "old" (10.0.0.1) the workspace falls back to once x is gone from it.
func relabelProxy(t *testing.T, twoPods bool) (*Proxy, toolscache.ResourceEventHandler, *corev1.Pod) {
	t.Helper()
	p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	p.router.now = func() time.Time { return t0 }
	h := p.EventHandler()
	if twoPods {
		h.OnAdd(wsPod("old", 20*time.Minute, "10.0.0.1", true, nil), false)
	}
	x := wsPod("x", 10*time.Minute, "10.0.0.2", true, nil)
	h.OnAdd(x, false)
	if tg := p.router.lookup("/ws/jane/demo/"); tg == nil || tg.podName != "x" || tg.addr != "10.0.0.2:8080" {
		t.Fatalf("before the relabel /ws/jane/demo/ routes to %+v, want pod x at 10.0.0.2:8080", tg)
	}
	return p, h, x
}

// trackWebSocket registers an open WebSocket on pod uid, as the proxy does after a handshake.
func trackWebSocket(t *testing.T, p *Proxy, uid types.UID) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	p.conns.track(uid, a)
}

// checkDemoWithoutX checks that nothing of workspace default/demo leads to pod x any more: its
// route goes to the pod "old" (twoPods) or nowhere, the router does not hold x under demo, and
// x's WebSockets (opened through demo's route) are closed.
func checkDemoWithoutX(t *testing.T, p *Proxy, x *corev1.Pod, twoPods bool, at string) {
	t.Helper()
	demo := wsKey{"default", "demo"}
	tg := p.router.lookup("/ws/jane/demo/")
	switch {
	case twoPods && (tg == nil || tg.podName != "old" || tg.addr != "10.0.0.1:8080"):
		t.Errorf("%s: /ws/jane/demo/ routes to %+v, want the pod old at 10.0.0.1:8080", at, tg)
	case !twoPods && tg != nil:
		t.Errorf("%s: /ws/jane/demo/ still routes to %s at %s (%s), want no route", at, tg.podName, tg.addr, tg.status.Phase)
	}
	if got := p.router.pod(demo, x.UID); got != nil {
		t.Errorf("%s: the router still holds pod x under %s", at, demo)
	}
	if p.router.podAlive(demo, x.UID) {
		t.Errorf("%s: pod x is still alive in %s (a WebSocket handshake through its route would be kept)", at, demo)
	}
	if n := p.OpenWebSockets(string(x.UID)); n != 0 {
		t.Errorf("%s: %d WebSockets opened through %s's route stay open to pod x", at, n, demo)
	}
}

// TestEventHandlerForgetsAPodWhoseLabelIsRemoved removes pod x's nogoo9/workspace-id label (what
// nogoo9's Warning advises for a pod relabelled into another workspace) or its nogoo9/type label,
// then deletes it (as the informer does: the last version, or a tombstone of it): from the
// relabel on, workspace demo's route must not lead to x, whose IP another pod may get.
func TestEventHandlerForgetsAPodWhoseLabelIsRemoved(t *testing.T) {
	for _, label := range []string{workspace.LabelWorkspaceID, workspace.LabelType} {
		for _, twoPods := range []bool{false, true} {
			for _, tombstone := range []bool{false, true} {
				name := fmt.Sprintf("%s removed, two pods %v, tombstone %v", label, twoPods, tombstone)
				t.Run(name, func(t *testing.T) {
					p, h, x := relabelProxy(t, twoPods)
					trackWebSocket(t, p, x.UID)
					relabelled := x.DeepCopy()
					delete(relabelled.Labels, label)
					h.OnUpdate(x, relabelled)
					checkDemoWithoutX(t, p, x, twoPods, "after the relabel")
					var final any = relabelled
					if tombstone {
						final = toolscache.DeletedFinalStateUnknown{Key: "default/x", Obj: relabelled}
					}
					h.OnDelete(final)
					checkDemoWithoutX(t, p, x, twoPods, "after the delete")
					if want := map[bool]int{false: 0, true: 1}[twoPods]; len(p.router.ws) != want {
						t.Errorf("the router keeps %d workspaces, want %d", len(p.router.ws), want)
					}
				})
			}
		}
	}
}

// TestEventHandlerMovesARelabelledPod relabels pod x into workspace "other", with its path
// annotation changed or not: x must then be routed for "other" only, never still for demo.
func TestEventHandlerMovesARelabelledPod(t *testing.T) {
	for _, twoPods := range []bool{false, true} {
		for _, samePath := range []bool{false, true} {
			t.Run(fmt.Sprintf("two pods %v, same path %v", twoPods, samePath), func(t *testing.T) {
				p, h, x := relabelProxy(t, twoPods)
				trackWebSocket(t, p, x.UID)
				moved := x.DeepCopy()
				moved.Labels[workspace.LabelWorkspaceID] = "other"
				prefix := "/ws/jane/demo/"
				if !samePath {
					prefix = "/ws/jane/other/"
					moved.Annotations[workspace.AnnWorkspacePath] = prefix
					moved.Annotations[workspace.AnnPreviewPath] = "/preview/jane/other/"
				}
				h.OnUpdate(x, moved)
				other := wsKey{"default", "other"}
				if samePath {
					// demo's old pod and other's x claim one prefix: the older claimant keeps it.
					if tg := p.router.lookup(prefix); twoPods && (tg == nil || tg.podName != "old") || !twoPods && (tg == nil || tg.ws != other) {
						t.Errorf("%s routes to %+v, want %s", prefix, tg, map[bool]string{true: "demo's pod old", false: "other's pod x"}[twoPods])
					}
					if p.router.pod(other, x.UID) == nil {
						t.Errorf("pod x is not filed under %s", other)
					}
				} else {
					checkDemoWithoutX(t, p, x, twoPods, "after the move")
					if tg := p.router.lookup(prefix); tg == nil || tg.ws != other || tg.podName != "x" {
						t.Errorf("%s routes to %+v, want pod x of %s", prefix, tg, other)
					}
				}
				for key, st := range p.router.ws {
					if key != other && podByUID(st.pods, x.UID) != nil {
						t.Errorf("pod x is still filed under %s as well as %s", key, other)
					}
				}
				if n := p.OpenWebSockets(string(x.UID)); n != 0 {
					t.Errorf("%d WebSockets opened through demo's route stay open to pod x, now of %s", n, other)
				}
				h.OnDelete(moved)
				for _, pre := range []string{"/ws/jane/demo/", "/ws/jane/other/"} {
					if tg := p.router.lookup(pre); tg != nil && tg.podName == "x" {
						t.Errorf("after the delete %s still routes to pod x at %s", pre, tg.addr)
					}
				}
				if want := map[bool]int{false: 0, true: 1}[twoPods]; len(p.router.ws) != want {
					t.Errorf("after the delete the router keeps %d workspaces, want %d", len(p.router.ws), want)
				}
			})
		}
	}
}

// TestDeleteFindsThePodWhereverItIsFiled deletes pod x with a final state (or a tombstone of
// one) that no longer names the workspace it is filed under, no update having said so: the
// delete must still take x out of demo.
func TestDeleteFindsThePodWhereverItIsFiled(t *testing.T) {
	for _, label := range []string{workspace.LabelWorkspaceID, workspace.LabelType} {
		for _, tombstone := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s removed, tombstone %v", label, tombstone), func(t *testing.T) {
				p, h, x := relabelProxy(t, false)
				final := x.DeepCopy()
				delete(final.Labels, label)
				if label == workspace.LabelType {
					final.Labels[workspace.LabelWorkspaceID] = "other" // names another workspace
				}
				var obj any = final
				if tombstone {
					obj = toolscache.DeletedFinalStateUnknown{Key: "default/x", Obj: final}
				}
				h.OnDelete(obj)
				checkDemoWithoutX(t, p, x, false, "after the delete")
				if len(p.router.ws) != 0 {
					t.Errorf("the router keeps %d workspaces, want none", len(p.router.ws))
				}
			})
		}
	}
}

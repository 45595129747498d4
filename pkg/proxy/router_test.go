package proxy

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
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
	p.conns.track(uid, a, true)
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

// TestAHandshakeFinishingAfterTheGraceIsClosed: a WebSocket stays pinned to its pod while the pod
// is not ready for less than the grace period; when the grace ends, its WebSockets are closed. A
// handshake that was in flight then, and finishes after, must be closed too: it was pinned to a
// pod that stopped serving, and no timer is left to close it. One that finishes while the grace
// still runs is kept, like the WebSockets already open.
func TestAHandshakeFinishingAfterTheGraceIsClosed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		grace      time.Duration
		graceOver  bool
		wantClosed bool
	}{
		{name: "the handshake finishes after the grace ended", grace: time.Millisecond, graceOver: true, wantClosed: true},
		{name: "the handshake finishes while the grace runs", grace: time.Hour, wantClosed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(arrived)
				<-release
				c, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
				_, _ = io.Copy(c, brw.Reader)
			}))
			defer backend.Close()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
			p, err := New(verifierOnly{}, Options{BindAddress: ":0", NotReadyGrace: tc.grace})
			if err != nil {
				t.Fatal(err)
			}
			defer p.transport.CloseIdleConnections()
			pod := podAt("jane", "demo", host, port, false)
			p.PodChanged(pod)
			srv := httptest.NewServer(p)
			defer srv.Close()

			c := dialProxy(t, strings.TrimPrefix(srv.URL, "http://"))
			if _, err := io.WriteString(c, "GET /ws/jane/demo/term HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer good\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-arrived:
			case <-time.After(waitBound):
				t.Fatalf("the handshake did not reach the pod within %v", waitBound)
			}
			// The pod turns not-ready while the handshake is in flight.
			notReady := pod.DeepCopy()
			for i := range notReady.Status.Conditions {
				if notReady.Status.Conditions[i].Type == corev1.PodReady {
					notReady.Status.Conditions[i].Status = corev1.ConditionFalse
				}
			}
			p.podUpdated(pod, notReady)
			graceRunning := func() bool {
				p.router.mu.Lock()
				defer p.router.mu.Unlock()
				_, ok := p.router.notReady[pod.UID]
				return ok
			}
			if tc.graceOver {
				waitFor(t, "the not-ready grace ends", func() bool { return !graceRunning() })
			} else if !graceRunning() {
				t.Fatal("no not-ready grace runs for the pod")
			}
			close(release)

			// The proxy decides on the connection before it passes the 101 on.
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the handshake's answer: %v", err)
			}
			if n := p.OpenWebSockets(string(pod.UID)); tc.wantClosed && n != 0 {
				t.Fatalf("answer %d; %d WebSockets stay open to a pod not ready for longer than the grace, want 0", res.StatusCode, n)
			} else if !tc.wantClosed && (res.StatusCode != http.StatusSwitchingProtocols || n != 1) {
				t.Fatalf("answer %d with %d WebSockets open, want 101 and 1: the grace still runs", res.StatusCode, n)
			}
			if !tc.wantClosed {
				// Still an echoing connection to the pod.
				if _, err := io.WriteString(c, "ping"); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 4)
				if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
					t.Fatalf("echo %q, %v: the connection kept through the grace does not work", buf, err)
				}
				return
			}
			// The client sees its connection end (dialProxy's deadline bounds the read).
			if _, err := io.Copy(io.Discard, br); err != nil {
				t.Fatalf("the connection did not end: %v", err)
			}
		})
	}
}

// TestAnUpgradedWorkspaceKeepsItsContestedPrefix: jane's workspace team/demo was spawned by an
// earlier version on the path /ws/jane/demo/, which mallory's newer workspace jane/demo claims too
// (its own path, workspace.WorkspacePath). The older, jane's, keeps it: and must keep it after
// every pod it is made of has been replaced (an upgrade, a stop and start, an eviction's copy),
// each copy created after mallory's pod. The copies carry the workspace's creation
// (nogoo9/workspace-created-at) as the controller's copies do. The expected owner after each step
// is written out, not worked out by the router's own rule.
func TestAnUpgradedWorkspaceKeepsItsContestedPrefix(t *testing.T) {
	const (
		legacyCreated = "2026-01-02T02:04:05Z" // t0 - 1h: the creation of jane's first pod
		rivalCreated  = "2026-01-02T02:54:05Z" // t0 - 10m: mallory's first pod
	)
	type step struct {
		what      string
		add       *corev1.Pod // PodChanged
		del       *corev1.Pod // PodDeleted
		wantOwner string      // of /ws/jane/demo/ and /preview/jane/demo/ afterwards
	}
	// pod is a workspace pod of ns/id owned by owner on jane's legacy paths, created age before
	// t0, carrying the workspace's creation when created is set.
	pod := func(ns, id, name, owner string, age time.Duration, ready bool, created string) *corev1.Pod {
		ann := map[string]string{workspace.AnnOwner: owner}
		if created != "" {
			ann[workspace.AnnWorkspaceCreatedAt] = created
		}
		p := wsPod(name, age, "10.0.0."+fmt.Sprint(len(name)), ready, ann)
		p.Namespace, p.UID = ns, types.UID("uid-"+ns+"-"+name)
		p.Labels[workspace.LabelWorkspaceID] = id
		return p
	}
	legacy := pod("team", "demo", "demo-1", "jane", time.Hour, true, "")
	rival := pod("jane", "demo", "demo-x", "mallory", 10*time.Minute, true, "")
	start := []step{
		{what: "jane's workspace", add: legacy, wantOwner: "jane"},
		{what: "mallory's newer workspace on the same path", add: rival, wantOwner: "jane"},
	}
	upgraded := pod("team", "demo", "demo-1-up-abcde", "jane", 0, true, legacyCreated)
	upgraded.Annotations[workspace.AnnUpgradeFrom] = "demo-1"
	stopped := pod("team", "demo", "demo-1-stop", "jane", 5*time.Minute, false, legacyCreated)
	startedStopped := stopped.DeepCopy()
	startedStopped.Status.Conditions[2].Status = corev1.ConditionTrue // PodReady
	startedStopped.Status.Conditions[1].Status = corev1.ConditionTrue
	evictedCopy := pod("team", "demo", "demo-1-up-abcde-evicted", "jane", 0, true, legacyCreated)
	rivalUpgraded := pod("jane", "demo", "demo-x-up-fghij", "mallory", 0, true, rivalCreated)

	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "the older workspace is upgraded side by side", steps: append(start,
			step{what: "its upgraded pod", add: upgraded, wantOwner: "jane"},
			step{what: "the upgrade deletes the original pod", del: legacy, wantOwner: "jane"},
		)},
		{name: "the older workspace is stopped and started", steps: append(start,
			step{what: "its stopped copy", add: stopped, wantOwner: "jane"},
			step{what: "the stop deletes the running pod", del: legacy, wantOwner: "jane"},
			step{what: "the start releases the stopped copy", add: startedStopped, wantOwner: "jane"},
		)},
		{name: "the older workspace is upgraded, then its pod evicted and copied", steps: append(start,
			step{what: "its upgraded pod", add: upgraded, wantOwner: "jane"},
			step{what: "the upgrade deletes the original pod", del: legacy, wantOwner: "jane"},
			step{what: "the eviction's copy", add: evictedCopy, wantOwner: "jane"},
			step{what: "the evicted pod goes", del: upgraded, wantOwner: "jane"},
		)},
		{name: "the newer workspace is upgraded", steps: append(start,
			step{what: "its upgraded pod", add: rivalUpgraded, wantOwner: "jane"},
			step{what: "the upgrade deletes its original pod", del: rival, wantOwner: "jane"},
		)},
		{name: "the older workspace is deleted", steps: append(start,
			step{what: "its only pod goes", del: legacy, wantOwner: "mallory"},
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			p.router.now = func() time.Time { return t0 }
			for _, s := range tc.steps {
				if s.add != nil {
					p.PodChanged(s.add.DeepCopy())
				}
				if s.del != nil {
					p.PodDeleted(s.del.DeepCopy())
				}
				for _, path := range []string{"/ws/jane/demo/x", "/preview/jane/demo/x"} {
					if tg := p.router.lookup(path); tg == nil || tg.owner != s.wantOwner {
						got := "nothing"
						if tg != nil {
							got = tg.owner + "'s workspace " + tg.ws.String()
						}
						t.Fatalf("after %s, %s goes to %s, want %s's", s.what, path, got, s.wantOwner)
					}
				}
			}
		})
	}
}

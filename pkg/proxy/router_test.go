package proxy

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestRouterTableFollowsRandomPodEventsWithContestedPrefixes drives the router with random pod
// events of workspaces that claim the same prefixes (a path moved, a pod replaced, deleted,
// turning ready) and checks after every step that the table is what routesFor over each
// workspace's pods gives, with every prefix going to its oldest claimant, that only prefixes with
// two or more claimants keep a claimant list, and that a forgotten workspace leaves nothing.
func TestRouterTableFollowsRandomPodEventsWithContestedPrefixes(t *testing.T) {
	prefixes := []string{"/p/a/", "/p/b/", "/p/c/"}
	ids := []string{"w1", "w2", "w3", "w4"}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := newRouter(time.Minute, newConnRegistry(logr.Discard()), nil, logr.Discard())
		r.now = func() time.Time { return t0 }
		model := map[wsKey]map[types.UID]*corev1.Pod{} // the pods each workspace has now
		for step := range 200 {
			id := ids[rng.IntN(len(ids))]
			key := wsKey{"default", id}
			var desc string
			if pods := model[key]; len(pods) > 0 && rng.IntN(3) == 0 {
				uids := make([]string, 0, len(pods))
				for uid := range pods {
					uids = append(uids, string(uid))
				}
				sort.Strings(uids)
				uid := types.UID(uids[rng.IntN(len(uids))])
				p := pods[uid]
				delete(pods, uid)
				if len(pods) == 0 {
					delete(model, key)
				}
				r.remove(p)
				desc = "delete " + p.Name
			} else {
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
				p := wsPod(name, age, fmt.Sprintf("10.0.%d.%d", indexOf(ids, id), n+1), rng.IntN(2) == 0, ann)
				p.Labels[workspace.LabelWorkspaceID] = id
				p.UID = types.UID("uid-" + name)
				if model[key] == nil {
					model[key] = map[types.UID]*corev1.Pod{}
				}
				model[key][p.UID] = p
				r.upsert(p)
				desc = fmt.Sprintf("upsert %s on %s", name, ann[workspace.AnnWorkspacePath])
			}
			checkRouterAgainstModel(t, r, model, fmt.Sprintf("seed %d step %d (%s)", seed, step, desc))
			if t.Failed() {
				return
			}
		}
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
}

func keysOf(m map[string]*target) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

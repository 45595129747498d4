package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

type podOpt func(*corev1.Pod)

func pod(name, owner, id, version string, created time.Time, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: ktypes.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
				workspace.LabelTemplate: "python", workspace.LabelTemplateVersion: version,
			},
			Annotations: map[string]string{workspace.AnnOwner: owner, workspace.AnnTemplateVersion: version},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide:" + version}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ready(p *corev1.Pod) {
	p.Spec.NodeName = "node-1"
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue},
	}}
}

func pulling(p *corev1.Pod) {
	p.Spec.NodeName = "node-1"
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "ide", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: `pull "ide:2" <failed> & "quoted"`}}},
	}}
}

func deletedAt(t time.Time) podOpt {
	return func(p *corev1.Pod) { d := metav1.NewTime(t); p.DeletionTimestamp = &d }
}

func annotated(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// TestRenderMatchesDescribe checks that a view computed once, with its clock note added at read
// time, is exactly what workspace.Describe gives at that time, as a value and as JSON, across the
// note's thresholds.
func TestRenderMatchesDescribe(t *testing.T) {
	old := pod("ws-a", "alice", "a", "1.0", t0, ready)
	groups := []struct {
		name string
		pods []*corev1.Pod
		kind clockKind
	}{
		{"ready pod: no clock note", []*corev1.Pod{old}, clockNone},
		{"pod waiting for the scheduler: pending note", []*corev1.Pod{pod("ws-b", "bob", "b", "1.0", t0)}, clockPending},
		{"pod with a zero creation time: no note ever", []*corev1.Pod{pod("ws-z", "bob", "z", "1.0", time.Time{})}, clockNone},
		{"pod pulling an image, message with JSON and HTML characters", []*corev1.Pod{pod("ws-c", "carol", "c", "1.0", t0, pulling)}, clockNone},
		{"every pod being deleted: grace note", []*corev1.Pod{pod("ws-d", "dave", "d", "1.0", t0, ready, deletedAt(t0.Add(time.Minute)))}, clockGrace},
		{"upgrade in flight, new pod unscheduled: pending note of the new pod", []*corev1.Pod{
			old, pod("ws-a-up-xyz12", "alice", "a", "2.0", t0.Add(time.Minute), annotated(workspace.AnnUpgradeFrom, "ws-a")),
		}, clockPending},
		{"upgrade requested", []*corev1.Pod{pod("ws-e", "erin", "e", "1.0", t0, ready, annotated(workspace.AnnUpgradeRequested, "2026-03-01T10:00:00Z", workspace.AnnUpgradePod, "ws-e-up-abcde"))}, clockNone},
		{"maintenance", []*corev1.Pod{pod("ws-f", "frank", "f", "1.0", t0, ready, annotated(workspace.AnnMaintenance, "disk repair"))}, clockNone},
	}
	nows := []time.Duration{-time.Hour, 0, 400 * time.Millisecond, 999 * time.Millisecond, time.Second, time.Minute + 1500*time.Millisecond, 90 * time.Second, 30 * time.Hour}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			e := newEntry(workspace.NewestFirst(append([]*corev1.Pod(nil), g.pods...)))
			if e.clock.kind != g.kind {
				t.Fatalf("clock kind %d, want %d", e.clock.kind, g.kind)
			}
			for _, latest := range []string{"", "1.0", "2.0"} {
				for _, d := range nows {
					now := t0.Add(time.Minute).Add(d)
					want := workspace.Describe(g.pods, latest, now)
					if got := e.view(latest, now); got != want {
						t.Errorf("latest %q, now %s: view\n%+v\nwant\n%+v", latest, d, got, want)
					}
					l := &WorkspaceList{entries: []*entry{e}, latest: map[string]string{"python": latest}, now: now}
					var b bytes.Buffer
					if err := l.WriteJSON(&b); err != nil {
						t.Fatal(err)
					}
					wantJSON, _ := json.Marshal([]workspace.Info{want})
					if !bytes.Equal(b.Bytes(), wantJSON) {
						t.Errorf("latest %q, now %s: JSON\n%s\nwant\n%s", latest, d, b.Bytes(), wantJSON)
					}
					b.Reset()
					if err := l.WriteEscapedJSON(&b); err != nil {
						t.Fatal(err)
					}
					if wantText := AppendEscaped(nil, wantJSON); !bytes.Equal(b.Bytes(), wantText) {
						t.Errorf("latest %q, now %s: escaped JSON\n%s\nwant\n%s", latest, d, b.Bytes(), wantText)
					}
				}
			}
		})
	}
}

func ids(entries []*entry) []string {
	out := []string{}
	for _, e := range entries {
		out = append(out, e.id)
	}
	return out
}

// TestViewsFollowPodEvents drives the views with informer events in sequences a cache delivers
// and checks the lists after each step.
func TestViewsFollowPodEvents(t *testing.T) {
	v := newViews("ns")
	a := pod("ws-a", "alice", "a", "1.0", t0, ready)
	b := pod("ws-b", "bob", "b", "1.0", t0)
	c := pod("ws-c", "alice", "c", "1.0", t0)
	other := pod("ws-x", "alice", "x", "1.0", t0)
	other.Namespace = "elsewhere"
	notWorkspace := pod("plain", "alice", "p", "1.0", t0)
	delete(notWorkspace.Labels, workspace.LabelType)
	// Each update carries the object the informer delivered before, as a cache's events do.
	upgraded := pod("ws-a-up-xyz12", "alice", "a", "2.0", t0.Add(time.Minute), annotated(workspace.AnnUpgradeFrom, "ws-a"))
	upgradedReady := pod("ws-a-up-xyz12", "alice", "a", "2.0", t0.Add(time.Minute), ready, annotated(workspace.AnnUpgradeFrom, "ws-a"))

	steps := []struct {
		name      string
		apply     func()
		all       []string
		alice     []string
		wantPhase map[string]workspace.PhaseName
	}{
		{"pods of three workspaces arrive out of order", func() { v.OnAdd(c, true); v.OnAdd(a, true); v.OnAdd(b, true) },
			[]string{"a", "b", "c"}, []string{"a", "c"}, map[string]workspace.PhaseName{"a": workspace.PhaseReady, "b": workspace.PhaseScheduling}},
		{"pods of another namespace and non-workspace pods are ignored", func() { v.OnAdd(other, false); v.OnAdd(notWorkspace, false) },
			[]string{"a", "b", "c"}, []string{"a", "c"}, nil},
		{"an upgrade intent on a pod changes only that workspace", func() {
			up := a.DeepCopy()
			up.Annotations[workspace.AnnUpgradeRequested] = "now"
			v.OnUpdate(a, up)
		}, []string{"a", "b", "c"}, []string{"a", "c"}, map[string]workspace.PhaseName{"a": workspace.PhaseUpgrading, "b": workspace.PhaseScheduling}},
		{"the upgraded pod joins its workspace; the old one still serves", func() {
			v.OnAdd(upgraded, false)
		}, []string{"a", "b", "c"}, []string{"a", "c"}, map[string]workspace.PhaseName{"a": workspace.PhaseUpgrading}},
		{"the old pod is deleted and the new one becomes ready", func() {
			v.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/ws-a", Obj: a})
			v.OnUpdate(upgraded, upgradedReady)
		}, []string{"a", "b", "c"}, []string{"a", "c"}, map[string]workspace.PhaseName{"a": workspace.PhaseReady}},
		{"a workspace whose last pod goes is gone from every list", func() { v.OnDelete(c) },
			[]string{"a", "b"}, []string{"a"}, nil},
		{"a pod relabelled to another workspace moves there", func() {
			moved := b.DeepCopy()
			moved.Labels[workspace.LabelWorkspaceID] = "d"
			moved.Annotations[workspace.AnnOwner] = "alice"
			v.OnUpdate(b, moved)
		}, []string{"a", "d"}, []string{"a", "d"}, nil},
		{"a pod that loses its workspace label leaves", func() {
			plain := upgradedReady.DeepCopy()
			delete(plain.Labels, workspace.LabelType)
			v.OnUpdate(upgradedReady, plain)
		}, []string{"d"}, []string{"d"}, nil},
		{"a pod that leaves while the cache lost track of its deletion (final state unknown) leaves", func() {
			gone := b.DeepCopy()
			gone.Labels[workspace.LabelWorkspaceID] = "d"
			gone.Annotations[workspace.AnnOwner] = "alice"
			v.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/ws-b", Obj: gone})
		}, []string{}, []string{}, nil},
	}
	for _, s := range steps {
		s.apply()
		all, _ := v.snapshot("", true, "", 0)
		alice, _ := v.snapshot("alice", false, "", 0)
		if got := ids(all); fmt.Sprint(got) != fmt.Sprint(s.all) {
			t.Errorf("%s: all = %v, want %v", s.name, got, s.all)
		}
		if got := ids(alice); fmt.Sprint(got) != fmt.Sprint(s.alice) {
			t.Errorf("%s: alice's = %v, want %v", s.name, got, s.alice)
		}
		for id, phase := range s.wantPhase {
			if e := v.get(id); e == nil || e.info().Phase != phase {
				t.Errorf("%s: workspace %s: entry %+v, want phase %s", s.name, id, e, phase)
			}
		}
		wantBob := []string{"b"}
		if !slices.Contains(s.all, "b") {
			wantBob = []string{}
		}
		if bob, _ := v.snapshot("bob", false, "", 0); fmt.Sprint(ids(bob)) != fmt.Sprint(wantBob) {
			t.Errorf("%s: bob's = %v, want %v", s.name, ids(bob), wantBob)
		}
	}
}

// TestViewsSortTheInitialListOnce: the initial list's workspaces are appended out of order and
// sorted once; every list, and every change made before the first list, still sees them in id
// order, each owner's too.
func TestViewsSortTheInitialListOnce(t *testing.T) {
	v := newViews("ns")
	var want []string
	owners := map[string][]string{}
	for i := 99; i >= 0; i-- { // reverse order: every append is out of order
		id, owner := fmt.Sprintf("ws-%02d", i), fmt.Sprintf("user-%d", i%3)
		v.OnAdd(pod("p-"+id, owner, id, "1.0", t0), true)
		want = append([]string{id}, want...)
		owners[owner] = append([]string{id}, owners[owner]...)
	}
	// A second pod of each of ten workspaces in the same initial list (an upgrade in flight
	// across a restart) joins its entry and leaves the lists unsorted: no sort per pod.
	for i := 20; i < 30; i++ {
		id := fmt.Sprintf("ws-%02d", i)
		v.OnAdd(pod("p-"+id+"-up", fmt.Sprintf("user-%d", i%3), id, "2.0", t0.Add(time.Minute)), true)
	}
	if !v.unsorted {
		t.Fatal("the initial list's workspaces were inserted in order, or sorted for a workspace's second pod")
	}
	if e := v.get("ws-25"); e == nil || len(e.pods) != 2 {
		t.Errorf("ws-25's entry = %+v, want its two pods", e)
	}
	check := func(step string, want []string, owners map[string][]string) {
		t.Helper()
		if all, _ := v.snapshot("", true, "", 0); fmt.Sprint(ids(all)) != fmt.Sprint(want) {
			t.Errorf("%s: all = %v, want %v", step, ids(all), want)
		}
		for owner, w := range owners {
			if got, _ := v.snapshot(owner, false, "", 0); fmt.Sprint(ids(got)) != fmt.Sprint(w) {
				t.Errorf("%s: %s's = %v, want %v", step, owner, ids(got), w)
			}
		}
		if page, more := v.snapshot("", true, "ws-49", 2); fmt.Sprint(ids(page)) != "[ws-50 ws-51]" || !more {
			t.Errorf("%s: the page after ws-49 = %v (more %v), want [ws-50 ws-51] and more", step, ids(page), more)
		}
	}
	// A change before any read: the lists are sorted before it applies.
	moved := pod("p-ws-07", "user-1", "ws-07", "2.0", t0)
	v.OnUpdate(pod("p-ws-07", "user-1", "ws-07", "1.0", t0), moved)
	v.OnDelete(pod("p-ws-98", "user-2", "ws-98", "1.0", t0))
	want = slices.DeleteFunc(want, func(id string) bool { return id == "ws-98" })
	owners["user-2"] = slices.DeleteFunc(owners["user-2"], func(id string) bool { return id == "ws-98" })
	check("after an update and a delete", want, owners)
	// A workspace added after the initial list is inserted in order.
	v.OnAdd(pod("p-ws-995", "user-0", "ws-995", "1.0", t0), false)
	if v.unsorted {
		t.Error("a workspace added after the initial list left the lists unsorted")
	}
	i, _ := slices.BinarySearch(want, "ws-995")
	want = slices.Insert(want, i, "ws-995")
	j, _ := slices.BinarySearch(owners["user-0"], "ws-995")
	owners["user-0"] = slices.Insert(owners["user-0"], j, "ws-995")
	check("after a later add", want, owners)
	// A second pod of a workspace in the initial list joins its entry (no second entry).
	v.OnAdd(pod("p-ws-10-up", "user-1", "ws-10", "2.0", t0.Add(time.Minute)), true)
	check("after a second pod of a workspace", want, owners)
	if e := v.get("ws-10"); e == nil || len(e.pods) != 2 {
		t.Errorf("ws-10's entry = %+v, want its two pods", e)
	}
}

func TestSnapshotPages(t *testing.T) {
	v := newViews("ns")
	for _, id := range []string{"e", "a", "d", "b", "c"} {
		v.OnAdd(pod("ws-"+id, "alice", id, "1.0", t0), false)
	}
	tests := []struct {
		name     string
		after    string
		limit    int
		want     []string
		wantMore bool
	}{
		{"no limit: everything", "", 0, []string{"a", "b", "c", "d", "e"}, false},
		{"first page", "", 2, []string{"a", "b"}, true},
		{"next page after the last id", "b", 2, []string{"c", "d"}, true},
		{"last page", "d", 2, []string{"e"}, false},
		{"after an id that has gone since: the list goes on from where it would be", "bb", 2, []string{"c", "d"}, true},
		{"after the end", "z", 2, []string{}, false},
		{"a limit larger than the list", "", 10, []string{"a", "b", "c", "d", "e"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, more := v.snapshot("alice", false, tc.after, tc.limit)
			if fmt.Sprint(ids(got)) != fmt.Sprint(tc.want) || more != tc.wantMore {
				t.Errorf("snapshot(after %q, limit %d) = %v, %v; want %v, %v", tc.after, tc.limit, ids(got), more, tc.want, tc.wantMore)
			}
		})
	}
}

// TestViewChangeIsHeardAfterTheViewsApplyIt: the function given to OnViewChange is called for each
// workspace an event changed, and by then the views serve the change (a live page told of it reads
// the new view, never the old one), including both workspaces of a relabelled pod.
func TestViewChangeIsHeardAfterTheViewsApplyIt(t *testing.T) {
	v := newViews("ns")
	s := &Service{views: v}
	a := pod("ws-a", "alice", "a", "1.0", t0, ready)
	b := pod("ws-b", "bob", "b", "1.0", t0)
	v.OnAdd(b, true)
	var heard []string
	if !s.OnViewChange(func(id string) {
		e := v.get(id)
		switch id {
		case "a":
			if e == nil || len(e.pods) != 1 || e.pods[0].Annotation(workspace.AnnUpgradeRequested) != "now" {
				t.Errorf("told of %q before the views applied the intent: %+v", id, e)
			}
		case "b":
			if e != nil {
				t.Errorf("told of %q before the views dropped it", id)
			}
		case "d":
			if e == nil {
				t.Errorf("told of %q before the views filed it", id)
			}
		}
		heard = append(heard, id)
	}) {
		t.Fatal("a service with views reports none")
	}
	up := a.DeepCopy()
	up.Annotations[workspace.AnnUpgradeRequested] = "now"
	v.OnAdd(up, false)
	moved := b.DeepCopy()
	moved.Labels[workspace.LabelWorkspaceID] = "d"
	v.OnUpdate(b, moved)
	other := pod("ws-x", "alice", "x", "1.0", t0)
	other.Namespace = "elsewhere"
	v.OnAdd(other, false)
	if want := []string{"a", "b", "d"}; !slices.Equal(heard, want) {
		t.Fatalf("heard %v, want %v (another namespace's pod is not the views')", heard, want)
	}
	if (&Service{}).OnViewChange(func(string) {}) {
		t.Fatal("a service without views reports some")
	}
}

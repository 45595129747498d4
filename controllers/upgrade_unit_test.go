package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

func upgradeUnitPod(name, id, tmpl, version string, ann map[string]string) *corev1.Pod {
	a := map[string]string{workspace.AnnTemplateVersion: version}
	for k, v := range ann {
		a[k] = v
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Labels:            map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id, workspace.LabelTemplate: tmpl},
		Annotations:       a}}
}

func TestOutdatedCounts(t *testing.T) {
	reg := &fakeTemplates{}
	reg.set(&templates.Template{Name: "python", Version: "v2"})
	pods := []*corev1.Pod{
		upgradeUnitPod("a", "a", "python", "v1", nil),
		upgradeUnitPod("b", "b", "python", "v2", nil),
		upgradeUnitPod("c", "c", "python", "v1", nil),
		upgradeUnitPod("d", "d", "gone", "v1", nil),
	}
	got := OutdatedCounts(pods, reg)
	want := map[outdatedKey]int{{"python", true}: 2, {"python", false}: 1, {"gone", false}: 1}
	if len(got) != len(want) {
		t.Fatalf("counts = %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("counts[%v] = %d, want %d", k, got[k], n)
		}
	}
}

// TestGateCountsObservedUpgradesAndReservations checks the cap against what the cache shows plus
// the creates the cache does not show yet, and that a stale read cannot start a second upgrade of
// the same workspace under another name.
func TestGateCountsObservedUpgradesAndReservations(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := upgradeUnitPod("ws-a", "a", "python", "v1", nil)
	inFlight := upgradeUnitPod(workspace.NextPodName(old, "v2"), "a", "python", "v2", map[string]string{
		workspace.AnnUpgradeFrom: "ws-a", workspace.AnnUpgradeFromUID: "uid-ws-a", workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)})
	c := fake.NewClientBuilder().WithObjects(old, inFlight).Build()
	wake := make(chan event.GenericEvent, 10)
	g := newGate(2, 0, c, wake)
	ctx := context.Background()
	key := func(id string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: id} }

	tests := []struct {
		name string
		key  string
		pod  string
		ok   bool
	}{
		{"one observed in flight: a second upgrade fits", "b", "ws-b-up-1", true},
		{"the same create again (stale read) is admitted", "b", "ws-b-up-1", true},
		{"another name for the same workspace waits for the cache", "b", "ws-b-up-2", false},
		{"observed + reserved reach the cap of 2: a third waits", "c", "ws-c-up-1", false},
	}
	for _, tt := range tests {
		ok, _, err := g.admit(ctx, key(tt.key), tt.pod, now)
		if err != nil {
			t.Fatal(err)
		}
		if ok != tt.ok {
			t.Errorf("%s: admitted = %v, want %v", tt.name, ok, tt.ok)
		}
	}
	if g.waitingCount() != 1 {
		t.Errorf("waiting = %d, want 1", g.waitingCount())
	}
	// b's upgrade ends: c is woken and fits.
	g.release(key("b"))
	expectWoken(t, wake, "c", "a slot freed")
	if ok, _, _ := g.admit(ctx, key("c"), "ws-c-up-1", now); !ok {
		t.Errorf("c not admitted after a slot freed")
	}
	// A reservation the cache never confirms expires.
	if ok, _, _ := g.admit(ctx, key("d"), "ws-d-up-1", now.Add(3*time.Minute)); !ok {
		t.Errorf("an expired reservation still counts against the cap")
	}
}

// TestGateFinishedUpgradeFreesItsSlotBeforeTheCacheShowsIt checks that an upgrade this process
// concluded stops counting at once (the woken workspace gets the slot instead of sleeping again),
// and counts again only if the cache still shows it in flight after the mark expired.
func TestGateFinishedUpgradeFreesItsSlotBeforeTheCacheShowsIt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := upgradeUnitPod("ws-a", "a", "python", "v1", nil)
	up := upgradeUnitPod(workspace.NextPodName(old, "v2"), "a", "python", "v2", map[string]string{
		workspace.AnnUpgradeFrom: "ws-a", workspace.AnnUpgradeFromUID: "uid-ws-a", workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)})
	c := fake.NewClientBuilder().WithObjects(old, up).Build()
	wake := make(chan event.GenericEvent, 10)
	g := newGate(1, 0, c, wake)
	ctx := context.Background()
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}

	steps := []struct {
		name string
		do   func()
		at   time.Time
		ok   bool
	}{
		{"a in flight in the cache takes the only slot", func() {}, now, false},
		{"a concluded by this process: b fits although the cache still shows a", func() { g.finish(a, now) }, now, true},
		{"the cache still shows a in flight: the mark stays", func() {
			g.release(b)
			g.observed(a, []*corev1.Pod{old, up})
		}, now, true},
		{"a mark the cache never confirms expires", func() { g.release(b) }, now.Add(3 * time.Minute), false},
	}
	for _, st := range steps {
		st.do()
		ok, _, err := g.admit(ctx, b, "ws-b-up-1", st.at)
		if err != nil {
			t.Fatal(err)
		}
		if ok != st.ok {
			t.Errorf("%s: admitted = %v, want %v", st.name, ok, st.ok)
		}
	}
	// The cache shows a's upgrade over: the mark goes.
	g.finish(a, now)
	g.observed(a, []*corev1.Pod{up})
	g.mu.Lock()
	_, marked := g.finished[a]
	g.mu.Unlock()
	if marked {
		t.Errorf("finished mark kept after the cache showed the upgrade over")
	}
}

// TestGateFollowsEachWorkspaceAsItsReconcileObservesIt checks that after the first admission
// (which lists the cache once) the count follows what each workspace's reconcile observes.
func TestGateFollowsEachWorkspaceAsItsReconcileObservesIt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := upgradeUnitPod("ws-x", "x", "python", "v1", nil)
	up := upgradeUnitPod(workspace.NextPodName(old, "v2"), "x", "python", "v2", map[string]string{
		workspace.AnnUpgradeFrom: "ws-x", workspace.AnnUpgradeFromUID: "uid-ws-x", workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)})
	g := newGate(1, 0, fake.NewClientBuilder().Build(), make(chan event.GenericEvent, 10))
	ctx := context.Background()
	b, x := types.NamespacedName{Namespace: "ns", Name: "b"}, types.NamespacedName{Namespace: "ns", Name: "x"}

	steps := []struct {
		name string
		pods []*corev1.Pod // what x's reconcile observes before b asks (nil: no reconcile of x)
		ok   bool
	}{
		{"nothing in flight: b fits", nil, true},
		{"x's reconcile observes an upgrade in flight: b waits", []*corev1.Pod{old, up}, false},
		{"x's reconcile observes the old pod gone: b fits", []*corev1.Pod{up}, true},
	}
	for _, st := range steps {
		g.release(b)
		if st.pods != nil {
			g.observed(x, st.pods)
		}
		ok, _, err := g.admit(ctx, b, "ws-b-up-1", now)
		if err != nil {
			t.Fatal(err)
		}
		if ok != st.ok {
			t.Errorf("%s: admitted = %v, want %v", st.name, ok, st.ok)
		}
	}
}

// TestGateCountsFromTheCachesOwnPodsWithoutAList checks that the first count reads the cache's
// own pods (podcache.Every) when they are there, with no List (which copies every pod struct),
// and lists only while they are not handed over yet.
func TestGateCountsFromTheCachesOwnPodsWithoutAList(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := upgradeUnitPod("ws-a", "a", "python", "v1", nil)
	up := upgradeUnitPod(workspace.NextPodName(old, "v2"), "a", "python", "v2", map[string]string{
		workspace.AnnUpgradeFrom: "ws-a", workspace.AnnUpgradeFromUID: "uid-ws-a", workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)})
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	for _, tt := range []struct {
		name      string
		synced    bool
		wantLists int
	}{
		{"cache's pods handed over: counted from them, no List", true, 0},
		{"not handed over yet: counted from a List", false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lists := 0
			c := fake.NewClientBuilder().WithObjects(old, up).WithInterceptorFuncs(interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
					lists++
					return c.List(ctx, l, opts...)
				},
			}).Build()
			g := newGate(1, 0, c, make(chan event.GenericEvent, 10))
			g.cached = func() ([]*corev1.Pod, bool) {
				if !tt.synced {
					return nil, false
				}
				return []*corev1.Pod{old, up}, true
			}
			ok, n, err := g.admit(context.Background(), b, "ws-b-up-1", now)
			if err != nil {
				t.Fatal(err)
			}
			if ok || n != 1 {
				t.Errorf("admitted = %v with %d in flight, want a wait behind a's upgrade (1 in flight)", ok, n)
			}
			if lists != tt.wantLists {
				t.Errorf("Lists = %d, want %d", lists, tt.wantLists)
			}
		})
	}
}

// TestAtLeast: the API server's version as it reports it, suffixes included.
func TestAtLeast(t *testing.T) {
	for _, tc := range []struct {
		major, minor string
		want         bool
	}{
		{"1", "37", true}, {"1", "37+", true}, {"1", "38", true}, {"2", "0", true},
		{"1", "36", false}, {"1", "36+", false}, {"", "", false}, {"1", "x", false},
	} {
		if got := atLeast(tc.major, tc.minor, 1, 37); got != tc.want {
			t.Errorf("atLeast(%q, %q, 1, 37) = %v, want %v", tc.major, tc.minor, got, tc.want)
		}
	}
}

// admit is acquire for a pod the scheduler places, answered as ok and the upgrades in flight.
func (g *gate) admit(ctx context.Context, key types.NamespacedName, name string, now time.Time) (bool, int, error) {
	a, err := g.acquire(ctx, key, name, now)
	return a.ok, a.inFlight, err
}

// TestGatePacesByUpgradesWaitingForANode checks --max-pending-upgrades: it counts the upgrades
// whose new pod has no node yet (observed or reserved, a Recreate start too), not those placed,
// and a binding frees the slot at once and wakes a waiting workspace, while the upgrades stay in
// flight.
func TestGatePacesByUpgradesWaitingForANode(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pair := func(id string) (old, up *corev1.Pod) {
		old = upgradeUnitPod("ws-"+id, id, "python", "v1", nil)
		old.Spec.NodeName = "node-1"
		up = upgradeUnitPod(workspace.NextPodName(old, "v2"), id, "python", "v2", map[string]string{
			workspace.AnnUpgradeFrom: old.Name, workspace.AnnUpgradeFromUID: string(old.UID), workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)})
		return old, up
	}
	oldA, upA := pair("a")
	oldB, upB := pair("b")
	wake := make(chan event.GenericEvent, 10)
	g := newGate(0, 2, fake.NewClientBuilder().WithObjects(oldA, upA).Build(), wake)
	ctx := context.Background()
	key := func(id string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: id} }
	acquire := func(id string) admission {
		t.Helper()
		name := "ws-" + id + "-up"
		if id == "b" {
			name = upB.Name
		}
		a, err := g.acquire(ctx, key(id), name, now)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	if a := acquire("b"); !a.ok || a.waitingForNode != 1 {
		t.Errorf("b: %+v, want admitted with a's unbound pod waiting for a node", a)
	}
	// A Recreate start counts like any other: its workspace is down from the old pod's deletion
	// until the new pod is placed, and the room the old pod frees may not fit the new version.
	if a := acquire("c"); a.ok || !a.byPending || a.waitingForNode != 2 || a.inFlight != 2 {
		t.Errorf("c: %+v, want held back by the pending limit at a and b", a)
	}
	// The cache shows b's pod, not bound yet: still waiting, nobody woken.
	g.observed(key("b"), []*corev1.Pod{oldB, upB})
	select {
	case ev := <-wake:
		t.Errorf("woke %s while nothing was placed", ev.Object.GetName())
	default:
	}
	// The scheduler binds a's pod: a's upgrade is still in flight, but c is woken and fits.
	bound := upA.DeepCopy()
	bound.Spec.NodeName = "node-2"
	g.observed(key("a"), []*corev1.Pod{oldA, bound})
	expectWoken(t, wake, "c", "a's pod was bound")
	if a := acquire("c"); !a.ok || a.inFlight != 2 {
		t.Errorf("c after a's binding: %+v, want admitted with a and b in flight", a)
	}
	// b's upgrade concluded by this process while its pod had no node: its slot frees at once.
	if a := acquire("d"); a.ok {
		t.Errorf("d: %+v, want held back (b and c wait for a node)", a)
	}
	g.finish(key("b"), now)
	if a := acquire("d"); !a.ok {
		t.Errorf("d after b finished: %+v, want admitted", a)
	}
}

// TestGateKeepsBothLimits: with both limits set, the in-flight cap holds although every pod was
// placed.
func TestGateKeepsBothLimits(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := upgradeUnitPod("ws-a", "a", "python", "v1", nil)
	up := upgradeUnitPod(workspace.NextPodName(old, "v2"), "a", "python", "v2", map[string]string{
		workspace.AnnUpgradeFrom: "ws-a", workspace.AnnUpgradeFromUID: "uid-ws-a", workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)})
	up.Spec.NodeName = "node-1"
	g := newGate(1, 5, fake.NewClientBuilder().WithObjects(old, up).Build(), make(chan event.GenericEvent, 10))
	a, err := g.acquire(context.Background(), types.NamespacedName{Namespace: "ns", Name: "b"}, "ws-b-up", now)
	if err != nil {
		t.Fatal(err)
	}
	if a.ok || a.byPending || a.inFlight != 1 || a.waitingForNode != 0 {
		t.Errorf("b: %+v, want held back by --max-concurrent-upgrades=1 (a placed, in flight)", a)
	}
}

// TestGateTellsAStaleReadFromALimit: a second start of the same workspace under another pod name
// (a stale read while the cache does not show the first create yet) is held back as stale, not by
// a limit, so no "queued" Event is recorded (and used up) for it.
func TestGateTellsAStaleReadFromALimit(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := newGate(0, 200, fake.NewClientBuilder().Build(), make(chan event.GenericEvent, 10))
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	if a, err := g.acquire(context.Background(), key, "ws-a-v2", now); err != nil || !a.ok || a.stale {
		t.Fatalf("first start: %+v, %v; want admitted", a, err)
	}
	if a, err := g.acquire(context.Background(), key, "ws-a-v2", now); err != nil || !a.ok || a.stale {
		t.Errorf("retry of the same create: %+v, %v; want admitted (AlreadyExists makes it harmless)", a, err)
	}
	a, err := g.acquire(context.Background(), key, "ws-a-v3", now)
	if err != nil || a.ok || !a.stale || a.byPending {
		t.Errorf("another name from a stale read: %+v, %v; want held back as stale", a, err)
	}
}

// expectWoken checks that the gate has woken workspace want after what happened.
func expectWoken(t *testing.T, wake <-chan event.GenericEvent, want, after string) {
	t.Helper()
	select {
	case ev := <-wake:
		if ev.Object.GetName() != want {
			t.Errorf("woke %s after %s, want %s", ev.Object.GetName(), after, want)
		}
	default:
		t.Errorf("no workspace woken after %s", after)
	}
}

// TestAnEvictedRecreatePodIsRolledBackNotCopied: when Kubernetes evicts a Recreate upgrade's new
// pod before it is Ready (its old pod gone or going), the upgrade planner rolls it back from its
// record and the lifecycle planner does not also copy it (one workspace, one pod): the pass takes
// the rollback first (evictedRollback). Every other delete is the lifecycle planner's, as before:
// the owner's, an eviction the owner's delete met, a pod that was Ready, a workspace with a live
// pod (the rollback pod, once made).
func TestAnEvictedRecreatePodIsRolledBackNotCopied(t *testing.T) {
	keys, err := upgrade.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := upgrade.Config{Keys: keys}
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	const owner, id = "auth0|jane", "demo"
	pod := func(name, uid, version string, created time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
				workspace.LabelUserSub: workspace.UserLabel(owner), workspace.LabelTemplate: "ide"},
			Annotations: map[string]string{workspace.AnnOwner: owner, workspace.AnnTemplateVersion: version}},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "ide", Image: "ide:" + version}},
				Volumes: []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home"}}}}}}
	}
	deleted := func(p *corev1.Pod, at time.Time) *corev1.Pod {
		ts, grace := metav1.NewTime(at), int64(30)
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
		return p
	}
	evicted := func(p *corev1.Pod, at time.Time) *corev1.Pod {
		deleted(p, at.Add(30*time.Second))
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: lifecycle.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.NewTime(at)})
		return p
	}
	readyNow := func(p *corev1.Pod) *corev1.Pod {
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
		return p
	}
	old := func() *corev1.Pod { return pod(workspace.PodName(owner, id), "uid-old", "v1", now.Add(-time.Hour)) }
	newRe := func() *corev1.Pod {
		o := old()
		p := pod(workspace.NextPodName(o, "v2"), "uid-new", "v2", now.Add(-3*time.Minute))
		p.Annotations[workspace.AnnUpgradeFrom] = o.Name
		p.Annotations[workspace.AnnUpgradeFromUID] = string(o.UID)
		p.Annotations[workspace.AnnUpgradeFromVersion] = "v1"
		p.Annotations[workspace.AnnUpgradeStrategy] = string(upgrade.Recreate)
		p.Annotations[workspace.AnnUpgradeStartedAt] = now.Add(-2 * time.Minute).Format(time.RFC3339)
		p.Annotations[workspace.AnnRollbackSpec] = "gzip+base64:spec"
		p.Annotations[workspace.AnnUpgradeHMAC] = keys.Sign(p.Namespace, p.Name, p.Annotations, p.Annotations[workspace.AnnRollbackSpec])
		return p
	}
	rollbackOf := func(failed *corev1.Pod) *corev1.Pod {
		p := pod(workspace.RollbackPodName(failed), "uid-rb", "v1", now)
		p.Spec.NodeName = ""
		p.Annotations[workspace.AnnUpgradeFrom] = failed.Name
		p.Annotations[workspace.AnnUpgradeFromUID] = string(failed.UID)
		p.Annotations[workspace.AnnUpgradeStrategy] = string(upgrade.Rollback)
		return p
	}

	for _, tc := range []struct {
		name     string
		pods     func() []*corev1.Pod
		rollback bool
		// copied: the lifecycle planner, which has the workspace when there is no rollback,
		// copies the evicted pod.
		copied bool
	}{
		{name: "the new pod evicted before it was Ready, the old pod gone: rolled back, not copied", rollback: true,
			pods: func() []*corev1.Pod { return []*corev1.Pod{evicted(newRe(), now)} }},
		{name: "the new pod evicted before it was Ready, the old pod still terminating (nogoo9 deleted it first): rolled back", rollback: true,
			pods: func() []*corev1.Pod {
				return []*corev1.Pod{evicted(newRe(), now), deleted(old(), now.Add(-2*time.Minute))}
			}},
		{name: "the new pod evicted once Ready, before the pass that confirms it: copied (the new version ran)", copied: true,
			pods: func() []*corev1.Pod { return []*corev1.Pod{evicted(readyNow(newRe()), now)} }},
		{name: "the rollback pod made (live): nothing more for either planner on the evicted pod",
			pods: func() []*corev1.Pod { n := evicted(newRe(), now); return []*corev1.Pod{rollbackOf(n), n} }},
		{name: "the owner's delete met the evicted pod (deleted-at): neither rolled back nor copied",
			pods: func() []*corev1.Pod {
				n := evicted(newRe(), now)
				n.Annotations[workspace.AnnDeletedAt] = now.Format(time.RFC3339)
				return []*corev1.Pod{n}
			}},
		{name: "the owner deleted the new pod (no DisruptionTarget): neither",
			pods: func() []*corev1.Pod { return []*corev1.Pod{deleted(newRe(), now)} }},
		{name: "a pod the owner deleted, evicted two minutes later (the Eviction API marks a terminating pod): neither",
			pods: func() []*corev1.Pod {
				n := evicted(newRe(), now)
				ts := metav1.NewTime(now.Add(-2 * time.Minute))
				n.DeletionTimestamp = &ts
				return []*corev1.Pod{n}
			}},
		{name: "a workspace with no upgrade evicted: copied, as before", copied: true,
			pods: func() []*corev1.Pod { return []*corev1.Pod{evicted(old(), now)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := tc.pods()
			m, ok := evictedRollback(pods, now, cfg)
			if ok != tc.rollback {
				t.Fatalf("evictedRollback = %v (%d actions), want %v", ok, len(m.Actions), tc.rollback)
			}
			if ok {
				if len(m.Actions) != 1 || m.Actions[0].Kind != upgrade.CreateRollbackPod || m.Actions[0].Pod != pods[0] {
					t.Fatalf("actions %+v, want the rollback of %s", m.Actions, pods[0].Name)
				}
				return
			}
			copied := false
			for _, a := range lifecycle.Plan(pods, lifecycle.Target{Found: true, Version: "v2"}, now, lifecycle.Config{}).Actions {
				copied = copied || a.Kind == lifecycle.CreateStoppedPod && a.Evicted
			}
			if copied != tc.copied {
				t.Errorf("the lifecycle planner copies an evicted pod: %v, want %v", copied, tc.copied)
			}
		})
	}
}

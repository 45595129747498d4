package controllers

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The update-policy runner against a real API server, tick by tick with a fixed clock: automatic
// requests are rated (per tick and by the concurrency cap) so that a backlog, as after an outage,
// never starts all at once; a pin holds; a request the policy no longer wants is withdrawn.
// It runs twice: reading a List (Reader), and reading the manager cache's own pods one workspace
// at a time (Pods, as main.go wires it), each tick after the cache has caught up with the API
// server.
func TestPolicyRunnerRatesRequestsAndHonoursPinAndPolicyChanges(t *testing.T) {
	for _, fromCache := range []bool{false, true} {
		name := "list"
		if fromCache {
			name = "cache"
		}
		t.Run(name, func(t *testing.T) { testPolicyRunner(t, fromCache) })
	}
}

func testPolicyRunner(t *testing.T, fromCache bool) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC) // a Saturday
	names := make([]string, 6)
	for i := range names {
		names[i] = fmt.Sprintf("ws-p%d", i)
		createIdleIDEPod(t, c, names[i], fmt.Sprintf("p%d", i), i == 5, now)
	}
	reg := whenIdleTemplates()
	r := &PolicyRunner{Client: c, Reader: c, Templates: reg, Recorder: record.NewFakeRecorder(1000),
		Opts: PolicyOptions{PerInterval: 2, MaxInFlight: 3, IdleAfter: time.Minute, Now: func() time.Time { return now }}}
	caughtUp := func() {}
	if fromCache {
		mgr := newTestManager(t, cfg)
		pods, err := podcache.NewEvery(ctx, mgr.GetCache())
		if err != nil {
			t.Fatal(err)
		}
		runManager(t, ctx, mgr)
		r.Pods, r.Reader = pods, nil
		caughtUp = func() { t.Helper(); waitEveryCaughtUp(t, ctx, c, pods) }
	}

	requested := func() (out []string) {
		t.Helper()
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{workspace.LabelTemplate: "ide"}); err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.Annotations[workspace.AnnUpgradeRequested] != "" {
				if p.Annotations[workspace.AnnAutoUpgrade] != "when-idle" || p.Annotations[workspace.AnnUpgradePod] != workspace.NextPodName(&p, "2") {
					t.Errorf("pod %s: request without the policy mark or the pod name: %v", p.Name, p.Annotations)
				}
				out = append(out, p.Name)
			}
		}
		return out
	}
	tick := func(want int, wantTotal int) {
		t.Helper()
		caughtUp()
		n, err := r.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := requested(); n != want || len(got) != wantTotal {
			t.Fatalf("tick requested %d (want %d); requested now %v (want %d)", n, want, got, wantTotal)
		}
	}
	tick(2, 2) // five due: only --auto-upgrades-per-interval start
	tick(1, 3) // the cap (3) leaves room for one
	tick(0, 3) // the cap is full: nothing more, nothing lost

	// Two upgrades end (the controller clears the intent): room for two again, the pinned
	// workspace is never among them.
	for _, name := range requested()[:2] {
		patch := []byte(`{"metadata":{"annotations":{"` + workspace.AnnUpgradeRequested + `":null,"` + workspace.AnnUpgradePod + `":null,"` + workspace.AnnAutoUpgrade + `":null,"` + workspace.AnnTemplateVersion + `":"2"}}}`)
		if err := c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	tick(2, 3)
	for _, name := range requested() {
		if name == names[5] {
			t.Errorf("the pinned workspace %s was requested", name)
		}
	}

	// The template switches to a window that is closed now: the runner's own requests that
	// have not started are withdrawn; nothing new is requested.
	tmpl := ideTemplate("2", "example.com/ide:2", "")
	tmpl.Annotations = map[string]string{workspace.AnnUpdatePolicy: "window", workspace.AnnUpdateWindow: "Sun 02:00-04:00 UTC"}
	reg.set(tmpl)
	tick(0, 0)
}

// waitEveryCaughtUp waits (at most 30 s) until pods holds every workspace pod the API server
// has, at the resourceVersion it has.
func waitEveryCaughtUp(t *testing.T, ctx context.Context, c client.Client, pods *podcache.Every) {
	t.Helper()
	var list corev1.PodList
	if err := c.List(ctx, &list, client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, p := range list.Items {
		want[p.Namespace+"/"+p.Name] = p.ResourceVersion
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]string{}
		if all, ok := pods.Pods(); ok {
			for _, p := range all {
				got[p.Namespace+"/"+p.Name] = p.ResourceVersion
			}
			if maps.Equal(got, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache's pods did not catch up with the API server in 30 s: have %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPolicyRunnersFirstTickWaitsForTheCachesPods: a runner that starts before the cache's pods
// are in evaluates them as soon as they are, not an --update-policy-interval later (the first
// tick would evaluate nothing and the next one come an hour later here).
func TestPolicyRunnersFirstTickWaitsForTheCachesPods(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	pod := createIdleIDEPod(t, c, "ws-first", "first", false, now)
	reg := whenIdleTemplates()
	mgr := newTestManager(t, cfg)
	pods, err := podcache.NewEvery(ctx, mgr.GetCache())
	if err != nil {
		t.Fatal(err)
	}
	r := &PolicyRunner{Client: c, Pods: pods, Templates: reg, Recorder: record.NewFakeRecorder(100),
		Opts: PolicyOptions{Interval: time.Hour, PerInterval: 1, IdleAfter: time.Minute, Now: func() time.Time { return now }}}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Start(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("policy runner: %v", err)
		}
	})
	if pods.Synced() {
		t.Fatal("the cache's pods are in before the manager started: the test proves nothing")
	}
	runManager(t, ctx, mgr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			t.Fatal(err)
		}
		if got.Annotations[workspace.AnnUpgradeRequested] != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no upgrade requested 30 s after the cache's pods came in (interval 1 h): %v", got.Annotations)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createIdleIDEPod creates jane's workspace id in default, on the "ide" template's version 1,
// Ready for an hour before now (idle for the when-idle policy), pinned or not.
func createIdleIDEPod(t *testing.T, c client.Client, name, id string, pinned bool, now time.Time) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
				workspace.LabelTemplate: "ide", workspace.LabelTemplateVersion: "1"},
			Annotations: map[string]string{workspace.AnnOwner: "jane", workspace.AnnTemplateVersion: "1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
	}
	if pinned {
		pod.Annotations[workspace.AnnPinned] = "true"
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestPolicyRunnerPacesRequestsByUpgradesWaitingForANode: under --max-pending-upgrades the runner
// counts the requests not started yet and the upgrades whose new pod has no node, not the
// upgrades whose new pod the scheduler has placed; a binding makes room for another request.
func TestPolicyRunnerPacesRequestsByUpgradesWaitingForANode(t *testing.T) {
	_, c := startAPIServer(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	for i := range 4 {
		createIdleIDEPod(t, c, fmt.Sprintf("ws-q%d", i), fmt.Sprintf("q%d", i), false, now)
	}
	// Two workspaces with an upgrade in flight (busy for the policy), their new pods unbound.
	var ups []*corev1.Pod
	for _, id := range []string{"x", "y"} {
		old := createIdleIDEPod(t, c, "ws-"+id, id, false, now)
		up := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: workspace.NextPodName(old, "2"), Namespace: "default",
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
					workspace.LabelTemplate: "ide", workspace.LabelTemplateVersion: "2"},
				Annotations: map[string]string{workspace.AnnOwner: "jane", workspace.AnnTemplateVersion: "2",
					workspace.AnnUpgradeFrom: old.Name, workspace.AnnUpgradeFromUID: string(old.UID),
					workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:2"}}},
		}
		if err := c.Create(ctx, up); err != nil {
			t.Fatal(err)
		}
		ups = append(ups, up)
	}
	bind := func(p *corev1.Pod) {
		t.Helper()
		if err := c.SubResource("binding").Create(ctx, p, &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}); err != nil {
			t.Fatal(err)
		}
	}
	bind(ups[0])
	reg := whenIdleTemplates()
	r := &PolicyRunner{Client: c, Reader: c, Templates: reg, Recorder: record.NewFakeRecorder(1000),
		Opts: PolicyOptions{PerInterval: 10, MaxPending: 3, IdleAfter: time.Minute, Now: func() time.Time { return now }}}
	tick := func(want int) {
		t.Helper()
		n, err := r.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("tick requested %d, want %d", n, want)
		}
	}
	tick(2) // y waits for a node, x's pod is placed: room for two of the four due
	tick(0) // y and the two requests fill the limit
	bind(ups[1])
	tick(1) // y's pod placed: room for one more
}

// whenIdleTemplates holds the ide template at version 2 with the when-idle update policy.
func whenIdleTemplates() *fakeTemplates {
	reg := &fakeTemplates{}
	tmpl := ideTemplate("2", "example.com/ide:2", "")
	tmpl.Annotations = map[string]string{workspace.AnnUpdatePolicy: "when-idle"}
	reg.set(tmpl)
	return reg
}

// TestPolicyRunnerLeavesStoppedWorkspacesAlone: a stopped workspace gets no automatic request
// (the stop would hold it until a start, while it counted against --max-pending-upgrades), so
// stopped workspaces, however many and however old, never keep running ones from their window.
func TestPolicyRunnerLeavesStoppedWorkspacesAlone(t *testing.T) {
	_, c := startAPIServer(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC) // a Saturday, inside the window below
	for _, id := range []string{"a0", "a1", "a2"} {     // sorted before the running ones
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "ws-" + id, Namespace: "default",
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
					workspace.LabelTemplate: "ide", workspace.LabelTemplateVersion: "1"},
				Annotations: map[string]string{workspace.AnnOwner: "jane", workspace.AnnTemplateVersion: "1", workspace.AnnStopRequested: "true",
					workspace.AnnStoppedFromUID: "uid-running-" + id}},
			Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: workspace.GateStopped}},
				Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"z0", "z1"} {
		createIdleIDEPod(t, c, "ws-"+id, id, false, now)
	}
	reg := &fakeTemplates{}
	tmpl := ideTemplate("2", "example.com/ide:2", "")
	tmpl.Annotations = map[string]string{workspace.AnnUpdatePolicy: "window", workspace.AnnUpdateWindow: "Sat 02:00-04:00 UTC"}
	reg.set(tmpl)
	r := &PolicyRunner{Client: c, Reader: c, Templates: reg, Recorder: record.NewFakeRecorder(1000),
		Opts: PolicyOptions{PerInterval: 10, MaxPending: 2, IdleAfter: time.Minute, Now: func() time.Time { return now }}}
	for range 2 { // the second tick: the stopped ones are still not counted, nothing more is due
		if _, err := r.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{workspace.LabelTemplate: "ide"}); err != nil {
		t.Fatal(err)
	}
	var requested []string
	for _, p := range list.Items {
		if p.Annotations[workspace.AnnUpgradeRequested] != "" {
			requested = append(requested, p.Name)
		}
	}
	if fmt.Sprint(requested) != "[ws-z0 ws-z1]" {
		t.Fatalf("requested %v, want [ws-z0 ws-z1]: the running workspaces in their window, no stopped one", requested)
	}
}

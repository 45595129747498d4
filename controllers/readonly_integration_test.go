package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// snapshotReader is the manager's real cache with a witness: every pod it lists is remembered
// with a deep copy of how it looked when listed. A reader that lists with
// client.UnsafeDisableDeepCopy gets pods whose maps, slices and pointers are the cache's own, so
// any write through them (a label set, a condition changed, a slice sorted in place) shows as
// a difference between the pod and its copy.
type snapshotReader struct {
	client.Reader
	mu   sync.Mutex
	seen []listed
	// read: the differences workspaceSnapshotReader found; reads: how many passes it served.
	read  []string
	reads int
}

type listed struct {
	pod  *corev1.Pod
	copy *corev1.Pod
}

func (s *snapshotReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	if pl, ok := list.(*corev1.PodList); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i := range pl.Items {
			s.seen = append(s.seen, listed{pod: &pl.Items[i], copy: pl.Items[i].DeepCopy()})
		}
	}
	return nil
}

// changed returns the differences between every listed pod and its copy, and those
// workspaceSnapshotReader found.
func (s *snapshotReader) changed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.read...)
	for _, l := range s.seen {
		if d := cmp.Diff(l.copy, l.pod); d != "" {
			out = append(out, l.pod.Name+": "+d)
		}
	}
	return out
}

// workspaceSnapshotReader is snapshotReader with the cache's ReadWorkspace, the path the phase
// controller takes on nogoo9's cache (workspacePods). Its pods are valid only until fn returns
// (their memory is reused), so they are compared with copies taken before fn, as soon as it
// returns.
type workspaceSnapshotReader struct {
	*snapshotReader
	cache workspacePods
}

func (s workspaceSnapshotReader) ReadWorkspace(ctx context.Context, ns, id string, fn func(pods []*corev1.Pod) error) error {
	return s.cache.ReadWorkspace(ctx, ns, id, func(pods []*corev1.Pod) error {
		// fn may reorder the slice (the phase controller sorts it newest first): the pods are
		// compared by pointer, not by place.
		orig, copies := slices.Clone(pods), make([]*corev1.Pod, len(pods))
		for i, p := range pods {
			copies[i] = p.DeepCopy()
		}
		err := fn(pods)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reads++
		for i, p := range orig {
			if d := cmp.Diff(copies[i], p); d != "" {
				s.read = append(s.read, copies[i].Name+": "+d)
			}
		}
		return err
	})
}

// TestPhaseReconcilerNeverMutatesTheCache proves what lets the phase controller read without
// deep copies (podcache.Cache.ReadWorkspace on nogoo9's cache, else a List with
// client.UnsafeDisableDeepCopy): its reconcile, Events included, only reads the cached pods. It
// runs the reconciler over workspaces in several phases on a real kube-apiserver and cache, by
// each path, and checks every pod it was handed against a copy taken before. The last steps
// write into a pod each path hands out on purpose and expect the check to see it, so it can fail.
func TestPhaseReconcilerNeverMutatesTheCache(t *testing.T) {
	cfg, c := startAPIServer(t)
	mgr := newTestManager(t, cfg, func(o *ctrl.Options) { o.Cache = podcache.Options("default") })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := podcache.AddWorkspaceIDIndex(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	cached, ok := mgr.GetCache().(workspacePods)
	if !ok {
		t.Fatalf("the manager's cache (%T) has no ReadWorkspace", mgr.GetCache())
	}
	// lister lists (the fallback); reader reads by workspace, as on nogoo9's cache.
	lister := &snapshotReader{Reader: mgr.GetCache()}
	reader := workspaceSnapshotReader{snapshotReader: &snapshotReader{Reader: mgr.GetCache()}, cache: cached}
	var reconcilers []*PhaseReconciler
	for _, rd := range []client.Reader{lister, reader} {
		r := &PhaseReconciler{
			Reader:   rd,
			Recorder: mgr.GetEventRecorderFor("phase-readonly-test"), //nolint:staticcheck // as SetupPhaseReconciler
			Gauge:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "test_readonly_workspaces"}, []string{"phase"}),
		}
		r.init() // started before the pods: every first sighting is announced with an Event
		reconcilers = append(reconcilers, r)
	}
	runManager(t, context.Background(), mgr)

	type ws struct {
		id, pod     string
		ready       bool
		maintenance string
	}
	workspaces := []ws{
		{id: "pending", pod: "ws-a-pending"},
		{id: "ready", pod: "ws-a-ready", ready: true},
		{id: "maint", pod: "ws-a-maint", ready: true, maintenance: "disk check"},
		{id: "two", pod: "ws-a-two-old", ready: true},
		{id: "two", pod: "ws-a-two-new"},
	}
	for _, w := range workspaces {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: w.pod, Namespace: "default",
				Labels:      map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: w.id},
				Annotations: map[string]string{workspace.AnnOwner: "a"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "ide", Image: "img"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "WorkspaceStorageMounted"}}},
		}
		if w.maintenance != "" {
			p.Annotations[workspace.AnnMaintenance] = w.maintenance
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		if w.ready {
			p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
			p.Status.Conditions = append(p.Status.Conditions,
				corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				corev1.PodCondition{Type: "WorkspaceStorageMounted", Status: corev1.ConditionTrue})
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// Wait (bounded) until the cache shows every pod with its status.
	for _, w := range workspaces {
		for {
			var p corev1.Pod
			err := mgr.GetCache().Get(ctx, types.NamespacedName{Namespace: "default", Name: w.pod}, &p)
			if err == nil && p.Status.Phase != "" {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the cache never showed pod %s with its status: %v", w.pod, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	// Two passes: the first sighting (an Event each) and a repeat (no change).
	for _, r := range reconcilers {
		for pass := 0; pass < 2; pass++ {
			for _, w := range workspaces {
				if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: w.id}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(lister.seen) < 2*len(workspaces) {
		t.Fatalf("the reconciler listed %d pods through the cache, want at least %d", len(lister.seen), 2*len(workspaces))
	}
	if len(reader.seen) != 0 || reader.reads < 2*len(workspaces) {
		t.Fatalf("on a cache with ReadWorkspace, the reconciler listed %d pods and read %d times by workspace, want no List and at least %d reads",
			len(reader.seen), reader.reads, 2*len(workspaces))
	}
	for _, d := range append(lister.changed(), reader.changed()...) {
		t.Errorf("the phase reconciler changed a cached pod (-listed +after):\n%s", d)
	}

	// The check sees a write through a listed pod's shared map.
	var list corev1.PodList
	if err := lister.List(ctx, &list, client.InNamespace("default"), client.UnsafeDisableDeepCopy); err != nil || len(list.Items) == 0 {
		t.Fatalf("list: %v (%d pods)", err, len(list.Items))
	}
	list.Items[0].Labels["example.com/written"] = "by the test"
	if len(lister.changed()) == 0 {
		t.Error("a label written into a listed pod went unnoticed: the check cannot fail")
	}
	// And a write into a pod read by workspace (its label map is the Scratch's own, cleared when
	// the pass ends).
	err := reader.ReadWorkspace(ctx, "default", "ready", func(pods []*corev1.Pod) error {
		if len(pods) == 0 {
			return fmt.Errorf("no pod")
		}
		pods[0].Labels["example.com/written"] = "by the test"
		return nil
	})
	if err != nil {
		t.Fatalf("read workspace ready: %v", err)
	}
	if len(reader.changed()) == 0 {
		t.Error("a label written into a pod read by workspace went unnoticed: the check cannot fail")
	}
}

// TestCollectorNeverMutatesTheCache proves what lets the /metrics collector read the cache's own
// pods (podcache.Every, no List and so no copy of each pod struct): collecting only reads them.
// It also checks that the figures are those the former path computed (a deep-copied List of every
// workspace pod) across two namespaces, an id used in both, an upgrade in flight and a deletion.
// The last step writes into a pod on purpose and expects the check to see it, so it can fail.
func TestCollectorNeverMutatesTheCache(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	mgr := newTestManager(t, cfg, func(o *ctrl.Options) { o.Cache = podcache.OptionsFor([]string{"default", "team"}) })
	every, err := podcache.NewEvery(ctx, mgr.GetCache())
	if err != nil {
		t.Fatal(err)
	}
	reg := &fakeTemplates{}
	reg.set(&templates.Template{Name: "python", Version: "v2"})
	r := &WorkspaceReconciler{Templates: reg, every: every}
	prev := current.Swap(r)
	t.Cleanup(func() { current.Store(prev) })
	gatherer := prometheus.NewPedanticRegistry()
	gatherer.MustRegister(workspaceCollector{})

	runManager(t, context.Background(), mgr)

	create := func(ns, name, id, version string, ann map[string]string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
					workspace.LabelTemplate: "python", workspace.LabelTemplateVersion: version},
				Annotations: ann},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "img"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	create("default", "ws-a", "a", "v1", nil)
	create("default", "ws-b", "b", "v2", nil)
	create("team", "ws-a", "a", "v1", nil) // the same id in another namespace: another workspace
	old := create("default", "ws-c", "c", "v1", nil)
	upC := create("default", workspace.NextPodName(old, "v2"), "c", "v2", map[string]string{
		workspace.AnnUpgradeFrom: old.Name, workspace.AnnUpgradeFromUID: string(old.UID), workspace.AnnUpgradeStrategy: string(upgrade.SideBySide)})

	// figures gathers the collector's samples as "template/outdated" -> value, plus "in-flight".
	figures := func() map[string]float64 {
		t.Helper()
		mfs, err := gatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "nogoo9_template_workspaces":
					l := map[string]string{}
					for _, lp := range m.GetLabel() {
						l[lp.GetName()] = lp.GetValue()
					}
					out[l["template"]+"/"+l["outdated"]] = m.GetGauge().GetValue()
				case "nogoo9_upgrades_in_flight":
					out["in-flight"] = m.GetGauge().GetValue()
				case "nogoo9_upgrades_waiting_for_node":
					out["waiting-for-node"] = m.GetGauge().GetValue()
				}
			}
		}
		return out
	}
	// former computes the same figures the way the collector did before: a List of deep copies.
	former := func() map[string]float64 {
		t.Helper()
		var list corev1.PodList
		if err := mgr.GetCache().List(ctx, &list, client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace}); err != nil {
			t.Fatal(err)
		}
		pods := make([]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			pods[i] = &list.Items[i]
		}
		slots := upgrade.Slots(pods)
		out := map[string]float64{"in-flight": float64(len(slots)), "waiting-for-node": 0}
		for _, s := range slots {
			if s.WaitingForNode {
				out["waiting-for-node"]++
			}
		}
		for k, n := range OutdatedCounts(pods, reg) {
			out[k.template+"/"+boolLabel(k.outdated)] = float64(n)
		}
		return out
	}
	// Wait (bounded) until the collector shows the figures wanted.
	waitFor := func(want map[string]float64) {
		t.Helper()
		for {
			got := figures()
			if cmp.Diff(want, got) == "" {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the collector never showed the figures wanted (-want +got):\n%s", cmp.Diff(want, got))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	// default/a and team/a are outdated; b and c (its active pod is the new one) are not.
	waitFor(map[string]float64{"python/true": 2, "python/false": 2, "in-flight": 1, "waiting-for-node": 1})
	if d := cmp.Diff(former(), figures()); d != "" {
		t.Errorf("the collector's figures differ from a List's (-list +collector):\n%s", d)
	}

	// Collect with a copy of every pod it reads, then compare.
	pods, ok := every.Pods()
	if !ok || len(pods) != 5 {
		t.Fatalf("every cached pod: %d pods (synced %v), want 5", len(pods), ok)
	}
	copies := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		copies[i] = p.DeepCopy()
	}
	changed := func() []string {
		var out []string
		for i, p := range pods {
			if d := cmp.Diff(copies[i], p); d != "" {
				out = append(out, p.Namespace+"/"+p.Name+": "+d)
			}
		}
		return out
	}
	for range 3 {
		figures()
	}
	for _, d := range changed() {
		t.Errorf("the collector changed a cached pod (-before +after):\n%s", d)
	}

	// A deleted pod leaves the figures.
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "ws-a"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(map[string]float64{"python/true": 1, "python/false": 2, "in-flight": 1, "waiting-for-node": 1})
	if d := cmp.Diff(former(), figures()); d != "" {
		t.Errorf("after a deletion, the collector's figures differ from a List's (-list +collector):\n%s", d)
	}

	// The scheduler places c's new pod: still in flight, no longer waiting for a node.
	if err := c.SubResource("binding").Create(ctx, upC, &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(map[string]float64{"python/true": 1, "python/false": 2, "in-flight": 1, "waiting-for-node": 0})

	// The check sees a write through a pod the collector reads.
	pods[0].Labels["example.com/written"] = "by the test"
	if len(changed()) == 0 {
		t.Error("a label written into a cached pod went unnoticed: the check cannot fail")
	}
}

package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

var phaseT0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func phasePod(name, id string, created time.Time, ready bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", CreationTimestamp: metav1.NewTime(created),
			Labels:      map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id},
			Annotations: map[string]string{},
		},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "ide", Image: "img"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if ready {
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = "10.0.0.1"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

func newTestPhaseReconciler(c client.Client, now time.Time) (*PhaseReconciler, *record.FakeRecorder, *prometheus.GaugeVec) {
	rec := record.NewFakeRecorder(100)
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "test_workspaces"}, []string{"phase"})
	return &PhaseReconciler{Reader: c, Recorder: rec, Gauge: gauge, Now: func() time.Time { return now }}, rec, gauge
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func gaugeValue(g *prometheus.GaugeVec, phase workspace.PhaseName) float64 {
	return testutil.ToFloat64(g.WithLabelValues(string(phase)))
}

// TestPhaseReconcilerTransitions walks a workspace through phases with a fake client (pure logic:
// the envtest test below covers the real API server) and checks one Event per transition, none for
// repeated reconciles, the gauge, and forgetting a deleted workspace.
func TestPhaseReconcilerTransitions(t *testing.T) {
	ctx := context.Background()
	pod := phasePod("ws-a", "demo", phaseT0.Add(time.Minute), false)
	c := fake.NewClientBuilder().WithIndex(&corev1.Pod{}, podcache.IndexWorkspaceID, podcache.WorkspaceID).WithObjects(pod).Build()
	r, rec, gauge := newTestPhaseReconciler(c, phaseT0.Add(2*time.Minute))
	r.init()
	r.started = phaseT0 // the reconciler started before the pod was created
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "demo"}}

	mustReconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	update := func(mut func(p *corev1.Pod)) {
		t.Helper()
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		mut(&p)
		status := p.Status
		if err := c.Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
		p.Status = status
		if err := c.Status().Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		name      string
		mutate    func(p *corev1.Pod)
		reconcile int
		wantEvent string // "" for none
		gaugeAt   workspace.PhaseName
	}{
		{name: "first sighting of a new workspace", reconcile: 3, wantEvent: "Normal PhaseInitializing", gaugeAt: workspace.PhaseInitializing},
		{name: "becomes ready", mutate: func(p *corev1.Pod) {
			p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}, reconcile: 2, wantEvent: "Normal PhaseReady", gaugeAt: workspace.PhaseReady},
		{name: "unrelated annotation change: same phase, no event", mutate: func(p *corev1.Pod) {
			p.Annotations["team"] = "x"
		}, reconcile: 2, gaugeAt: workspace.PhaseReady},
		{name: "maintenance", mutate: func(p *corev1.Pod) {
			p.Annotations[workspace.AnnMaintenance] = "disk move"
		}, reconcile: 2, wantEvent: "Warning PhaseUnavailable", gaugeAt: workspace.PhaseUnavailable},
		{name: "maintenance over", mutate: func(p *corev1.Pod) {
			delete(p.Annotations, workspace.AnnMaintenance)
		}, reconcile: 1, wantEvent: "Normal PhaseReady", gaugeAt: workspace.PhaseReady},
		// The upgrade controller records UpgradeStarted and UpgradeSucceeded on these pods: the
		// phase changes an upgrade makes get no Event of their own (two writes per workspace less
		// in a bulk upgrade).
		{name: "upgrade requested: Upgrading without a Phase Event", mutate: func(p *corev1.Pod) {
			p.Annotations[workspace.AnnUpgradeRequested] = "true"
		}, reconcile: 2, gaugeAt: workspace.PhaseUpgrading},
		{name: "upgrade over: Ready again without a Phase Event", mutate: func(p *corev1.Pod) {
			delete(p.Annotations, workspace.AnnUpgradeRequested)
		}, reconcile: 2, gaugeAt: workspace.PhaseReady},
		{name: "maintenance after the upgrade is still announced", mutate: func(p *corev1.Pod) {
			p.Annotations[workspace.AnnMaintenance] = "disk move"
		}, reconcile: 1, wantEvent: "Warning PhaseUnavailable", gaugeAt: workspace.PhaseUnavailable},
	}
	for _, s := range steps {
		if s.mutate != nil {
			update(s.mutate)
		}
		for i := 0; i < s.reconcile; i++ {
			mustReconcile()
		}
		got := drain(rec)
		switch {
		case s.wantEvent == "" && len(got) != 0:
			t.Errorf("step %q: want no event, got %q", s.name, got)
		case s.wantEvent != "" && (len(got) != 1 || !strings.HasPrefix(got[0], s.wantEvent+" ")):
			t.Errorf("step %q: want one event %q, got %q", s.name, s.wantEvent, got)
		}
		for _, ph := range allPhases {
			want := 0.0
			if ph == s.gaugeAt {
				want = 1
			}
			if v := gaugeValue(gauge, ph); v != want {
				t.Errorf("step %q: gauge{phase=%s} = %v, want %v", s.name, ph, v, want)
			}
		}
	}

	if err := c.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	mustReconcile()
	if v := gaugeValue(gauge, workspace.PhaseReady); v != 0 {
		t.Errorf("after deletion gauge{phase=Ready} = %v, want 0", v)
	}
	if len(r.last) != 0 {
		t.Errorf("deleted workspace not forgotten: %v", r.last)
	}
}

// TestPhaseReconcilerRestartIsQuiet: workspaces that existed before the reconciler started are
// counted but not announced again (no Event storm on a leader change).
func TestPhaseReconcilerRestartIsQuiet(t *testing.T) {
	ctx := context.Background()
	oldPod := phasePod("ws-old", "old", phaseT0, true)
	newPod := phasePod("ws-new", "new", phaseT0.Add(2*time.Hour), true)
	c := fake.NewClientBuilder().WithIndex(&corev1.Pod{}, podcache.IndexWorkspaceID, podcache.WorkspaceID).WithObjects(oldPod, newPod).Build()
	r, rec, gauge := newTestPhaseReconciler(c, phaseT0.Add(time.Hour))
	r.init() // started = phaseT0 + 1h

	for _, id := range []string{"old", "new"} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: id}}); err != nil {
			t.Fatal(err)
		}
	}
	got := drain(rec)
	if len(got) != 1 || !strings.Contains(got[0], "default/new") {
		t.Errorf("want one event for the workspace created after start, got %q", got)
	}
	if v := gaugeValue(gauge, workspace.PhaseReady); v != 2 {
		t.Errorf("gauge{phase=Ready} = %v, want 2", v)
	}
}

func TestWorkspaceRequest(t *testing.T) {
	tests := []struct {
		name string
		obj  client.Object
		want []reconcile.Request
	}{
		{"workspace pod maps to namespace and id", phasePod("ws-a", "demo", phaseT0, false),
			[]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "default", Name: "demo"}}}},
		{"pod without the type label maps to nothing", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{workspace.LabelWorkspaceID: "demo"}}}, nil},
		{"non-pod maps to nothing", &corev1.ConfigMap{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WorkspaceRequest(context.Background(), tt.obj)
			if len(got) != len(tt.want) || (len(got) == 1 && got[0] != tt.want[0]) {
				t.Errorf("WorkspaceRequest() = %v, want %v", got, tt.want)
			}
		})
	}
}

package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestBulkUpgradeWritesTwoEventsPerWorkspace: an admin upgrades every workspace of a template at
// once, with the phase controller and the upgrade controller running as main.go runs them (one
// manager, its Event broadcaster NewEventBroadcaster). Each workspace gets exactly the Events
// people need, its upgrade's start and end, and no Phase Event for the Upgrading phase the upgrade
// passes through: two Event writes per workspace, not four.
func TestBulkUpgradeWritesTwoEventsPerWorkspace(t *testing.T) {
	const n = 12
	cfg, c := startAPIServer(t)
	ns := newNamespace(t, c, "bulk")
	reg := &fakeTemplates{}
	reg.set(ideTemplate("v1", "ide:1", ""))
	e := &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg, clock: &testClock{now: time.Now()}}

	// The workspaces exist before the controllers start: their first sighting is quiet, so every
	// Event in the namespace afterwards is the upgrade's.
	olds := make([]*corev1.Pod, n)
	for i := range olds {
		olds[i] = e.spawn(fmt.Sprintf("user-%d", i), fmt.Sprintf("ws-%d", i))
	}
	// The phase controller counts a pod created in the second it starts as new (timestamps have
	// whole seconds): start it in a later second.
	newest := olds[n-1].CreationTimestamp.Time
	e.g.Eventually(func() bool { return time.Now().Truncate(time.Second).After(newest) }).WithTimeout(5 * time.Second).Should(gomega.BeTrue())

	events, err := NewEventBroadcaster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(events.Shutdown) // after the manager has stopped (runManager's clean-up runs first)
	mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
		o.EventBroadcaster = events //nolint:staticcheck // as main.go
		o.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: podcache.Pods()},
		}
	})
	// As SetupPhaseReconciler, with a gauge of its own to wait on.
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "test_workspaces"}, []string{"phase"})
	phases := &PhaseReconciler{Reader: mgr.GetCache(), Recorder: mgr.GetEventRecorderFor(PhaseControllerName), Gauge: gauge} //nolint:staticcheck // as SetupPhaseReconciler
	if err := phases.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := SetupWorkspaceReconciler(mgr, reg, UpgradeOptions{Now: e.clock.Now, Name: UpgradeControllerName + "-bulk"}); err != nil {
		t.Fatal(err)
	}
	runManager(t, context.Background(), mgr)
	// The phase controller has seen every workspace Ready (quietly) before the upgrade starts.
	e.g.Eventually(func() float64 { return gaugeValue(gauge, workspace.PhaseReady) }).WithTimeout(30 * time.Second).Should(gomega.BeNumerically("==", n))

	// Upgrade all: the new version, then the intent on every pod (as the front end's upgrade-all).
	reg.set(ideTemplate("v2", "ide:2", ""))
	for _, old := range olds {
		e.annotate(old.Name, workspace.AnnUpgradeRequested, ptr.To(time.Now().UTC().Format(time.RFC3339)))
	}
	// Play the kubelet: each upgraded pod becomes Ready.
	for i, old := range olds {
		up := e.upgradedPod(fmt.Sprintf("ws-%d", i), old.Name)
		e.setReady(up.Name)
	}

	type tally struct{ objects, writes map[string]int32 }
	count := func(g gomega.Gomega) tally {
		var list corev1.EventList
		g.Expect(c.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
		out := tally{objects: map[string]int32{}, writes: map[string]int32{}}
		for _, ev := range list.Items {
			out.objects[ev.Reason]++
			out.writes[ev.Reason] += max(ev.Count, 1)
		}
		return out
	}
	// Every workspace upgraded, and its end recorded (the last Event an upgrade makes).
	e.g.Eventually(func(g gomega.Gomega) {
		for i := range olds {
			pods := e.pods(g, fmt.Sprintf("ws-%d", i))
			g.Expect(pods).To(gomega.HaveLen(1))
			for _, p := range pods {
				g.Expect(workspace.TemplateVersion(p)).To(gomega.Equal("v2"))
			}
		}
		g.Expect(count(g).objects[upgrade.ReasonUpgradeSucceeded]).To(gomega.BeEquivalentTo(n))
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())

	// The phase controller has seen each workspace back at Ready (its gauge), so any Phase Event
	// it was going to write is on its way; for a few seconds none may arrive, and the Events stay
	// one start and one end per workspace.
	e.g.Eventually(func() float64 { return gaugeValue(gauge, workspace.PhaseReady) }).WithTimeout(30 * time.Second).Should(gomega.BeNumerically("==", n))
	e.g.Expect(gaugeValue(gauge, workspace.PhaseUpgrading)).To(gomega.BeZero())
	e.g.Consistently(func(g gomega.Gomega) {
		got := count(g)
		g.Expect(got.objects[upgrade.ReasonUpgradeStarted]).To(gomega.BeEquivalentTo(n), "UpgradeStarted Events: %v", got.objects)
		g.Expect(got.objects[upgrade.ReasonUpgradeSucceeded]).To(gomega.BeEquivalentTo(n), "UpgradeSucceeded Events: %v", got.objects)
		var total int32
		for reason, w := range got.writes {
			total += w
			g.Expect(strings.HasPrefix(reason, "Phase")).To(gomega.BeFalse(), "a Phase Event for the upgrade: %v", got.writes)
		}
		g.Expect(total).To(gomega.BeEquivalentTo(2*n), "Event writes per reason: %v", got.writes)
	}).WithTimeout(3 * time.Second).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
}

package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestAnIntentWaitsForTheTemplateCache: a person raises the template's version and writes the
// upgrade intent right after. When the intent reaches the controller before the template cache
// has the new version, the intent was dropped with "UpgradeNotNeeded ... already runs version 1"
// (found by the relist e2e spec, 3 runs in 5). Now the controller asks the API server for the
// template's ConfigMap first, waits while it is ahead of the cache, and upgrades once the cache
// catches up.
func TestAnIntentWaitsForTheTemplateCache(t *testing.T) {
	cfg, c := startAPIServer(t)
	ns := fmt.Sprintf("lag-%d", time.Now().UnixNano())
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	source := "configmap:" + ns + "/ide"
	v1 := ideTemplate("v1", "ide:1", "")
	v1.Source = source
	reg := &fakeTemplates{}
	reg.set(v1)
	e := &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg, clock: &testClock{now: time.Now()}}
	e.start()
	run := e.spawn("jane", "lag")

	// The API server already has version v2; the template cache (reg) still says v1.
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ide", Namespace: ns,
		Labels: map[string]string{"nogoo9/pod-template": "true"}, Annotations: map[string]string{workspace.AnnTemplateVersion: "v2"}}}); err != nil {
		t.Fatal(err)
	}
	e.annotate(run.Name, workspace.AnnUpgradeRequested, ptr.To("true"))
	// Bounded check that nothing drops the intent while the cache lags (the clock does not move, so
	// the controller's own bound on the wait is not reached).
	e.g.Consistently(func(g gomega.Gomega) {
		var p corev1.Pod
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: run.Name}, &p)).To(gomega.Succeed())
		g.Expect(p.Annotations).To(gomega.HaveKey(workspace.AnnUpgradeRequested))
		g.Expect(e.events(g, run.Name)).NotTo(gomega.ContainElement(upgrade.ReasonUpgradeNotNeeded))
	}).WithTimeout(3*time.Second).WithPolling(100*time.Millisecond).Should(gomega.Succeed(), "the intent was dropped while the template cache lagged")

	v2 := ideTemplate("v2", "ide:2", "")
	v2.Source = source
	reg.set(v2)
	e.g.Eventually(func(g gomega.Gomega) {
		var p corev1.Pod
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: workspace.NextPodName(run, "v2")}, &p)).To(gomega.Succeed())
		g.Expect(workspace.TemplateVersion(&p)).To(gomega.Equal("v2"))
	}).WithTimeout(60*time.Second).Should(gomega.Succeed(), "the upgrade to v2 once the cache has it")
}

package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestRecreateGateIsLiftedOnlyOnceTheOldPodIsGone: a Recreate upgrade creates the new pod behind
// nogoo9's scheduling gate, so the scheduler does not try it while the old pod holds the
// ReadWriteOncePod volume; the gate stays while the old pod is still terminating, and goes as soon
// as the old pod is gone from the API server.
func TestRecreateGateIsLiftedOnlyOnceTheOldPodIsGone(t *testing.T) {
	cfg, c := startAPIServer(t)
	ns := newNamespace(t, c, "gate")
	reg := &fakeTemplates{}
	reg.set(ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod))
	e := &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg, clock: &testClock{now: time.Now()}}
	e.start()
	old := e.spawn("dana", "disk")

	// The kubelet's part: the old pod stays terminating until the test lets it go.
	const hold = "test.nogoo9/hold"
	e.g.Expect(c.Patch(context.Background(), old, client.RawPatch(types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, hold))))).To(gomega.Succeed())

	reg.set(ideTemplate("v2", "ide:2", corev1.ReadWriteOncePod))
	e.annotate(old.Name, workspace.AnnUpgradeRequested, ptr.To("true"))
	name := workspace.NextPodName(old, "v2")
	gated := func(g gomega.Gomega) bool {
		var p corev1.Pod
		g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p)).To(gomega.Succeed())
		g.Expect(p.Annotations[workspace.AnnUpgradeStrategy]).To(gomega.Equal(string(upgrade.Recreate)))
		return slices.ContainsFunc(p.Spec.SchedulingGates, func(s corev1.PodSchedulingGate) bool { return s.Name == workspace.GateVolumeRelease })
	}

	// The new pod exists behind the gate and the old one is being deleted.
	e.g.Eventually(func(g gomega.Gomega) {
		g.Expect(gated(g)).To(gomega.BeTrue())
		var p corev1.Pod
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(old), &p)).To(gomega.Succeed())
		g.Expect(p.DeletionTimestamp).NotTo(gomega.BeNil())
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	// While the old pod holds the volume the gate stays, whatever wakes the controller.
	e.poke(name)
	e.g.Consistently(func(g gomega.Gomega) {
		g.Expect(gated(g)).To(gomega.BeTrue())
	}).WithTimeout(2 * time.Second).Should(gomega.Succeed())

	// The old pod goes: the gate is lifted.
	e.g.Expect(c.Patch(context.Background(), old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(gomega.Succeed())
	e.g.Eventually(func(g gomega.Gomega) {
		g.Expect(gated(g)).To(gomega.BeFalse())
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())

	// And the upgrade ends as before once the pod is Ready.
	e.setReady(name)
	e.g.Eventually(func(g gomega.Gomega) {
		p := e.pods(g, "disk")[name]
		g.Expect(p).NotTo(gomega.BeNil())
		g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeStartedAt))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
}

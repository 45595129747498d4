package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

// TestRecreateDeadlineStartsWhenTheGateIsLifted: the old pod's graceful termination takes all but
// 5 s of the upgrade's deadline. The new pod, which has not run yet, gets the whole deadline from
// the moment its gate is lifted: nogoo9/upgrade-started-at is rewritten in the very patch that
// removes the gate (one write, as before), and the upgrade is not rolled back when the first
// deadline passes.
func TestRecreateDeadlineStartsWhenTheGateIsLifted(t *testing.T) {
	cfg, c := startAPIServer(t)
	ns := newNamespace(t, c, "gate-deadline")
	reg := &fakeTemplates{}
	reg.set(ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod))
	e := &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg, clock: &testClock{now: time.Now()}}
	old := e.spawn("erin", "disk")
	name := workspace.NextPodName(old, "v2")
	// The controller's patches of the new pod, counted before each is sent: counted after its
	// answer, a patch the test already saw applied (the gate gone) could still be uncounted.
	var patches atomic.Int32
	e.startWithClient(func(cl client.WithWatch) client.WithWatch {
		return interceptor.NewClient(cl, interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*corev1.Pod); ok && obj.GetName() == name {
					patches.Add(1)
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
		})
	})

	// The kubelet's part: the old pod stays terminating until the test lets it go.
	const hold = "test.nogoo9/hold"
	e.g.Expect(c.Patch(context.Background(), old, client.RawPatch(types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, hold))))).To(gomega.Succeed())
	reg.set(ideTemplate("v2", "ide:2", corev1.ReadWriteOncePod))
	e.annotate(old.Name, workspace.AnnUpgradeRequested, ptr.To("true"))
	var started time.Time
	e.g.Eventually(func(g gomega.Gomega) {
		var p corev1.Pod
		g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p)).To(gomega.Succeed())
		g.Expect(p.Spec.SchedulingGates).To(gomega.ContainElement(corev1.PodSchedulingGate{Name: workspace.GateVolumeRelease}))
		started = upgrade.StartedAt(&p)
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(old), &p)).To(gomega.Succeed())
		g.Expect(p.DeletionTimestamp).NotTo(gomega.BeNil())
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	before := patches.Load()

	// The old pod goes 5 s before the deadline.
	e.clock.Add(started.Add(10*time.Minute - 5*time.Second).Sub(e.clock.Now()))
	lifted := e.clock.Now().UTC().Format(time.RFC3339)
	e.g.Expect(c.Patch(context.Background(), old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(gomega.Succeed())
	e.g.Eventually(func(g gomega.Gomega) {
		var p corev1.Pod
		g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p)).To(gomega.Succeed())
		g.Expect(p.Spec.SchedulingGates).To(gomega.BeEmpty())
		g.Expect(p.Annotations).To(gomega.HaveKeyWithValue(workspace.AnnUpgradeStartedAt, lifted), "the deadline starts with the gate's removal")
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	e.g.Expect(patches.Load()-before).To(gomega.Equal(int32(1)), "the gate and the new deadline are one patch")

	// Half a minute past the first deadline the new pod, still starting, is not rolled back.
	e.clock.Add(35 * time.Second)
	e.poke(name)
	e.g.Consistently(func(g gomega.Gomega) {
		pods := e.pods(g, "disk")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods).To(gomega.HaveKey(name))
	}).WithTimeout(3 * time.Second).Should(gomega.Succeed())
}

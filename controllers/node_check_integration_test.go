package controllers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestTheNodeCheckCopiesNoNode: every pass of every workspace asks whether the nodes of its pods
// still exist (docs/reliability.md, "A node that disappears"). With the cache nogoo9 runs (one
// per watched namespace: controller-runtime's multi-namespace cache), controller-runtime's Get
// of a Node copies the cached object, managed fields included, whatever the caller asks: the
// check asks the set of cached node names first, which copies nothing. The answer stays the
// same: a cached node exists; a node neither the cache nor the API server has is gone, and so is
// a node deleted since, which also wakes the workspaces on it.
func TestTheNodeCheckCopiesNoNode(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "node-check")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-check-%d", time.Now().UnixNano()),
		Labels: map[string]string{"kubernetes.io/hostname": "node-check", "topology.kubernetes.io/zone": "z1"}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	// A second writer, so the node carries two managed-fields entries, as a real one does.
	if err := c.Patch(ctx, node, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"node.alpha.kubernetes.io/ttl":"0"}}}`)), client.FieldOwner("kubelet")); err != nil {
		t.Fatal(err)
	}

	mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
		// Two namespaces, so the cache is a multi-namespace cache, as nogoo9's.
		o.Cache = podcache.OptionsFor([]string{ns, newNamespace(t, c, "node-check-other")})
	})
	managerSeq.Lock()
	managerSeq.n++
	name := fmt.Sprintf("node-check-%d", managerSeq.n)
	managerSeq.Unlock()
	r := &WorkspaceReconciler{Client: c, Reader: mgr.GetCache(), APIReader: mgr.GetAPIReader(), Templates: &fakeTemplates{},
		Recorder: record.NewFakeRecorder(10), Opts: UpgradeOptions{Name: name}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, mgr)

	on := func(n string) []*corev1.Pod {
		return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: corev1.PodSpec{NodeName: n}}}
	}
	waitFor(t, 30*time.Second, "node "+node.Name+" in the set of cached nodes", func() bool { return r.nodes.has(node.Name) })
	gone, err := r.goneNodes(ctx, on(node.Name))
	if err != nil || len(gone) != 0 {
		t.Fatalf("goneNodes(pod on %s, which exists) = %v, %v; want none gone", node.Name, gone, err)
	}
	gone, err = r.goneNodes(ctx, on("node-check-never-existed"))
	if err != nil || !gone["node-check-never-existed"] {
		t.Fatalf("goneNodes(pod on a node that never existed) = %v, %v; want it gone", gone, err)
	}

	// What this avoids: a cache Get of the node (controller-runtime's lookups and the copy of
	// its metadata, managed fields among it) costs dozens of allocations; the set none.
	pods := on(node.Name)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := r.goneNodes(ctx, pods); err != nil {
			t.Fatal(err)
		}
	})
	var copied float64
	{
		meta := nodeMeta()
		if err := mgr.GetCache().Get(ctx, client.ObjectKey{Name: node.Name}, meta); err != nil {
			t.Fatal(err)
		}
		if len(meta.ManagedFields) < 2 {
			t.Fatalf("the cached node has %d managed-fields entries, want at least 2 (the test's premise)", len(meta.ManagedFields))
		}
		copied = testing.AllocsPerRun(200, func() {
			_ = mgr.GetCache().Get(ctx, client.ObjectKey{Name: node.Name}, nodeMeta(), client.UnsafeDisableDeepCopy)
		})
	}
	if allocs > copied/2 {
		t.Errorf("the node check allocates %.0f times per call, more than half of what a cache Get that copies the node costs (%.0f): it copies the node", allocs, copied)
	}
	t.Logf("node check: %.0f allocations per call; a cache Get of the node: %.0f", allocs, copied)

	// The node goes: the set drops it, the check finds it gone (the API server confirms).
	if err := c.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node "+node.Name+" dropped from the set of cached nodes", func() bool { return !r.nodes.has(node.Name) })
	gone, err = r.goneNodes(ctx, on(node.Name))
	if err != nil || !gone[node.Name] {
		t.Fatalf("goneNodes(pod on deleted node %s) = %v, %v; want it gone", node.Name, gone, err)
	}
}

// TestARecreateUpgradeWhoseNewPodLosesItsNodeRollsBack: a Recreate upgrade's new pod is bound to
// a Node that is deleted before the pod is Ready, its old pod gone. The lifecycle planner marks it
// (nogoo9/node-lost) and leaves the upgrade to its planner, which fails it at once (NodeLost) and
// brings the previous pod back from the new pod's record; the pod GC force-deletes the new pod
// right after the rollback pod's create (here before the check that follows it: a pod of a gone
// Node is no delete of the workspace), and the rollback pod stays and starts. Before, the upgrade
// waited for its 10-minute deadline while the GC removed the only pod, record and all, and a
// rollback pod made in time was undone as a deleted workspace's.
func TestARecreateUpgradeWhoseNewPodLosesItsNodeRollsBack(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod), UpgradeOptions{})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-node"}}
	e.g.Expect(c.Create(ctx, node)).To(gomega.Succeed())
	bind := func(p *corev1.Pod) {
		e.g.Expect(c.SubResource("binding").Create(ctx, p, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: e.ns},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node.Name},
		})).To(gomega.Succeed())
	}
	old := e.spawn("jane", "lost")
	bind(old)

	var lostPod atomic.Pointer[corev1.Pod] // the new pod, once bound
	var gcOnce sync.Once
	var gcRan atomic.Bool
	var gcErr atomic.Value
	e.startWithClient(func(cw client.WithWatch) client.WithWatch {
		return interceptor.NewClient(cw, interceptor.Funcs{
			Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				err := cl.Create(ctx, obj, opts...)
				if up := lostPod.Load(); err == nil && up != nil && obj.GetName() == workspace.RollbackPodName(up) {
					// The pod GC removes the pod of the gone Node (grace period 0).
					gcOnce.Do(func() {
						gcRan.Store(true)
						if derr := c.Delete(ctx, up, client.GracePeriodSeconds(0), client.Preconditions{UID: &up.UID}); derr != nil {
							gcErr.Store(derr.Error())
						}
					})
				}
				return err
			},
		})
	})
	e.reg.set(ideTemplate("v2", "ide:2", corev1.ReadWriteOncePod))
	e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
	created := e.recreatedPod("lost", old.Name)
	// The kubelet's end of the old pod's delete; the new pod is then let through its gate.
	e.g.Eventually(func(g gomega.Gomega) {
		g.Expect(e.get(old.Name).DeletionTimestamp).NotTo(gomega.BeNil())
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	e.g.Expect(c.Delete(ctx, old, client.GracePeriodSeconds(0), client.Preconditions{UID: &old.UID})).To(gomega.Succeed())
	e.g.Eventually(func(g gomega.Gomega) {
		g.Expect(e.only(g, "lost").Spec.SchedulingGates).To(gomega.BeEmpty())
	}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the new pod ungated once the old pod is gone")
	bind(created)
	up := e.get(created.Name)
	lostPod.Store(up.DeepCopy())
	e.g.Expect(up.Annotations).To(gomega.HaveKey(workspace.AnnRollbackSpec), "the upgrade is in flight")

	e.g.Expect(c.Delete(ctx, node)).To(gomega.Succeed())
	var back *corev1.Pod
	e.g.Eventually(func(g gomega.Gomega) {
		back = e.only(g, "lost")
		g.Expect(back.Name).To(gomega.Equal(workspace.RollbackPodName(up)), "the rollback pod")
	}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the upgrade is rolled back well before its deadline")
	e.g.Expect(gcRan.Load()).To(gomega.BeTrue(), "the pod GC removed the lost pod right after the rollback pod's create")
	e.g.Expect(gcErr.Load()).To(gomega.BeNil(), "the pod GC's delete")
	e.g.Expect(back.Annotations[workspace.AnnUpgradeStrategy]).To(gomega.Equal(string(upgrade.Rollback)))
	e.g.Expect(workspace.TemplateVersion(back)).To(gomega.Equal("v1"))
	e.g.Expect(back.Annotations[workspace.AnnLastUpgradeError]).To(gomega.ContainSubstring(upgrade.ReasonNodeLost))
	e.expectIdentity(e.g, back, old)
	e.g.Eventually(func(g gomega.Gomega) {
		p := e.only(g, "lost")
		g.Expect(p.UID).To(gomega.Equal(back.UID), "the rollback pod is not undone as a deleted workspace")
		g.Expect(p.Spec.SchedulingGates).To(gomega.BeEmpty(), "released to the scheduler")
	}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the rollback pod starts once the lost pod is gone")
	e.g.Consistently(func(g gomega.Gomega) {
		g.Expect(e.only(g, "lost").UID).To(gomega.Equal(back.UID))
	}).WithTimeout(2 * time.Second).Should(gomega.Succeed())
}

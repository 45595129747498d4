package controllers

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestEvictionOnAPIServer: a drain evicts a workspace's pod through the Eviction API (the API
// server marks it DisruptionTarget=True and deletes it); the workspace survives as a gated copy
// that starts once the evicted pod is gone. A person's delete still deletes the workspace.
// envtest: no scheduler, no kubelet; the test binds the pods and plays the kubelet's end of a
// delete with a grace-0 delete.
func TestEvictionOnAPIServer(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()

	// bound spawns jane's workspace id and binds its pod to a node, as kube-scheduler does: a
	// bound pod's graceful delete waits for a kubelet, as on a real node.
	bound := func(e *upgradeEnv, id string) *corev1.Pod {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-" + id}}
		e.g.Expect(e.c.Create(ctx, node)).To(gomega.Succeed())
		run := e.spawn("jane", id)
		e.g.Expect(e.c.SubResource("binding").Create(ctx, run, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: e.ns},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node.Name},
		})).To(gomega.Succeed())
		return e.get(run.Name)
	}
	// bindTo binds p to the node of its workspace's first pod (bound made it).
	bindTo := func(e *upgradeEnv, p *corev1.Pod) {
		e.g.Expect(e.c.SubResource("binding").Create(ctx, p, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: e.ns},
			Target:     corev1.ObjectReference{Kind: "Node", Name: e.ns + "-" + workspace.ID(p)},
		})).To(gomega.Succeed())
	}
	evict := func(e *upgradeEnv, p *corev1.Pod) {
		e.g.Expect(e.c.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: e.ns},
		})).To(gomega.Succeed())
		e.g.Expect(lifecycle.Disrupted(e.get(p.Name))).To(gomega.BeTrue(), "the API server marks an evicted pod")
	}
	// terminating waits until pod name is being deleted (bound to a node, it waits for a kubelet:
	// a long preStop).
	terminating := func(e *upgradeEnv, name string) {
		e.g.Eventually(func(g gomega.Gomega) {
			var p corev1.Pod
			g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &p)).To(gomega.Succeed())
			g.Expect(p.DeletionTimestamp).NotTo(gomega.BeNil())
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "pod %s deleted by nogoo9", name)
	}
	claims := func(p *corev1.Pod) []string {
		var out []string
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				out = append(out, v.PersistentVolumeClaim.ClaimName)
			}
		}
		return out
	}

	t.Run("a drained workspace comes back as a gated copy with its identity and claims, which starts once the evicted pod is gone", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod), UpgradeOptions{})
		run := bound(e, "drained")
		e.g.Expect(claims(run)).NotTo(gomega.BeEmpty())
		e.start()

		// kubectl drain: the Eviction API.
		e.g.Expect(e.c.SubResource("eviction").Create(ctx, run, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: e.ns},
		})).To(gomega.Succeed())
		evicted := e.get(run.Name)
		e.g.Expect(evicted.DeletionTimestamp).NotTo(gomega.BeNil(), "the evicted pod waits for its kubelet")
		e.g.Expect(lifecycle.Disrupted(evicted)).To(gomega.BeTrue(), "the API server marks an evicted pod: %+v", evicted.Status.Conditions)

		var cp *corev1.Pod
		e.g.Eventually(func(g gomega.Gomega) {
			cp = e.only(g, "drained")
			g.Expect(cp.Name).To(gomega.Equal(lifecycle.StoppedPodName(run)))
			g.Expect(workspace.IsStoppedPod(cp)).To(gomega.BeTrue())
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "a gated copy keeps the workspace")
		e.expectIdentity(e.g, cp, run)
		e.g.Expect(cp.Annotations).NotTo(gomega.HaveKey(workspace.AnnStopRequested), "the copy starts: nobody stopped the workspace")
		e.g.Expect(cp.Annotations[workspace.AnnStoppedFromUID]).To(gomega.Equal(string(run.UID)))
		e.g.Expect(claims(cp)).To(gomega.Equal(claims(run)))
		e.g.Expect(workspace.TemplateVersion(cp)).To(gomega.Equal(workspace.TemplateVersion(run)))

		e.g.Consistently(func(g gomega.Gomega) {
			p := e.only(g, "drained")
			g.Expect(p.UID).To(gomega.Equal(cp.UID), "the copy is not undone as a deleted workspace")
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeTrue(), "the copy waits while the evicted pod mounts its claim")
		}).WithTimeout(3 * time.Second).Should(gomega.Succeed())

		// The kubelet's end of the delete.
		e.g.Expect(e.c.Delete(ctx, evicted, client.GracePeriodSeconds(0), client.Preconditions{UID: &evicted.UID})).To(gomega.Succeed())
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "drained")
			g.Expect(p.UID).To(gomega.Equal(cp.UID))
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeFalse(), "released to the scheduler")
			g.Expect(p.Spec.NodeName).To(gomega.BeEmpty())
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the copy starts once the evicted pod is gone")
		e.g.Eventually(func(g gomega.Gomega) {
			g.Expect(strings.Join(e.events(g, run.Name), ",")).To(gomega.ContainSubstring(lifecycle.ReasonEvictionReplaced))
		}).WithTimeout(10*time.Second).Should(gomega.Succeed(), "an Event says what happened")
		for _, name := range claims(run) {
			var pvc corev1.PersistentVolumeClaim
			e.g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &pvc)).To(gomega.Succeed(), "claim %s kept", name)
			e.g.Expect(pvc.DeletionTimestamp).To(gomega.BeNil())
		}
	})

	// Before stop 52 the old pod, being deleted without DisruptionTarget, read as the owner's
	// delete of the workspace: nothing was copied, and the workspace was gone with its pods.
	t.Run("a drain that evicts the new pod of a side-by-side upgrade while the old pod is still terminating keeps the workspace as the new pod's copy", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		old := bound(e, "cutover")
		e.start()
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
		up := e.upgradedPod("cutover", old.Name)
		bindTo(e, up)
		e.setReady(up.Name)
		terminating(e, old.Name) // the upgrade succeeded; the old pod's preStop runs

		evict(e, e.get(up.Name))
		e.g.Eventually(func(g gomega.Gomega) {
			cp := e.only(g, "cutover")
			g.Expect(cp.Name).To(gomega.Equal(lifecycle.StoppedPodName(up)), "the evicted new pod's copy")
			g.Expect(workspace.TemplateVersion(cp)).To(gomega.Equal("v2"))
			e.expectIdentity(g, cp, old)
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the workspace survives the drain")
	})

	t.Run("a drain that evicts the old pod of a failed side-by-side upgrade while its new pod is still terminating keeps the workspace as the old pod's copy", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", ""), UpgradeOptions{Timeout: 10 * time.Minute})
		old := bound(e, "failed")
		e.start()
		e.reg.set(ideTemplate("v2", "registry.invalid/ide:2", ""))
		e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
		up := e.upgradedPod("failed", old.Name)
		bindTo(e, up)
		e.failPastDeadline(up.Name, "ErrImagePull", `failed to pull image "registry.invalid/ide:2": not found`)
		terminating(e, up.Name) // the upgrade failed; the new pod's preStop runs
		e.g.Expect(e.get(old.Name).Annotations[workspace.AnnLastUpgradeError]).To(gomega.ContainSubstring("ErrImagePull"))

		evict(e, e.get(old.Name))
		e.g.Eventually(func(g gomega.Gomega) {
			cp := e.only(g, "failed")
			g.Expect(cp.Name).To(gomega.Equal(lifecycle.StoppedPodName(old)), "the evicted old pod's copy")
			g.Expect(workspace.TemplateVersion(cp)).To(gomega.Equal("v1"))
			e.expectIdentity(g, cp, old)
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the workspace survives the drain")
	})

	// Before, the lifecycle planner copied the evicted new pod without the upgrade's record (bound
	// to the new pod's name): the copy ran the new version with no deadline and no rollback.
	t.Run("a drain that evicts a Recreate upgrade's new pod before it is Ready rolls the upgrade back from the pod's record and copies nothing", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod), UpgradeOptions{})
		old := bound(e, "recreate")
		e.start()
		e.reg.set(ideTemplate("v2", "ide:2", corev1.ReadWriteOncePod))
		e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
		up := e.recreatedPod("recreate", old.Name)
		terminating(e, old.Name)
		// The kubelet's end of the old pod's delete; the new pod is then let through its gate.
		e.g.Expect(e.c.Delete(ctx, old, client.GracePeriodSeconds(0), client.Preconditions{UID: &old.UID})).To(gomega.Succeed())
		e.g.Eventually(func(g gomega.Gomega) {
			g.Expect(e.only(g, "recreate").Spec.SchedulingGates).To(gomega.BeEmpty())
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the new pod ungated once the old pod is gone")
		bindTo(e, up)
		e.g.Expect(e.get(up.Name).Annotations).To(gomega.HaveKey(workspace.AnnRollbackSpec), "the upgrade is in flight")

		evict(e, e.get(up.Name))
		var back *corev1.Pod
		e.g.Eventually(func(g gomega.Gomega) {
			back = e.only(g, "recreate")
			g.Expect(back.Name).To(gomega.Equal(workspace.RollbackPodName(up)), "the rollback pod, not a copy of the evicted one")
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the upgrade is rolled back")
		e.g.Expect(back.Annotations[workspace.AnnUpgradeStrategy]).To(gomega.Equal(string(upgrade.Rollback)))
		e.g.Expect(workspace.TemplateVersion(back)).To(gomega.Equal("v1"))
		e.g.Expect(back.Spec.Containers[0].Image).To(gomega.Equal("ide:1"))
		e.g.Expect(back.Annotations[workspace.AnnLastUpgradeError]).To(gomega.ContainSubstring(upgrade.ReasonEvicted))
		e.g.Expect(claims(back)).To(gomega.Equal(claims(up)))
		e.expectIdentity(e.g, back, old)

		e.g.Consistently(func(g gomega.Gomega) {
			p := e.only(g, "recreate")
			g.Expect(p.UID).To(gomega.Equal(back.UID), "the rollback pod is not undone as a deleted workspace")
			g.Expect(p.Spec.SchedulingGates).NotTo(gomega.BeEmpty(), "it waits while the evicted pod mounts its claim")
			var cp corev1.Pod
			g.Expect(apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: lifecycle.StoppedPodName(up)}, &cp))).To(gomega.BeTrue(), "no copy of the evicted pod")
		}).WithTimeout(3 * time.Second).Should(gomega.Succeed())

		evicted := e.get(up.Name)
		e.g.Expect(e.c.Delete(ctx, evicted, client.GracePeriodSeconds(0), client.Preconditions{UID: &evicted.UID})).To(gomega.Succeed())
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "recreate")
			g.Expect(p.UID).To(gomega.Equal(back.UID))
			g.Expect(p.Spec.SchedulingGates).To(gomega.BeEmpty(), "released to the scheduler")
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the rollback pod starts once the evicted pod is gone")
	})

	// Before, the check after the create read the old pod's eviction as the owner's delete and
	// deleted the new pod; bound to a node, it terminated without DisruptionTarget, so nothing
	// was copied either, and the workspace was gone.
	t.Run("an eviction of the old pod right before a side-by-side upgrade's create is no delete of the workspace: the new pod, bound at once, stays", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		old := bound(e, "oldevicted")
		newName := workspace.NextPodName(old, "v2")
		var once sync.Once
		e.startWithClient(func(cw client.WithWatch) client.WithWatch {
			return interceptor.NewClient(cw, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					mine := obj.GetName() == newName
					if mine {
						// A drain evicts the old pod after the pass planned from the cache.
						once.Do(func() {
							if err := c.SubResource("eviction").Create(ctx, old, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: old.Name, Namespace: e.ns}}); err != nil {
								t.Errorf("evict %s: %v", old.Name, err)
							}
						})
					}
					err := cl.Create(ctx, obj, opts...)
					if err == nil && mine {
						// The scheduler binds the new pod at once.
						if berr := c.SubResource("binding").Create(ctx, obj, &corev1.Binding{
							ObjectMeta: metav1.ObjectMeta{Name: newName, Namespace: e.ns},
							Target:     corev1.ObjectReference{Kind: "Node", Name: e.ns + "-oldevicted"},
						}); berr != nil {
							t.Errorf("bind %s: %v", newName, berr)
						}
					}
					return err
				},
			})
		})
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
		e.g.Eventually(func(g gomega.Gomega) {
			g.Expect(lifecycle.Disrupted(e.get(old.Name))).To(gomega.BeTrue())
			g.Expect(e.only(g, "oldevicted").Name).To(gomega.Equal(newName))
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the old pod evicted, the new pod live")
		e.g.Consistently(func(g gomega.Gomega) {
			p := e.only(g, "oldevicted")
			g.Expect(p.Name).To(gomega.Equal(newName), "the new pod keeps the workspace")
			g.Expect(p.Spec.NodeName).NotTo(gomega.BeEmpty())
		}).WithTimeout(3 * time.Second).Should(gomega.Succeed())
		e.expectIdentity(e.g, e.get(newName), old)
	})

	t.Run("a person's kubectl delete of the workspace's pod still deletes the workspace", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod), UpgradeOptions{})
		run := bound(e, "deleted")
		e.start()
		e.g.Expect(e.c.Delete(ctx, run)).To(gomega.Succeed())
		e.g.Consistently(func(g gomega.Gomega) {
			g.Expect(e.pods(g, "deleted")).To(gomega.BeEmpty(), "no copy")
		}).WithTimeout(3 * time.Second).Should(gomega.Succeed())
		e.g.Expect(e.c.Delete(ctx, run, client.GracePeriodSeconds(0))).To(gomega.Succeed())
		var gone corev1.Pod
		e.g.Expect(apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(run), &gone))).To(gomega.BeTrue())
		e.g.Consistently(func(g gomega.Gomega) {
			g.Expect(e.pods(g, "deleted")).To(gomega.BeEmpty(), "no copy")
		}).WithTimeout(2 * time.Second).Should(gomega.Succeed())
	})
}

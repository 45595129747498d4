package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestLifecycleOnAPIServer runs stop, start and culling stories on a real kube-apiserver
// (envtest: no scheduler, no kubelet; the test plays the kubelet and moves the clock).
func TestLifecycleOnAPIServer(t *testing.T) {
	cfg, c := startAPIServer(t)

	t.Run("a controller that died between creating the stopped pod and deleting the running one finishes the stop, and kubectl starts it again", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod), UpgradeOptions{})
		run := e.spawn("jane", "demo")
		why := "for the weekend"
		e.annotate(run.Name, workspace.AnnStopRequested, &why)
		// The state a kill -9 after step 1 leaves: the stopped copy exists, the running pod too.
		stopped, full := e.createStoppedCopy(run.Name, nil)

		e.start()
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "demo")
			g.Expect(p.Name).To(gomega.Equal(stopped.Name))
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeTrue())
			g.Expect(p.Annotations[workspace.AnnStopRequested]).To(gomega.Equal(why))
			e.expectIdentity(g, p, run)
			g.Expect(p.Spec.Volumes).To(gomega.Equal(full.Spec.Volumes[:1]), "the same claim, without the token volume")
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the running pod is deleted, the stopped one stays")

		e.annotate(stopped.Name, workspace.AnnStopRequested, nil) // kubectl annotate ... nogoo9/stop-requested-
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "demo")
			g.Expect(p.Name).To(gomega.Equal(stopped.Name))
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeFalse(), "the gate is removed")
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnStoppedFromUID))
			g.Expect(workspace.TemplateVersion(p)).To(gomega.Equal("v1"))
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "started on the same pod and version")
	})

	t.Run("an idle workspace is culled after its template's timeout, with the reason in its message and an Event; activity postpones it", func(t *testing.T) {
		tmpl := ideTemplate("v1", "ide:1", "")
		tmpl.Annotations = map[string]string{workspace.AnnIdleTimeout: "1h"}
		e := newNamespaceEnv(t, cfg, c, tmpl, UpgradeOptions{})
		e.start()
		run := e.spawn("jane", "idle")

		// 50 minutes later a proxy records activity; at 1h10m the pod is not idle for an hour yet.
		e.clock.Add(50 * time.Minute)
		at := e.clock.Now().UTC().Format(time.RFC3339)
		e.annotate(run.Name, workspace.AnnLastActivity, &at)
		e.cached(run.Name, func(g gomega.Gomega, p *corev1.Pod) {
			g.Expect(p.Annotations[workspace.AnnLastActivity]).To(gomega.Equal(at))
		})
		e.clock.Add(20 * time.Minute)
		e.poke(run.Name)
		e.g.Consistently(func(g gomega.Gomega) {
			g.Expect(e.only(g, "idle").Annotations).NotTo(gomega.HaveKey(workspace.AnnStopRequested))
		}).WithTimeout(2*time.Second).Should(gomega.Succeed(), "activity 20 minutes ago keeps it running")

		e.clock.Add(41 * time.Minute)
		e.poke(run.Name)
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "idle")
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeTrue())
			g.Expect(p.Annotations[workspace.AnnStopRequested]).To(gomega.ContainSubstring("without activity (idle timeout 1h0m0s)"))
			st := workspace.Phase([]*corev1.Pod{p}, e.clock.Now())
			g.Expect(st.Phase).To(gomega.Equal(workspace.PhaseStopped))
			g.Expect(st.Message).To(gomega.ContainSubstring("without activity"))
			g.Expect(strings.Join(e.events(g, run.Name), ",")).To(gomega.ContainSubstring(lifecycle.ReasonCulled))
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "culled and stopped")
	})

	t.Run("a workspace stopped for longer than its idle timeout and started again is not culled before anyone can use it; an hour unused after the start is", func(t *testing.T) {
		tmpl := ideTemplate("v1", "ide:1", "")
		tmpl.Annotations = map[string]string{workspace.AnnIdleTimeout: "1h"}
		e := newNamespaceEnv(t, cfg, c, tmpl, UpgradeOptions{})
		e.start()
		stopped, _ := e.stopped("night", "for the night")

		// Ten hours later its owner starts it. Its pod was created at the stop and no kubelet has
		// written its status yet (envtest has none; a real one writes only once it is scheduled).
		e.clock.Add(10 * time.Hour)
		startedAt := e.clock.Now().UTC().Format(time.RFC3339)
		e.annotate(stopped.Name, workspace.AnnStopRequested, nil)
		e.cached(stopped.Name, func(g gomega.Gomega, p *corev1.Pod) {
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeFalse(), "the gate is removed")
			g.Expect(p.Annotations[workspace.AnnStartedAt]).To(gomega.Equal(startedAt), "the start is stamped with the controller's clock")
		})
		e.poke(stopped.Name)
		e.g.Consistently(func(g gomega.Gomega) {
			p := e.only(g, "night")
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnStopRequested))
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeFalse())
		}).WithTimeout(2*time.Second).Should(gomega.Succeed(), "just started: not idle, whatever the stop's time")

		e.clock.Add(61 * time.Minute)
		e.poke(stopped.Name)
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "night")
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeTrue())
			g.Expect(p.Annotations[workspace.AnnStopRequested]).To(gomega.ContainSubstring("without activity (idle timeout 1h0m0s)"))
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "unused for an hour after its start: culled")
	})

	t.Run("a start with the update policy on-start comes back on the template's latest version with the same identity", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		stopped, run := e.stopped("fresh", "true")

		v2 := ideTemplate("v2", "ide:2", "")
		v2.Annotations = map[string]string{"nogoo9/update-policy": "on-start"}
		e.reg.set(v2)
		e.annotate(stopped.Name, workspace.AnnStopRequested, nil)
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "fresh")
			g.Expect(p.Name).To(gomega.Equal(lifecycle.StartedPodName(stopped)))
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeFalse())
			g.Expect(workspace.TemplateVersion(p)).To(gomega.Equal("v2"))
			g.Expect(p.Spec.Containers[0].Image).To(gomega.Equal("ide:2"))
			e.expectIdentity(g, p, run)
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "started on v2, the stopped pod deleted")
	})

	t.Run("a workspace whose node is deleted reports NodeLost and comes back with the same identity and claims, never two pods serving", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod), UpgradeOptions{})
		ctx := context.Background()
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-node"}}
		e.g.Expect(e.c.Create(ctx, node)).To(gomega.Succeed())
		run := e.spawn("jane", "lost")
		// The scheduler's binding, as kube-scheduler writes it.
		e.g.Expect(e.c.SubResource("binding").Create(ctx, run, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: e.ns},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node.Name},
		})).To(gomega.Succeed())
		run = e.get(run.Name)
		e.g.Expect(run.Spec.NodeName).To(gomega.Equal(node.Name))
		e.start()
		e.g.Consistently(func(g gomega.Gomega) {
			p := e.only(g, "lost")
			g.Expect(p.UID).To(gomega.Equal(run.UID))
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnNodeLost))
		}).WithTimeout(2*time.Second).Should(gomega.Succeed(), "a pod on an existing node is left alone")

		e.g.Expect(e.c.Delete(ctx, node)).To(gomega.Succeed())
		var back *corev1.Pod
		e.g.Eventually(func(g gomega.Gomega) {
			pods := e.pods(g, "lost")
			g.Expect(pods).To(gomega.HaveLen(1), "one live pod")
			for _, p := range pods {
				back = p
			}
			g.Expect(back.UID).NotTo(gomega.Equal(run.UID), "the lost pod is deleted")
			g.Expect(workspace.IsStoppedPod(back)).To(gomega.BeFalse(), "the copy is released to the scheduler")
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the lost pod replaced")
		e.expectIdentity(e.g, back, run)
		e.g.Expect(back.Name).To(gomega.Equal(lifecycle.StoppedPodName(run)))
		e.g.Expect(workspace.TemplateVersion(back)).To(gomega.Equal(workspace.TemplateVersion(run)))
		e.g.Expect(back.Spec.NodeName).To(gomega.BeEmpty())
		e.g.Expect(back.Annotations).NotTo(gomega.HaveKey(workspace.AnnNodeLost))
		claims := func(p *corev1.Pod) []string {
			var out []string
			for _, v := range p.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					out = append(out, v.PersistentVolumeClaim.ClaimName)
				}
			}
			return out
		}
		e.g.Expect(claims(back)).To(gomega.Equal(claims(run)))
		e.g.Expect(claims(back)).NotTo(gomega.BeEmpty())
		var gonePod corev1.Pod
		e.g.Expect(apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(run), &gonePod))).To(gomega.BeTrue(), "the lost pod is gone, not waiting for a kubelet")
		e.g.Eventually(func(g gomega.Gomega) {
			reasons := strings.Join(e.events(g, run.Name), ",")
			g.Expect(reasons).To(gomega.ContainSubstring(lifecycle.ReasonNodeLost))
			g.Expect(reasons).To(gomega.ContainSubstring(lifecycle.ReasonNodeLostReplaced))
		}).WithTimeout(10*time.Second).Should(gomega.Succeed(), "Events say what happened")
		for _, name := range claims(run) {
			var pvc corev1.PersistentVolumeClaim
			e.g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &pvc)).To(gomega.Succeed(), "claim %s kept", name)
			e.g.Expect(pvc.DeletionTimestamp).To(gomega.BeNil())
		}
	})
}

// stopped spawns jane's workspace id, asks for its stop with why, and returns its stopped pod once
// the controller (started) has stopped it, and the running pod it was.
func (e *upgradeEnv) stopped(id, why string) (stopped, run *corev1.Pod) {
	e.t.Helper()
	run = e.spawn("jane", id)
	e.annotate(run.Name, workspace.AnnStopRequested, &why)
	e.g.Eventually(func(g gomega.Gomega) {
		stopped = e.only(g, id)
		g.Expect(workspace.IsStoppedPod(stopped)).To(gomega.BeTrue())
	}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "stopped")
	return stopped, run
}

// createStoppedCopy creates the stopped copy of the running pod name as a stop's first step makes
// it (with set added to its annotations), and returns it and the running pod it was made from.
func (e *upgradeEnv) createStoppedCopy(name string, set map[string]string) (stopped, from *corev1.Pod) {
	e.t.Helper()
	from = e.get(name)
	if set == nil {
		set = map[string]string{}
	}
	set[workspace.AnnStoppedFromUID] = string(from.UID)
	stopped, err := lifecycle.StoppedPod(from, lifecycle.StoppedPodName(from), set)
	e.g.Expect(err).NotTo(gomega.HaveOccurred())
	e.g.Expect(e.c.Create(context.Background(), stopped)).To(gomega.Succeed())
	return stopped, from
}

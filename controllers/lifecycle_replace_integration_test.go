package controllers

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestLifecycleReplacementsOnAPIServer: the stories where nogoo9 replaces a workspace's pod by
// one it made from it (a stop, a start on the latest version) while a person writes on the pod
// that goes, or the API server refuses the new pod. The test sets up the pods as a crash or a
// lagging front end leaves them, then starts the controller.
func TestLifecycleReplacementsOnAPIServer(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	onStartV2 := func(e *upgradeEnv) {
		v2 := ideTemplate("v2", "ide:2", "")
		v2.Annotations = map[string]string{workspace.AnnUpdatePolicy: "on-start"}
		e.reg.set(v2)
	}
	// stoppedWithoutItsPod leaves workspace id stopped: its stopped pod (annotations set added),
	// the running pod it was copied from gone.
	stoppedWithoutItsPod := func(e *upgradeEnv, id string, set map[string]string) *corev1.Pod {
		s, run := e.createStoppedCopy(e.spawn("jane", id).Name, set)
		e.g.Expect(e.c.Delete(ctx, run)).To(gomega.Succeed()) // never bound: removed at once
		e.g.Eventually(func(g gomega.Gomega) {
			g.Expect(apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(run), &corev1.Pod{}))).To(gomega.BeTrue())
		}).WithTimeout(10 * time.Second).Should(gomega.Succeed())
		return s
	}

	t.Run("a maintenance and a pin written on the running pod after its stopped copy was made stay with the stopped workspace", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		run := e.spawn("jane", "demo")
		why := "for the weekend"
		e.annotate(run.Name, workspace.AnnStopRequested, &why)
		stopped, _ := e.createStoppedCopy(run.Name, nil)
		// An admin, whose front end does not show the stopped pod yet, writes on the running pod.
		e.annotate(run.Name, workspace.AnnMaintenance, str("disk migration"))
		e.annotate(run.Name, workspace.AnnPinned, str("true"))

		e.start()
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "demo")
			g.Expect(p.Name).To(gomega.Equal(stopped.Name))
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeTrue())
			g.Expect(p.Annotations[workspace.AnnMaintenance]).To(gomega.Equal("disk migration"))
			g.Expect(p.Annotations[workspace.AnnPinned]).To(gomega.Equal("true"))
			g.Expect(p.Annotations[workspace.AnnStopRequested]).To(gomega.Equal(why))
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the running pod is deleted, its stopped copy keeps what the admin wrote")
	})

	t.Run("a stop written only on the stopped pod while a start on the latest version runs its new pod stops the new pod", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		why := "stopped by its owner"
		s := stoppedWithoutItsPod(e, "demo", map[string]string{workspace.AnnStopRequested: why})
		onStartV2(e)
		// The start's new pod, as the controller made it before the stop; the front end, whose
		// cache did not show it, wrote the stop on the stopped pod only.
		tmpl, _ := e.reg.Get("ide")
		n, claims, err := spawnerBuild(tmpl, s, lifecycle.StartedPodName(s))
		e.g.Expect(err).NotTo(gomega.HaveOccurred())
		e.g.Expect(claims).To(gomega.BeEmpty())
		n.Namespace, n.Name, n.GenerateName = e.ns, lifecycle.StartedPodName(s), ""
		upgrade.PreserveIdentity(n, s)
		n.Annotations[workspace.AnnStartedFromUID] = string(s.UID)
		e.g.Expect(e.c.Create(ctx, n)).To(gomega.Succeed())
		e.setReady(n.Name)

		e.start()
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "demo")
			g.Expect(p.Name).To(gomega.Equal(lifecycle.StoppedPodName(n)), "the new pod's stopped copy")
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeTrue())
			g.Expect(workspace.TemplateVersion(p)).To(gomega.Equal("v2"))
			g.Expect(p.Annotations[workspace.AnnStopRequested]).To(gomega.Equal(why))
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "stopped on the new version, no pod running")
	})

	t.Run("a start on the latest version that the API server refuses starts the workspace on its own version, with a Warning", func(t *testing.T) {
		e := newNamespaceEnv(t, cfg, c, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		s := stoppedWithoutItsPod(e, "demo", nil)
		onStartV2(e)
		refused := lifecycle.StartedPodName(s)
		var attempts atomic.Int32
		e.startWithClient(func(cl client.WithWatch) client.WithWatch {
			return interceptor.NewClient(cl, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*corev1.Pod); ok && obj.GetName() == refused {
						attempts.Add(1)
						return apierrors.NewForbidden(corev1.Resource("pods"), refused,
							errors.New(`violates PodSecurity "restricted:latest": runAsNonRoot != true`))
					}
					return cl.Create(ctx, obj, opts...)
				},
			})
		})
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.only(g, "demo")
			g.Expect(p.Name).To(gomega.Equal(s.Name))
			g.Expect(workspace.IsStoppedPod(p)).To(gomega.BeFalse(), "the gate is removed")
			g.Expect(workspace.TemplateVersion(p)).To(gomega.Equal("v1"))
			var list corev1.EventList
			g.Expect(e.c.List(ctx, &list, client.InNamespace(e.ns))).To(gomega.Succeed())
			var warnings []string
			for _, ev := range list.Items {
				if ev.InvolvedObject.Name == s.Name && ev.Type == corev1.EventTypeWarning && ev.Reason == lifecycle.ReasonStarting {
					warnings = append(warnings, ev.Message)
				}
			}
			g.Expect(warnings).To(gomega.HaveLen(1))
			g.Expect(warnings[0]).To(gomega.And(gomega.ContainSubstring("refused pod "+refused), gomega.ContainSubstring("PodSecurity"),
				gomega.ContainSubstring("on its version v1")))
		}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "started on v1 with a Warning that says why")
		e.g.Expect(attempts.Load()).To(gomega.BeNumerically(">=", 1))
	})
}

// TestLifecycleStaleStartKeepsTheStop: a pass whose cache does not show the stop written on the
// stopped pod yet plans to finish a start on the latest version by deleting the stopped pod. The
// delete is conditional on the stopped pod as the cache showed it, so it fails, and the stop,
// which the API already answered, is not deleted with the pod.
func TestLifecycleStaleStartKeepsTheStop(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "stale-start")
	reg := &fakeTemplates{}
	reg.set(ideTemplate("v1", "ide:1", ""))
	e := &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg, clock: &testClock{now: time.Now()}}
	run := e.spawn("jane", "demo")
	s, _ := e.createStoppedCopy(run.Name, nil)
	e.g.Expect(c.Delete(ctx, run)).To(gomega.Succeed())
	v2 := ideTemplate("v2", "ide:2", "")
	v2.Annotations = map[string]string{workspace.AnnUpdatePolicy: "on-start"}
	reg.set(v2)
	n, _, err := spawnerBuild(v2, s, lifecycle.StartedPodName(s))
	e.g.Expect(err).NotTo(gomega.HaveOccurred())
	n.Namespace, n.Name, n.GenerateName = ns, lifecycle.StartedPodName(s), ""
	upgrade.PreserveIdentity(n, s)
	n.Annotations[workspace.AnnStartedFromUID] = string(s.UID)
	e.g.Expect(c.Create(ctx, n)).To(gomega.Succeed())
	e.setReady(n.Name)

	// The cache: both pods, the stopped one as it was before the stop.
	view := []*corev1.Pod{e.get(s.Name), e.get(n.Name)}
	for _, p := range view {
		_, _ = workspace.StripPod(p) // as the informer holds them
	}
	why := "stopped by its owner"
	e.annotate(s.Name, workspace.AnnStopRequested, &why)

	r := snapshotReconciler("stale-start-test", c, snapshotCache{pods: view}, c, reg, record.NewFakeRecorder(100), e.clock.Now)
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "demo"}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	var after corev1.Pod
	e.g.Expect(c.Get(ctx, client.ObjectKeyFromObject(s), &after)).To(gomega.Succeed(), "the stopped pod with the stop is not deleted")
	e.g.Expect(after.DeletionTimestamp).To(gomega.BeNil(), "the stopped pod with the stop is not deleted")
	e.g.Expect(after.Annotations[workspace.AnnStopRequested]).To(gomega.Equal(why))
}

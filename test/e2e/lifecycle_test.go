package e2e

import (
	"context"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/standin"
	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// lcPods lists the workspace's pods in ns: live ones and all.
func lcPods(g Gomega, ns, id string) (live, all []corev1.Pod) {
	var list corev1.PodList
	g.Expect(K8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(Succeed())
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live, list.Items
}

// lcExpectStopped waits until the workspace has exactly one pod, held by the stop gate, with no
// node, carrying identity (the annotations and labels of the running pod) and mounting claims.
func lcExpectStopped(ns, id string, identity map[string]string, claims []string) corev1.Pod {
	GinkgoHelper()
	var stopped corev1.Pod
	Eventually(func(g Gomega) {
		_, all := lcPods(g, ns, id)
		g.Expect(all).To(HaveLen(1), "only the stopped pod is left")
		stopped = all[0]
		g.Expect(workspace.IsStoppedPod(&stopped)).To(BeTrue(), "pod %s carries the stop gate", stopped.Name)
		g.Expect(stopped.Spec.NodeName).To(BeEmpty(), "a stopped pod uses no node")
		g.Expect(identityOf(&stopped)).To(Equal(identity))
		g.Expect(claimNames(&stopped)).To(Equal(claims))
	}).Should(Succeed(), "workspace %s stopped with its identity and claims", id)
	return stopped
}

// lcIdleTimeout is the idle timeout of the culling spec's template: short, since the culler's
// clock is real, but with room for a loaded 2-core machine, where a busy workspace's activity
// must go from the proxy to the pod's annotation (a write every --activity-write-interval) and on
// to the controller's cache well within it.
const lcIdleTimeout = 30 * time.Second

// lcTemplate is a template with a ReadWriteOncePod claim "home" of class, and annotations.
func lcTemplate(ns, name, class string, ann map[string]string) *corev1.ConfigMap {
	cm := upgradeTemplate(ns, name, "1.0", "example.com/ide:1.0", class)
	for k, v := range ann {
		cm.Annotations[k] = v
	}
	return cm
}

var _ = Describe("Lifecycle: stop, start and idle culling", Label("lifecycle"), func() {

	It("stops a workspace keeping its claim and record, answers 503 with how to start it, and starts it on the same paths, also across kill -9 of the controller", func(ctx SpecContext) {
		ns := NewNamespace()
		class := rwopVolumes(ctx, ns, 1)
		Expect(K8s.Create(ctx, lcTemplate(ns, "life", class, nil))).To(Succeed())
		StartStandin(ns)
		front := StartNogoo9("--namespace="+ns, "--components=api,proxy")
		ctl := StartNogoo9("--namespace="+ns, "--components=controller")
		alice := pxUserToken(ctx, ns, "alice")

		By("spawning a workspace with a claim; it serves through the proxy")
		w := pxSpawn(front, alice, "life", "box")
		running := WaitPodReady(ns, w.ActivePod)
		identity, claims := identityOf(running), claimNames(running)
		Expect(claims).To(HaveLen(1))
		Eventually(func(g Gomega) {
			g.Expect(stInfoG(g, front.ProxyURL+w.WorkspacePath, alice).Pod).To(Equal(running.Name))
		}).Should(Succeed())

		By("stopping it through the REST API, and killing the controller (kill -9) as soon as it has created the stopped pod")
		code, body := pxAPI(front, alice, http.MethodPost, "/api/v1/workspaces/box/stop", nil)
		Expect(code).To(Equal(http.StatusAccepted), "%s", body)
		Eventually(func(g Gomega) {
			live, _ := lcPods(g, ns, "box")
			g.Expect(live).To(ContainElement(HaveField("Spec.SchedulingGates", ContainElement(HaveField("Name", workspace.GateStopped)))))
		}).WithPolling(20*time.Millisecond).Should(Succeed(), "the stopped pod is created")
		ctl.Kill()
		ctl.Restart()

		By("after the restart: one pod, gated, no node, same identity and claim; the claim is still there")
		stopped := lcExpectStopped(ns, "box", identity, claims)
		Expect(K8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claims[0]}, &corev1.PersistentVolumeClaim{})).To(Succeed())
		pxExpectPhase(front, alice, "box", workspace.PhaseStopped, workspace.ReasonStopped, "stopped by its owner")

		By("the stopped workspace stays in the list with its paths")
		code, body = pxAPI(front, alice, http.MethodGet, "/api/v1/workspaces", nil)
		Expect(code).To(Equal(http.StatusOK))
		Expect(string(body)).To(ContainSubstring(w.WorkspacePath))

		By("the proxy answers 503 with a page that says how to start it")
		page := stGet(front.ProxyURL+w.WorkspacePath, alice, "text/html")
		Expect(page.code).To(Equal(http.StatusServiceUnavailable))
		Expect(page.body).To(And(ContainSubstring("is stopped"), ContainSubstring("/api/v1/namespaces/"+ns+"/workspaces/box/start"), ContainSubstring("stopped by its owner")))

		By("starting it through the REST API while the controller is down (kill -9), then restarting the controller")
		ctl.Kill()
		code, body = pxAPI(front, alice, http.MethodPost, "/api/v1/workspaces/box/start", nil)
		Expect(code).To(Equal(http.StatusAccepted), "%s", body)
		ctl.Restart()

		By("it comes back Ready on the same version, pod, claim and paths, and serves through the proxy")
		started := WaitPodReady(ns, stopped.Name)
		Expect(workspace.IsStoppedPod(started)).To(BeFalse())
		Expect(identityOf(started)).To(Equal(identity))
		Expect(claimNames(started)).To(Equal(claims))
		Expect(workspace.TemplateVersion(started)).To(Equal("1.0"))
		Eventually(func(g Gomega) {
			g.Expect(stInfoG(g, front.ProxyURL+w.WorkspacePath, alice).Pod).To(Equal(started.Name))
		}).Should(Succeed(), "the same path serves the started pod")
	})

	// Activity is written every second; the idle timeout is lcIdleTimeout (30 s).
	It("stops an idle workspace after its template's idle timeout, and not one busy with HTTP through a second proxy replica or with an open WebSocket", func(ctx SpecContext) {
		ns := NewNamespace()
		class := rwopVolumes(ctx, ns, 3)
		Expect(K8s.Create(ctx, lcTemplate(ns, "idle", class, map[string]string{workspace.AnnIdleTimeout: lcIdleTimeout.String()}))).To(Succeed())
		StartStandin(ns)
		// Replica A runs everything; replica B is a second proxy (and API) on its own. Activity
		// seen only by B must keep a workspace alive: the replicas share it through the pod.
		a := StartNogoo9("--namespace="+ns, "--activity-write-interval=1s")
		b := StartNogoo9("--namespace="+ns, "--components=api,proxy", "--activity-write-interval=1s")
		alice := pxUserToken(ctx, ns, "alice")

		// The controller culls on the template's timeout once a pod was created (or started)
		// lcIdleTimeout ago without activity, so traffic starts right after each workspace serves.
		By("a workspace kept busy with HTTP requests through replica B only")
		httpWS := pxSpawn(a, alice, "idle", "busy-http")
		WaitPodReady(ns, httpWS.ActivePod)
		stopHTTP := make(chan struct{})
		httpDone := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(httpDone)
			for {
				select {
				case <-stopHTTP:
					return
				case <-time.After(300 * time.Millisecond):
				}
				_, _ = stDo(b.ProxyURL+httpWS.WorkspacePath, alice, "application/json")
			}
		}()
		DeferCleanup(func() { close(stopHTTP); <-httpDone })

		By("a workspace with an open terminal WebSocket through replica A and no other traffic")
		wsWS := pxSpawn(a, alice, "idle", "busy-ws")
		WaitPodReady(ns, wsWS.ActivePod)
		var term *standin.Terminal
		Eventually(func(g Gomega) {
			t, err := standin.DialTerminal(ctx, a.ProxyURL+wsWS.WorkspacePath+"term", alice)
			g.Expect(err).NotTo(HaveOccurred())
			term = t
		}).Should(Succeed(), "the terminal opens once the stand-in serves the pod")
		DeferCleanup(func() { _ = term.Close() })

		By("an idle workspace: nothing uses it")
		idle := pxSpawn(a, alice, "idle", "idle")
		WaitPodReady(ns, idle.ActivePod)

		By("the idle one is stopped, with the reason in its message and an Event")
		Eventually(func(g Gomega) {
			w := pxWorkspace(g, a, alice, "idle")
			g.Expect(w.Phase).To(Equal(workspace.PhaseStopped), "%+v", w.Status)
			g.Expect(w.Message).To(ContainSubstring("without activity (idle timeout " + lcIdleTimeout.String() + ")"))
		}).WithTimeout(lcIdleTimeout+2*time.Minute).Should(Succeed(), "the idle workspace is culled")
		Eventually(func(g Gomega) {
			var evs corev1.EventList
			g.Expect(K8s.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
			var reasons []string
			for _, e := range evs.Items {
				reasons = append(reasons, e.Reason)
			}
			g.Expect(reasons).To(ContainElement(lifecycle.ReasonCulled))
		}).Should(Succeed(), "a %s Event", lifecycle.ReasonCulled)

		By("the busy ones stay Ready for two idle timeouts more, their activity recorded by the replica that saw it")
		Consistently(func(g Gomega) {
			for _, id := range []string{"busy-http", "busy-ws"} {
				w := pxWorkspace(g, b, alice, id)
				g.Expect(w.Phase).To(Equal(workspace.PhaseReady), "%s: %+v", id, w.Status)
			}
		}).WithTimeout(2 * lcIdleTimeout).WithPolling(time.Second).Should(Succeed())
		for _, id := range []string{"busy-http", "busy-ws"} {
			w := pxWorkspace(Default, b, alice, id)
			Expect(w.LastActivity).NotTo(BeEmpty(), "%s has nogoo9/last-activity", id)
		}
	})
})

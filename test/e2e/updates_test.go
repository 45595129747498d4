package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Updates without disruption (issue 15): adoption of the original product's pods, a version that
// moves the port, update policies, pin, dry run, template history and rollback, and a kill -9
// during an automatic upgrade. The real binary, REST with real tokens, kwok as the kubelet; the
// policies run with a one-second interval and threshold so the specs stay short.
var _ = Describe("Updates", Label("updates"), func() {
	It("Updates: a pod of the original format is adopted and upgraded; a version that moves the port takes effect, the paths stay", func(ctx SpecContext) {
		ns := NewNamespace()
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "legacy", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		p := StartNogoo9("--namespace=" + ns)

		By("creating a pod the way the original product did: labels only, no nogoo9/owner")
		legacy := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ws-alice-legacy-box",
				Labels: map[string]string{
					workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "box",
					workspace.LabelUserSub: "alice-legacy", workspace.LabelTemplateVersion: "1.0",
					workspace.LabelTemplate: "legacy",
				},
				Annotations: map[string]string{workspace.AnnWorkspacePath: "/ws/alice-legacy/box/", workspace.AnnWorkspacePort: "8080"},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1.0",
				Ports: []corev1.ContainerPort{{Name: "ide", ContainerPort: 8080}}}}},
		}
		Expect(K8s.Create(ctx, legacy)).To(Succeed())
		old := WaitPodReady(ns, legacy.Name)

		By("nogoo9 adopts it: the owner its user-sub names is stamped")
		Eventually(func(g Gomega) {
			var pod corev1.Pod
			g.Expect(K8s.Get(ctx, client.ObjectKeyFromObject(old), &pod)).To(Succeed())
			g.Expect(pod.Annotations).To(HaveKeyWithValue(workspace.AnnOwner, "alice-legacy"))
		}).Should(Succeed())

		By("raising the template to a version that serves on 9090")
		v2 := upgradeTemplate(ns, "legacy", "2.0", "example.com/ide:2.0", "")
		v2.Annotations[workspace.AnnWorkspacePort] = "9090"
		v2.Data[workspace.DataSpec] = strings.ReplaceAll(v2.Data[workspace.DataSpec], "8080", "9090")
		bumpTemplate(ctx, v2)
		waitServed(ctx, p, "legacy", "2.0")

		By("requesting the upgrade with kubectl, as a person would")
		out, err := kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pod", old.Name, workspace.AnnUpgradeRequested+"=true")
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)

		cur := waitSinglePod(ns, "box", func(g Gomega, pod *corev1.Pod) {
			g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0"))
			g.Expect(podReadyNow(pod)).To(BeTrue())
		})
		Expect(cur.Annotations).To(HaveKeyWithValue(workspace.AnnOwner, "alice-legacy"), "the adopted owner")
		Expect(cur.Labels).To(HaveKeyWithValue(workspace.LabelUserSub, "alice-legacy"))
		Expect(cur.Annotations).To(HaveKeyWithValue(workspace.AnnWorkspacePath, "/ws/alice-legacy/box/"), "the path users know stays")
		Expect(cur.Annotations).To(HaveKeyWithValue(workspace.AnnWorkspacePort, "9090"), "the port follows the new version")
		Expect(cur.Spec.Containers[0].Ports[0].ContainerPort).To(Equal(int32(9090)))
		waitPodEvent(ns, cur.Name, upgrade.ReasonUpgradeSucceeded)
	})

	It("Updates: pin, dry run, when-idle and window policies, upgrade-all skipping the pin, history and rollback", func(ctx SpecContext) {
		ns, adminNS := NewNamespace(), NewNamespace()
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "tpl", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		p := StartNogoo9("--namespace="+ns, "--admin-group=system:serviceaccounts:"+adminNS,
			"--update-policy-interval=1s", "--idle-after=1s")
		alice := userClient(ctx, p, ns, "alice")
		admin := userClient(ctx, p, adminNS, "admin")

		By("alice spawns three workspaces")
		pods := map[string]*corev1.Pod{}
		for _, id := range []string{"pinned", "idle", "win"} {
			pods[id] = WaitPodReady(ns, alice.spawn(ctx, "tpl", id).ActivePod)
		}

		By("alice pins one and gives it when-idle too; a bad window is refused with the reason")
		var w frontend.Workspace
		_, err := alice.call(ctx, http.MethodPut, "/api/v1/workspaces/pinned/pin", nil, &w)
		Expect(err).NotTo(HaveOccurred())
		Expect(w.Pinned).To(BeTrue())
		_, err = alice.call(ctx, http.MethodPut, "/api/v1/workspaces/pinned/update-policy", frontend.UpdatePolicyInput{Policy: "when-idle"}, &w)
		Expect(err).NotTo(HaveOccurred())
		Expect(w.UpdatePolicy).To(Equal("when-idle"))
		status, err := alice.call(ctx, http.MethodPut, "/api/v1/workspaces/win/update-policy", frontend.UpdatePolicyInput{Policy: "window", Window: "Sat 2-4"}, nil)
		Expect(status).To(Equal(http.StatusBadRequest))
		Expect(err).To(MatchError(ContainSubstring("has 2 parts, want 3")))

		By("raising the template to 2.0 with a new image and a new variable")
		v2 := upgradeTemplate(ns, "tpl", "2.0", "example.com/ide:2.0", "")
		v2.Data[workspace.DataSpec] = strings.Replace(v2.Data[workspace.DataSpec], `"ports"`, `"env": [{"name": "MODE", "value": "fast"}], "ports"`, 1)
		bumpTemplate(ctx, v2)
		alice.waitOutdated(ctx, "idle", "2.0")

		By("a dry run says what would change and writes nothing")
		var prev frontend.UpgradePreview
		status, err = alice.call(ctx, http.MethodPost, "/api/v1/workspaces/idle/upgrade?dryRun=true", nil, &prev)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusOK))
		Expect(prev.Status).To(Equal("wouldUpgrade"))
		Expect(prev.Strategy).To(Equal(string(upgrade.SideBySide)))
		Expect(prev.Interrupts).To(BeFalse())
		Expect(prev.Changes).To(ContainElements(
			upgrade.Change{Field: "template version", From: "1.0", To: "2.0"},
			upgrade.Change{Field: "container ide image", From: "example.com/ide:1.0", To: "example.com/ide:2.0"},
			upgrade.Change{Field: "container ide env MODE", To: `"fast"`},
		))
		now := workspacePodsNow(ns, "idle")
		Expect(now).To(HaveLen(1))
		Expect(now[0].UID).To(Equal(pods["idle"].UID))
		Expect(now[0].Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested), "a dry run writes nothing")

		By("when-idle: alice opts her workspace in and it upgrades on its own; the pinned one does not")
		_, err = alice.call(ctx, http.MethodPut, "/api/v1/workspaces/idle/update-policy", frontend.UpdatePolicyInput{Policy: "when-idle"}, nil)
		Expect(err).NotTo(HaveOccurred())
		waitSinglePod(ns, "idle", func(g Gomega, pod *corev1.Pod) {
			g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0"))
			g.Expect(pod.Annotations).To(HaveKeyWithValue(workspace.AnnUpdatePolicy, "when-idle"), "the workspace's choice survives its upgrade")
		})
		waitPodEvent(ns, pods["idle"].Name, "AutoUpgradeRequested")
		// Both were idle for the same tick that requested this one: a pin that did not hold would
		// have been requested with it.
		pinned := workspacePodsNow(ns, "pinned")
		Expect(pinned).To(HaveLen(1))
		Expect(workspace.TemplateVersion(pinned[0])).To(Equal("1.0"))
		Expect(pinned[0].Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))

		By("window: set with kubectl to a window around now, the workspace upgrades")
		t := time.Now().UTC()
		window := fmt.Sprintf("daily %s-%s UTC", t.Add(-time.Minute).Format("15:04"), t.Add(10*time.Minute).Format("15:04"))
		out, err := kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pod", pods["win"].Name,
			workspace.AnnUpdatePolicy+"=window", workspace.AnnUpdateWindow+"="+window)
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)
		waitSinglePod(ns, "win", func(g Gomega, pod *corev1.Pod) { g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0")) })

		By("upgrade-all skips the pinned workspace and says so")
		var all struct{ Upgrades []frontend.UpgradeResult }
		_, err = admin.call(ctx, http.MethodPost, "/api/v1/upgrade-all", nil, &all)
		Expect(err).NotTo(HaveOccurred())
		Expect(all.Upgrades).To(HaveLen(1))
		Expect(all.Upgrades[0].ID).To(Equal("pinned"))
		Expect(all.Upgrades[0].Status).To(Equal("skipped"))
		Expect(all.Upgrades[0].Error).To(ContainSubstring("pinned"))

		By("the history keeps both versions as ConfigMaps")
		Eventually(func(g Gomega) []string {
			var h struct{ Versions []templates.VersionInfo }
			_, err := admin.call(ctx, http.MethodGet, "/api/v1/templates/tpl/history", nil, &h)
			g.Expect(err).NotTo(HaveOccurred())
			var vs []string
			for _, v := range h.Versions {
				g.Expect(v.Valid).To(BeTrue(), v.Error)
				vs = append(vs, v.Version)
			}
			return vs
		}).Should(Equal([]string{"2.0", "1.0"}))
		var listed struct{ Templates []frontend.TemplateInfo }
		_, err = alice.call(ctx, http.MethodGet, "/api/v1/templates", nil, &listed)
		Expect(err).NotTo(HaveOccurred())
		Expect(listed.Templates).To(ContainElement(And(HaveField("Name", "tpl"), HaveField("History", HaveLen(2)))), "list_templates shows the history")

		By("only an admin rolls a workspace back to a kept version; it is pinned there")
		status, err = alice.call(ctx, http.MethodPost, "/api/v1/workspaces/idle/upgrade?version=1.0", nil, nil)
		Expect(status).To(Equal(http.StatusForbidden), "%v", err)
		var res frontend.UpgradeResult
		status, err = admin.call(ctx, http.MethodPost, "/api/v1/workspaces/idle/upgrade?version=1.0", nil, &res)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusAccepted))
		rolled := waitSinglePod(ns, "idle", func(g Gomega, pod *corev1.Pod) {
			g.Expect(workspace.TemplateVersion(pod)).To(Equal("1.0"))
			g.Expect(podReadyNow(pod)).To(BeTrue())
		})
		Expect(rolled.Name).To(Equal(res.PodName))
		Expect(rolled.Spec.Containers[0].Image).To(Equal("example.com/ide:1.0"))
		Expect(rolled.Annotations).To(HaveKeyWithValue(workspace.AnnPinned, "true"), "no policy moves it forward again")
		Expect(rolled.Annotations).NotTo(HaveKey(workspace.AnnTargetVersion))
	})

	It("Updates: nogoo9 killed with -9 during an automatic upgrade; the upgrade ends once, and is not retried in a loop", func(ctx SpecContext) {
		ns := NewNamespace()
		auto := func(version, image string) *corev1.ConfigMap {
			cm := upgradeTemplate(ns, "auto", version, image, "")
			cm.Annotations[workspace.AnnUpdatePolicy] = "when-idle"
			return cm
		}
		Expect(K8s.Create(ctx, auto("1.0", "example.com/ide:1.0"))).To(Succeed())
		// A deadline far away until the upgrade has been seen in flight (a loaded machine must not
		// fail it before this spec sees it), a short one from the restart on (the last flag wins).
		p := StartNogoo9("--namespace="+ns, "--update-policy-interval=1s", "--idle-after=1s", "--upgrade-timeout="+inFlightTimeout.String())
		alice := userClient(ctx, p, ns, "alice")
		old := WaitPodReady(ns, alice.spawn(ctx, "auto", "box").ActivePod)

		By("a new version whose image never pulls: the policy starts the upgrade on its own")
		bumpTemplate(ctx, auto("2.0", FailingImage("auto")))
		var up *corev1.Pod
		Eventually(func(g Gomega) {
			pods := workspacePods(g, ns, "box")
			g.Expect(pods).To(HaveLen(2), "old and upgraded pod")
			for _, pod := range pods {
				if pod.UID != old.UID {
					up = pod
				} else {
					g.Expect(pod.Annotations).To(HaveKeyWithValue(workspace.AnnAutoUpgrade, "when-idle"))
				}
			}
			g.Expect(up.Annotations).To(HaveKeyWithValue(workspace.AnnUpgradeFrom, old.Name))
		}).Should(Succeed())

		// The policy's Event is written by the recorder's own goroutine, some time after the
		// request: wait for it, or the kill may take it along and the count below would be 0.
		waitPodEvent(ns, old.Name, "AutoUpgradeRequested")

		By("kill -9 in the middle, then start again, with a deadline of 15 s")
		p.Kill()
		p.Args = append(p.Args, "--upgrade-timeout=15s")
		p.Restart()

		By("the deadline fails the upgrade once: the old pod keeps serving with the error, nothing else is created")
		cur := waitSinglePod(ns, "box", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.UID).To(Equal(old.UID))
			g.Expect(pod.Annotations).To(HaveKey(workspace.AnnLastUpgradeError))
			g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		})
		Expect(workspace.TemplateVersion(cur)).To(Equal("1.0"))
		// The policy still wants the upgrade, but a failed one is not retried before
		// --auto-upgrade-retry-after (1h): several ticks later there is still one request.
		Consistently(func(g Gomega) int {
			g.Expect(workspacePods(g, ns, "box")).To(HaveLen(1))
			return podEventCount(ctx, ns, old.Name, "AutoUpgradeRequested")
		}, 4*time.Second, 500*time.Millisecond).Should(Equal(1))
	})
})

// waitServed waits until nogoo9 serves version of template name (its list_templates).
func waitServed(ctx context.Context, p *Nogoo9Process, name, version string) {
	GinkgoHelper()
	c := userClient(ctx, p, p.Namespace, "viewer")
	Eventually(func(g Gomega) {
		var list struct{ Templates []frontend.TemplateInfo }
		_, err := c.call(ctx, http.MethodGet, "/api/v1/templates", nil, &list)
		g.Expect(err).NotTo(HaveOccurred())
		found := false
		for _, t := range list.Templates {
			if t.Name == name {
				found = t.Version == version
			}
		}
		g.Expect(found).To(BeTrue(), "template %s at %s in %v", name, version, list)
	}).Should(Succeed())
}

// podEventCount counts the Events with reason on pod name (Events of one source aggregate into
// one object with a count).
func podEventCount(ctx context.Context, ns, name, reason string) int {
	GinkgoHelper()
	var list corev1.EventList
	Expect(K8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	n := 0
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name && e.Reason == reason {
			n += max(int(e.Count), 1)
		}
	}
	return n
}

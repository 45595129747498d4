package e2e

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Maintenance is an operator's decision (issue 12, section 5, measured on the old code: the
// owner's upgrade came back Ready with no maintenance). The real binary, REST with real tokens,
// kwok as the kubelet.
var _ = Describe("Maintenance and upgrades", Label("integrity"), func() {
	It("Maintenance survives upgrades: the owner's upgrade is refused, an admin's keeps it, upgrade-all skips it", func(ctx SpecContext) {
		ns := NewNamespace()
		adminNS := NewNamespace()
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		p := StartNogoo9("--namespace="+ns, "--admin-group=system:serviceaccounts:"+adminNS)
		alice := userClient(ctx, p, ns, "alice")
		admin := userClient(ctx, p, adminNS, "admin")

		By("alice spawns a workspace; an admin puts it in maintenance")
		ws := alice.spawn(ctx, "plain", "demo")
		old := WaitPodReady(ns, ws.ActivePod)
		var after frontend.Workspace
		status, err := admin.call(ctx, http.MethodPut, "/api/v1/workspaces/demo/maintenance", map[string]string{"reason": "disk migration"}, &after)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusOK))
		Expect(after.Phase).To(Equal(workspace.PhaseUnavailable), "the answer shows the phase after the write")

		By("raising the template version")
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", "example.com/ide:2.0", ""))
		alice.waitOutdated(ctx, "demo", "2.0")

		By("alice's upgrade is refused with 409 naming the maintenance")
		status, err = alice.call(ctx, http.MethodPost, "/api/v1/workspaces/demo/upgrade", nil, nil)
		Expect(status).To(Equal(http.StatusConflict))
		Expect(err).To(MatchError(ContainSubstring("maintenance")))
		Consistently(func(g Gomega) {
			g.Expect(workspacePods(g, ns, "demo")).To(HaveLen(1))
		}).WithTimeout(2 * time.Second).Should(Succeed())

		By("upgrade-all skips it and says so")
		var answer struct {
			Upgrades []frontend.UpgradeResult `json:"upgrades"`
		}
		status, err = admin.call(ctx, http.MethodPost, "/api/v1/upgrade-all", nil, &answer)
		all := answer.Upgrades
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusAccepted))
		Expect(all).To(HaveLen(1))
		Expect(all[0].Status).To(Equal("skipped"))
		Expect(all[0].Error).To(ContainSubstring("maintenance"))

		By("an admin's upgrade goes through and the new pod keeps the maintenance")
		r := admin.upgrade(ctx, "demo")
		Expect(r.Status).To(Equal("upgrading"))
		Expect(r.PodName).To(Equal(workspace.NextPodName(old, "2.0")))
		waitSinglePod(ns, "demo", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.Name).To(Equal(r.PodName))
			g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0"))
			g.Expect(pod.Annotations[workspace.AnnMaintenance]).To(Equal("disk migration"))
		})
		Eventually(func(g Gomega) {
			g.Expect(alice.get(ctx, "demo").Phase).To(Equal(workspace.PhaseUnavailable))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})
})

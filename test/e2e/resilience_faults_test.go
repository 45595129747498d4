package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// resEtcdOutage is how long etcd stays down (NOGOO9_E2E_ETCD_OUTAGE, default 15s).
func resEtcdOutage() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("NOGOO9_E2E_ETCD_OUTAGE")); err == nil && d > 0 {
		return d
	}
	return 15 * time.Second
}

var _ = Describe("Resilience: more faults of the control plane", Label("resilience"), func() {
	It("etcd down under spawns and proxied traffic: every spawn answers (503 saying what happened), the proxy keeps serving, and everything converges", func(ctx SpecContext) {
		ns := NewNamespace()
		const n = 3
		port := 8080
		Expect(K8s.Create(ctx, pxTemplate(ns, "py", "1", "example.com/ide:1", port))).To(Succeed())
		t, err := Cluster.ServiceAccountToken(ctx, ns, "alice", "nogoo9", 0)
		Expect(err).NotTo(HaveOccurred())
		alice := t

		By("starting nogoo9 with a 4s write timeout, a quota (the ledger is written too) and a lease that outlasts the outage")
		outage := resEtcdOutage()
		proc := StartNogoo9("--namespace="+ns, "--leader-elect=true", "--leader-election-renew-deadline="+(outage+20*time.Second).String(),
			"--leader-election-lease-duration="+(outage+40*time.Second).String(), "--auth=oidc", "--api-write-timeout=4s",
			"--max-workspaces-per-user=50",
			"--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile)
		Eventually(func() string { return proc.LogTail(2000) }).Should(ContainSubstring("Successfully acquired lease"))
		StartStandin(ns)
		before := map[string]workspace.Info{}
		for i := range n {
			id := fmt.Sprintf("etcd-%d", i)
			before[id] = pxSpawn(proc, alice, "py", id)
		}
		for id, w := range before {
			pxExpectPhase(proc, alice, id, workspace.PhaseReady, "", "")
			Eventually(func(g Gomega) {
				code, _, body, err := pxDo(proc.ProxyURL+w.WorkspacePath, alice)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), body)
			}).Should(Succeed())
		}

		By(fmt.Sprintf("stopping etcd for %s while spawning, listing and proxying", outage))
		Expect(Cluster.StopProcess(localcluster.Etcd)).To(Succeed())
		down := time.Now()
		restarted := false
		DeferCleanup(func(ctx SpecContext) {
			if !restarted {
				Expect(Cluster.StartProcess(ctx, localcluster.Etcd)).To(Succeed())
			}
		}, NodeTimeout(2*time.Minute))
		statuses := map[string]map[int]int{}
		note := func(what string, code int) {
			if statuses[what] == nil {
				statuses[what] = map[int]int{}
			}
			statuses[what][code]++
		}
		var attempted []string // spawn ids answered anything but 201: may or may not exist afterwards
		created := map[string]bool{}
		notReady := false
		var slowest time.Duration // printed, not asserted
		for i := 0; time.Since(down) < outage; i++ {
			Expect(proc.Exited()).To(BeFalse(), "nogoo9 exited while etcd was down:\n%s", proc.LogTail(40))
			if body, err := resProbeBody(proc, "/readyz?verbose=1"); err == nil && strings.Contains(body, "[-]apiserver failed") {
				notReady = true
			}
			id := fmt.Sprintf("down-%d", i)
			// resClient gives up after 15 s: an answer after that is a hang.
			sent := time.Now()
			code, body, err := resCall(proc, alice, "POST", "/api/v1/workspaces", map[string]any{"template": "py", "id": id})
			Expect(err).NotTo(HaveOccurred(), "a spawn while etcd is down must answer, not hang")
			slowest = max(slowest, time.Since(sent))
			note("spawn", code)
			if code == http.StatusCreated {
				created[id] = true
			} else {
				attempted = append(attempted, id)
				Expect(code).To(Equal(http.StatusServiceUnavailable), "spawn while etcd is down: %s", body)
				var e struct{ Error, Code string }
				Expect(json.Unmarshal(body, &e)).To(Succeed(), string(body))
				Expect(e.Code).To(Equal("Unavailable"))
				Expect(e.Error).To(ContainSubstring("did not answer in time"))
				Expect(e.Error).To(ContainSubstring("shows whether it took effect"))
			}
			code, body, err = resCall(proc, alice, "GET", "/api/v1/workspaces", nil)
			Expect(err).NotTo(HaveOccurred())
			note("list", code)
			Expect(code).To(BeElementOf(http.StatusOK, http.StatusServiceUnavailable), "list: %s", body)
			for id, w := range before {
				code, _, body, err := pxDo(proc.ProxyURL+w.WorkspacePath, alice)
				Expect(err).NotTo(HaveOccurred(), "proxy to %s", id)
				note("proxy", code)
				Expect(code).To(BeNumerically("<", 500), "proxy to %s while etcd is down: %s", id, body)
			}
		}
		GinkgoWriter.Printf("etcd outage of %s: answers %v, slowest spawn answer %s, /readyz not ready seen: %v\n",
			time.Since(down).Round(time.Second), statuses, slowest.Round(time.Millisecond), notReady)
		AddReportEntry("etcd outage answers", fmt.Sprint(statuses))
		Expect(statuses["spawn"][http.StatusServiceUnavailable]).To(BeNumerically(">", 0), "no spawn noticed the outage: %v", statuses)
		Expect(notReady).To(BeTrue(), "/readyz never said not ready while etcd was down")

		By("starting etcd again: ready again, one pod per workspace, identities unchanged, spawns work")
		Expect(Cluster.StartProcess(ctx, localcluster.Etcd)).To(Succeed())
		restarted = true
		Eventually(func() (int, error) { return resProbe(proc, "/readyz") }, 2*time.Minute).Should(Equal(http.StatusOK))
		Expect(proc.Exited()).To(BeFalse(), "nogoo9 exited:\n%s", proc.LogTail(40))
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(K8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace})).To(Succeed())
			groups := groupPods(pods.Items)
			for id, w := range before {
				ps := groups[id]
				g.Expect(ps).To(HaveLen(1), "workspace %s: one pod, got %v", id, podNames(ps))
				g.Expect(ps[0].DeletionTimestamp).To(BeNil())
				g.Expect(ps[0].Annotations[workspace.AnnWorkspacePath]).To(Equal(w.WorkspacePath), id)
			}
			for id := range created {
				g.Expect(groups[id]).To(HaveLen(1), "workspace %s was answered 201", id)
			}
			for id, ps := range groups {
				g.Expect(ps).To(HaveLen(1), "workspace %s: one pod, got %v", id, podNames(ps))
				g.Expect(ps[0].Status.Phase).To(Equal(corev1.PodRunning), "workspace %s", id)
			}
		}, 2*time.Minute).Should(Succeed())
		for id, w := range before {
			Eventually(func(g Gomega) {
				code, _, body, err := pxDo(proc.ProxyURL+w.WorkspacePath, alice)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), "%s: %s", id, body)
			}).Should(Succeed())
		}
		Eventually(func(g Gomega) {
			code, body, err := resCall(proc, alice, "POST", "/api/v1/workspaces", map[string]any{"template": "py", "id": "etcd-after"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusCreated), string(body))
		}).Should(Succeed())
		var exist []string
		for _, id := range attempted {
			var l corev1.PodList
			Expect(K8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(Succeed())
			if len(l.Items) > 0 {
				exist = append(exist, id)
			}
		}
		GinkgoWriter.Printf("spawns answered 503 during the outage: %v; of them exist afterwards (whole and Running): %v\n", attempted, exist)
	})
})

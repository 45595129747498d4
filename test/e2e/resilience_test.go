package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/envvar"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// resOutage is how long the API server stays down (NOGOO9_E2E_OUTAGE, default 20s): longer than
// the token cache (10s) and the lease renew deadline (10s), so whatever depends on them shows.
func resOutage() time.Duration { return e2eDuration("NOGOO9_E2E_OUTAGE", 20*time.Second) }

// stopProcess stops the local cluster's process name for an outage and returns what starts it
// again. If the spec ends before that is called, a cleanup starts it, so no later spec runs
// without it.
func stopProcess(name string) (start func(ctx context.Context)) {
	GinkgoHelper()
	Expect(Cluster.StopProcess(name)).To(Succeed())
	started := false
	DeferCleanup(func(ctx SpecContext) {
		if !started {
			Expect(Cluster.StartProcess(ctx, name)).To(Succeed())
		}
	}, NodeTimeout(2*time.Minute))
	return func(ctx context.Context) {
		GinkgoHelper()
		Expect(Cluster.StartProcess(ctx, name)).To(Succeed())
		started = true
	}
}

// e2eDuration is the positive duration in environment variable name, or def when it is unset; a
// value that is not one fails the spec that reads it, saying what to write.
func e2eDuration(name string, def time.Duration) time.Duration {
	GinkgoHelper()
	d, err := envvar.Duration(name, def)
	Expect(err).NotTo(HaveOccurred())
	return d
}

// resClient bounds every call: an answer that does not come within 15 s counts as a hang.
var resClient = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: nil}}

// resCall sends one API request and returns status and body, or the transport error.
func resCall(p *Nogoo9Process, token, method, path string, body any) (int, []byte, error) {
	return restCall(resClient, p, token, method, path, body)
}

// restCall sends one API request with a bearer token and body as JSON through hc and returns
// status and body, or the transport error.
func restCall(hc *http.Client, p *Nogoo9Process, token, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.APIURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func resProbe(p *Nogoo9Process, path string) (int, error) {
	resp, err := resClient.Get("http://" + p.ProbeAddr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// resProbeBody is the body of a probe endpoint (with ?verbose=1 it lists each check as [+] or [-]).
func resProbeBody(p *Nogoo9Process, path string) (string, error) {
	resp, err := resClient.Get("http://" + p.ProbeAddr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

var _ = Describe("Resilience: faults of the control plane", Label("resilience"), func() {
	It("kube-apiserver down during a bulk upgrade, spawns and proxied traffic: nogoo9 stays up, says not-ready and 503, keeps proxying, and converges", func(ctx SpecContext) {
		ns := NewNamespace()
		const n = 4
		port := 8080
		tmpl := pxTemplate(ns, "py", "1", "example.com/ide:1", port)
		Expect(K8s.Create(ctx, tmpl)).To(Succeed())
		token := func(name string) string {
			t, err := Cluster.ServiceAccountToken(ctx, ns, name, "nogoo9", 0)
			Expect(err).NotTo(HaveOccurred())
			return t
		}
		alice, admin := token("alice"), token("admin")
		aliceSub := "system:serviceaccount:" + ns + ":alice"

		By("starting nogoo9 with leader election whose renew deadline outlasts the outage, and OIDC tokens (verified offline once the keys are cached)")
		// With the default renew deadline (10s) the leader exits after 10s without the API server,
		// so that it never acts without its lease (docs/reliability.md).
		// The lease outlasts the outage with the restart's margin (see the etcd outage spec).
		proc := StartNogoo9("--namespace="+ns, "--leader-elect=true", "--leader-election-renew-deadline="+(resOutage()+60*time.Second).String(),
			"--leader-election-lease-duration="+(resOutage()+80*time.Second).String(), "--auth=oidc",
			"--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile,
			"--oidc-admin-claim=sub", "--oidc-admin-value=system:serviceaccount:"+ns+":admin")
		proc.WaitControllersRunning()
		StartStandin(ns)

		By(fmt.Sprintf("spawning %d workspaces and reaching each through the proxy", n))
		before := pxSpawnReachable(proc, alice, "py", "res", n)

		By("raising the template and asking for every upgrade, then stopping kube-apiserver at once")
		tmpl.Annotations[workspace.AnnTemplateVersion] = "2"
		tmpl.Data[workspace.DataSpec] = pxTemplateSpec("example.com/ide:2", port)
		bumpTemplate(ctx, tmpl)
		Eventually(func(g Gomega) {
			code, body, err := resCall(proc, admin, "POST", "/api/v1/upgrade-all", nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusAccepted), string(body))
			var res struct{ Upgrades []struct{ ID, Status string } }
			g.Expect(json.Unmarshal(body, &res)).To(Succeed())
			g.Expect(res.Upgrades).To(HaveLen(n), string(body))
		}).Should(Succeed())
		startAPIServer := stopProcess(localcluster.KubeAPIServer)
		down := time.Now()

		By("while it is down: /readyz says not ready, /healthz stays up, writes get 503, reads and the proxy keep working")
		Eventually(func() (string, error) { return resProbeBody(proc, "/readyz?verbose=1") }, 30*time.Second).Should(ContainSubstring("[-]apiserver failed"))
		statuses := map[string]map[int]int{}
		note := func(what string, code int) {
			if statuses[what] == nil {
				statuses[what] = map[int]int{}
			}
			statuses[what][code]++
		}
		spawned := 0
		for i := 0; time.Since(down) < resOutage(); i++ {
			Expect(proc.Exited()).To(BeFalse(), "nogoo9 exited while the API server was down:\n%s", proc.LogTail(40))
			code, err := resProbe(proc, "/healthz")
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusOK), "/healthz")

			code, body, err := resCall(proc, alice, "POST", "/api/v1/workspaces", map[string]any{"template": "py", "id": fmt.Sprintf("down-%d", i)})
			Expect(err).NotTo(HaveOccurred(), "spawn during the outage must answer, not hang")
			note("spawn", code)
			if code == http.StatusCreated {
				spawned++ // only before the client noticed; must exist afterwards
			} else {
				Expect(code).To(Equal(http.StatusServiceUnavailable), "spawn during the outage: %s", body)
				Expect(string(body)).To(ContainSubstring("try again"))
			}
			code, body, err = resCall(proc, alice, "GET", "/api/v1/workspaces", nil)
			Expect(err).NotTo(HaveOccurred())
			note("list", code)
			Expect(code).To(BeElementOf(http.StatusOK, http.StatusServiceUnavailable), "list: %s", body)
			code, body, err = resCall(proc, alice, "POST", "/api/v1/workspaces/res-0/upgrade", nil)
			Expect(err).NotTo(HaveOccurred())
			note("upgrade", code)
			Expect(code).To(BeElementOf(http.StatusOK, http.StatusAccepted, http.StatusServiceUnavailable), "upgrade: %s", body)

			for id, w := range before {
				code, _, body, err := pxDo(proc.ProxyURL+w.WorkspacePath, alice)
				Expect(err).NotTo(HaveOccurred(), "proxy to %s", id)
				note("proxy", code)
				Expect(code).To(BeNumerically("<", 500), "proxy to %s during the outage: %s", id, body)
			}
		}
		code, _ := resProbe(proc, "/readyz")
		Expect(code).NotTo(Equal(http.StatusOK), "/readyz at the end of the outage")
		GinkgoWriter.Printf("outage of %s: answers %v\n", time.Since(down).Round(time.Second), statuses)
		AddReportEntry("api-server outage answers", fmt.Sprint(statuses))

		By("starting kube-apiserver again: everything converges with the invariants intact")
		startAPIServer(ctx)
		back := time.Now()
		Eventually(func() (int, error) { return resProbe(proc, "/readyz") }, 2*time.Minute).Should(Equal(http.StatusOK))
		GinkgoWriter.Printf("ready again %s after the API server\n", time.Since(back).Round(time.Millisecond))
		Expect(proc.Exited()).To(BeFalse(), "nogoo9 exited:\n%s", proc.LogTail(40))
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(K8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace})).To(Succeed())
			groups := groupPods(pods.Items)
			for id, w := range before {
				ps := groups[id]
				g.Expect(ps).To(HaveLen(1), "workspace %s: one pod, got %v", id, podNames(ps))
				p := ps[0]
				g.Expect(p.DeletionTimestamp).To(BeNil())
				g.Expect(workspace.Owner(p)).To(Equal(aliceSub), id)
				g.Expect(p.Annotations[workspace.AnnWorkspacePath]).To(Equal(w.WorkspacePath), id)
				g.Expect(workspace.TemplateVersion(p)).To(Equal("2"), id)
				g.Expect(p.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested), id)
				g.Expect(p.Annotations).NotTo(HaveKey(workspace.AnnUpgradePod), id)
			}
			for id, ps := range groups {
				g.Expect(ps).To(HaveLen(1), "workspace %s: one pod, got %v", id, podNames(ps))
			}
			g.Expect(len(groups)).To(Equal(n + spawned))
		}, 3*time.Minute).Should(Succeed())
		for id, w := range before {
			Eventually(func(g Gomega) {
				code, _, body, err := pxDo(proc.ProxyURL+w.WorkspacePath, alice)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), "%s: %s", id, body)
			}).Should(Succeed())
		}
		By("a spawn works again")
		Eventually(func(g Gomega) {
			code, body, err := resCall(proc, alice, "POST", "/api/v1/workspaces", map[string]any{"template": "py", "id": "after-" + strconv.Itoa(n)})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusCreated), string(body))
		}).Should(Succeed())
		Expect(proc.Exited()).To(BeFalse())
	})

	It("hand edits during an upgrade (intent removed, version label changed, garbage intent) converge to one safe pod per workspace, with Events", func(ctx SpecContext) {
		ns := NewNamespace()
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		// No deadline can pass before the edits are made; then nogoo9 is restarted with one a
		// short while ahead, which ends the upgrades.
		p := StartNogoo9("--namespace="+ns, "--upgrade-timeout="+inFlightTimeout.String())
		carol := userClient(ctx, p, ns, "carol")
		ids := []string{"edit-intent", "edit-label", "edit-garbage"}
		old := map[string]*corev1.Pod{}
		before := map[string]map[string]string{}
		for _, id := range ids {
			ws := carol.spawn(ctx, "plain", id)
			old[id] = WaitPodReady(ns, ws.ActivePod)
			before[id] = identityOf(old[id])
		}

		By("raising the version to an image that never pulls, so the upgrades stay in flight")
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", FailingImage("ide"), ""))
		for _, id := range ids {
			carol.waitOutdated(ctx, id, "2.0")
		}
		annotate := func(args ...string) {
			GinkgoHelper()
			out, err := kubectl(Cluster.Kubeconfig, append([]string{"-n", ns}, args...)...)
			Expect(err).NotTo(HaveOccurred(), "kubectl %v:\n%s", args, out)
		}
		annotate("annotate", "pod", old["edit-intent"].Name, workspace.AnnUpgradeRequested+"=true")
		annotate("annotate", "pod", old["edit-label"].Name, workspace.AnnUpgradeRequested+"=true")
		annotate("annotate", "pod", old["edit-garbage"].Name, workspace.AnnUpgradeRequested+"=maybe later", "nogoo9/bogus={\"json\":\n${x}")
		newPod := map[string]*corev1.Pod{}
		for _, id := range []string{"edit-intent", "edit-label"} {
			Eventually(func(g Gomega) {
				pods := workspacePods(g, ns, id)
				g.Expect(pods).To(HaveLen(2))
				for _, pod := range pods {
					if pod.UID != old[id].UID {
						newPod[id] = pod
					}
				}
			}).Should(Succeed(), "the upgrade of %s starts", id)
		}

		By("a person removes the intent from one old pod and rewrites the version label of another new pod")
		annotate("annotate", "pod", old["edit-intent"].Name, workspace.AnnUpgradeRequested+"-")
		annotate("label", "--overwrite", "pod", newPod["edit-label"].Name, workspace.LabelTemplateVersion+"=garbage")

		// Before the restart: the Event is written by the recorder's own goroutine, and the
		// restarted nogoo9 finds no garbage left to write one about.
		waitPodEvent(ns, old["edit-garbage"].Name, "InvalidUpgradeRequest")

		By("restarting nogoo9 with a deadline 20 s ahead for both upgrades")
		first := upgradeStartedAt(newPod["edit-intent"])
		if at := upgradeStartedAt(newPod["edit-label"]); at.Before(first) {
			first = at
		}
		restartWithDeadline(p, first, 20*time.Second)

		By("each workspace converges to its old pod, identity unchanged, no intent left, and Events say what happened")
		for _, id := range ids {
			cur := waitSinglePod(ns, id, func(g Gomega, pod *corev1.Pod) {
				g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
				g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnUpgradePod))
			})
			Expect(cur.UID).To(Equal(old[id].UID), "%s: the old pod keeps serving", id)
			Expect(identityOf(cur)).To(Equal(before[id]), id)
			Expect(podReadyNow(cur)).To(BeTrue(), id)
		}
		for _, id := range []string{"edit-intent", "edit-label"} {
			waitPodEvent(ns, old[id].Name, "UpgradeFailed")
		}
		Expect(hist.Violations()).To(BeEmpty())
	})
})

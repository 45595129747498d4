package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// resEtcdOutage is how long etcd stays down (NOGOO9_E2E_ETCD_OUTAGE, default 15s).
func resEtcdOutage() time.Duration { return e2eDuration("NOGOO9_E2E_ETCD_OUTAGE", 15*time.Second) }

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
		// The lease must outlast the whole time the API server cannot write: the outage, the
		// spawns that time out in it, etcd's restart and kube-apiserver's reconnect to it, which
		// took 25 s beyond a 15 s outage once on a loaded 2-core machine (a 20 s margin lost the
		// lease, and nogoo9 exits then, by design).
		proc := StartNogoo9("--namespace="+ns, "--leader-elect=true", "--leader-election-renew-deadline="+(outage+60*time.Second).String(),
			"--leader-election-lease-duration="+(outage+80*time.Second).String(), "--auth=oidc", "--api-write-timeout=4s",
			"--max-workspaces-per-user=50",
			"--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile)
		proc.WaitControllersRunning()
		StartStandin(ns)
		before := pxSpawnReachable(proc, alice, "py", "etcd", n)

		By(fmt.Sprintf("stopping etcd for %s while spawning, listing and proxying", outage))
		startEtcd := stopProcess(localcluster.Etcd)
		down := time.Now()
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
		startEtcd(ctx)
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
		// A try that fails while the API server is still slow (503) holds its quota reservation
		// while it settles in the background (70 s); the next try joins it rather than waiting
		// (docs/templates.md, quota), so a retry is answered 201 as soon as the API server is.
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

	It("a kwok node deleted under running workspaces: nogoo9 reports NodeLost, replaces each pod on another node with the same identity and claims, never two pods serving, nothing re-owned", func(ctx SpecContext) {
		ns := NewNamespace()
		group := "res-" + ns
		capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi")}
		// Two nodes of the spec's own, tainted, so no other spec's pod lands on them: the
		// workspaces start on the first, which is then deleted; the second takes them.
		createNode := func(name string) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      map[string]string{"nogoo9-e2e/node": group},
				Annotations: map[string]string{localcluster.KwokNodeAnnotation: localcluster.KwokNodeValue, "node.alpha.kubernetes.io/ttl": "0"},
			}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nogoo9-e2e/node", Value: group, Effect: corev1.TaintEffectNoSchedule}}}}
			n.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}
			Expect(K8s.Create(ctx, n)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) {
				_ = K8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
			})
			Eventually(func(g Gomega) {
				var cur corev1.Node
				g.Expect(K8s.Get(ctx, client.ObjectKey{Name: name}, &cur)).To(Succeed())
				ready := false
				for _, c := range cur.Status.Conditions {
					ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
				}
				g.Expect(ready).To(BeTrue(), "node %s Ready", name)
			}, time.Minute).Should(Succeed())
		}
		first, second := group+"-a", group+"-b"
		createNode(first)

		class := rwopVolumes(ctx, ns, 2)
		tmpl := upgradeTemplate(ns, "py", "1", "example.com/ide:1", class)
		tmpl.Data[workspace.DataSpec] = fmt.Sprintf(`{"containers": [{"name": "ide", "image": "example.com/ide:1",
			"ports": [{"name": "ide", "containerPort": 8080}], "volumeMounts": [{"name": "home", "mountPath": "/home/user"}]}],
			"nodeSelector": {"nogoo9-e2e/node": %q}, "tolerations": [{"key": "nogoo9-e2e/node", "operator": "Exists", "effect": "NoSchedule"}]}`, group)
		Expect(K8s.Create(ctx, tmpl)).To(Succeed())
		t, err := Cluster.ServiceAccountToken(ctx, ns, "alice", "nogoo9", 0)
		Expect(err).NotTo(HaveOccurred())
		alice := t
		proc := StartNogoo9("--namespace="+ns, "--auth=oidc",
			"--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile)

		By("spawning two workspaces with a claim each on the first node")
		ids := []string{"node-a", "node-b"}
		claims := map[string]types.UID{}
		before := map[string]*corev1.Pod{}
		for _, id := range ids {
			pxSpawn(proc, alice, "py", id)
		}
		for _, id := range ids {
			pxExpectPhase(proc, alice, id, workspace.PhaseReady, "", "")
			p := waitSinglePod(ns, id, func(g Gomega, p *corev1.Pod) { g.Expect(p.Spec.NodeName).To(Equal(first)) })
			before[id] = p
			for _, name := range claimNames(p) {
				var pvc corev1.PersistentVolumeClaim
				Expect(K8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pvc)).To(Succeed())
				Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
				claims[name] = pvc.UID
			}
		}
		Expect(claims).To(HaveLen(len(ids)))
		createNode(second)

		By("deleting the first node: NodeLost, then Ready on the second node")
		Expect(K8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: first}})).To(Succeed())
		deleted := time.Now()
		seen := map[string][]string{} // id -> distinct "phase/reason" answers of GET, in order
		maxServing := 0
		Eventually(func(g Gomega) {
			for _, id := range ids {
				code, body := pxAPI(proc, alice, "GET", "/api/v1/workspaces/"+id, nil)
				state := strconv.Itoa(code)
				if code == http.StatusOK {
					var w workspace.Info
					g.Expect(json.Unmarshal(body, &w)).To(Succeed())
					state = string(w.Phase) + "/" + w.Reason
				}
				if l := seen[id]; len(l) == 0 || l[len(l)-1] != state {
					seen[id] = append(seen[id], state)
				}
				serving := 0
				for _, p := range workspacePodsNow(ns, id) {
					if p.DeletionTimestamp == nil && !workspace.IsStoppedPod(p) {
						serving++
					}
				}
				maxServing = max(maxServing, serving)
			}
			for _, id := range ids {
				g.Expect(seen[id][len(seen[id])-1]).To(Equal(string(workspace.PhaseReady)+"/"+workspace.ReasonRunning), "%s Ready again", id)
				pods := workspacePodsNow(ns, id)
				g.Expect(pods).To(HaveLen(1), id)
				g.Expect(pods[0].Spec.NodeName).To(Equal(second), id)
			}
		}, 2*time.Minute, 500*time.Millisecond).Should(Succeed())
		took := time.Since(deleted).Round(time.Second)
		GinkgoWriter.Printf("after the node was deleted, GET answered %v; Ready on %s after %s\n", seen, second, took)
		AddReportEntry("node deleted: workspace answers", fmt.Sprint(seen, " ready again after ", took))
		Expect(maxServing).To(Equal(1), "never two pods of a workspace serving (or placed) at once")

		By("the same id, owner, paths, version and claims; NodeLost said in Events; every claim bound")
		for _, id := range ids {
			p := waitSinglePod(ns, id, func(g Gomega, p *corev1.Pod) {})
			old := before[id]
			Expect(p.UID).NotTo(Equal(old.UID))
			Expect(workspace.ID(p)).To(Equal(id))
			for _, k := range []string{workspace.AnnOwner, workspace.AnnWorkspacePath, workspace.AnnTemplateVersion} {
				Expect(p.Annotations[k]).To(Equal(old.Annotations[k]), "%s: annotation %s", id, k)
			}
			Expect(p.Labels[workspace.LabelUserSub]).To(Equal(old.Labels[workspace.LabelUserSub]), id)
			Expect(claimNames(p)).To(Equal(claimNames(old)), id)
			waitPodEvent(ns, old.Name, lifecycle.ReasonNodeLost, lifecycle.ReasonNodeLostReplaced)
			pxExpectPhase(proc, alice, id, workspace.PhaseReady, "", "")
		}
		for name, uid := range claims {
			var pvc corev1.PersistentVolumeClaim
			Expect(K8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pvc)).To(Succeed())
			Expect(pvc.UID).To(Equal(uid), name)
			Expect(pvc.DeletionTimestamp).To(BeNil(), name)
			Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound), name)
		}
		Expect(proc.Exited()).To(BeFalse())
	})

	It("watches broken by a kube-apiserver restart while workspaces change: the model misses no change and nothing acts twice", func(ctx SpecContext) {
		ns := NewNamespace()
		port := 8080
		tmpl := pxTemplate(ns, "py", "1", "example.com/ide:1", port)
		Expect(K8s.Create(ctx, tmpl)).To(Succeed())
		t, err := Cluster.ServiceAccountToken(ctx, ns, "alice", "nogoo9", 0)
		Expect(err).NotTo(HaveOccurred())
		alice := t
		// The leader keeps its lease through the restart (renew deadline above the restart time).
		proc := StartNogoo9("--namespace="+ns, "--leader-elect=true", "--leader-election-renew-deadline=40s",
			"--leader-election-lease-duration=60s", "--auth=oidc",
			"--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile)
		proc.WaitControllersRunning()
		StartStandin(ns)
		ids := []string{"watch-maint", "watch-gone", "watch-up"}
		info := map[string]workspace.Info{}
		for _, id := range ids {
			info[id] = pxSpawn(proc, alice, "py", id)
		}
		for _, id := range ids {
			pxExpectPhase(proc, alice, id, workspace.PhaseReady, "", "")
		}
		podOf := map[string]*corev1.Pod{}
		for _, id := range ids {
			podOf[id] = waitSinglePod(ns, id, func(Gomega, *corev1.Pod) {})
		}

		// The template is raised before the restart, so that nogoo9's registry knows version 2 when
		// the intent arrives (two informers deliver in no common order; see docs/reliability.md).
		tmpl.Annotations[workspace.AnnTemplateVersion] = "2"
		tmpl.Data[workspace.DataSpec] = pxTemplateSpec("example.com/ide:2", port)
		bumpTemplate(ctx, tmpl)
		Eventually(func(g Gomega) {
			g.Expect(pxWorkspace(g, proc, alice, "watch-up").IsOutdated).To(BeTrue())
		}).Should(Succeed())

		By("restarting kube-apiserver, then changing workspaces before nogoo9's watches are back")
		stopProcess(localcluster.KubeAPIServer)(ctx)
		// A person puts one workspace in maintenance by hand, deletes another's pod and asks for
		// the upgrade of the third by hand.
		m := podOf["watch-maint"]
		Expect(K8s.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.Name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+workspace.AnnMaintenance+`":"relist test"}}}`)))).To(Succeed())
		Expect(K8s.Delete(ctx, podOf["watch-gone"])).To(Succeed())
		u := podOf["watch-up"]
		Expect(K8s.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: u.Name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+workspace.AnnUpgradeRequested+`":"`+time.Now().UTC().Format(time.RFC3339)+`"}}}`)))).To(Succeed())

		By("the views, the routes and the controller all see every change")
		upPods := map[string]bool{} // every pod of watch-up seen at any poll
		Eventually(func(g Gomega) {
			for _, p := range workspacePodsNow(ns, "watch-up") {
				upPods[p.Name] = true
			}
			g.Expect(pxWorkspace(g, proc, alice, "watch-maint").Status).To(Equal(workspace.Status{Phase: workspace.PhaseUnavailable,
				Reason: workspace.ReasonMaintenance, Message: "relist test"}))
			code, _ := pxAPI(proc, alice, "GET", "/api/v1/workspaces/watch-gone", nil)
			g.Expect(code).To(Equal(http.StatusNotFound), "watch-gone after its pod was deleted")
			code, _, _, err := pxDo(proc.ProxyURL+info["watch-gone"].WorkspacePath, alice)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).NotTo(Equal(http.StatusOK), "the proxy still routes to the deleted workspace")
			code, _, _, err = pxDo(proc.ProxyURL+info["watch-maint"].WorkspacePath, alice)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).NotTo(Equal(http.StatusOK), "the proxy still serves a workspace in maintenance")
			w := pxWorkspace(g, proc, alice, "watch-up")
			g.Expect(w.Phase).To(Equal(workspace.PhaseReady))
			g.Expect(w.TemplateVersion).To(Equal("2"))
			ps := workspacePodsNow(ns, "watch-up")
			g.Expect(ps).To(HaveLen(1))
			g.Expect(ps[0].Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		}, 2*time.Minute, 500*time.Millisecond).Should(Succeed(), func() string {
			var events corev1.EventList
			_ = K8s.List(ctx, &events, client.InNamespace(ns))
			var out []string
			for _, e := range events.Items {
				out = append(out, e.InvolvedObject.Name+" "+e.Reason+": "+e.Message)
			}
			return strings.Join(out, "\n")
		})
		// The upgraded pod's server is the test's stand-in, which starts serving on the pod's
		// IP when its own watch (also broken by the restart) sees the pod: wait for it, bounded.
		Eventually(func(g Gomega) {
			code, _, body, err := pxDo(proc.ProxyURL+info["watch-up"].WorkspacePath, alice)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), body)
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

		By("nothing acted twice: one new pod and one UpgradeStarted for the upgraded workspace, nothing for the others")
		Expect(upPods).To(HaveLen(2), "pods seen for watch-up: %v", upPods)
		started := map[string]int32{}
		// The Event is written after the fact (client-go's recorder, which retries a failed write
		// after up to 10 s): wait for it, then count.
		Eventually(func(g Gomega) {
			var events corev1.EventList
			g.Expect(K8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			clear(started)
			for _, e := range events.Items {
				if e.Reason == "UpgradeStarted" {
					started[e.InvolvedObject.Name] += max(e.Count, 1)
				}
			}
			g.Expect(started).To(HaveKey(u.Name))
		}, 30*time.Second, 250*time.Millisecond).Should(Succeed(), "the upgraded pod's UpgradeStarted Event")
		Expect(started).To(Equal(map[string]int32{u.Name: 1}), "UpgradeStarted Events by pod")
		Expect(workspacePodsNow(ns, "watch-gone")).To(BeEmpty(), "nogoo9 re-created a workspace whose pod a person deleted")
		Expect(workspacePodsNow(ns, "watch-maint")).To(HaveLen(1))
		Expect(workspacePodsNow(ns, "watch-maint")[0].UID).To(Equal(m.UID))
		GinkgoWriter.Printf("relist: nogoo9 logged a too-old resource version: %v\n", strings.Contains(proc.LogTail(5000), "too old resource version"))
		Expect(proc.Exited()).To(BeFalse())
	})
})

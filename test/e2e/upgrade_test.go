package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The upgrade controller as an operator meets it: the real nogoo9 binary, workspaces spawned
// through its REST API with real service-account tokens (TokenReview), template versions raised
// with a ConfigMap patch, upgrades requested with kubectl or REST, and kwok playing the kubelet
// (the scheduler enforces ReadWriteOncePod, images under nonexistent.invalid/ stay ErrImagePull).
//
// Every spec watches its namespace's workspace pods from the start (podHistory) and checks the
// invariants after every single event the API server reports, not only at the end: a workspace
// never has zero live pods once it had one, never more than two, its owner never changes, and
// where the strategy promises it (side-by-side) it is never without a Ready pod.
var _ = Describe("Upgrade controller", Label("upgrade"), func() {
	It("Upgrade side-by-side: a kubectl intent moves a workspace to the new version with no outage", func(ctx SpecContext) {
		ns := NewNamespace()
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		p := StartNogoo9("--namespace=" + ns)
		alice := userClient(ctx, p, ns, "alice")

		By("spawning a workspace through REST as alice")
		hist.NoOutage("box")
		ws := alice.spawn(ctx, "plain", "box")
		old := WaitPodReady(ns, ws.ActivePod)
		Expect(old.Annotations[workspace.AnnOwner]).To(Equal("system:serviceaccount:" + ns + ":alice"))
		before := identityOf(old)

		By("raising the template to 2.0 with a new image")
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", "example.com/ide:2.0", ""))
		alice.waitOutdated(ctx, "box", "2.0")

		By("a hand-typed garbage intent is removed with a Warning Event, and nothing is upgraded")
		out, err := kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pod", old.Name, workspace.AnnUpgradeRequested+"=maybe")
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)
		waitPodEvent(ns, old.Name, "InvalidUpgradeRequest")
		Eventually(func(g Gomega) {
			pods := workspacePods(g, ns, "box")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].UID).To(Equal(old.UID))
			g.Expect(pods[0].Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		}).Should(Succeed())

		By("requesting the upgrade with kubectl annotate, as a person would")
		out, err = kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pod", old.Name, workspace.AnnUpgradeRequested+"=true")
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)

		By("converging on one Ready pod at 2.0 with the same identity and no intent")
		cur := waitSinglePod(ns, "box", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.UID).NotTo(Equal(old.UID), "still the old pod")
			g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0"))
			g.Expect(podReadyNow(pod)).To(BeTrue(), "the new pod is Ready")
		})
		Expect(cur.Name).To(HavePrefix(old.Name + "-up-"))
		Expect(cur.Spec.Containers[0].Image).To(Equal("example.com/ide:2.0"))
		Expect(cur.Labels[workspace.LabelTemplateVersion]).To(Equal(workspace.VersionLabel("2.0")))
		Expect(identityOf(cur)).To(Equal(before), "owner, id, name and routing are the old pod's")
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnUpgradePod))
		Expect(cur.Annotations).To(HaveKeyWithValue(workspace.AnnUpgradeStrategy, "SideBySide"))
		Expect(cur.Annotations).To(HaveKeyWithValue(workspace.AnnUpgradeFrom, old.Name))
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnLastUpgradeError))
		waitPodEvent(ns, cur.Name, "UpgradeSucceeded")
		waitPodEvent(ns, old.Name, "UpgradeStarted")

		By("showing the upgraded workspace through REST, still alice's and not outdated")
		w := alice.get(ctx, "box")
		Expect(w.ActivePod).To(Equal(cur.Name))
		Expect(w.IsOutdated).To(BeFalse())
		Expect(w.Owner).To(Equal(before[workspace.AnnOwner]))

		Eventually(func(g Gomega) float64 {
			return metricValue(g, p, "nogoo9_upgrades_total", "result", "succeeded", "strategy", "SideBySide")
		}).Should(Equal(1.0))
		Expect(hist.Violations()).To(BeEmpty())
		Expect(hist.MaxLive("box")).To(Equal(2), "old and new pod ran side by side")
	})

	It("Upgrade recreate with a ReadWriteOncePod volume: the new pod waits for the old one, the claim stays", func(ctx SpecContext) {
		ns := NewNamespace()
		class := rwopVolumes(ctx, ns, 1)
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "disk", "1.0", "example.com/ide:1.0", class))).To(Succeed())
		p := StartNogoo9("--namespace=" + ns)
		bob := userClient(ctx, p, ns, "bob")

		By("spawning a workspace with a ReadWriteOncePod claim")
		hist.Exclusive("data")
		ws := bob.spawn(ctx, "disk", "data")
		old := WaitPodReady(ns, ws.ActivePod)
		before := identityOf(old)
		claim := claimOf(ctx, ns, "data")
		Expect(claim.Spec.AccessModes).To(ConsistOf(corev1.ReadWriteOncePod))
		Expect(claim.Status.Phase).To(Equal(corev1.ClaimBound))

		By("raising the version and requesting the upgrade through REST as the owner")
		bumpTemplate(ctx, upgradeTemplate(ns, "disk", "2.0", "example.com/ide:2.0", class))
		bob.waitOutdated(ctx, "data", "2.0")
		res := bob.upgrade(ctx, "data")
		Expect(res.Status).To(Equal("upgrading"))
		Expect(res.PodName).To(HavePrefix(old.Name + "-up-"))

		By("converging on the announced pod at 2.0, mounting the same claim")
		cur := waitSinglePod(ns, "data", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.Name).To(Equal(res.PodName))
			g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0"))
			g.Expect(podReadyNow(pod)).To(BeTrue(), "the new pod is Ready")
			g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnUpgradeStartedAt), "the Recreate upgrade is concluded")
		})
		Expect(identityOf(cur)).To(Equal(before))
		Expect(cur.Annotations).To(HaveKeyWithValue(workspace.AnnUpgradeStrategy, "Recreate"))
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnRollbackSpec))
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		Expect(claimNames(cur)).To(ConsistOf(claim.Name))
		after := claimOf(ctx, ns, "data")
		Expect(after.UID).To(Equal(claim.UID), "the same PVC object, not a new one")
		Expect(after.DeletionTimestamp).To(BeNil())
		Expect(after.Status.Phase).To(Equal(corev1.ClaimBound))
		waitPodEvent(ns, cur.Name, "UpgradeSucceeded")
		Eventually(func(g Gomega) float64 {
			return metricValue(g, p, "nogoo9_upgrades_total", "result", "succeeded", "strategy", "Recreate")
		}).Should(Equal(1.0))

		By("having held the new pod behind nogoo9's scheduling gate until the old pod was gone")
		oldRec, newRec := hist.Pod(old.Name), hist.Pod(cur.Name)
		Expect(oldRec).NotTo(BeNil())
		Expect(newRec).NotTo(BeNil())
		Expect(newRec.GatedAtCreation).To(BeTrue(), "the new pod was created behind %s", workspace.GateVolumeRelease)
		Expect(oldRec.RemovedSeq).To(BeNumerically(">", 0), "the old pod was removed")
		Expect(newRec.UngatedSeq).To(BeNumerically(">", oldRec.RemovedSeq), "the gate was lifted only once the old pod was gone")
		Expect(newRec.BoundSeq).To(BeNumerically(">", oldRec.RemovedSeq), "the new pod got a node only after the old pod was gone")
		Expect(newRec.CreatedSeq).To(BeNumerically("<", oldRec.GoingSeq), "the new pod existed before the old one was deleted")
		Expect(hist.Violations()).To(BeEmpty())
	})

	It("Upgrade failing image: the deadline fails it, the old pod keeps serving with the error recorded", func(ctx SpecContext) {
		ns := NewNamespace()
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		// No deadline can pass before the spec has seen the upgrade in flight; then nogoo9 is
		// restarted with one a short while ahead (restartWithDeadline).
		p := StartNogoo9("--namespace="+ns, "--upgrade-timeout="+inFlightTimeout.String())
		carol := userClient(ctx, p, ns, "carol")

		hist.NoOutage("fragile")
		ws := carol.spawn(ctx, "plain", "fragile")
		old := WaitPodReady(ns, ws.ActivePod)
		before := identityOf(old)

		By("raising the version to an image that can never be pulled")
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", FailingImage("ide"), ""))
		carol.waitOutdated(ctx, "fragile", "2.0")
		out, err := kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pod", old.Name, workspace.AnnUpgradeRequested+"=true")
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)

		By("the new pod is created and stays in ErrImagePull")
		var failing *corev1.Pod
		Eventually(func(g Gomega) {
			pods := workspacePods(g, ns, "fragile")
			g.Expect(pods).To(HaveLen(2))
			for _, pod := range pods {
				if pod.UID != old.UID {
					failing = pod
				}
			}
			g.Expect(failing.Status.ContainerStatuses).NotTo(BeEmpty())
			g.Expect(failing.Status.ContainerStatuses[0].State.Waiting).NotTo(BeNil())
			g.Expect(failing.Status.ContainerStatuses[0].State.Waiting.Reason).To(Equal("ErrImagePull"))
		}).Should(Succeed())
		started := upgradeStartedAt(failing)
		w := carol.get(ctx, "fragile")
		Expect(w.Phase).To(Equal(workspace.PhaseUpgrading))
		Expect(w.UpgradePod).To(Equal(failing.Name))
		Expect(w.ActivePod).To(Equal(old.Name), "the old pod serves while the new one is not Ready")

		By("restarting nogoo9 with a deadline 20 s ahead: it fails the upgrade when the deadline comes")
		timeout := restartWithDeadline(p, started, 20*time.Second)

		By("after the deadline: only the old pod, still Ready on 1.0, with the error and without the intent")
		cur := waitSinglePod(ns, "fragile", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.Annotations).To(HaveKey(workspace.AnnLastUpgradeError))
		})
		Expect(cur.UID).To(Equal(old.UID), "the old pod keeps serving")
		Expect(podReadyNow(cur)).To(BeTrue())
		Expect(workspace.TemplateVersion(cur)).To(Equal("1.0"))
		Expect(identityOf(cur)).To(Equal(before))
		msg := cur.Annotations[workspace.AnnLastUpgradeError]
		Expect(msg).To(HavePrefix("Upgrade failed at "))
		Expect(msg).To(ContainSubstring("ErrImagePull"))
		at, err := time.Parse(time.RFC3339, strings.SplitN(strings.TrimPrefix(msg, "Upgrade failed at "), ": ", 2)[0])
		Expect(err).NotTo(HaveOccurred(), "the failure time in %q", msg)
		Expect(at).To(BeTemporally(">=", started.Add(timeout-time.Second)), "ErrImagePull may heal: it must wait for the deadline")
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnUpgradePod))
		err = K8s.Get(ctx, client.ObjectKeyFromObject(failing), &corev1.Pod{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the failed new pod %s is deleted (%v)", failing.Name, err)
		waitPodEvent(ns, cur.Name, "UpgradeFailed")

		By("showing the error and the outdated version through REST")
		w = carol.get(ctx, "fragile")
		Expect(w.LastUpgradeError).To(Equal(msg))
		Expect(w.IsOutdated).To(BeTrue())
		Expect(w.ActivePod).To(Equal(old.Name))
		Eventually(func(g Gomega) {
			g.Expect(metricValue(g, p, "nogoo9_upgrades_total", "result", "failed", "strategy", "SideBySide")).To(Equal(1.0))
			g.Expect(metricValue(g, p, "nogoo9_template_workspaces", "template", "plain", "outdated", "true")).To(Equal(1.0))
		}).Should(Succeed())

		By("a fixed version 2.1 requested again through REST goes through and clears the error")
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.1", "example.com/ide:2.1", ""))
		carol.waitOutdated(ctx, "fragile", "2.1")
		res := carol.upgrade(ctx, "fragile")
		fixed := waitSinglePod(ns, "fragile", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.Name).To(Equal(res.PodName))
			g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.1"))
			g.Expect(podReadyNow(pod)).To(BeTrue())
		})
		Expect(fixed.Annotations).NotTo(HaveKey(workspace.AnnLastUpgradeError))
		Expect(identityOf(fixed)).To(Equal(before))
		Expect(hist.Violations()).To(BeEmpty())
	})

	It("Upgrade deadline passed while nogoo9 was down: the first pass after the restart fails it and rolls back", func(ctx SpecContext) {
		ns := NewNamespace()
		class := rwopVolumes(ctx, ns, 1)
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "disk", "1.0", "example.com/ide:1.0", class))).To(Succeed())
		// No deadline can pass before the spec has seen both upgrades in flight; the restart
		// gets one that passed while nogoo9 was down.
		p := StartNogoo9("--namespace="+ns, "--upgrade-timeout="+inFlightTimeout.String())
		dave := userClient(ctx, p, ns, "dave")
		hist.NoOutage("sbs")
		hist.Exclusive("rwop")
		sbs := WaitPodReady(ns, dave.spawn(ctx, "plain", "sbs").ActivePod)
		rwop := WaitPodReady(ns, dave.spawn(ctx, "disk", "rwop").ActivePod)
		claim := claimOf(ctx, ns, "rwop")

		By("raising both templates to an image that cannot be pulled and requesting both upgrades")
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", FailingImage("ide"), ""))
		bumpTemplate(ctx, upgradeTemplate(ns, "disk", "2.0", FailingImage("ide"), class))
		dave.waitOutdated(ctx, "sbs", "2.0")
		dave.waitOutdated(ctx, "rwop", "2.0")
		sbsNew, rwopNew := dave.upgrade(ctx, "sbs").PodName, dave.upgrade(ctx, "rwop").PodName

		By("killing nogoo9 once both new pods are in ErrImagePull (the Recreate one after its old pod is gone)")
		started := map[string]time.Time{}
		Eventually(func(g Gomega) {
			for _, name := range []string{sbsNew, rwopNew} {
				var pod corev1.Pod
				g.Expect(K8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod)).To(Succeed())
				g.Expect(pod.Status.ContainerStatuses).NotTo(BeEmpty(), "pod %s", name)
				g.Expect(pod.Status.ContainerStatuses[0].State.Waiting).NotTo(BeNil(), "pod %s", name)
				g.Expect(pod.Status.ContainerStatuses[0].State.Waiting.Reason).To(Equal("ErrImagePull"), "pod %s", name)
				g.Expect(pod.Annotations).To(HaveKey(workspace.AnnUpgradeStartedAt), "pod %s", name)
				started[name] = upgradeStartedAt(&pod)
			}
		}).Should(Succeed())
		p.Kill()
		killed := time.Now()
		Expect(workspacePodsNow(ns, "sbs")).To(HaveLen(2), "side-by-side: old and new pod")
		rwopPods := workspacePodsNow(ns, "rwop")
		Expect(rwopPods).To(HaveLen(1), "Recreate: the old pod is gone")
		Expect(rwopPods[0].Name).To(Equal(rwopNew))

		By("choosing a deadline that passes while nogoo9 is down, and waiting until it has passed for both")
		// At least 15 s, and long enough that neither deadline had passed at the kill: whole
		// seconds (the start times have no more), with one to spare.
		timeout := 15 * time.Second
		for _, at := range started {
			timeout = max(timeout, killed.Sub(at).Truncate(time.Second)+2*time.Second)
		}
		deadlines := map[string]time.Time{}
		for name, at := range started {
			deadlines[name] = at.Add(timeout)
			Expect(deadlines[name]).To(BeTemporally(">", killed), "the deadline of %s is after the kill", name)
		}
		Eventually(func() bool {
			now := time.Now()
			return now.After(deadlines[sbsNew].Add(time.Second)) && now.After(deadlines[rwopNew].Add(time.Second))
		}, 2*timeout).Should(BeTrue())
		Expect(workspacePodsNow(ns, "sbs")).To(HaveLen(2), "nothing moves while nogoo9 is down")

		By("restarting with that deadline: the side-by-side upgrade fails onto the old pod, the Recreate one rolls back on 1.0")
		p.Args = append(p.Args, "--upgrade-timeout="+timeout.String())
		p.Restart()
		cur := waitSinglePod(ns, "sbs", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.UID).To(Equal(sbs.UID))
			g.Expect(pod.Annotations[workspace.AnnLastUpgradeError]).To(HavePrefix("Upgrade failed at "))
		})
		Expect(cur.Annotations[workspace.AnnLastUpgradeError]).To(ContainSubstring("ErrImagePull"))
		Expect(cur.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		back := waitSinglePod(ns, "rwop", func(g Gomega, pod *corev1.Pod) {
			g.Expect(pod.Name).NotTo(Equal(rwopNew))
			g.Expect(podReadyNow(pod)).To(BeTrue(), "the rollback pod is Ready")
		})
		Expect(back.Annotations).To(HaveKeyWithValue(workspace.AnnUpgradeStrategy, "Rollback"))
		Expect(workspace.TemplateVersion(back)).To(Equal("1.0"))
		Expect(back.Spec.Containers[0].Image).To(Equal("example.com/ide:1.0"))
		Expect(back.Annotations[workspace.AnnLastUpgradeError]).To(HavePrefix("Upgrade failed at "))
		Expect(back.Annotations[workspace.AnnLastUpgradeError]).To(ContainSubstring("ErrImagePull"))
		Expect(identityOf(back)).To(Equal(identityOf(rwop)))
		Expect(claimNames(back)).To(ConsistOf(claim.Name))
		Expect(claimOf(ctx, ns, "rwop").UID).To(Equal(claim.UID))
		waitPodEvent(ns, rwopNew, "UpgradeFailed")
		Eventually(func(g Gomega) {
			g.Expect(metricValue(g, p, "nogoo9_upgrades_total", "result", "failed", "strategy", "SideBySide")).To(Equal(1.0))
			g.Expect(metricValue(g, p, "nogoo9_upgrades_total", "result", "failed", "strategy", "Recreate")).To(Equal(1.0))
		}).Should(Succeed(), "each failure counted once by the restarted process")
		Expect(hist.Violations()).To(BeEmpty())
	})

	It("Upgrade with two replicas: only the leader acts, the standby finishes when the leader is killed", func(ctx SpecContext) {
		const n = 30
		ns := NewNamespace()
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		// A small cap keeps the leader from finishing everything before it is killed.
		leader := StartNogoo9("--namespace="+ns, "--leader-elect=true", "--max-concurrent-upgrades=5")
		leader.WaitControllersRunning()
		standby := StartNogoo9("--namespace="+ns, "--leader-elect=true", "--max-concurrent-upgrades=5")
		erin := userClient(ctx, standby, ns, "erin")

		By("spawning workspaces through the standby's API (the API runs on every replica)")
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("w-%02d", i)
			hist.NoOutage(ids[i])
		}
		erin.spawnAllReady(ctx, ns, ids, plainTemplate)

		By("raising the version and annotating every outdated pod with kubectl, as docs/upgrades.md shows")
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", "example.com/ide:2.0", ""))
		erin.waitOutdated(ctx, ids[0], "2.0")
		out, err := kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pods", "-l", workspace.LabelTemplate+"=plain,"+workspace.LabelTemplateVersion+"!=2.0",
			workspace.AnnUpgradeRequested+"=true")
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)

		By("killing the leader in the middle")
		Eventually(hist.UpgradedPods, time.Minute, 20*time.Millisecond).Should(BeNumerically(">=", 3))
		leader.Kill()
		killed := hist.UpgradedPods()
		GinkgoWriter.Printf("leader killed with %d of %d upgraded pods created\n", killed, n)

		By("the standby takes the lease and finishes every upgrade")
		waitAllUpgraded(ns, ids, "2.0")
		Expect(hist.Violations()).To(BeEmpty())

		By("the standby wrote nothing before it held the lease")
		log := standby.LogTail(100000)
		acquired := strings.Index(log, "Successfully acquired lease")
		Expect(acquired).To(BeNumerically(">=", 0), "the standby took over")
		for _, write := range []string{"Created upgraded pod", "Deleted pod"} {
			if i := strings.Index(log, write); i >= 0 {
				Expect(i).To(BeNumerically(">", acquired), "%q logged by the standby before it was elected", write)
			}
		}
		if killed < n {
			Expect(log[acquired:]).To(Or(ContainSubstring("Created upgraded pod"), ContainSubstring("Deleted pod")), "the standby did the rest")
		}
	})

	// Regression (label startup-template-sync, fixed in e072e02): the upgrade controller's workers
	// used to start when the pod cache had synced, not the template registry, so a pass that met an
	// intent before the registry had loaded the workspace's template failed it with TemplateNotFound.
	It("Upgrade requested while nogoo9 is down: carried out when it starts again", Label("startup-template-sync"), func(ctx SpecContext) {
		// Each workspace has a template of its own, among other teams' templates: at start the
		// template registry loads them all while the upgrade controller already reconciles every
		// workspace with its intent.
		const n = 40
		ns := NewNamespace()
		hist := watchWorkspacePods(ns)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("w-%02d", i)
			hist.NoOutage(ids[i])
			Expect(K8s.Create(ctx, upgradeTemplate(ns, "t-"+ids[i], "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		}
		Expect(inParallel(8, fillerTemplates, func(i int) error {
			cm := upgradeTemplate(ns, fmt.Sprintf("filler-%03d", i), "1.0", "example.com/filler:1.0", "")
			cm.Data[workspace.DataSpec] = fillerSpec
			return K8s.Create(ctx, cm)
		})).To(BeEmpty())
		p := StartNogoo9("--namespace=" + ns)
		frank := userClient(ctx, p, ns, "frank")
		frank.spawnAllReady(ctx, ns, ids, func(i int) string { return "t-" + ids[i] })

		By("stopping nogoo9, raising every version and annotating every pod with kubectl")
		p.Stop()
		for _, id := range ids {
			bumpTemplate(ctx, upgradeTemplate(ns, "t-"+id, "2.0", "example.com/ide:2.0", ""))
		}
		out, err := kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pods", "-l", workspace.LabelType+"="+workspace.TypeWorkspace,
			workspace.AnnUpgradeRequested+"=true")
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)

		By("starting nogoo9 again: every workspace is upgraded, none fails for want of its template")
		p.Restart()
		for _, id := range ids {
			waitSinglePod(ns, id, func(g Gomega, pod *corev1.Pod) {
				if e := pod.Annotations[workspace.AnnLastUpgradeError]; e != "" {
					StopTrying(fmt.Sprintf("workspace %s failed its upgrade: pod %s has %s=%q", id, pod.Name, workspace.AnnLastUpgradeError, e)).Now()
				}
				g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0"), "workspace %s", id)
				g.Expect(podReadyNow(pod)).To(BeTrue())
			})
		}
		Expect(hist.Violations()).To(BeEmpty())
	})

	// Regression (label delete-race, fixed in c237eef): DELETE /api/v1/workspaces/{id} used to delete
	// only the pods the front end's cache showed, so an upgraded pod created a moment earlier (or
	// later, from the controller's stale view of the old pod) survived and became the workspace again.
	It("Upgrade racing the owner's delete: a deleted workspace stays deleted", Label("delete-race"), func(ctx SpecContext) {
		const n = 20
		ns := NewNamespace()
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		p := StartNogoo9("--namespace=" + ns)
		gina := userClient(ctx, p, ns, "gina")
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("w-%02d", i)
		}
		gina.spawnAllReady(ctx, ns, ids, plainTemplate)
		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", "example.com/ide:2.0", ""))
		gina.waitOutdated(ctx, ids[0], "2.0")

		By("requesting an upgrade and, right after it, deleting the workspace, as a user who changed their mind")
		Expect(inParallel(n, n, func(i int) error {
			if _, err := gina.call(ctx, http.MethodPost, "/api/v1/workspaces/"+ids[i]+"/upgrade", nil, nil); err != nil {
				return err
			}
			status, err := gina.call(ctx, http.MethodDelete, "/api/v1/workspaces/"+ids[i], nil, nil)
			if err == nil && status != http.StatusAccepted {
				err = fmt.Errorf("delete %s: status %d", ids[i], status)
			}
			return err
		})).To(BeEmpty())

		By("no workspace comes back")
		var left []*corev1.Pod
		Eventually(func(g Gomega) {
			// Settled: nothing terminating any more (kwok removes a deleted pod in about a second).
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			left = nil
			for i := range list.Items {
				g.Expect(list.Items[i].DeletionTimestamp).To(BeNil(), "pod %s still terminating", list.Items[i].Name)
				left = append(left, &list.Items[i])
			}
		}).Should(Succeed())
		var story []string
		for _, pod := range left {
			// Who missed whom: was the upgraded pod created before or after the old pod's deletion
			// began (API server order, from the watch)?
			newRec, oldRec := hist.Pod(pod.Name), hist.Pod(pod.Annotations[workspace.AnnUpgradeFrom])
			when := "unknown"
			if newRec != nil && oldRec != nil {
				when = "created before the old pod's deletion began: the delete did not see it"
				if newRec.CreatedSeq > oldRec.GoingSeq {
					when = "created after the old pod's deletion had begun: the controller acted on a stale view"
				}
			}
			story = append(story, fmt.Sprintf("workspace %s is back as pod %s (version %s), %s",
				workspace.ID(pod), pod.Name, workspace.TemplateVersion(pod), when))
		}
		Expect(story).To(BeEmpty(), "workspaces deleted by their owner must stay deleted")
		Consistently(func(g Gomega) int {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			return len(list.Items)
		}).Should(BeZero())
	})

	It("Upgrade bulk: 100 workspaces of both strategies, some failing, with nogoo9 killed in the middle", func(ctx SpecContext) {
		const (
			// Long enough that no healthy upgrade misses it across two kills and restarts of a
			// nogoo9 with 100 workspaces on a loaded machine; the failing ones wait it out.
			timeout     = 90 * time.Second
			users       = 10
			plainN      = 85 // side-by-side, healthy
			diskN       = 8  // ReadWriteOncePod, Recreate, healthy
			brokenN     = 5  // side-by-side, the new version cannot be pulled
			brokenDiskN = 2  // Recreate, the new version cannot be pulled: rolled back
			maxInFlight = 25
		)
		t0 := time.Now()
		lap := func(what string) {
			GinkgoWriter.Printf("bulk: %s at %s\n", what, time.Since(t0).Round(100*time.Millisecond))
		}
		ns := NewNamespace()
		adminNS := NewNamespace()
		class := rwopVolumes(ctx, ns, diskN+brokenDiskN)
		hist := watchWorkspacePods(ns)

		type kind struct {
			template      string
			n             int
			exclusive     bool
			fails         bool
			prefix, image string
		}
		kinds := []kind{
			{template: "plain", n: plainN, prefix: "p"},
			{template: "disk", n: diskN, prefix: "d", exclusive: true},
			{template: "broken", n: brokenN, prefix: "b", fails: true},
			{template: "broken-disk", n: brokenDiskN, prefix: "bd", exclusive: true, fails: true},
		}
		for _, k := range kinds {
			cls := ""
			if k.exclusive {
				cls = class
			}
			Expect(K8s.Create(ctx, upgradeTemplate(ns, k.template, "1.0", "example.com/"+k.template+":1.0", cls))).To(Succeed())
		}
		p := StartNogoo9("--namespace="+ns, "--upgrade-timeout="+timeout.String(), fmt.Sprintf("--max-concurrent-upgrades=%d", maxInFlight),
			"--admin-group=system:serviceaccounts:"+adminNS)
		clients := make([]*apiClient, users)
		for i := range clients {
			clients[i] = userClient(ctx, p, ns, fmt.Sprintf("user-%d", i))
		}
		admin := userClient(ctx, p, adminNS, "admin")
		var who struct {
			IsAdmin bool `json:"isAdmin"`
		}
		Expect(admin.call(ctx, http.MethodGet, "/api/v1/whoami", nil, &who)).To(Equal(http.StatusOK))
		Expect(who.IsAdmin).To(BeTrue(), "members of --admin-group are admins")

		By("spawning 100 workspaces of 10 users through REST, 16 requests at a time")
		type wsInfo struct {
			id, owner string
			kind      kind
		}
		var all []wsInfo
		n := 0
		for _, k := range kinds {
			for i := range k.n {
				c := clients[n%users]
				all = append(all, wsInfo{id: fmt.Sprintf("%s-%02d", k.prefix, i), owner: c.subject, kind: k})
				n++
			}
		}
		for _, w := range all {
			if w.kind.exclusive {
				hist.Exclusive(w.id)
			} else {
				hist.NoOutage(w.id)
			}
		}
		errs := inParallel(16, len(all), func(i int) error {
			w := all[i]
			var out frontend.Workspace
			status, err := clients[i%users].call(ctx, http.MethodPost, "/api/v1/workspaces", frontend.SpawnInput{Template: w.kind.template, ID: w.id}, &out)
			if err == nil && status != http.StatusCreated {
				err = fmt.Errorf("spawn %s: status %d", w.id, status)
			}
			return err
		})
		Expect(errs).To(BeEmpty())
		lap("spawned")
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			ready := 0
			for i := range list.Items {
				if podReadyNow(&list.Items[i]) {
					ready++
				}
			}
			g.Expect(ready).To(Equal(len(all)), "Ready workspace pods")
		}, 3*time.Minute, time.Second).Should(Succeed())
		lap("all Ready")

		before := map[string]map[string]string{}
		var pods corev1.PodList
		Expect(K8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		Expect(pods.Items).To(HaveLen(len(all)))
		for i := range pods.Items {
			before[workspace.ID(&pods.Items[i])] = identityOf(&pods.Items[i])
		}
		claimsBefore := map[string]types.UID{}
		var claims corev1.PersistentVolumeClaimList
		Expect(K8s.List(ctx, &claims, client.InNamespace(ns))).To(Succeed())
		for _, c := range claims.Items {
			Expect(c.Status.Phase).To(Equal(corev1.ClaimBound), "claim %s", c.Name)
			claimsBefore[c.Name] = c.UID
		}
		Expect(claimsBefore).To(HaveLen(diskN + brokenDiskN))

		By("raising every template to 2.0; the broken ones to an image that cannot be pulled")
		for _, k := range kinds {
			cls, image := "", "example.com/"+k.template+":2.0"
			if k.exclusive {
				cls = class
			}
			if k.fails {
				image = FailingImage(k.template)
			}
			bumpTemplate(ctx, upgradeTemplate(ns, k.template, "2.0", image, cls))
		}
		Eventually(func(g Gomega) {
			var out struct{ Templates []frontend.TemplateInfo }
			_, err := admin.call(ctx, http.MethodGet, "/api/v1/templates", nil, &out)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Templates).To(HaveLen(len(kinds)))
			for _, t := range out.Templates {
				g.Expect(t.Version).To(Equal("2.0"), "template %s", t.Name)
				g.Expect(t.Valid).To(BeTrue(), "template %s: %s", t.Name, t.Error)
			}
		}).Should(Succeed())

		By("an admin upgrading all of them through REST")
		var upgraded struct{ Upgrades []frontend.UpgradeResult }
		status, err := admin.call(ctx, http.MethodPost, "/api/v1/upgrade-all", nil, &upgraded)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusAccepted))
		Expect(upgraded.Upgrades).To(HaveLen(len(all)))
		for _, u := range upgraded.Upgrades {
			Expect(u.Status).To(Equal("upgrading"), "workspace %s: %s", u.ID, u.Error)
			Expect(u.Owner).To(Equal(before[u.ID][workspace.AnnOwner]), "the admin does not become the owner of %s", u.ID)
		}
		lap("upgrade-all answered")

		By("killing nogoo9 (SIGKILL) while upgrades are in flight")
		Eventually(hist.UpgradedPods, 2*time.Minute, 50*time.Millisecond).Should(BeNumerically(">=", 15))
		p.Kill()
		lap(fmt.Sprintf("killed with %d upgraded pods created", hist.UpgradedPods()))
		unfinished := 0
		Expect(K8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		for _, group := range groupPods(pods.Items) {
			if len(group) > 1 || group[0].Annotations[workspace.AnnUpgradeRequested] != "" {
				unfinished++
			}
		}
		Expect(unfinished).To(BeNumerically(">", 0), "the kill must land in the middle of the bulk upgrade")
		GinkgoWriter.Printf("bulk: %d workspaces unfinished at the kill\n", unfinished)

		By("restarting nogoo9, and killing it once more while the failing upgrades wait for their deadline")
		p.Restart()
		lap("restarted")
		Eventually(func(g Gomega) bool {
			if hist.UpgradedPods() >= len(all)-5 {
				return true
			}
			// Or no request is left to act on (a failed start clears it): kill anyway, the
			// convergence check below says what went wrong.
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for i := range list.Items {
				if _, ok := list.Items[i].Annotations[workspace.AnnUpgradeRequested]; ok {
					return false
				}
			}
			return true
		}, 2*time.Minute, 50*time.Millisecond).Should(BeTrue())
		p.Kill()
		lap(fmt.Sprintf("killed again with %d upgraded pods created", hist.UpgradedPods()))
		p.Restart()
		lap("restarted again")

		By("converging")
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			groups := groupPods(list.Items)
			g.Expect(groups).To(HaveLen(len(all)), "workspaces")
			for _, w := range all {
				group := groups[w.id]
				g.Expect(group).To(HaveLen(1), "workspace %s: exactly one pod, got %v", w.id, podNames(group))
				pod := group[0]
				g.Expect(pod.DeletionTimestamp).To(BeNil(), "workspace %s: pod %s", w.id, pod.Name)
				g.Expect(podReadyNow(pod)).To(BeTrue(), "workspace %s: pod %s Ready", w.id, pod.Name)
				g.Expect(identityOf(pod)).To(Equal(before[w.id]), "workspace %s: identity of pod %s", w.id, pod.Name)
				g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested), "workspace %s: intent on %s", w.id, pod.Name)
				if w.kind.exclusive {
					// A Recreate upgrade (or its rollback) is in flight while this is on the pod.
					g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnUpgradeStartedAt), "workspace %s: upgrade of %s not concluded", w.id, pod.Name)
					g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnRollbackSpec), "workspace %s: pod %s", w.id, pod.Name)
				}
				if w.kind.fails {
					g.Expect(workspace.TemplateVersion(pod)).To(Equal("1.0"), "failed workspace %s stays on 1.0", w.id)
					g.Expect(pod.Annotations[workspace.AnnLastUpgradeError]).To(HavePrefix("Upgrade failed at "), "workspace %s: pod %s", w.id, pod.Name)
					g.Expect(pod.Spec.Containers[0].Image).To(Equal("example.com/"+w.kind.template+":1.0"), "workspace %s", w.id)
				} else {
					if e := pod.Annotations[workspace.AnnLastUpgradeError]; e != "" {
						StopTrying(fmt.Sprintf("workspace %s (healthy template) failed its upgrade: pod %s has %s=%q", w.id, pod.Name, workspace.AnnLastUpgradeError, e)).Now()
					}
					g.Expect(workspace.TemplateVersion(pod)).To(Equal("2.0"), "workspace %s: pod %s", w.id, pod.Name)
				}
			}
		}, timeout+2*time.Minute, time.Second).Should(Succeed()) // the last failing upgrades may have started just now
		lap("converged")

		By("keeping every claim: same objects, still bound, mounted by the same workspaces")
		Expect(K8s.List(ctx, &claims, client.InNamespace(ns))).To(Succeed())
		after := map[string]types.UID{}
		for _, c := range claims.Items {
			Expect(c.DeletionTimestamp).To(BeNil(), "claim %s", c.Name)
			Expect(c.Status.Phase).To(Equal(corev1.ClaimBound), "claim %s", c.Name)
			after[c.Name] = c.UID
		}
		Expect(after).To(Equal(claimsBefore))
		Expect(K8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		for i := range pods.Items {
			pod := &pods.Items[i]
			if strings.HasPrefix(workspace.ID(pod), "d-") || strings.HasPrefix(workspace.ID(pod), "bd-") {
				Expect(claimNames(pod)).To(HaveLen(1), "pod %s", pod.Name)
				Expect(claimsBefore).To(HaveKey(claimNames(pod)[0]))
			}
		}

		By("creating the pods upgrade-all announced, across the crash")
		announced := map[string]string{}
		for _, u := range upgraded.Upgrades {
			announced[u.ID] = u.PodName
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if workspace.TemplateVersion(pod) == "2.0" {
				Expect(pod.Name).To(Equal(announced[workspace.ID(pod)]), "workspace %s", workspace.ID(pod))
			}
		}

		By("never having a workspace without a pod, with three pods, another owner, or (side-by-side) without a Ready pod")
		Expect(hist.Violations()).To(BeEmpty())
		GinkgoWriter.Printf("bulk: at most %d upgrades in flight at once\n", hist.MaxInFlight())
		Expect(hist.MaxInFlight()).To(BeNumerically("<=", maxInFlight), "--max-concurrent-upgrades holds, also across the restart")
		for _, w := range all {
			if !w.kind.fails || w.kind.exclusive {
				continue
			}
			Expect(hist.MaxLive(w.id)).To(Equal(2), "workspace %s had its failing new pod next to the old one", w.id)
		}

		By("listing all 100 through REST as the admin: the failed ones outdated with their error")
		var list struct{ Workspaces []frontend.Workspace }
		Eventually(func(g Gomega) {
			_, err := admin.call(ctx, http.MethodGet, "/api/v1/workspaces?all=true", nil, &list)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Workspaces).To(HaveLen(len(all)))
			for _, w := range list.Workspaces {
				g.Expect(w.Phase).To(Equal(workspace.PhaseReady), "workspace %s", w.ID)
				g.Expect(w.IsOutdated).To(Equal(w.LastUpgradeError != ""), "workspace %s: outdated exactly when its upgrade failed", w.ID)
			}
		}).Should(Succeed())
		lap("done")
	})
})

// fillerTemplates templates of fillerSpec (about 25 KiB each) sit next to the ones under test in
// the spec that restarts nogoo9 with upgrade requests pending.
const fillerTemplates = 300

var fillerSpec = func() string {
	var env []string
	for i := range 300 {
		env = append(env, fmt.Sprintf(`{"name": "SETTING_%03d", "value": "a value that a real template might well carry along"}`, i))
	}
	return `{"containers": [{"name": "ide", "image": "example.com/filler:1.0", "ports": [{"containerPort": 8080}], "env": [` +
		strings.Join(env, ", ") + `]}]}`
}()

// upgradeTemplate is a template ConfigMap with one container (the IDE on 8080) running image;
// with a storage class, it also declares a ReadWriteOncePod claim "home" of that class, mounted
// by the container.
func upgradeTemplate(ns, name, version, image, class string) *corev1.ConfigMap {
	mounts := ""
	data := map[string]string{}
	if class != "" {
		mounts = `, "volumeMounts": [{"name": "home", "mountPath": "/home/user"}]`
		data[workspace.DataVolumeClaims] = fmt.Sprintf(`[{"metadata": {"name": "home"}, "spec": {"accessModes": ["ReadWriteOncePod"],
			"storageClassName": %q, "resources": {"requests": {"storage": "1Gi"}}}}]`, class)
	}
	data[workspace.DataSpec] = fmt.Sprintf(`{"containers": [{"name": "ide", "image": %q,
		"ports": [{"name": "ide", "containerPort": 8080}]%s}]}`, image, mounts)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:      map[string]string{workspace.LabelPodTemplate: "true"},
			Annotations: map[string]string{workspace.AnnTemplateVersion: version, workspace.AnnWorkspacePort: "8080"},
		},
		Data: data,
	}
}

// bumpTemplate writes cm's version annotation and data over the existing template in one merge
// patch, as `kubectl apply` of the edited file would.
func bumpTemplate(ctx context.Context, cm *corev1.ConfigMap) {
	GinkgoHelper()
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": cm.Annotations},
		"data":     cm.Data,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name}},
		client.RawPatch(types.MergePatchType, patch))).To(Succeed(), "raise template %s to %s", cm.Name, cm.Annotations[workspace.AnnTemplateVersion])
}

// rwopVolumes creates n ReadWriteOncePod PersistentVolumes of a storage class of ns's own (removed
// after the spec) and returns the class.
func rwopVolumes(ctx context.Context, ns string, n int) string {
	GinkgoHelper()
	class := ns + "-rwop"
	_, err := Cluster.CreateVolumes(ctx, localcluster.VolumeOptions{
		StorageClassName: class, Count: n, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_ = K8s.DeleteAllOf(ctx, &corev1.PersistentVolume{}, client.MatchingLabels{"nogoo9-local/storage-class": class})
	})
	return class
}

// identityKeys are what an upgrade must carry over from the pod it replaces, whoever asked.
var (
	identityLabelKeys      = []string{workspace.LabelType, workspace.LabelWorkspaceID, workspace.LabelUserSub, workspace.LabelTemplate}
	identityAnnotationKeys = []string{workspace.AnnOwner, workspace.AnnWorkspaceName, workspace.AnnWorkspacePath,
		workspace.AnnWorkspacePort, workspace.AnnPreviewPath, workspace.AnnPreviewPort}
)

// identityOf returns the identity labels and annotations of pod (missing ones as "").
func identityOf(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, k := range identityLabelKeys {
		out["label "+k] = pod.Labels[k]
	}
	for _, k := range identityAnnotationKeys {
		out[k] = pod.Annotations[k]
	}
	return out
}

func podReadyNow(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && podCondition(pod, corev1.PodReady) == corev1.ConditionTrue
}

func claimNames(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

func podNames(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
		if p.DeletionTimestamp != nil {
			out[i] += " (terminating)"
		}
	}
	return out
}

// groupPods groups workspace pods by workspace id (terminating ones included).
func groupPods(pods []corev1.Pod) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for i := range pods {
		if id := workspace.ID(&pods[i]); id != "" {
			out[id] = append(out[id], &pods[i])
		}
	}
	return out
}

// workspacePods lists every pod of workspace id in ns, terminating ones included.
func workspacePods(g Gomega, ns, id string) []*corev1.Pod {
	var list corev1.PodList
	g.Expect(K8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(Succeed())
	return groupPods(list.Items)[id]
}

// metricValue reads the sample of metric name whose labels include every label="value" of labels
// from p's /metrics; it fails when there is none.
func metricValue(g Gomega, p *Nogoo9Process, name string, labels ...string) float64 {
	resp, err := upgradeHTTP.Get("http://" + p.MetricsAddr + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		labelPart, value, ok := strings.Cut(strings.TrimPrefix(line, name), " ")
		if !ok {
			continue
		}
		matches := true
		for i := 0; i+1 < len(labels); i += 2 {
			matches = matches && strings.Contains(labelPart, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		if matches {
			var v float64
			_, err := fmt.Sscan(value, &v)
			g.Expect(err).NotTo(HaveOccurred(), "value of %s", line)
			return v
		}
	}
	g.Expect(fmt.Sprintf("no sample of %s%v", name, labels)).To(BeEmpty())
	return 0
}

// workspacePodsNow lists the pods of workspace id in ns once.
func workspacePodsNow(ns, id string) []*corev1.Pod {
	GinkgoHelper()
	return workspacePods(Default, ns, id)
}

// waitAllUpgraded waits until each workspace of ids is one Ready pod on template version, its
// upgrade intent gone.
func waitAllUpgraded(ns string, ids []string, version string) {
	GinkgoHelper()
	for _, id := range ids {
		waitSinglePod(ns, id, func(g Gomega, pod *corev1.Pod) {
			g.Expect(workspace.TemplateVersion(pod)).To(Equal(version))
			g.Expect(podReadyNow(pod)).To(BeTrue())
			g.Expect(pod.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
		})
	}
}

// inFlightTimeout is the --upgrade-timeout of a spec that must see an upgrade in flight (a new
// pod that cannot be pulled) before its deadline may pass: nothing a loaded machine delays can
// reach it. The spec then restarts nogoo9 with the short deadline it tests (the last flag wins).
const inFlightTimeout = 10 * time.Minute

// upgradeStartedAt is when the upgrade that created up started, as nogoo9 reckons its deadline
// from: its nogoo9/upgrade-started-at or its creation, whichever is later (whole seconds).
func upgradeStartedAt(up *corev1.Pod) time.Time {
	GinkgoHelper()
	started, err := time.Parse(time.RFC3339, up.Annotations[workspace.AnnUpgradeStartedAt])
	Expect(err).NotTo(HaveOccurred(), "%s on pod %s", workspace.AnnUpgradeStartedAt, up.Name)
	if created := up.CreationTimestamp.Time; created.After(started) {
		return created
	}
	return started
}

// restartWithDeadline restarts p (gracefully) with the --upgrade-timeout that puts the deadline of
// an upgrade started at started about left from now, and returns it (whole seconds). Should the
// restart itself take longer than left, the restarted nogoo9 finds the deadline passed, which
// must end the upgrade just the same.
func restartWithDeadline(p *Nogoo9Process, started time.Time, left time.Duration) time.Duration {
	GinkgoHelper()
	timeout := (time.Since(started) + left).Truncate(time.Second) + time.Second
	p.Args = append(p.Args, "--upgrade-timeout="+timeout.String())
	p.Restart()
	return timeout
}

// waitSinglePod waits until workspace id has exactly one pod (none terminating) that also passes
// check, and returns it.
func waitSinglePod(ns, id string, check func(Gomega, *corev1.Pod)) *corev1.Pod {
	GinkgoHelper()
	var pod *corev1.Pod
	Eventually(func(g Gomega) {
		pods := workspacePods(g, ns, id)
		g.Expect(pods).To(HaveLen(1), "pods of workspace %s: %v", id, podNames(pods))
		pod = pods[0]
		g.Expect(pod.DeletionTimestamp).To(BeNil())
		check(g, pod)
	}, 2*time.Minute).Should(Succeed())
	return pod
}

// claimOf returns the only PVC of workspace id (the spawner labels claims with the id).
func claimOf(ctx context.Context, ns, id string) *corev1.PersistentVolumeClaim {
	GinkgoHelper()
	var list corev1.PersistentVolumeClaimList
	Expect(K8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(Succeed())
	Expect(list.Items).To(HaveLen(1), "claims of workspace %s", id)
	return &list.Items[0]
}

// waitPodEvent waits for Events with every one of reasons on pod name (by name: the pod may be
// gone). Events are written after the fact, by client-go's recorder on its own goroutine, which
// retries a failed write after up to 10 s: the wait is the suite's default, bounded.
func waitPodEvent(ns, name string, reasons ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) []string {
		var list corev1.EventList
		g.Expect(K8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": name})).To(Succeed())
		var seen []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Pod" {
				seen = append(seen, e.Reason)
			}
		}
		return seen
	}).Should(ContainElements(reasons), "Events %v on pod %s/%s", reasons, ns, name)
}

// inParallel runs fn(0..n-1) on workers goroutines and returns the errors.
func inParallel(workers, n int, fn func(i int) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	work := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for i := range work {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return errs
}

// spawnAllReady spawns one workspace per id through c, from template tmpl(i), 8 at a time, and
// waits (bounded, 2 min) until namespace ns holds as many pods as ids, every one Running and Ready.
func (c *apiClient) spawnAllReady(ctx context.Context, ns string, ids []string, tmpl func(i int) string) {
	GinkgoHelper()
	Expect(inParallel(8, len(ids), func(i int) error {
		_, err := c.call(ctx, http.MethodPost, "/api/v1/workspaces", frontend.SpawnInput{Template: tmpl(i), ID: ids[i]}, nil)
		return err
	})).To(BeEmpty())
	Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(K8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(len(ids)))
		for i := range list.Items {
			g.Expect(podReadyNow(&list.Items[i])).To(BeTrue(), "pod %s", list.Items[i].Name)
		}
	}).WithTimeout(2 * time.Minute).Should(Succeed())
}

// plainTemplate names template "plain" for every workspace (spawnAllReady).
func plainTemplate(int) string { return "plain" }

// apiClient calls nogoo9's REST API with one service account's token.
type apiClient struct {
	base, token, subject string
}

var upgradeHTTP = &http.Client{Timeout: 30 * time.Second}

// userClient mints a token for service account ns/name that the API server accepts (nogoo9 runs
// with --auth=kubernetes: TokenReview) and returns a REST client for it.
func userClient(ctx context.Context, p *Nogoo9Process, ns, name string) *apiClient {
	GinkgoHelper()
	tok, err := Cluster.ServiceAccountToken(ctx, ns, name, Cluster.IssuerURL, 0)
	Expect(err).NotTo(HaveOccurred())
	return &apiClient{base: p.APIURL, token: tok, subject: "system:serviceaccount:" + ns + ":" + name}
}

// call sends a JSON request and decodes a 2xx answer into out. err is set for a transport error
// or a status >= 400 (with the answer's body).
func (c *apiClient) call(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, c.base+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := upgradeHTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		return resp.StatusCode, fmt.Errorf("%s %s as %s: %s: %s", method, path, c.subject, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %s: %w", method, path, data, err)
		}
	}
	return resp.StatusCode, nil
}

func (c *apiClient) spawn(ctx context.Context, template, id string) frontend.Workspace {
	GinkgoHelper()
	var w frontend.Workspace
	status, err := c.call(ctx, http.MethodPost, "/api/v1/workspaces", frontend.SpawnInput{Template: template, ID: id}, &w)
	Expect(err).NotTo(HaveOccurred())
	Expect(status).To(Equal(http.StatusCreated))
	Expect(w.Owner).To(Equal(c.subject))
	return w
}

func (c *apiClient) get(ctx context.Context, id string) frontend.Workspace {
	GinkgoHelper()
	var w frontend.Workspace
	_, err := c.call(ctx, http.MethodGet, "/api/v1/workspaces/"+id, nil, &w)
	Expect(err).NotTo(HaveOccurred())
	return w
}

func (c *apiClient) upgrade(ctx context.Context, id string) frontend.UpgradeResult {
	GinkgoHelper()
	var r frontend.UpgradeResult
	status, err := c.call(ctx, http.MethodPost, "/api/v1/workspaces/"+id+"/upgrade", nil, &r)
	Expect(err).NotTo(HaveOccurred())
	Expect(status).To(Equal(http.StatusAccepted))
	return r
}

// waitOutdated waits until nogoo9 (whose API and controller share one template registry) reports
// workspace id outdated with latest version: before that, an intent could find nothing to do.
func (c *apiClient) waitOutdated(ctx context.Context, id, version string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var w frontend.Workspace
		_, err := c.call(ctx, http.MethodGet, "/api/v1/workspaces/"+id, nil, &w)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(w.LatestTemplateVersion).To(Equal(version))
		g.Expect(w.IsOutdated).To(BeTrue())
	}).Should(Succeed(), "workspace %s outdated with latest version %s", id, version)
}

// podHistory follows every workspace pod of a namespace through a watch, in the API server's
// order, and checks the invariants after each event.
type podHistory struct {
	mu         sync.Mutex
	seq        int
	pods       map[types.UID]*PodRecord
	byName     map[string]*PodRecord
	owner      map[string][2]string // workspace id -> first (owner, user-sub)
	everLive   map[string]bool
	everReady  map[string]bool
	maxLive    map[string]int
	noOutage   map[string]bool
	exclusive  map[string]bool
	upgraded   int
	inFlight   int
	violations []string
}

// PodRecord is what the history saw of one pod; the Seq fields are event numbers (0: never).
type PodRecord struct {
	Name, ID string
	// CreatedSeq: first seen; GoingSeq: deletion started (or removed); BoundSeq: first seen with a
	// node; RemovedSeq: removed from the API server.
	CreatedSeq, GoingSeq, BoundSeq, RemovedSeq int
	// Unschedulable is the message of the first PodScheduled=False/Unschedulable condition seen.
	Unschedulable string
	// GatedAtCreation: first seen behind nogoo9's scheduling gate; UngatedSeq: first seen without
	// it after that.
	GatedAtCreation bool
	UngatedSeq      int

	live, ready, bound bool
	pod                *corev1.Pod
}

// watchWorkspacePods starts a podHistory of ns's workspace pods; it stops after the spec.
func watchWorkspacePods(ns string) *podHistory {
	GinkgoHelper()
	h := &podHistory{pods: map[types.UID]*PodRecord{}, byName: map[string]*PodRecord{}, owner: map[string][2]string{},
		everLive: map[string]bool{}, everReady: map[string]bool{}, maxLive: map[string]int{},
		noOutage: map[string]bool{}, exclusive: map[string]bool{}}
	selector := workspace.LabelType + "=" + workspace.TypeWorkspace
	ctx, cancel := context.WithCancel(context.Background())
	list, err := Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	Expect(err).NotTo(HaveOccurred())
	Expect(list.Items).To(BeEmpty(), "start the history before the first workspace pod")
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = selector
		return Clientset.CoreV1().Pods(ns).Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range rw.ResultChan() {
			h.observe(ev)
		}
	}()
	DeferCleanup(func() {
		cancel()
		rw.Stop()
		<-done
	})
	return h
}

// NoOutage marks workspace id as one whose Ready pods must never all go once one was Ready.
func (h *podHistory) NoOutage(id string) { h.mu.Lock(); h.noOutage[id] = true; h.mu.Unlock() }

// Exclusive marks workspace id as one whose pods must never run on a node at the same time (a
// ReadWriteOncePod claim).
func (h *podHistory) Exclusive(id string) { h.mu.Lock(); h.exclusive[id] = true; h.mu.Unlock() }

// Violations lists the invariant violations seen so far.
func (h *podHistory) Violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.violations...)
}

// MaxLive is the most live pods workspace id had at once.
func (h *podHistory) MaxLive(id string) int { h.mu.Lock(); defer h.mu.Unlock(); return h.maxLive[id] }

// UpgradedPods counts the upgraded pods (nogoo9/upgrade-from) created so far.
func (h *podHistory) UpgradedPods() int { h.mu.Lock(); defer h.mu.Unlock(); return h.upgraded }

// MaxInFlight is the most workspaces seen with an upgrade in flight at once (as the controller's
// concurrency cap counts them).
func (h *podHistory) MaxInFlight() int { h.mu.Lock(); defer h.mu.Unlock(); return h.inFlight }

// Pod returns a copy of the record of the pod named name, or nil.
func (h *podHistory) Pod(name string) *PodRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.byName[name]
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

func (h *podHistory) violate(format string, args ...any) {
	if len(h.violations) < 50 {
		h.violations = append(h.violations, fmt.Sprintf("event %d: ", h.seq)+fmt.Sprintf(format, args...))
	}
}

func (h *podHistory) observe(ev watch.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Type == watch.Bookmark {
		return
	}
	h.seq++
	pod, ok := ev.Object.(*corev1.Pod)
	if !ok {
		h.violate("the watch broke (%s %T: %v): the invariants cannot be checked", ev.Type, ev.Object, ev.Object)
		return
	}
	rec := h.pods[pod.UID]
	if rec == nil {
		rec = &PodRecord{Name: pod.Name, ID: workspace.ID(pod), CreatedSeq: h.seq}
		h.pods[pod.UID] = rec
		h.byName[pod.Name] = rec
		if pod.Annotations[workspace.AnnUpgradeFrom] != "" {
			h.upgraded++
		}
	}
	id := rec.ID
	rec.pod = pod
	rec.live = ev.Type != watch.Deleted && pod.DeletionTimestamp == nil
	rec.ready = rec.live && podReadyNow(pod)
	rec.bound = ev.Type != watch.Deleted && pod.Spec.NodeName != ""
	if !rec.live && rec.GoingSeq == 0 {
		rec.GoingSeq = h.seq
	}
	if ev.Type == watch.Deleted {
		rec.RemovedSeq = h.seq
	}
	if pod.Spec.NodeName != "" && rec.BoundSeq == 0 {
		rec.BoundSeq = h.seq
	}
	gated := slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == workspace.GateVolumeRelease })
	if rec.CreatedSeq == h.seq && gated {
		rec.GatedAtCreation = true
	}
	if rec.GatedAtCreation && !gated && rec.UngatedSeq == 0 {
		rec.UngatedSeq = h.seq
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && rec.Unschedulable == "" {
			rec.Unschedulable = c.Message
		}
	}

	who := [2]string{workspace.Owner(pod), pod.Labels[workspace.LabelUserSub]}
	if first, seen := h.owner[id]; !seen {
		h.owner[id] = who
	} else if first != who {
		h.violate("pod %s of workspace %s has owner %v, the workspace was %v's", pod.Name, id, who, first)
	}

	live, ready, bound := 0, 0, 0
	var names []string
	for _, r := range h.pods {
		if r.ID != id {
			continue
		}
		if r.live {
			live++
			names = append(names, r.Name)
		}
		if r.ready {
			ready++
		}
		if r.bound {
			bound++
		}
	}
	sort.Strings(names)
	h.maxLive[id] = max(h.maxLive[id], live)
	if live > 0 {
		h.everLive[id] = true
	}
	if ready > 0 {
		h.everReady[id] = true
	}
	switch {
	case live == 0 && h.everLive[id]:
		h.violate("workspace %s has no live pod after %s of pod %s", id, ev.Type, pod.Name)
	case live > 2:
		h.violate("workspace %s has %d live pods %v", id, live, names)
	}
	if h.noOutage[id] && h.everReady[id] && ready == 0 {
		h.violate("workspace %s (side-by-side) has no Ready pod after %s of pod %s; live: %v", id, ev.Type, pod.Name, names)
	}
	if h.exclusive[id] && bound > 1 {
		h.violate("workspace %s (ReadWriteOncePod) has %d pods on nodes at once", id, bound)
	}
	h.inFlight = max(h.inFlight, h.countInFlight())
}

// countInFlight counts the workspaces with an upgrade in flight now, by the controller's own rule.
func (h *podHistory) countInFlight() int {
	byID := map[string][]*corev1.Pod{}
	for _, r := range h.pods {
		if r.live {
			byID[r.ID] = append(byID[r.ID], r.pod)
		}
	}
	n := 0
	for _, group := range byID {
		for _, p := range group {
			if workspace.UpgradeInFlight(p, group) {
				n++
				break
			}
		}
	}
	return n
}

// The invariant checker must be able to fail: synthetic event sequences, each breaking one rule.
var _ = Describe("Upgrade invariant checker (e2e helper podHistory)", func() {
	type step struct {
		typ  watch.EventType
		pod  string
		mods func(*corev1.Pod)
	}
	ready := func(p *corev1.Pod) {
		p.Spec.NodeName = "n"
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	going := func(p *corev1.Pod) { ready(p); p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }
	otherOwner := func(p *corev1.Pod) { p.Annotations[workspace.AnnOwner] = "mallory" }
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "n" }
	DescribeTable("checks every event",
		func(noOutage, exclusive bool, steps []step, want string) {
			h := &podHistory{pods: map[types.UID]*PodRecord{}, byName: map[string]*PodRecord{}, owner: map[string][2]string{},
				everLive: map[string]bool{}, everReady: map[string]bool{}, maxLive: map[string]int{},
				noOutage: map[string]bool{"w": noOutage}, exclusive: map[string]bool{"w": exclusive}}
			for _, s := range steps {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.pod, UID: types.UID(s.pod),
					Labels:      map[string]string{workspace.LabelWorkspaceID: "w", workspace.LabelUserSub: "alice"},
					Annotations: map[string]string{workspace.AnnOwner: "alice"}}}
				if s.mods != nil {
					s.mods(p)
				}
				h.observe(watch.Event{Type: s.typ, Object: p})
			}
			if want == "" {
				Expect(h.Violations()).To(BeEmpty())
			} else {
				Expect(h.Violations()).To(ContainElement(ContainSubstring(want)))
			}
		},
		Entry("a clean side-by-side upgrade", true, false, []step{
			{watch.Added, "a", ready}, {watch.Added, "b", nil}, {watch.Modified, "b", ready},
			{watch.Modified, "a", going}, {watch.Deleted, "a", going},
		}, ""),
		Entry("the last pod deleted", false, false, []step{
			{watch.Added, "a", ready}, {watch.Modified, "a", going},
		}, "has no live pod"),
		Entry("three live pods", false, false, []step{
			{watch.Added, "a", nil}, {watch.Added, "b", nil}, {watch.Added, "c", nil},
		}, "3 live pods"),
		Entry("another owner", false, false, []step{
			{watch.Added, "a", nil}, {watch.Added, "b", otherOwner},
		}, "has owner"),
		Entry("an outage in side-by-side", true, false, []step{
			{watch.Added, "a", ready}, {watch.Added, "b", nil}, {watch.Modified, "a", going},
		}, "has no Ready pod"),
		Entry("two pods on nodes with a ReadWriteOncePod claim", false, true, []step{
			{watch.Added, "a", ready}, {watch.Added, "b", bound},
		}, "pods on nodes at once"),
	)

	It("reports a broken watch", func() {
		h := &podHistory{}
		h.observe(watch.Event{Type: watch.Error, Object: &metav1.Status{Message: "too old resource version"}})
		Expect(h.Violations()).To(ContainElement(ContainSubstring("the watch broke")))
	})
})

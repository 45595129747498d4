package spawner

import (
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestSettlingYieldsOnlyToAnotherOwnersPod: a spawn whose answer for its second claim was lost
// settles while its pod already exists; a second pod with its id has appeared (secondPods).
// Before, settling yielded to the workspace's own stopped copy too, deleting the pod it replaces
// and the claim the copy mounts: the workspace lost its data.
func TestSettlingYieldsOnlyToAnotherOwnersPod(t *testing.T) {
	for _, tc := range secondPods() {
		t.Run(tc.name, func(t *testing.T) {
			ctx, c := fakeSetup(t)
			g := NewWithT(t)
			s := New(c, c, testTemplates(t), Options{Namespace: fakeNS})
			tmpl, _ := testTemplates(t).Get("persistent")
			pod, pvcs, err := BuildPod(tmpl, Identity{Owner: "jane", ID: "w", Context: map[string]string{"repo": "r"}, Namespace: fakeNS}, workspace.PodName("jane", "w"))
			g.Expect(err).NotTo(HaveOccurred())
			pod.Namespace = fakeNS
			for _, p := range pvcs {
				p.Namespace = fakeNS
			}
			g.Expect(c.Create(ctx, pod)).To(Succeed())
			g.Expect(c.Create(ctx, pvcs[0])).To(Succeed()) // the second claim's answer was lost
			second := tc.build(t, pod)
			g.Expect(c.Create(ctx, second)).To(Succeed())

			done, err := s.settleOnce(ctx, lostSpawn{pod: pod, pvcs: pvcs, created: pvcs[:1], owner: "jane", id: "w", since: time.Now()}, testr.New(t))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(done).To(BeTrue())

			var got corev1.Pod
			podErr := c.Get(ctx, client.ObjectKeyFromObject(pod), &got)
			var claim corev1.PersistentVolumeClaim
			claimErr := c.Get(ctx, client.ObjectKeyFromObject(pvcs[0]), &claim)
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(second), &got)).To(Succeed(), "the second pod is never settling's to delete")
			if tc.wantYields {
				g.Expect(apierrors.IsNotFound(podErr)).To(BeTrue(), "the settling pod yields: %v", podErr)
				g.Expect(apierrors.IsNotFound(claimErr)).To(BeTrue(), "the claim the settling spawn created goes with it: %v", claimErr)
				return
			}
			g.Expect(podErr).NotTo(HaveOccurred(), "the pod the stopped copy replaces is the controller's to delete")
			g.Expect(claimErr).NotTo(HaveOccurred(), "the stopped copy mounts claim %s", pvcs[0].Name)
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pvcs[1]), &claim)).To(Succeed(), "settling finishes the workspace: its lost claim is created")
		})
	}
}

// TestASettlingSpawnHoldsItsQuotaSlotUntilItsPodCanNoLongerAppear: a spawn's pod create got no
// answer; the API server may still perform it for the lost-write window (70 s), longer than a
// reservation's TTL (1 min). While settling waits for the pod, a spawn of another id at the limit
// must still be refused, or both pods run. Before, the settling spawn's reservation expired 60 s
// after it was made and the other spawn was admitted; the late pod then made two.
func TestASettlingSpawnHoldsItsQuotaSlotUntilItsPodCanNoLongerAppear(t *testing.T) {
	ctx, base := fakeSetup(t)
	g := NewWithT(t)
	clock := newFakeClock()
	held := holdPodCreates(base, "a")
	s := New(held, base, testTemplates(t), Options{Namespace: fakeNS, MaxPerUser: 1, Now: clock.Now}) // the default TTL and window
	jane := Caller{Subject: "jane"}
	_, err := s.Spawn(ctx, Request{Template: "plain", ID: "a", Caller: jane})
	g.Expect(mayHaveHappened(err)).To(BeTrue(), "the create's answer is lost: %v", err)

	// Time passes while settling looks for the pod (every 2 s): each look holds the slot afresh.
	refreshed := clock.Step(40 * time.Second)
	g.Eventually(func(g Gomega) {
		var cm corev1.ConfigMap
		g.Expect(base.Get(ctx, client.ObjectKey{Namespace: fakeNS, Name: LedgerName("jane")}, &cm)).To(Succeed())
		g.Expect(readTries(&cm)["a"]).To(ContainElement(BeTemporally(">=", refreshed)), "settling holds its reservation afresh")
	}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())

	clock.Step(25 * time.Second) // 65 s: past the TTL since the reservation was made, within the window
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "b", Caller: jane})
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "a's create may still land: %v", err)

	held.land(ctx, t) // a's create lands within the window
	g.Eventually(func(g Gomega) {
		g.Expect(reservations(ctx, g, base, fakeNS, "jane")).NotTo(HaveKey("a"), "settling found a's pod and released its hold")
	}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	running, _, err := s.tally(ctx, "jane", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(running).To(Equal([]string{"a"}))
}

// TestASettledSpawnStaysWithinTheClaimLimit: a spawn checks the claim limit under the owner's
// lock and creates its claims after its pod. When its pod's create got no answer, settling creates
// the claims later, after the lock was let go; meanwhile another spawn of the owner took the last
// claims. Settling must check the limit again and leave its claims uncreated (the pod waits for
// them). Before, it created them regardless: four claims with a limit of two.
func TestASettledSpawnStaysWithinTheClaimLimit(t *testing.T) {
	ctx, base := fakeSetup(t)
	g := NewWithT(t)
	held := holdPodCreates(base, "a")
	s := New(held, base, testTemplates(t), Options{Namespace: fakeNS, MaxClaimsPerUser: 2, MaxPerUser: 5})
	spawn := func(id string) error {
		_, err := s.Spawn(ctx, Request{Template: "persistent", ID: id, Context: map[string]string{"repo": "r"}, Caller: Caller{Subject: "jane"}})
		return err
	}
	g.Expect(mayHaveHappened(spawn("a"))).To(BeTrue(), "a's pod create gets no answer")
	g.Expect(spawn("b")).To(Succeed(), "a has no claims yet: b's two fit")

	held.land(ctx, t) // a's create lands: settling finds the pod and would create its claims
	g.Eventually(func(g Gomega) {
		g.Expect(reservations(ctx, g, base, fakeNS, "jane")).NotTo(HaveKey("a"), "settling of a ended")
	}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())

	var claims corev1.PersistentVolumeClaimList
	g.Expect(base.List(ctx, &claims, client.InNamespace(fakeNS))).To(Succeed())
	ids := []string{}
	for _, c := range claims.Items {
		ids = append(ids, c.Labels[workspace.LabelWorkspaceID])
	}
	g.Expect(ids).To(ConsistOf("b", "b"), "jane's claims stay within the limit of 2")
	g.Expect(podsWithLabels(ctx, g, base, fakeNS, map[string]string{workspace.LabelWorkspaceID: "a"})).To(HaveLen(1), "a's pod stays and waits for its claims")
}

package spawner

import (
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestARetryAfterAFailedTrySucceedsAtOnce: a try whose pod create got no answer leaves its quota
// reservation behind while it settles in the background (for the lost-write window, 70 s by
// default, longer than the reservation's TTL of 1 min). A retry of the same owner and id must
// not wait for that: it joins the reservation and creates the workspace. Before tries held
// reservations by token, the retry was refused (409 "already being created by another request")
// until the reservation expired.
func TestARetryAfterAFailedTrySucceedsAtOnce(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	long := 10 * time.Minute // neither the TTL nor the lost-write window can end during the test
	failing := New(lostAnswers(t, "pod", false), c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1,
		ReservationTTL: long, LostWriteWindow: long, SettleTimeout: 20 * time.Second})
	jane := Caller{Subject: "jane"}
	_, err := failing.Spawn(ctx, Request{Template: "plain", ID: "again", Caller: jane})
	g.Expect(err).To(HaveOccurred())
	g.Expect(mayHaveHappened(err)).To(BeTrue(), "%v", err)
	g.Expect(reservations(ctx, g, c, ns, "jane")).To(HaveKey("again"), "the failed try holds its reservation while it settles")

	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1, ReservationTTL: long})
	res, err := s.Spawn(ctx, Request{Template: "plain", ID: "again", Caller: jane})
	g.Expect(err).NotTo(HaveOccurred(), "a retry after a failed try must succeed at once")
	g.Expect(res.Pod.Name).To(Equal(workspace.PodName("jane", "again")))
	// One workspace, one slot: the quota of 1 is used.
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "other", Caller: jane})
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "%v", err)
	// The failed try's settling finds the pod, ends, and releases its hold: nothing stays behind.
	g.Eventually(func(g Gomega) {
		g.Expect(reservations(ctx, g, c, ns, "jane")).NotTo(HaveKey("again"))
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "again"})).To(HaveLen(1))
}

// TestALateReleaseNeverDropsARetrysReservation: a failed try's release runs late, in the
// background; by then a retry of the same id holds the reservation. The late release must leave
// the retry's hold in place, or a spawn of another id would be admitted before the retry's pod
// exists, and quota would over-admit by one.
func TestALateReleaseNeverDropsARetrysReservation(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1, ReservationTTL: 10 * time.Minute})
	first, err := s.reserve(ctx, "jane", "x")
	g.Expect(err).NotTo(HaveOccurred())
	retry, err := s.reserve(ctx, "jane", "x")
	g.Expect(err).NotTo(HaveOccurred(), "a retry joins the reservation")
	g.Expect(retry).NotTo(Equal(first))

	g.Expect(s.release(ctx, "jane", "x", first)).To(Succeed())
	g.Expect(reservations(ctx, g, c, ns, "jane")).To(HaveKey("x"))
	_, err = s.reserve(ctx, "jane", "y")
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "the retry still holds the only slot: %v", err)
	// A release that runs twice (a retried write) changes nothing either.
	g.Expect(s.release(ctx, "jane", "x", first)).To(Succeed())
	_, err = s.reserve(ctx, "jane", "y")
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "%v", err)

	// The last hold's release frees the slot.
	g.Expect(s.release(ctx, "jane", "x", retry)).To(Succeed())
	g.Expect(reservations(ctx, g, c, ns, "jane")).To(BeEmpty())
	y, err := s.reserve(ctx, "jane", "y")
	g.Expect(err).NotTo(HaveOccurred())
	// x's old tokens hold nothing any more: releasing them leaves y's reservation alone.
	g.Expect(s.release(ctx, "jane", "x", first)).To(Succeed())
	g.Expect(s.release(ctx, "jane", "x", retry)).To(Succeed())
	g.Expect(reservations(ctx, g, c, ns, "jane")).To(HaveKey("y"))
	g.Expect(s.release(ctx, "jane", "y", y)).To(Succeed())
}

// TestAReservationOfACrashedTryExpires: a try that never releases (its replica crashed) holds
// its reservation until ReservationTTL after the last try joined it, also when a retry joined
// and released.
func TestAReservationOfACrashedTryExpires(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1, ReservationTTL: time.Minute, Now: func() time.Time { return now }})
	_, err := s.reserve(ctx, "jane", "x") // crashed: never released
	g.Expect(err).NotTo(HaveOccurred())
	now = now.Add(30 * time.Second)
	retry, err := s.reserve(ctx, "jane", "x")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.release(ctx, "jane", "x", retry)).To(Succeed())
	_, err = s.reserve(ctx, "jane", "y")
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "the crashed try still holds x: %v", err)
	now = now.Add(31 * time.Second) // a minute after the crashed try reserved
	_, err = s.reserve(ctx, "jane", "y")
	g.Expect(err).NotTo(HaveOccurred())
}

// TestQuotaHoldsWhenRetriesOfOneIDRaceOtherSpawns: tries of one id join its reservation, so
// they must never take more than its one slot, on one replica or two: twenty spawns of one id
// and twenty of distinct ids at once, a quota of 3, end with exactly three workspaces (one of
// them the shared id, created once), everyone else refused, and an empty ledger.
func TestQuotaHoldsWhenRetriesOfOneIDRaceOtherSpawns(t *testing.T) {
	ctx, _, ns := setup(t)
	g := NewWithT(t)
	var spawners []*Spawner
	for i := 0; i < 2; i++ {
		c, err := client.New(cfg, client.Options{})
		g.Expect(err).NotTo(HaveOccurred())
		spawners = append(spawners, New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 3}))
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		ok    []string
		codes = map[Code]int{}
		other []error
	)
	start := make(chan struct{})
	for i := 0; i < 40; i++ {
		id := "same"
		if i%2 == 1 {
			id = fmt.Sprintf("d%02d", i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := spawners[i%2].Spawn(ctx, Request{Template: "plain", ID: id, Caller: Caller{Subject: "jane"}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok = append(ok, id)
			case CodeOf(err) != "":
				codes[CodeOf(err)]++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	g.Expect(other).To(BeEmpty())
	g.Expect(ok).To(HaveLen(3), "created: %v, refused: %v", ok, codes)
	g.Expect(codes[QuotaExceeded]+codes[Conflict]).To(Equal(37), "%v", codes)
	c, _ := client.New(cfg, client.Options{})
	pods := podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelType: workspace.TypeWorkspace})
	g.Expect(pods).To(HaveLen(3))
	ids := map[string]bool{}
	for i := range pods {
		ids[workspace.ID(&pods[i])] = true
	}
	g.Expect(ids).To(HaveLen(3), "one pod per workspace")
	var ledger corev1.ConfigMap
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: LedgerName("jane")}, &ledger)).To(Succeed())
	g.Expect(ledger.Data[ledgerDataKey]).To(Equal("{}"))
	g.Expect(ledger.Data[ledgerTriesKey]).To(Equal("{}"))
}

// TestAReservationOfAnOlderVersionIsNotJoined: during a rolling upgrade of nogoo9 an older replica
// writes reservations without tries, and its release deletes the reservation whatever joined it.
// A retry that joined such a reservation would then hold no slot while it still creates its pod,
// and quota could admit one more; so it is refused as the older version refuses it, and the
// older replica's reservation and slot stay as they were.
func TestAReservationOfAnOlderVersionIsNotJoined(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	ledger := corev1.ConfigMap{ObjectMeta: ledgerMeta(client.ObjectKey{Namespace: ns, Name: LedgerName("jane")}, "jane")}
	writeReservations(&ledger, map[string]time.Time{"x": time.Now()})
	g.Expect(c.Create(ctx, &ledger)).To(Succeed())

	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1, ReservationTTL: 10 * time.Minute})
	_, err := s.reserve(ctx, "jane", "x")
	g.Expect(CodeOf(err)).To(Equal(Conflict), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("already being created by another request"))
	_, err = s.reserve(ctx, "jane", "y")
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "the older try still holds the only slot: %v", err)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&ledger), &ledger)).To(Succeed())
	g.Expect(ledger.Data).NotTo(HaveKey(ledgerTriesKey), "nothing was written")
}

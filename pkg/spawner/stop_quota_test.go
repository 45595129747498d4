package spawner

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestConcurrentStopsRespectTheStoppedLimit: a stop holds a stopped slot in the owner's quota
// ledger from its check until its intent is written, as a start holds a running slot, so stops
// decided together cannot each see the last free slot. Before, a stop only counted the pods and
// wrote nothing: with MaxStoppedPerUser=1, three stops checked before any wrote its intent, and
// all three workspaces ended up stopped.
func TestConcurrentStopsRespectTheStoppedLimit(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 10, MaxStoppedPerUser: 1})
	stop := func(id string) error {
		pods := podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: id})
		g.Expect(pods).To(HaveLen(1))
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{workspace.AnnStopRequested: "true"}}})
		return c.Patch(ctx, &pods[0], client.RawPatch(types.MergePatchType, patch))
	}
	stopped := func(owner string) []string {
		_, st, err := s.tally(ctx, owner, "")
		g.Expect(err).NotTo(HaveOccurred())
		return st
	}
	for _, owner := range []string{"jane", "joe"} {
		for _, id := range []string{"a", "b", "c"} {
			_, err := s.Spawn(ctx, Request{Template: "plain", ID: owner + "-" + id, Caller: Caller{Subject: owner}})
			g.Expect(err).NotTo(HaveOccurred())
		}
	}

	// Three stops decided before any writes its intent (the audit's order): the first holds the
	// only slot, the other two are refused, naming the stop in flight.
	releaseA, err := s.ReserveStop(ctx, "jane", ns, "jane-a", false)
	g.Expect(err).NotTo(HaveOccurred())
	for _, id := range []string{"jane-b", "jane-c"} {
		_, err := s.ReserveStop(ctx, "jane", ns, id, false)
		g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "stop %s while the stop of jane-a holds the slot: %v", id, err)
		g.Expect(err.Error()).To(And(ContainSubstring("1 stopped workspace (jane-a)"), ContainSubstring("delete one before stopping "+id)))
	}
	// A second stop of the same workspace joins the first: one workspace, one slot.
	again, err := s.ReserveStop(ctx, "jane", ns, "jane-a", false)
	g.Expect(err).NotTo(HaveOccurred(), "a second stop of jane-a counts it once")
	again(nil)
	g.Expect(stop("jane-a")).To(Succeed())
	releaseA(nil)
	g.Expect(stopReservations(ctx, g, c, ns, "jane")).To(BeEmpty(), "the stop is done: jane-a counts itself")
	_, err = s.ReserveStop(ctx, "jane", ns, "jane-b", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "jane-a is stopped: %v", err)
	g.Expect(stopped("jane")).To(Equal([]string{"jane-a"}))

	// Three stops at once, each reserving, writing its intent and releasing: one stops.
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, id := range []string{"joe-a", "joe-b", "joe-c"} {
		wg.Go(func() {
			release, err := s.ReserveStop(ctx, "joe", ns, id, false)
			if err != nil {
				errs[i] = err
				return
			}
			err = stop(id)
			release(err)
			errs[i] = err
		})
	}
	wg.Wait()
	refused := 0
	for _, err := range errs {
		if err != nil {
			g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "%v", err)
			refused++
		}
	}
	g.Expect(refused).To(Equal(2))
	g.Expect(stopped("joe")).To(HaveLen(1), "with MaxStoppedPerUser=1")

	// A workspace of another watched namespace is reserved by its namespace and id.
	release, err := s.ReserveStop(ctx, "joe", "team", "joe-a", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "%v", err)
	g.Expect(release).To(BeNil())
	s2 := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 10, MaxStoppedPerUser: 2})
	release, err = s2.ReserveStop(ctx, "joe", "team", "joe-a", false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopReservations(ctx, g, c, ns, "joe")).To(HaveKey("team/joe-a"))
	release(nil)
	g.Expect(stopReservations(ctx, g, c, ns, "joe")).To(BeEmpty())
}

// stopReservations reads owner's stop reservations from the ledger in ns.
func stopReservations(ctx context.Context, g Gomega, c client.Client, ns, owner string) map[string]map[string]any {
	var cm corev1.ConfigMap
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: LedgerName(owner)}, &cm)).To(Succeed())
	out := map[string]map[string]any{}
	if raw := cm.Data[ledgerStopsKey]; raw != "" {
		g.Expect(json.Unmarshal([]byte(raw), &out)).To(Succeed())
	}
	return out
}

package spawner

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Stopped workspaces use no node: they do not count against MaxPerUser, and MaxStoppedPerUser
// bounds them instead.
func TestQuotaCountsRunningAndStoppedWorkspacesApart(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1, MaxStoppedPerUser: 1, ReservationTTL: time.Minute})
	jane := Caller{Subject: "jane"}
	stop := func(id string) {
		pods := podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: id})
		g.Expect(pods).To(HaveLen(1))
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{workspace.AnnStopRequested: "true"}}})
		g.Expect(c.Patch(ctx, &pods[0], client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}

	_, err := s.Spawn(ctx, Request{Template: "plain", ID: "a", Caller: jane})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "b", Caller: jane})
	g.Expect(errors.Is(err, ErrQuotaExceeded)).To(BeTrue(), "one running workspace is the limit: %v", err)

	// A stopped workspace frees its running slot.
	releaseStop, err := s.ReserveStop(ctx, "jane", ns, "a", false)
	g.Expect(err).NotTo(HaveOccurred())
	stop("a")
	releaseStop(nil)
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "b", Caller: jane})
	g.Expect(err).NotTo(HaveOccurred(), "a is stopped: b may run")

	// Starting a while b runs is over the running limit; an admin may.
	_, err = s.ReserveStart(ctx, "jane", ns, "a", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded))
	g.Expect(err.Error()).To(And(ContainSubstring("1 running or pending workspace (b)"), ContainSubstring("stop or delete one before starting a")))
	release, err := s.ReserveStart(ctx, "jane", ns, "a", true)
	g.Expect(err).NotTo(HaveOccurred())
	release(nil)

	// Stopping b too is over the stopped limit.
	_, err = s.ReserveStop(ctx, "jane", ns, "b", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded))
	g.Expect(err.Error()).To(And(ContainSubstring("1 stopped workspace (a)"), ContainSubstring("delete one before stopping b")))
	releaseStop, err = s.ReserveStop(ctx, "jane", ns, "b", true)
	g.Expect(err).NotTo(HaveOccurred())
	releaseStop(nil)
}

// TestStartsAndSpawnsShareTheRunningLimit: a start takes a running slot as a spawn does, through
// the owner's quota ledger, so concurrent starts and spawns cannot each see the last free slot.
// Before, a start only counted the pods: a spawn between its reservation and its pod's create,
// and a start whose stop intent was not lifted yet, were invisible to it, and with a limit of 1
// two starts (or a start and a spawn) were both admitted.
func TestStartsAndSpawnsShareTheRunningLimit(t *testing.T) {
	ctx, c := fakeSetup(t)
	g := NewWithT(t)
	s := New(c, c, testTemplates(t), Options{Namespace: fakeNS, MaxPerUser: 1})
	jane := Caller{Subject: "jane"}
	setStop := func(id string, v any) {
		pods := podsWithLabels(ctx, g, c, fakeNS, map[string]string{workspace.LabelWorkspaceID: id})
		g.Expect(pods).To(HaveLen(1))
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{workspace.AnnStopRequested: v}}})
		g.Expect(c.Patch(ctx, &pods[0], client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}
	for _, id := range []string{"a", "c"} {
		_, err := s.Spawn(ctx, Request{Template: "plain", ID: id, Caller: jane})
		g.Expect(err).NotTo(HaveOccurred())
		setStop(id, "true")
	}

	// A spawn of b holds the only slot (between its reservation and its pod's create): neither
	// stopped workspace may start.
	b, err := s.reserve(ctx, "jane", "b")
	g.Expect(err).NotTo(HaveOccurred())
	for _, id := range []string{"a", "c"} {
		_, err := s.ReserveStart(ctx, "jane", fakeNS, id, false)
		g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "start %s while spawn b holds the slot: %v", id, err)
		g.Expect(err.Error()).To(ContainSubstring("1 running or pending workspace (b)"))
	}
	g.Expect(s.release(ctx, "jane", "b", b)).To(Succeed())

	// The start of a holds the slot until its stop intent is lifted: c may not start, nor may a
	// new workspace be spawned. A second start of a joins the first: one workspace, one slot.
	releaseA, err := s.ReserveStart(ctx, "jane", fakeNS, "a", false)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.ReserveStart(ctx, "jane", fakeNS, "c", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "start c while a is being started: %v", err)
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "d", Caller: jane})
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "spawn d while a is being started: %v", err)
	again, err := s.ReserveStart(ctx, "jane", fakeNS, "a", false)
	g.Expect(err).NotTo(HaveOccurred(), "a start of a workspace being started counts it once")
	again(nil)

	// The start is done: a runs, counts itself, and the ledger holds nothing of it.
	setStop("a", nil)
	releaseA(nil)
	g.Expect(reservations(ctx, g, c, fakeNS, "jane")).NotTo(HaveKey("a"))
	_, err = s.ReserveStart(ctx, "jane", fakeNS, "c", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded), "a runs: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("1 running or pending workspace (a)"))
	release, err := s.ReserveStart(ctx, "jane", fakeNS, "a", false)
	g.Expect(err).NotTo(HaveOccurred(), "starting a running workspace again is no new slot")
	release(nil)
}

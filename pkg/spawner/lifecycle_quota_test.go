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
	g.Expect(s.CheckStop(ctx, "jane", "a", false)).To(Succeed())
	stop("a")
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "b", Caller: jane})
	g.Expect(err).NotTo(HaveOccurred(), "a is stopped: b may run")

	// Starting a while b runs is over the running limit; an admin may.
	err = s.CheckStart(ctx, "jane", "a", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded))
	g.Expect(err.Error()).To(And(ContainSubstring("1 running workspace (b)"), ContainSubstring("stop or delete one before starting a")))
	g.Expect(s.CheckStart(ctx, "jane", "a", true)).To(Succeed())

	// Stopping b too is over the stopped limit.
	err = s.CheckStop(ctx, "jane", "b", false)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded))
	g.Expect(err.Error()).To(And(ContainSubstring("1 stopped workspace (a)"), ContainSubstring("delete one before stopping b")))
	g.Expect(s.CheckStop(ctx, "jane", "b", true)).To(Succeed())
}

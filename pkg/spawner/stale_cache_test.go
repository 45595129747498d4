package spawner

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestAStaleCacheNeverLetsTwoOwnersShareAnID: the id check before the create reads the cache,
// which may not hold a workspace created a moment ago. Here the cache sees nothing at all: a
// second owner's spawn of a taken id must still end in Conflict, and leave exactly the first
// owner's pod (the API-server read after the create decides, and the loser's pod is deleted).
func TestAStaleCacheNeverLetsTwoOwnersShareAnID(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	reg := testTemplates(t)
	_, err := New(c, c, reg, Options{Namespace: ns}).Spawn(ctx, Request{Template: "plain", ID: "stale", Caller: Caller{Subject: "jane"}})
	g.Expect(err).NotTo(HaveOccurred())

	wc, err := client.NewWithWatch(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	blind := interceptor.NewClient(wc, interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return nil },
	})
	_, err = New(blind, c, reg, Options{Namespace: ns}).Spawn(ctx, Request{Template: "plain", ID: "stale", Caller: Caller{Subject: "bob"}})
	g.Expect(CodeOf(err)).To(Equal(Conflict), "err = %v", err)

	live := 0
	for _, p := range podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "stale"}) {
		if p.DeletionTimestamp == nil {
			live++
			g.Expect(workspace.Owner(&p)).To(Equal("jane"))
		}
	}
	g.Expect(live).To(Equal(1))
}

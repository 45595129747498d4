package spawner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestOwnerLocksArePrunedWhenNobodyHoldsThem(t *testing.T) {
	var o ownerLocks
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			owner := fmt.Sprintf("user-%d", i%20)
			unlock, err := o.lock(context.Background(), owner)
			if err != nil {
				t.Error(err)
				return
			}
			unlock()
		}(i)
	}
	wg.Wait()
	if n := o.size(); n != 0 {
		t.Errorf("%d owner locks left after every spawn ended, want 0", n)
	}
}

func TestSpawnsLeaveNoOwnerLockBehind(t *testing.T) {
	ctx, c, ns := setup(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 5, MaxClaimsPerUser: 10})
	for i := 0; i < 6; i++ {
		owner := fmt.Sprintf("user-%d", i)
		if _, err := s.Spawn(ctx, Request{Template: "plain", ID: fmt.Sprintf("w-%d", i), Caller: Caller{Subject: owner}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Spawn(ctx, Request{Template: "persistent", ID: fmt.Sprintf("p-%d", i), Context: map[string]string{"repo": "r"}, Caller: Caller{Subject: owner}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.locks.size(); n != 0 {
		t.Errorf("%d owner locks left after the spawns ended, want 0", n)
	}
}

// TestClaimsLeftByDeletedWorkspacesAreBoundedPerUser: claims outlive their workspace, so a user
// who spawns and deletes workspaces with volumes would pile them up; the limit stops that with
// an error that says what to do, and reusing a deleted workspace's id (and claims) stays free.
func TestClaimsLeftByDeletedWorkspacesAreBoundedPerUser(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxClaimsPerUser: 3})
	jane := Caller{Subject: "jane"}
	spawn := func(id string, caller Caller) error {
		_, err := s.Spawn(ctx, Request{Template: "persistent", ID: id, Owner: "jane", Context: map[string]string{"repo": "r"}, Caller: caller})
		return err
	}
	g.Expect(spawn("one", jane)).To(Succeed())
	// Jane deletes the workspace; its two claims stay.
	g.Expect(c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: "one"})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "one"})).To(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())

	err := spawn("two", jane)
	g.Expect(CodeOf(err)).To(Equal(QuotaExceeded))
	g.Expect(err.Error()).To(ContainSubstring("limit is 3 per user"))
	g.Expect(err.Error()).To(ContainSubstring(workspace.ClaimName("jane", "one", "home")))
	g.Expect(podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "two"})).To(BeEmpty(), "a refused spawn creates nothing")

	// The same id again reuses its claims: nothing new, so it is allowed.
	g.Expect(spawn("one", jane)).To(Succeed())
	// An admin is not limited.
	g.Expect(spawn("three", Caller{Subject: "root", IsAdmin: true})).To(Succeed())
	var claims corev1.PersistentVolumeClaimList
	g.Expect(c.List(ctx, &claims, client.InNamespace(ns))).To(Succeed())
	names := []string{}
	for _, p := range claims.Items {
		names = append(names, p.Name)
	}
	g.Expect(strings.Join(names, ",")).NotTo(ContainSubstring("-two-"))
}

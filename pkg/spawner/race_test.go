package spawner

import (
	"context"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestConcurrentSpawnsOfOneIDNeverDeleteTheWinnersClaim: many spawns of the same workspace at
// once (an admin's, so no quota ledger serialises them): exactly one wins, and every claim its
// pod mounts still exists afterwards; a loser never deletes a claim the winner uses.
func TestConcurrentSpawnsOfOneIDNeverDeleteTheWinnersClaim(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns})
	const rounds, racers = 6, 8
	for r := 0; r < rounds; r++ {
		id := "race-" + string(rune('a'+r))
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, racers)
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				_, errs[i] = s.Spawn(ctx, Request{Template: "persistent", ID: id, Context: map[string]string{"repo": "r.git"},
					Owner: "jane", Caller: Caller{Subject: "root", IsAdmin: true}})
			}(i)
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if CodeOf(err) != Conflict {
				t.Fatalf("round %d: a losing spawn failed with %v, want a Conflict", r, err)
			}
		}
		g.Expect(ok).To(Equal(1), "round %d: exactly one spawn wins", r)
		pods := podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: id})
		g.Expect(pods).To(HaveLen(1))
		for _, v := range pods[0].Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			var pvc corev1.PersistentVolumeClaim
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: v.PersistentVolumeClaim.ClaimName}, &pvc)).To(Succeed(),
				"round %d: claim %s of the winning pod was deleted", r, v.PersistentVolumeClaim.ClaimName)
			g.Expect(pvc.DeletionTimestamp).To(BeNil())
		}
	}
}

// TestALosingSpawnNeverDeletesTheWinnersClaim forces the interleaving that used to lose data: spawn
// A is held just before creating its pod while spawn B of the same workspace runs to the end;
// then A goes on and loses. B's pod and every claim it mounts must still be there.
func TestALosingSpawnNeverDeletesTheWinnersClaim(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	reg := testTemplates(t)
	wc, err := client.NewWithWatch(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	held, atPodCreate, bDone := heldAtPodCreate(wc)
	a := New(held, c, reg, Options{Namespace: ns})
	b := New(c, c, reg, Options{Namespace: ns})
	req := Request{Template: "persistent", ID: "held", Owner: "jane", Context: map[string]string{"repo": "r"}, Caller: Caller{Subject: "root", IsAdmin: true}}
	aEnded := heldSpawn(ctx, t, atPodCreate, func() error { _, err := a.Spawn(ctx, req); return err })
	_, err = b.Spawn(ctx, req)
	close(bDone)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(CodeOf(aEnded())).To(Equal(Conflict))
	pods := podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "held"})
	g.Expect(pods).To(HaveLen(1))
	for _, v := range pods[0].Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			var pvc corev1.PersistentVolumeClaim
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: v.PersistentVolumeClaim.ClaimName}, &pvc)).To(Succeed(),
				"claim %s of the winning pod was deleted by the losing spawn", v.PersistentVolumeClaim.ClaimName)
			g.Expect(pvc.DeletionTimestamp).To(BeNil())
		}
	}
}

// heldAtPodCreate returns a client over cl whose first pod create waits: atPodCreate is closed
// when it is reached, and the create goes on once release is closed.
func heldAtPodCreate(cl client.WithWatch) (held client.Client, atPodCreate <-chan struct{}, release chan<- struct{}) {
	at, rel := make(chan struct{}), make(chan struct{})
	var once sync.Once
	return interceptor.NewClient(cl, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				once.Do(func() {
					close(at)
					<-rel
				})
			}
			return cl.Create(ctx, obj, opts...)
		},
	}), at, rel
}

// heldSpawn runs spawn A (made with heldAtPodCreate's client) in a goroutine and returns once A is
// held at its pod's create; the function it returns waits, bounded by ctx, for A's error.
func heldSpawn(ctx context.Context, t *testing.T, atPodCreate <-chan struct{}, spawn func() error) (aEnded func() error) {
	t.Helper()
	aErr := make(chan error, 1)
	go func() { aErr <- spawn() }()
	select {
	case <-atPodCreate:
	case err := <-aErr:
		t.Fatalf("spawn A ended before its pod's create: %v", err)
	case <-ctx.Done():
		t.Fatal("spawn A never reached its pod's create")
	}
	return func() error {
		t.Helper()
		select {
		case err := <-aErr:
			return err
		case <-ctx.Done():
			t.Fatal("spawn A never ended after spawn B won")
			return nil
		}
	}
}

package spawner

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// apiPodLists returns a reader over the API server that counts its pod lists in n.
func apiPodLists(t *testing.T, n *atomic.Int32) client.Reader {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(wc, interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				n.Add(1)
			}
			return cl.List(ctx, list, opts...)
		},
	})
}

// TestTheCheckAfterTheCreateWaitsForTheCache: the cache shows nothing with the id until it
// shows the spawn's own pod, together with a rival's pod of the same id (created before it, so
// in the same event stream before it). The check after the create must wait for its own pod
// before it looks, see the rival, yield, and not ask the API server. Without the wait it finds
// the id free and keeps its pod.
func TestTheCheckAfterTheCreateWaitsForTheCache(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	seen := podcache.NewSeen()
	var store atomic.Pointer[podcachetest.Store]
	store.Store(&podcachetest.Store{})
	wc, err := client.NewWithWatch(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	cached := interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				return store.Load().Get(ctx, key, obj)
			}
			return cl.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				return store.Load().List(ctx, list, opts...)
			}
			return cl.List(ctx, list, opts...)
		},
	})
	var apiLists atomic.Int32
	rival := &corev1.Pod{}
	rival.Namespace, rival.Name, rival.UID = ns, "rival-contested", "u-rival"
	rival.Labels = map[string]string{workspace.LabelWorkspaceID: "contested"}
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		podcachetest.AwaitWaiting(seen)
		var own corev1.PodList
		if err := c.List(ctx, &own, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: "contested"}); err != nil || len(own.Items) != 1 {
			t.Errorf("the spawn's own pod: %v, %d pods", err, len(own.Items))
			return // the spawn's wait ends at its bound and reads the API server: the test fails
		}
		store.Store(&podcachetest.Store{rival, &own.Items[0]}) // the store first, then the handlers
		seen.OnAdd(&own.Items[0], false)
	}()
	_, err = New(cached, apiPodLists(t, &apiLists), testTemplates(t), Options{Namespace: ns, Seen: seen, CacheWait: time.Minute}).
		Spawn(ctx, Request{Template: "plain", ID: "contested", Caller: Caller{Subject: "jane"}})
	g.Expect(CodeOf(err)).To(Equal(Conflict), "err = %v", err)
	g.Expect(apiLists.Load()).To(BeZero(), "the check read the API server")
	for _, p := range podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "contested"}) {
		g.Expect(p.DeletionTimestamp).NotTo(BeNil(), "the yielding spawn left its pod %s", p.Name)
	}
}

// TestALaterSpawnOfATakenIDYieldsOnTheCache: with nogoo9's real pod cache. Spawn A is held just
// before its create (its cache check found the id free) while B, another owner's spawn of the same
// id, runs to the end; then A creates its differently named pod. A's check after the create,
// answered by the cache once it shows A's pod, must find B's pod and yield; B's pod stays; no
// check asks the API server.
func TestALaterSpawnOfATakenIDYieldsOnTheCache(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	opts := podcache.OptionsFor([]string{ns})
	opts.Scheme = clientgoscheme.Scheme
	ca, err := podcache.NewCache(cfg, opts)
	g.Expect(err).NotTo(HaveOccurred())
	seen, err := podcache.WatchSeen(ctx, ca)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(seen).NotTo(BeNil(), "client-go's informers apply relists whole by default")
	go func() { _ = ca.Start(ctx) }()
	g.Expect(ca.WaitForCacheSync(ctx)).To(BeTrue())
	cc, err := client.NewWithWatch(cfg, client.Options{Cache: &client.CacheOptions{Reader: ca}})
	g.Expect(err).NotTo(HaveOccurred())

	held, atPodCreate, bDone := heldAtPodCreate(cc)
	var apiLists atomic.Int32
	reg := testTemplates(t)
	a := New(held, apiPodLists(t, &apiLists), reg, Options{Namespace: ns, Seen: seen, CacheWait: time.Minute})
	b := New(cc, apiPodLists(t, &apiLists), reg, Options{Namespace: ns, Seen: seen, CacheWait: time.Minute})
	admin := Caller{Subject: "root", IsAdmin: true}
	aEnded := heldSpawn(ctx, t, atPodCreate, func() error {
		_, err := a.Spawn(ctx, Request{Template: "plain", ID: "taken", Owner: "alice", Caller: admin})
		return err
	})
	won, err := b.Spawn(ctx, Request{Template: "plain", ID: "taken", Owner: "bob", Caller: admin})
	close(bDone)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(CodeOf(aEnded())).To(Equal(Conflict))
	g.Expect(apiLists.Load()).To(BeZero(), "a check after a create read the API server")
	live := []string{}
	for _, p := range podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "taken"}) {
		if p.DeletionTimestamp == nil {
			live = append(live, p.Name)
		}
	}
	g.Expect(live).To(ConsistOf(won.Pod.Name))
}

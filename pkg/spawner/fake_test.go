package spawner

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Helpers of the tests that need no kube-apiserver (they run with -short too): a
// controller-runtime fake client stands in for it, and an interceptor plays the API server's
// refusals and lost answers.

// fakeNS is the namespace of the fake-client tests.
const fakeNS = "nogoo9"

// fakeSetup gives a test a bounded context and an empty fake API server.
func fakeSetup(t *testing.T) (context.Context, client.WithWatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, fake.NewClientBuilder().Build()
}

// heldCreates is a client whose creates of workspace id's pod are held, as by an API server
// waiting for a slow etcd: the caller gets context.DeadlineExceeded and nothing exists until
// land() performs the held write.
type heldCreates struct {
	client.Client
	base client.WithWatch
	mu   sync.Mutex
	held *corev1.Pod
}

func holdPodCreates(base client.WithWatch, id string) *heldCreates {
	h := &heldCreates{base: base}
	h.Client = interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if p, ok := obj.(*corev1.Pod); ok && p.Labels[workspace.LabelWorkspaceID] == id {
				h.mu.Lock()
				h.held = p.DeepCopy()
				h.mu.Unlock()
				return context.DeadlineExceeded
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	return h
}

// land performs the held create.
func (h *heldCreates) land(ctx context.Context, t *testing.T) *corev1.Pod {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		t.Fatal("no create was held")
	}
	p := h.held.DeepCopy()
	if err := h.base.Create(ctx, p); err != nil {
		t.Fatalf("the held create of pod %s: %v", p.Name, err)
	}
	return p
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Step(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

package controllers

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// contentTypes records the Content-Type of the requests a client sends to paths containing part.
type contentTypes struct {
	part string
	mu   sync.Mutex
	seen []string
}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if strings.Contains(req.URL.Path, c.part) && req.Method != http.MethodGet {
			c.mu.Lock()
			c.seen = append(c.seen, req.Method+" "+req.Header.Get("Content-Type"))
			c.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (c *contentTypes) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// eventsManager starts a kube-apiserver, a namespace named after prefix with a pod "ws", and a
// running manager wired as main.go wires it (the manager's config, its broadcaster
// NewEventBroadcaster on the same config), set further by set; sent records what the manager's
// clients send to /events.
func eventsManager(t *testing.T, prefix string, set func(o *ctrl.Options, ns string)) (c client.Client, ns string, pod *corev1.Pod, sent *contentTypes, mgr ctrl.Manager) {
	t.Helper()
	base, c := startAPIServer(t)
	ctx := context.Background()
	ns = newNamespace(t, c, prefix)
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide:1"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	sent = &contentTypes{part: "/events"}
	cfg := rest.CopyConfig(base)
	cfg.WrapTransport = sent.wrap
	events, err := NewEventBroadcaster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(events.Shutdown) // after the manager has stopped (runManager's clean-up runs first)
	mgr = newTestManager(t, cfg, func(o *ctrl.Options) {
		o.EventBroadcaster = events //nolint:staticcheck // as main.go
		if set != nil {
			set(o, ns)
		}
	})
	runManager(t, ctx, mgr)
	return c, ns, pod, sent, mgr
}

// TestEventsAreWrittenAsProtobuf: a controller of a manager wired as main.go wires it records an
// Event (eventsManager); the Event reaches the API server, and it was sent as protobuf, not as
// client-go's default JSON (kube-apiserver decodes every Event of a bulk upgrade: two per
// workspace).
func TestEventsAreWrittenAsProtobuf(t *testing.T) {
	ctx := context.Background()
	c, ns, pod, sent, mgr := eventsManager(t, "events", nil)
	mgr.GetEventRecorderFor(UpgradeControllerName).Event(pod, corev1.EventTypeNormal, "UpgradeStarted", "Upgrade of pod ws started.") //nolint:staticcheck // as SetupWorkspaceReconciler

	g := gomega.NewWithT(t)
	g.Eventually(func(g gomega.Gomega) {
		var list corev1.EventList
		g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
		g.Expect(list.Items).To(gomega.ContainElement(gomega.HaveField("Reason", "UpgradeStarted")))
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(gomega.Succeed())
	g.Expect(sent.list()).To(gomega.ConsistOf("POST " + runtime.ContentTypeProtobuf))
}

// TestAnEventIsPOSTedOnceUnderLeaderElection: with leader election on, as main.go runs the
// controller, a manager has two recorder providers on one broadcaster (its cluster's and its
// own, for the election). Each recorded Event must reach the API server as one POST, not one per
// provider (before the fix: two, the second answered 409 after kube-apiserver had decoded it).
func TestAnEventIsPOSTedOnceUnderLeaderElection(t *testing.T) {
	ctx := context.Background()
	c, ns, pod, sent, mgr := eventsManager(t, "elected", func(o *ctrl.Options, ns string) {
		o.LeaderElection = true
		o.LeaderElectionID = "nogoo9-test"
		o.LeaderElectionNamespace = ns
	})
	g := gomega.NewWithT(t)
	g.Eventually(mgr.Elected()).WithTimeout(30 * time.Second).Should(gomega.BeClosed())
	reasons := func(g gomega.Gomega) []string {
		var list corev1.EventList
		g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
		var r []string
		for _, e := range list.Items {
			r = append(r, e.Reason)
		}
		return r
	}
	// The election's own Event, recorded through the manager's provider, then no more POSTs.
	g.Eventually(reasons).WithTimeout(30 * time.Second).Should(gomega.ContainElement("LeaderElection"))
	g.Consistently(func() []string { return sent.list() }).WithTimeout(2 * time.Second).Should(gomega.HaveLen(1))

	mgr.GetEventRecorderFor(UpgradeControllerName).Event(pod, corev1.EventTypeNormal, "UpgradeStarted", "Upgrade of pod ws started.") //nolint:staticcheck // as SetupWorkspaceReconciler
	g.Eventually(reasons).WithTimeout(30 * time.Second).Should(gomega.ContainElement("UpgradeStarted"))
	g.Consistently(func() []string { return sent.list() }).WithTimeout(2*time.Second).Should(gomega.HaveLen(2),
		"one POST for the election's Event and one for the upgrade's")
}

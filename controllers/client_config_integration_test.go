package controllers

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// watchEncodings records, for every watch request a client sends, whether the answer came
// compressed (Go's transport then decompresses it and says so).
type watchEncodings struct {
	mu         sync.Mutex
	compressed int
	plain      int
}

func (w *watchEncodings) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.URL.Query().Get("watch") == "true" {
			w.mu.Lock()
			if resp.Uncompressed || resp.Header.Get("Content-Encoding") != "" {
				w.compressed++
			} else {
				w.plain++
			}
			w.mu.Unlock()
		}
		return resp, err
	})
}

func (w *watchEncodings) counts() (compressed, plain int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.compressed, w.plain
}

// TestWatchStreamsAreNotCompressed: with the manager's config as main.go sets it
// (UncompressedResponses), the pod informer's watch comes uncompressed, so kube-apiserver does not
// gzip every pod event it sends nogoo9 (Kubernetes 1.37's WatchListCompression does, for a client
// that accepts gzip), and the informer still sees a new pod.
func TestWatchStreamsAreNotCompressed(t *testing.T) {
	base, c := startAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "plain")
	seen := &watchEncodings{}
	cfg := rest.CopyConfig(base)
	if on, err := UncompressedResponses(cfg); err != nil || !on {
		t.Fatalf("UncompressedResponses on a 1.37 API server = %v, %v; want true", on, err)
	}
	cfg.WrapTransport = seen.wrap
	mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
		o.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
	})
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, mgr)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide:1"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	g := gomega.NewWithT(t)
	g.Eventually(func() error {
		return mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
	}).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(gomega.Succeed())
	compressed, plain := seen.counts()
	if compressed != 0 || plain == 0 {
		t.Errorf("watch answers: %d compressed, %d plain; want every one plain", compressed, plain)
	}
}

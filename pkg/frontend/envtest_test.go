package frontend

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// The package's tests against a real kube-apiserver (envtest) share one; with -short none is
// started and those tests skip themselves. The front end's cache is what may lag: such a test
// reads pods through a snapshot (fakeCache of the pods as the API server had them a moment
// before), and writes and live reads go to the real API server.

var apiConfig *rest.Config

var liveNSSeq atomic.Int32

func TestMain(m *testing.M) {
	apiserver.Main(m, func(cfg *rest.Config) int {
		if cfg != nil {
			cfg.QPS, cfg.Burst = 1000, 2000
		}
		apiConfig = cfg
		return m.Run()
	}, apiserver.BenchmarksNeedNone)
}

// liveAPI is a test's own namespace on the shared API server.
type liveAPI struct {
	ctx context.Context
	k8s client.Client // direct, uncached
	ns  string
	// requests counts the requests k8s sent, by method (GET also counts lists).
	requests map[string]*atomic.Int64
}

// newLiveAPI gives a test a namespace of its own and a direct client that counts its requests;
// every call of the test is bounded by a minute.
func newLiveAPI(t *testing.T) *liveAPI {
	t.Helper()
	if apiConfig == nil {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
	l := &liveAPI{requests: map[string]*atomic.Int64{}}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		l.requests[m] = &atomic.Int64{}
	}
	cfg := rest.CopyConfig(apiConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if n, ok := l.requests[r.Method]; ok {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	l.ctx, l.k8s = ctx, c
	l.ns = fmt.Sprintf("fe-%d-%d", time.Now().Unix()%100000, liveNSSeq.Add(1))
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.ns}}); err != nil {
		t.Fatal(err)
	}
	return l
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// count is how many requests of method were sent so far.
func (l *liveAPI) count(method string) int64 { return l.requests[method].Load() }

// create creates p (built by pod()) in the test's namespace, Running and Ready as its options
// say, and returns it as the API server has it.
func (l *liveAPI) create(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	p.Namespace, p.UID, p.CreationTimestamp = l.ns, "", metav1.Time{}
	p.Labels[workspace.LabelUserSub] = workspace.UserLabel(workspace.Owner(p))
	status := p.Status
	if err := l.k8s.Create(l.ctx, p); err != nil {
		t.Fatal(err)
	}
	if status.Phase != "" {
		p.Status = status
		if err := l.k8s.Status().Update(l.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return l.get(t, p.Name)
}

// get reads pod name from the API server.
func (l *liveAPI) get(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := l.k8s.Get(l.ctx, client.ObjectKey{Namespace: l.ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// service is a front end whose cache is cache (a snapshot that lags when the test writes after
// taking it) and whose writes and live reads go to the API server.
func (l *liveAPI) service(t *testing.T, cache client.Reader, edit func(*Config)) *Service {
	t.Helper()
	cfg := Config{Namespace: l.ns, Cache: cache, Client: l.k8s, APIReader: l.k8s, Templates: stubTemplates{"python": "2.0"},
		WriteTimeout: 20 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// snapshot is a cache holding the pods named as the API server has them now: it lags behind
// every write that follows.
func (l *liveAPI) snapshot(t *testing.T, names ...string) client.WithWatch {
	t.Helper()
	pods := make([]*corev1.Pod, len(names))
	for i, n := range names {
		pods[i] = l.get(t, n)
	}
	return fakeCache(pods...)
}

// unreachableClient is a client of an address nothing listens on: its connections are refused,
// as by an API server that is down.
func (l *liveAPI) unreachableClient(t *testing.T) client.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	down := rest.CopyConfig(apiConfig)
	down.Host = "https://" + addr
	c, err := client.New(down, client.Options{Mapper: l.k8s.RESTMapper()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

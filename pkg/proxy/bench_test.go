package proxy

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// benchAuth accepts one token.
type benchAuth struct{}

func (benchAuth) Authenticate(r *http.Request) (*auth.Caller, error) {
	if t, _ := auth.TokenFromRequest(r); t == "bench" {
		return &auth.Caller{Subject: "jane"}, nil
	}
	return nil, &auth.Error{Reason: "unknown token"}
}

// discardWriter is a reusable ResponseWriter (with Flush, as ReverseProxy wants for streams).
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }
func (w *discardWriter) Flush()                      {}

// benchProxy is a Proxy with one ready workspace whose pod is a loopback server answering 1 KiB.
func benchProxy(b *testing.B) (*Proxy, func()) {
	body := bytes.Repeat([]byte("x"), 1024)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1024")
		_, _ = w.Write(body)
	}))
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	pod := wsPod("bench", time.Minute, host, true, map[string]string{workspace.AnnWorkspacePort: port})
	pod.CreationTimestamp = metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	p.PodChanged(pod)
	return p, func() { p.transport.CloseIdleConnections(); backend.Close() }
}

// BenchmarkServeHTTP is the proxy's request path (routing, auth cache, ReverseProxy, transport,
// and the loopback pod) for a keep-alive GET with a 1 KiB answer. Compare with
// -bench 'ServeHTTP' -benchmem; the ReverseProxy variant turns the fast path off, the
// StdTransport variant also swaps in http.Transport.
func BenchmarkServeHTTP(b *testing.B) { benchServe(b, true, false) }

// BenchmarkServeHTTPReverseProxy is the same request through httputil.ReverseProxy (no fast path).
func BenchmarkServeHTTPReverseProxy(b *testing.B) { benchServe(b, false, false) }

func BenchmarkServeHTTPStdTransport(b *testing.B) { benchServe(b, false, true) }

func benchServe(b *testing.B, fast, std bool) {
	p, done := benchProxy(b)
	defer done()
	p.fast = fast
	if std {
		tr := p.transport.fallback
		for _, t := range p.router.byWS {
			for _, tg := range t {
				if tg.rp != nil {
					tg.rp.Transport = tr
				}
			}
		}
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, "http://proxy.example/ws/jane/demo/x", nil)
		req.Header.Set("Authorization", "Bearer bench")
		clear(w.h)
		w.code, w.n = 0, 0
		p.ServeHTTP(w, req)
		if w.code != http.StatusOK || w.n != 1024 {
			b.Fatalf("got %d with %d bytes", w.code, w.n)
		}
	}
}

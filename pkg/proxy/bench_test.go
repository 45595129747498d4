package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
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
		for _, st := range p.router.ws {
			for _, tg := range st.targets {
				if rp := tg.reverseProxy(p.router.newRP); rp != nil {
					rp.Transport = tr
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

// rawBackend is a pod that answers every request on a keep-alive connection with a canned 1 KiB
// answer, without allocating per request: the allocations a benchmark counts are the proxy's.
func rawBackend(tb testing.TB) (host, port string) {
	tb.Helper()
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n\r\n" + strings.Repeat("x", 1024))
	host, port, _ = net.SplitHostPort(acceptEvery(tb, func(c net.Conn) {
		buf := make([]byte, 16<<10)
		n := 0
		for {
			m, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += m
			for {
				i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
				if i < 0 {
					break
				}
				if _, err := c.Write(answer); err != nil {
					return
				}
				n = copy(buf, buf[i+4:n])
			}
			if n == len(buf) {
				return
			}
		}
	}))
	return host, port
}

// BenchmarkLeanKeepAlive is one proxied keep-alive GET with a 1 KiB answer through the whole
// server (the lean loop, routing, the auth cache, the fast path, the pooled pod connection), from
// raw client bytes to raw pod bytes; client and pod do not allocate, so -benchmem counts the
// proxy's allocations per request.
func BenchmarkLeanKeepAlive(b *testing.B) {
	benchLeanKeepAlive(b, Options{}, "User-Agent: bench\r\nAccept: */*\r\n")
}

// browserLines are a browser's header lines besides Host and Authorization (cpusplit.sh's
// BROWSER=1).
const browserLines = "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
	"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-GB,en;q=0.5\r\n" +
	"Accept-Encoding: gzip, deflate, br\r\nReferer: http://127.0.0.1/ws/bench/demo/\r\nCookie: theme=dark; lang=en\r\n" +
	"Sec-Fetch-Dest: document\r\nSec-Fetch-Mode: navigate\r\nSec-Fetch-Site: same-origin\r\nConnection: keep-alive\r\n"

// BenchmarkLeanKeepAliveAnswer is BenchmarkLeanKeepAlive with a browser's header lines, the pod's
// answer copied raw (raw) or parsed into the client response's map (map, Options.NoRawAnswer).
func BenchmarkLeanKeepAliveAnswer(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchLeanKeepAlive(b, Options{}, browserLines) })
	b.Run("map", func(b *testing.B) { benchLeanKeepAlive(b, Options{NoRawAnswer: true}, browserLines) })
}

func benchLeanKeepAlive(b *testing.B, opts Options, lines string) {
	host, port := rawBackend(b)
	_, addr := startProxy(b, opts, host, port)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /ws/jane/demo/x HTTP/1.1\r\nHost: proxy.example\r\n" + lines + "Authorization: Bearer bench\r\n\r\n")
	buf := make([]byte, 8<<10)
	sent := 0
	exchange := func() {
		// A proxy that never answers fails the benchmark within waitBound. The deadline moves
		// on every 256 exchanges, not each one, to keep its cost out of the figures.
		if sent%256 == 0 {
			_ = c.SetDeadline(time.Now().Add(waitBound))
		}
		sent++
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		n, end := 0, -1
		for end < 0 || n < end+1024 {
			m, err := c.Read(buf[n:])
			if err != nil {
				b.Fatal(err)
			}
			n += m
			if end < 0 {
				if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 {
					end = i + 4
					if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 ")) {
						b.Fatalf("answer: %q", buf[:n])
					}
				}
			}
		}
		if n != end+1024 {
			b.Fatalf("answer of %d bytes, want %d", n, end+1024)
		}
	}
	exchange() // dial the pod, fill the auth cache
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for b.Loop() {
		exchange()
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkQuickParse is the lean server's request parser alone (no connection), for a browser's
// keep-alive GET.
func BenchmarkQuickParse(b *testing.B) {
	head := []byte("GET /ws/jane/demo/static/app.js?v=3 HTTP/1.1\r\nHost: ide.example.com\r\nUser-Agent: Mozilla/5.0\r\n" +
		"Accept: */*\r\nAccept-Encoding: gzip, deflate, br\r\nAccept-Language: en-GB,en;q=0.9\r\nCookie: a=1; b=2\r\n" +
		"Referer: https://ide.example.com/ws/jane/demo/\r\nAuthorization: Bearer bench\r\n\r\n")
	for _, lazy := range []bool{false, true} {
		b.Run(fmt.Sprintf("lazy=%t", lazy), func(b *testing.B) {
			q := newQuickReq()
			q.lazy = lazy
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, ok := q.quickParse(head, "192.0.2.1:1"); !ok {
					b.Fatal("not taken")
				}
				clear(q.header)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkRawAnswer is the pod's answer parsed raw (parseRawResponse) and as a header map
// (parseQuickResponseInto, with the connection's buffers, then the hop-by-hop fields dropped as
// the fast path does).
func BenchmarkRawAnswer(b *testing.B) {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\n" +
		"Cache-Control: no-cache\r\nEtag: \"abc\"\r\nVary: Accept-Encoding\r\nContent-Length: 1024\r\n\r\n")
	b.Run("raw", func(b *testing.B) {
		var res http.Response
		var ra rawAnswer
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			if !parseRawResponse(head, &res, &ra) {
				b.Fatal("not taken")
			}
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("map", func(b *testing.B) {
		var res http.Response
		h := http.Header{}
		var vals []string
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			clear(h)
			clear(vals)
			vals = vals[:0]
			if !parseQuickResponseInto(head, &res, h, &vals) {
				b.Fatal("not taken")
			}
			dropHopHeaders(h)
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkQuickResponse is the pod transport's answer parser alone (no connection).
func BenchmarkQuickResponse(b *testing.B) {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\n" +
		"Cache-Control: no-cache\r\nEtag: \"abc\"\r\nVary: Accept-Encoding\r\nContent-Length: 1024\r\n\r\n")
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		if _, ok := parseQuickResponse(head); !ok {
			b.Fatal("not taken")
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRawField is rawField alone over the names of a typical answer of a dev server
// (Express's, with a cache and a compression header): what parseRawResponse classifies per field.
func BenchmarkRawField(b *testing.B) {
	names := []string{"X-Powered-By", "Content-Type", "Content-Length", "ETag", "Date", "Connection", "Keep-Alive", "Cache-Control", "Vary", "Content-Encoding"}
	n := 0
	for b.Loop() {
		for _, k := range names {
			if rawField(k) != fieldOther {
				n++
			}
		}
	}
	if n != 6*b.N {
		b.Fatalf("%d of %d names classified, want 6 of %d", n, len(names)*b.N, len(names))
	}
}

// BenchmarkForwardedHeaders is the fast path's forwarded request head alone (no connection), for a
// browser's keep-alive GET: from the request's header map (map) and from the client's header lines
// (lines, what the lean loop's requests use).
func BenchmarkForwardedHeaders(b *testing.B) {
	head := []byte("GET /ws/jane/demo/static/app.js?v=3 HTTP/1.1\r\nHost: ide.example.com\r\nUser-Agent: Mozilla/5.0\r\n" +
		"Accept: */*\r\nAccept-Encoding: gzip, deflate, br\r\nAccept-Language: en-GB,en;q=0.9\r\nCookie: a=1; b=2\r\n" +
		"Referer: https://ide.example.com/ws/jane/demo/\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Site: same-origin\r\n" +
		"Connection: keep-alive\r\nAuthorization: Bearer bench\r\n\r\n")
	q := newQuickReq()
	r, ok := q.quickParse(head, "192.0.2.1:1")
	if !ok {
		b.Fatal("not taken")
	}
	tg := &target{prefix: "/ws/jane/demo/", strip: true}
	bw := bufio.NewWriterSize(io.Discard, 4<<10)
	for _, bc := range []struct {
		name  string
		lines string
	}{{"map", ""}, {"lines", q.lines}} {
		b.Run(bc.name, func(b *testing.B) {
			f := &fastRequest{in: r, t: tg, lines: bc.lines}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if err := f.writeRequest(bw); err != nil {
					b.Fatal(err)
				}
				bw.Reset(io.Discard)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the process's user and system CPU time: "cpu-ns/op" beside ns/op, which on a
// machine busy with other work counts the time this benchmark waited for a CPU.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is a loopback pod that counts the TCP connections it accepted.
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
}

func newCountingServer(t *testing.T, h http.Handler) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *countingServer) addr() string { return strings.TrimPrefix(s.URL, "http://") }

// recordingFallback stands in for http.Transport and records what it was given.
type recordingFallback struct {
	mu   sync.Mutex
	reqs []*http.Request
	next http.RoundTripper
}

func (f *recordingFallback) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.mu.Unlock()
	return f.next.RoundTrip(r)
}

func (f *recordingFallback) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

func newTestTransport(t *testing.T, headerTimeout time.Duration) (*syncTransport, *recordingFallback) {
	t.Helper()
	std := &http.Transport{}
	fb := &recordingFallback{next: std}
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := newSyncTransport(fb, d.DialContext, responseLimits{headerTimeout: headerTimeout}, 4, time.Minute)
	t.Cleanup(func() { tr.CloseIdleConnections(); std.CloseIdleConnections() })
	return tr, fb
}

// waitBound bounds every wait of a test on a peer (a pod, the proxy, the transport under test): a
// peer that never answers, or a lost wake-up, fails the test instead of hanging go test until its
// own timeout.
const waitBound = 30 * time.Second

// boundedCtx ends waitBound from now, or when t ends.
func boundedCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	t.Cleanup(cancel)
	return ctx
}

// do sends one request through tr and returns status and the whole body.
func do(tr http.RoundTripper, ctx context.Context, method, url string, body io.Reader, hdr http.Header) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, "", err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

func TestSyncTransportReusesKeptAliveConnections(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		handler http.HandlerFunc
		want    string
	}{
		{"content-length answers", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "hello "+r.URL.Path)
		}, "hello /x"},
		{"chunked answers flushed in pieces, with a trailer", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "3")
		}, "part0;part1;part2;"},
		{"HEAD has no body", http.MethodHead, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1234")
		}, ""},
		{"204 has no body", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		}, ""},
		{"304 has no body", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		}, ""},
		{"a small POST body is sent and the answer read", http.MethodPost, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d bytes", len(b))
		}, "got 5 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newCountingServer(t, tc.handler)
			tr, fb := newTestTransport(t, 0)
			for i := 0; i < 5; i++ {
				var body io.Reader
				if tc.method == http.MethodPost {
					body = strings.NewReader("12345")
				}
				_, got, err := do(tr, boundedCtx(t), tc.method, srv.URL+"/x", body, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if got != tc.want {
					t.Fatalf("request %d: body %q, want %q", i, got, tc.want)
				}
			}
			if n := srv.conns.Load(); n != 1 {
				t.Fatalf("5 sequential requests used %d connections, want 1 kept alive", n)
			}
			if n := tr.idleCount(srv.addr()); n != 1 {
				t.Fatalf("idle pool holds %d connections, want 1", n)
			}
			if fb.count() != 0 {
				t.Fatalf("the fallback transport was used %d times", fb.count())
			}
		})
	}
}

func TestSyncTransportPassesTrailers(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		fmt.Fprint(w, "data")
		w.Header().Set("X-Sum", "42")
	}))
	tr, _ := newTestTransport(t, 0)
	req, _ := http.NewRequestWithContext(boundedCtx(t), http.MethodGet, srv.URL, nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	if got := res.Trailer.Get("X-Sum"); got != "42" {
		t.Fatalf("trailer X-Sum = %q, want 42", got)
	}
}

func TestSyncTransportLargeBodies(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 5<<16) // 5 MiB
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d", n)
			return
		}
		_, _ = w.Write(big)
	}))
	tr, fb := newTestTransport(t, 0)
	_, got, err := do(tr, boundedCtx(t), http.MethodGet, srv.URL, nil, nil)
	if err != nil || got != string(big) {
		t.Fatalf("5 MiB answer: %d bytes, err %v", len(got), err)
	}
	_, got, err = do(tr, boundedCtx(t), http.MethodPost, srv.URL, bytes.NewReader(big), nil)
	if err != nil || got != fmt.Sprint(len(big)) {
		t.Fatalf("5 MiB upload: answer %q, err %v", got, err)
	}
	if fb.count() != 1 {
		t.Fatalf("a %d-byte upload went through the fallback %d times, want 1 (it is larger than %d)", len(big), fb.count(), maxSyncBody)
	}
}

func TestSyncTransportLeavesUpgradesAndUnknownLengthsToTheFallback(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok")
	}))
	tests := []struct {
		name string
		req  func(ctx context.Context) *http.Request
	}{
		{"an upgrade with a request body", func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("abc"))
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}},
		{"a body of unknown length", func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, io.NopCloser(strings.NewReader("abc")))
			r.ContentLength = -1
			return r
		}},
		{"Expect: 100-continue", func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, strings.NewReader("abc"))
			r.Header.Set("Expect", "100-continue")
			return r
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, fb := newTestTransport(t, 0)
			res, err := tr.RoundTrip(tc.req(boundedCtx(t)))
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if fb.count() != 1 {
				t.Fatalf("fallback used %d times, want 1", fb.count())
			}
		})
	}
}

func TestSyncTransportSurvivesAConnectionThePodClosed(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, b)
	}))
	tr, _ := newTestTransport(t, 0)
	for _, tc := range []struct {
		name, method, body string
	}{
		{"an idempotent request is retried on a fresh connection", http.MethodGet, ""},
		{"a POST skips the dead connection before sending", http.MethodPost, "payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := do(tr, boundedCtx(t), http.MethodGet, srv.URL, nil, nil); err != nil {
				t.Fatal(err)
			}
			if tr.idleCount(srv.addr()) != 1 {
				t.Fatal("no idle connection after the first request")
			}
			before := srv.conns.Load()
			srv.CloseClientConnections() // the pod's keep-alive timeout, or a restart
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			_, got, err := do(tr, boundedCtx(t), tc.method, srv.URL, body, nil)
			if err != nil {
				t.Fatalf("request after the pod closed the idle connection failed: %v", err)
			}
			if want := tc.method + " " + tc.body; got != want {
				t.Fatalf("answer %q, want %q", got, want)
			}
			if n := srv.conns.Load() - before; n != 1 {
				t.Fatalf("%d new connections, want 1", n)
			}
		})
	}
}

func TestSyncTransportDoesNotRetryWhenThePodMayHaveActed(t *testing.T) {
	var calls atomic.Int64
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			fmt.Fprint(w, "first")
			return
		}
		// Read the request, then drop the connection without answering.
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = c.Close()
		}
	}))
	tr, _ := newTestTransport(t, 0)
	if _, _, err := do(tr, boundedCtx(t), http.MethodGet, srv.URL, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, _, err := do(tr, boundedCtx(t), http.MethodPost, srv.URL, strings.NewReader("x"), nil)
	if err == nil {
		t.Fatal("a POST whose connection was dropped after sending succeeded")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error %v, want it to wrap io.ErrUnexpectedEOF (the 502 reason)", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the pod saw %d requests, want 2 (the POST must not be sent twice)", n)
	}
}

func TestSyncTransportClosesConnectionsItCannotReuse(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		read    bool // read the body to its end before closing
	}{
		{"the pod answers Connection: close", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			fmt.Fprint(w, "bye")
		}, true},
		{"the body is closed before its end", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write(bytes.Repeat([]byte("x"), 1<<20))
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newCountingServer(t, tc.handler)
			tr, _ := newTestTransport(t, 0)
			for i := 0; i < 2; i++ {
				req, _ := http.NewRequestWithContext(boundedCtx(t), http.MethodGet, srv.URL, nil)
				res, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if tc.read {
					_, _ = io.ReadAll(res.Body)
				} else {
					_, _ = res.Body.Read(make([]byte, 10))
				}
				_ = res.Body.Close()
				if n := tr.idleCount(srv.addr()); n != 0 {
					t.Fatalf("idle pool holds %d connections, want 0", n)
				}
			}
			if n := srv.conns.Load(); n != 2 {
				t.Fatalf("2 requests used %d connections, want 2", n)
			}
		})
	}
}

func TestSyncTransportCancellation(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			fmt.Fprint(w, "first part")
			w.(http.Flusher).Flush()
		}
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	tr, _ := newTestTransport(t, 0)

	t.Run("while waiting for the response headers", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, _, err := do(tr, ctx, http.MethodGet, srv.URL+"/headers", nil, nil)
			errc <- err
		}()
		select {
		case <-started:
		case err := <-errc:
			t.Fatalf("the request ended before it reached the pod: %v", err)
		case <-time.After(waitBound):
			t.Fatalf("the request did not reach the pod within %s", waitBound)
		}
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("RoundTrip did not return within 30s of the cancellation")
		}
	})
	t.Run("while reading the body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(boundedCtx(t))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/body", nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		buf := make([]byte, 64)
		if n, err := res.Body.Read(buf); err != nil || string(buf[:n]) != "first part" {
			t.Fatalf("first read: %q %v", buf[:n], err)
		}
		cancel()
		errc := make(chan error, 1)
		go func() { _, err := io.ReadAll(res.Body); errc <- err }()
		select {
		case err := <-errc:
			if err == nil {
				t.Fatal("reading a cancelled body ended without an error")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a read on a cancelled body did not return within 30s")
		}
		_ = res.Body.Close()
		if n := tr.idleCount(srv.addr()); n != 0 {
			t.Fatalf("a cancelled exchange left %d idle connections, want 0", n)
		}
	})
	t.Run("an already cancelled context sends nothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		before := srv.conns.Load()
		if _, _, err := do(tr, ctx, http.MethodGet, srv.URL, nil, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		if srv.conns.Load() != before {
			t.Fatal("a connection was opened for a cancelled request")
		}
	})
}

func TestSyncTransportResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	tr, _ := newTestTransport(t, 100*time.Millisecond)
	_, _, err := do(tr, boundedCtx(t), http.MethodGet, srv.URL, nil, nil)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "no response headers within 100ms") {
		t.Fatalf("error %v, want a timeout naming the response header timeout", err)
	}
}

func TestSyncTransportForwardsInformationalResponses(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		fmt.Fprint(w, "page")
	}))
	tr, _ := newTestTransport(t, 0)
	var got []int
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, code)
		return nil
	}}
	ctx := httptrace.WithClientTrace(boundedCtx(t), trace)
	code, body, err := do(tr, ctx, http.MethodGet, srv.URL, nil, nil)
	if err != nil || code != 200 || body != "page" {
		t.Fatalf("got %d %q %v, want 200 page", code, body, err)
	}
	if len(got) != 1 || got[0] != http.StatusEarlyHints {
		t.Fatalf("informational responses seen %v, want [103]", got)
	}
}

func TestSyncTransportConcurrentUse(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Answers of different lengths and encodings, so a mix-up of connections shows.
		if r.URL.Query().Get("chunked") == "1" {
			fmt.Fprint(w, r.URL.Path)
			w.(http.Flusher).Flush()
			fmt.Fprint(w, strings.Repeat("!", len(r.URL.Path)))
			return
		}
		fmt.Fprint(w, r.URL.Path+strings.Repeat("!", len(r.URL.Path)))
	}))
	tr, _ := newTestTransport(t, 0)
	const workers, each = 16, 50
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				p := fmt.Sprintf("/w%d/r%d", g, i)
				_, got, err := do(tr, boundedCtx(t), http.MethodGet, fmt.Sprintf("%s%s?chunked=%d", srv.URL, p, i%2), nil, nil)
				if err != nil {
					errc <- err
					return
				}
				if want := p + strings.Repeat("!", len(p)); got != want {
					errc <- fmt.Errorf("GET %s: body %q, want %q", p, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if n := tr.idleCount(srv.addr()); n > 4 {
		t.Fatalf("idle pool holds %d connections, more than its limit of 4", n)
	}
}

func TestSyncTransportClosesIdleConnectionsAfterTheIdleTimeout(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	d := &net.Dialer{}
	tr := newSyncTransport(http.DefaultTransport, d.DialContext, responseLimits{}, 4, 50*time.Millisecond)
	defer tr.CloseIdleConnections()
	if _, _, err := do(tr, boundedCtx(t), http.MethodGet, srv.URL, nil, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for tr.idleCount(srv.addr()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle connection was not closed within 30s of its idle timeout")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

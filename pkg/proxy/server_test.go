package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// startProxy serves p on a loopback listener with Start until the test ends.
func startProxy(t testing.TB, opts Options, host, port string, tweak ...func(*Proxy)) (*Proxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Listener = ln
	p, err := New(benchAuth{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	wp := wsPod("lean", time.Minute, host, true, map[string]string{workspace.AnnWorkspacePort: port})
	wp.CreationTimestamp = metav1.Now()
	p.PodChanged(wp)
	for _, f := range tweak {
		f(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		waitStopped(t, done)
	})
	if err := waitListening(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(waitBound); !opts.StandardServer && p.lean.Load() == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy's lean loop did not start within %v", waitBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p, ln.Addr().String()
}

func waitListening(addr string) error {
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c.Close()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s", addr)
}

// rawExchange sends raw on a new connection, reads one answer (method tells a HEAD answer), then
// sends a health check on the same connection to see whether it is still usable and in step.
func rawExchange(t *testing.T, addr, raw, method string) string {
	t.Helper()
	c := dialProxy(t, addr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	// An interim "100 Continue" is not the answer (a client skips it, as net/http's does); whether
	// net/http's server sends one depends on whether the handler reads the body before it answers,
	// which is a race for a request whose body arrived with its head.
	for err == nil && res.StatusCode == http.StatusContinue {
		res, err = http.ReadResponse(br, &http.Request{Method: method})
	}
	if err != nil {
		return "no answer: " + err.Error()
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	out := fmt.Sprintf("%d %q err=%v length=%d chunked=%v close=%v\n%s\ntrailer:\n%s", res.StatusCode, b, err, res.ContentLength,
		len(res.TransferEncoding) > 0, res.Close, dumpHeader(res.Header, "Date"), dumpHeader(res.Trailer))
	if res.Close {
		return out
	}
	if _, err := io.WriteString(c, "GET /_nogoo9/healthz HTTP/1.1\r\nHost: proxy.example\r\n\r\n"); err != nil {
		return out + "\nnext request: " + err.Error()
	}
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		return out + "\nnext request: " + err.Error()
	}
	b, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	return out + fmt.Sprintf("\nnext request: %d %q", res.StatusCode, b)
}

// TestLeanServerAnswersAsNetHTTPDoes sends each request, as raw bytes, to a proxy on its own
// connection loop and to one on net/http's server, and compares what the pod gets and what
// the client gets, framing included, and that the connection serves a next request alike.
func TestLeanServerAnswersAsNetHTTPDoes(t *testing.T) {
	pod := &recordingPod{}
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	// A watch for the client going away starts almost at once, so that most requests are
	// served with it running.
	lean, leanAddr := startProxy(t, Options{}, host, port, func(p *Proxy) { p.watchAfter = 2 * time.Millisecond })
	_, stdAddr := startProxy(t, Options{StandardServer: true}, host, port)

	const auth = "Authorization: Bearer bench\r\n"
	tests := []struct {
		name, method, raw string
		lean              bool // served by the lean loop, else handed to net/http
	}{
		{"a plain GET", "GET", "GET /ws/jane/demo/index.html?a=1 HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "Accept: text/html\r\n\r\n", true},
		{"hop-by-hop headers both ways", "GET", "GET /ws/jane/demo/hop HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "Connection: X-Private\r\nX-Private: 1\r\n\r\n", true},
		{"a chunked answer", "GET", "GET /ws/jane/demo/chunked HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"an event stream", "GET", "GET /ws/jane/demo/sse HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"trailers, announced and not", "GET", "GET /ws/jane/demo/trailers HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"a status with a body", "DELETE", "DELETE /ws/jane/demo/status HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"no content", "OPTIONS", "OPTIONS /ws/jane/demo/empty HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"HEAD", "HEAD", "HEAD /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"an empty POST with Content-Length: 0", "POST", "POST /ws/jane/demo/api HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "Content-Length: 0\r\n\r\n", true},
		{"the client asks to close", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "Connection: close\r\n\r\n", true},
		{"a Set-Cookie flood: a 502 with none of the pod's headers", "GET", "GET /ws/jane/demo/cookieflood HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"cookies: nogoo9's removed", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\nCookie: a=1; nogoo9_token=bench; b=2\r\n" + auth + "\r\n", true},
		{"no token: 401", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\n\r\n", true},
		{"no route: 404", "GET", "GET /nowhere HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"a prefix without its slash: 308", "GET", "GET /ws/jane/demo?x=1 HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"dot segments climbing out are cleaned", "GET", "GET /ws/jane/demo/../../other/x HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "\r\n", true},
		{"the login page", "GET", "GET /_nogoo9/login?next=/ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\n\r\n", true},
		{"a POST with a body goes to net/http", "POST", "POST /ws/jane/demo/api HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "Content-Length: 7\r\n\r\n{\"x\":1}", false},
		{"a chunked upload goes to net/http", "POST", "POST /ws/jane/demo/api HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"HTTP/1.0 goes to net/http", "GET", "GET /ws/jane/demo/ HTTP/1.0\r\nHost: proxy.example\r\n" + auth + "\r\n", false},
		{"two Host headers: net/http's 400", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n" + auth + "\r\n", false},
		{"no Host: net/http's 400", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\n" + auth + "\r\n", false},
		{"a malformed header line: net/http's 400", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\nno colon here\r\n\r\n", false},
		{"a bad header value: net/http's 400", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\nX-Bad: a\x01b\r\n\r\n", false},
		{"Expect: 100-continue goes to net/http", "POST", "POST /ws/jane/demo/api HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "Expect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", false},
		{"headers larger than the lean buffer go to net/http", "GET", "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\n" + auth + "X-Big: " + strings.Repeat("b", leanHeaderBuf) + "\r\n\r\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served, handed := lean.lean.Load().served.Load(), lean.lean.Load().handedOff.Load()
			var sent, got [2]string
			for i, addr := range []string{leanAddr, stdAddr} {
				pod.mu.Lock()
				pod.last = ""
				pod.mu.Unlock()
				got[i] = rawExchange(t, addr, tc.raw, tc.method)
				sent[i] = pod.lastRequest()
			}
			if sent[0] != sent[1] {
				t.Errorf("the pod got\n%s\n\nthrough the lean loop, and through net/http\n%s", sent[0], sent[1])
			}
			if got[0] != got[1] {
				t.Errorf("the client got\n%s\n\nfrom the lean loop, and from net/http\n%s", got[0], got[1])
			}
			if strings.Contains(got[0], "X-Pod-Header") {
				t.Errorf("a 502 carried the pod's headers:\n%s", got[0])
			}
			if tc.lean && lean.lean.Load().served.Load() == served {
				t.Errorf("the lean loop did not serve the request (handed off: %v)", lean.lean.Load().handedOff.Load() > handed)
			}
			if !tc.lean && lean.lean.Load().handedOff.Load() == handed {
				t.Error("the request was not handed to net/http")
			}
		})
	}
}

// TestLeanServerPipelinedRequests: requests sent back to back before any answer are answered in
// order on the connection.
func TestLeanServerPipelinedRequests(t *testing.T) {
	pod := &recordingPod{}
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	_, addr := startProxy(t, Options{}, host, port)
	c := dialProxy(t, addr)
	var raw strings.Builder
	for _, p := range []string{"/ws/jane/demo/status", "/ws/jane/demo/chunked", "/ws/jane/demo/hop"} {
		raw.WriteString("GET " + p + " HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n\r\n")
	}
	if _, err := io.WriteString(c, raw.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for _, want := range []string{"418 short and stout", "200 part1 part2", "200 hello"} {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer %q: %v", want, err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if got := fmt.Sprintf("%d %s", res.StatusCode, b); got != want {
			t.Fatalf("answer %q, want %q", got, want)
		}
	}
}

// TestLeanServerHandsAWebSocketToNetHTTP: a WebSocket opened on a connection the lean loop has
// already served plain requests on works, and stays pinned and tracked like any other.
func TestLeanServerHandsAWebSocketToNetHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/echo", websocket.Handler(func(c *websocket.Conn) { _, _ = io.Copy(c, c) }))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "plain") })
	backend := httptest.NewServer(mux)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, addr := startProxy(t, Options{}, host, port)
	c := dialProxy(t, addr)
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		if _, err := io.WriteString(c, "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK || string(b) != "plain" {
			t.Fatalf("plain request %d: %d %q", i, res.StatusCode, b)
		}
	}
	cfg, err := websocket.NewConfig("ws://proxy.example/ws/jane/demo/echo", "http://proxy.example")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Header.Set("Authorization", "Bearer bench")
	ws, err := websocket.NewClient(cfg, bufferedConn{Conn: c, r: br})
	if err != nil {
		t.Fatalf("WebSocket handshake on a kept-alive connection: %v", err)
	}
	if _, err := ws.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := ws.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("echo %q, %v", buf[:n], err)
	}
	if got := p.OpenWebSockets("uid-lean"); got != 1 {
		t.Fatalf("%d WebSockets tracked on the pod, want 1", got)
	}
	if p.lean.Load().handedOff.Load() != 1 || p.lean.Load().served.Load() < 2 {
		t.Fatalf("lean loop served %d, handed off %d; want 2 or more and 1", p.lean.Load().served.Load(), p.lean.Load().handedOff.Load())
	}
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestLeanServerNoticesAClientGoingAway: a request waiting for a slow pod is cancelled when its
// client closes the connection, so the pod's connection is closed too, as with net/http.
func TestLeanServerNoticesAClientGoingAway(t *testing.T) {
	arrived := make(chan struct{}, 1)
	var cancelled atomic.Bool
	release := make(chan struct{})
	defer close(release)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled.Store(true)
		case <-release:
		}
	}))
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, addr := startProxy(t, Options{}, host, port, func(p *Proxy) { p.watchAfter = 20 * time.Millisecond })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /ws/jane/demo/slow HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(waitBound):
		t.Fatal("the request did not reach the pod")
	}
	_ = c.Close()
	deadline := time.Now().Add(waitBound)
	for !cancelled.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("the pod's request was not cancelled within %v of the client going away", waitBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.lean.Load().handedOff.Load() != 0 {
		t.Fatal("the request was handed to net/http: this test is about the lean loop")
	}
}

// TestLeanServerTimeouts: a client that sends its headers too slowly, or keeps a connection
// idle, loses the connection (ReadHeaderTimeout and IdleTimeout of the proxy's server).
func TestLeanServerTimeouts(t *testing.T) {
	pod := &recordingPod{}
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.transport.CloseIdleConnections()
	wp := wsPod("lean", time.Minute, host, true, map[string]string{workspace.AnnWorkspacePort: port})
	wp.CreationTimestamp = metav1.Now()
	p.PodChanged(wp)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that the health check's headers, written right after the dial, arrive in time
	// on a loaded machine; the closes are waited for up to waitBound.
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second}
	s := newLeanServer(p, srv, ln.Addr())
	go func() { _ = srv.Serve(s.handoff) }()
	served := make(chan error, 1)
	go func() { served <- s.serve(context.Background(), ln) }()
	defer func() {
		s.shutdown.Store(true)
		_ = ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		_ = s.close(ctx)
		_ = srv.Shutdown(ctx)
		<-served
	}()

	closedWithin := func(c net.Conn) error {
		_ = c.SetReadDeadline(time.Now().Add(waitBound))
		b, err := io.ReadAll(c)
		if err != nil {
			return fmt.Errorf("the connection was not closed within %v (read %q): %w", waitBound, b, err)
		}
		return nil
	}
	t.Run("headers sent too slowly", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /ws/jane/demo/ HTTP/1.1\r\nHost: proxy.example\r\n"); err != nil {
			t.Fatal(err)
		}
		if err := closedWithin(c); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an idle connection", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(waitBound)) // the health check's answer too
		if _, err := io.WriteString(c, "GET /_nogoo9/healthz HTTP/1.1\r\nHost: proxy.example\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("health check: %d", res.StatusCode)
		}
		_ = c.SetReadDeadline(time.Now().Add(waitBound))
		if b, err := io.ReadAll(br); err != nil {
			t.Fatalf("the idle connection was not closed within %v (read %q): %v", waitBound, b, err)
		}
	})
	if s.handedOff.Load() != 0 {
		t.Fatal("a connection was handed to net/http: this test is about the lean loop")
	}
}

// TestALineBreakCannotHideAnUpgradeFromTheLeanLoop: http.ReadRequest ends a header line at a bare
// LF, the lean loop's own look at the lines (leanEligible) cut them at CRLF only, so
// "X: y\nUpgrade: websocket" passed it as one line and the loop served an upgrade it cannot
// hijack for: the client got a 502, the pod connection stayed open until the client left, and
// its entry stayed in the registry. Such a request now goes to net/http, on a connection the
// loop has served a plain request on first (pipelined), and is served like any other: the
// switch works, and nothing is left open once the client is gone.
func TestALineBreakCannotHideAnUpgradeFromTheLeanLoop(t *testing.T) {
	var upgraded atomic.Int64
	host, port, _ := net.SplitHostPort(podEvery(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Header.Get("Upgrade") == "" {
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain"); err != nil {
					return
				}
				continue
			}
			upgraded.Add(1)
			defer upgraded.Add(-1)
			if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"); err != nil {
				return
			}
			_, _ = io.Copy(c, br) // echo until the proxy closes the connection
			return
		}
	}))
	p, addr := startProxy(t, Options{}, host, port)
	c := dialProxy(t, addr)
	if _, err := io.WriteString(c, leanGet("plain")+
		"GET /ws/jane/demo/echo HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\nX: y\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for _, want := range []string{"200 plain", "101 "} {
		if got, err := readAnswer(c, br); err != nil || got != want {
			t.Fatalf("answer %q, %v; want %q", got, err, want)
		}
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo %q, %v", got, err)
	}
	if s := p.lean.Load(); s.served.Load() != 1 || s.handedOff.Load() != 1 {
		t.Fatalf("the lean loop served %d requests and handed off %d connections; want 1 and 1", s.served.Load(), s.handedOff.Load())
	}
	if n := p.OpenWebSockets("uid-lean"); n != 1 {
		t.Fatalf("%d WebSockets tracked, want 1", n)
	}
	_ = c.Close()
	waitFor(t, "no WebSocket tracked and no upgraded pod connection open", func() bool {
		return p.OpenWebSockets("uid-lean") == 0 && upgraded.Load() == 0
	})
}

// TestTheLeanLoopLeavesToNetHTTPWhatItCannotServe: a request the lean loop cannot serve (an
// upgrade, which needs a Hijacker; Expect; a body) goes to net/http whichever way its lines are
// spelled: leanEligible refuses a bare LF, and validForServer looks again at what
// http.ReadRequest made of the lines, so that no other difference between the two readings can
// bring such a request to the loop.
func TestTheLeanLoopLeavesToNetHTTPWhatItCannotServe(t *testing.T) {
	const start = "GET / HTTP/1.1\r\nHost: proxy.example\r\n"
	for _, tc := range []struct {
		name, head string
		lean       bool // the lean loop serves it
	}{
		{"a plain request", start + "X: y\r\n\r\n", true},
		{"an upgrade behind a bare LF", start + "X: y\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", false},
		{"Expect behind a bare LF", start + "X: y\nExpect: 100-continue\r\n\r\n", false},
		{"Transfer-Encoding behind a bare LF", start + "X: y\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"a second Host behind a bare LF", start + "X: y\nHost: other.example\r\n\r\n", false},
		{"a bare LF after the request line", "GET / HTTP/1.1\nHost: proxy.example\r\n\r\n", false},
		{"a bare LF as the first byte of a line", start + "\nX: y\r\n\r\n", false},
		{"a bare LF ending the head", start + "X: y\r\n\n", false},
		{"an LF at the end of a value, before the CRLF", start + "X: y\n\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := []byte(tc.head)
			if got := leanEligible(head); got != tc.lean {
				t.Errorf("leanEligible = %v, want %v", got, tc.lean)
			}
		})
	}
	// What validForServer refuses in the parsed request, whatever leanEligible said.
	for _, tc := range []struct{ name, fields string }{
		{"Upgrade", "Upgrade: websocket\r\nConnection: Upgrade\r\n"},
		{"Expect", "Expect: 100-continue\r\n"},
		{"Transfer-Encoding", "Transfer-Encoding: chunked\r\n"},
	} {
		t.Run("validForServer refuses "+tc.name, func(t *testing.T) {
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(start + tc.fields + "\r\n0\r\n\r\n")))
			if err != nil {
				t.Fatal(err)
			}
			if validForServer(req) {
				t.Errorf("validForServer takes a request with %s", tc.name)
			}
		})
	}
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(start + "X: y\r\n\r\n")))
	if err != nil || !validForServer(req) {
		t.Fatalf("validForServer refuses a plain request (%v)", err)
	}
}

// TestAStatusBelow100IsABadGateway: http.ReadResponse reads any three digits as a status, and a
// pod's "099" was taken for an informational answer (or, through net/http's Transport, for a
// final one) and handed to WriteHeader, which panics outside 100-999: the client's connection was
// reset instead of answered. On both servers, the fast path and ReverseProxy, and either
// transport, the client now gets a 502 that names the status.
func TestAStatusBelow100IsABadGateway(t *testing.T) {
	for _, pod := range []struct {
		answer string
		code   int
	}{
		{"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 99},
		{"HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\nok", 0},
	} {
		host, port, _ := answeringPod(t, pod.answer)
		for _, tc := range []struct {
			name string
			opts Options
		}{
			{"lean loop, fast path", Options{}},
			{"net/http's server, fast path", Options{StandardServer: true}},
			{"lean loop, ReverseProxy", Options{NoFastPath: true}},
			{"net/http's server, ReverseProxy", Options{StandardServer: true, NoFastPath: true}},
			{"lean loop, net/http's Transport", Options{StandardTransport: true}},
			{"net/http's server, net/http's Transport", Options{StandardServer: true, StandardTransport: true}},
		} {
			t.Run(fmt.Sprintf("%03d/%s", pod.code, tc.name), func(t *testing.T) {
				_, addr := startProxy(t, tc.opts, host, port)
				c := dialProxy(t, addr)
				if _, err := io.WriteString(c, leanGet("x")); err != nil {
					t.Fatal(err)
				}
				got, err := readWholeAnswer(bufio.NewReader(c))
				want := fmt.Sprintf("502 502 Bad Gateway: the workspace pod answered with the invalid status %d\n", pod.code)
				if err != nil || got != want {
					t.Fatalf("answer %q, %v; want %q", got, err, want)
				}
			})
		}
	}
}

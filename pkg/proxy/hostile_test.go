package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A hostile workspace process answers the proxy with something meant to exhaust it. Each test
// checks the bound that stops it: the bytes the proxy takes from the pod (and the heap) stay
// bounded, the attacker's client gets a 502 naming the bound, and another user's workspace is
// served all along.

// maxHostileBytes is where a hostile backend gives up (so the test of an unbounded proxy ends
// instead of eating the machine); a bounded proxy stops reading long before.
const maxHostileBytes = 64 << 20

// hostileBackend listens on loopback; for every connection it reads one request and calls
// answer, which writes until it returns, the proxy closes the connection, or the test stops it.
type hostileBackend struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	maxSent  atomic.Int64 // the most bytes written on one connection
	stopping atomic.Bool
}

func startHostile(t *testing.T, answer func(w io.Writer) error) *hostileBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &hostileBackend{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			go b.serve(c, answer)
		}
	}()
	t.Cleanup(b.stop)
	return b
}

func (b *hostileBackend) serve(c net.Conn, answer func(w io.Writer) error) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		cw := &countingWriter{w: c, b: b}
		if err := answer(cw); err != nil {
			return
		}
	}
}

// stop closes the listener and every connection (the proxy then sees EOF).
func (b *hostileBackend) stop() {
	b.stopping.Store(true)
	_ = b.ln.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
}

func (b *hostileBackend) addr() (string, string) {
	host, port, _ := net.SplitHostPort(b.ln.Addr().String())
	return host, port
}

type countingWriter struct {
	w    io.Writer
	b    *hostileBackend
	sent int64
}

var errHostileDone = fmt.Errorf("hostile backend: stopped")

func (cw *countingWriter) Write(p []byte) (int, error) {
	if cw.b.stopping.Load() || cw.sent >= maxHostileBytes {
		return 0, errHostileDone
	}
	n, err := cw.w.Write(p)
	cw.sent += int64(n)
	for {
		old := cw.b.maxSent.Load()
		if cw.sent <= old || cw.b.maxSent.CompareAndSwap(old, cw.sent) {
			break
		}
	}
	return n, err
}

// endless writes first, then chunk until the writer fails.
func endless(first, chunk string) func(w io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, first); err != nil {
			return err
		}
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return err
			}
		}
	}
}

// trickle writes first, then one header byte every 20 ms.
func trickle(first string) func(w io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, first); err != nil {
			return err
		}
		for {
			time.Sleep(20 * time.Millisecond) // the attack itself: a slow pod, not a wait in the test
			if _, err := io.WriteString(w, "a"); err != nil {
				return err
			}
		}
	}
}

// podAt is a ready workspace pod of id owned by owner, served on host:port, its preview public
// when public is set.
func podAt(owner, id, host, port string, public bool) *corev1.Pod {
	ann := map[string]string{
		workspace.AnnOwner:         owner,
		workspace.AnnWorkspacePath: "/ws/" + owner + "/" + id + "/",
		workspace.AnnWorkspacePort: port,
		workspace.AnnPreviewPath:   "/preview/" + owner + "/" + id + "/",
		workspace.AnnPreviewPort:   port,
	}
	if public {
		ann[workspace.AnnPublicPreview] = "true"
	}
	pod := wsPod(id+"-pod", time.Minute, host, true, ann)
	pod.UID = types.UID("uid-" + owner + "-" + id)
	pod.Labels[workspace.LabelWorkspaceID] = id
	pod.CreationTimestamp = metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	return pod
}

// heapPeak samples the heap until stop is closed and returns the largest growth over the
// start; over limit it calls onOver once (which ends the attack).
func heapPeak(stop <-chan struct{}, limit uint64, onOver func()) <-chan uint64 {
	out := make(chan uint64, 1)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	go func() {
		var peak uint64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		over := false
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak {
				peak = ms.HeapAlloc - base
			}
			if peak > limit && !over {
				over = true
				onOver()
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

type hostileCase struct {
	name   string
	answer func(w io.Writer) error
	// upgrade sends the attack as a WebSocket handshake (the standard Transport's path).
	upgrade bool
	// headerTimeout is the proxy's response header timeout: long, so that only the bound under
	// test can end the attack however slow the machine, unless that bound is the timeout.
	headerTimeout time.Duration
	want          string
}

func TestAHostileWorkspaceCannotExhaustTheProxy(t *testing.T) {
	cases := []hostileCase{
		{name: "one endless header line", answer: endless("HTTP/1.1 200 OK\r\nX: ", strings.Repeat("a", 32<<10)),
			want: "502 Bad Gateway: the workspace pod sent more than 1048576 bytes of response headers"},
		{name: "endless header lines", answer: endless("HTTP/1.1 200 OK\r\n", strings.Repeat("X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 512)),
			want: "502 Bad Gateway: the workspace pod sent more than 1048576 bytes of response headers"},
		{name: "endless informational answers", answer: endless("", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 64)),
			want: "502 Bad Gateway: the workspace pod sent more than 10 informational (1xx) responses"},
		{name: "headers that never end, sent slowly", answer: trickle("HTTP/1.1 200 OK\r\nX: "), headerTimeout: 2 * time.Second,
			want: "502 Bad Gateway: the workspace pod sent no response headers within 2s"},
		{name: "a Set-Cookie flood", answer: endless("HTTP/1.1 200 OK\r\n"+strings.Repeat("Set-Cookie: a=b\r\n", 200)+"Content-Length: 2\r\n\r\nok", ""),
			want: "502 Bad Gateway: the workspace pod sent more than 32 Set-Cookie headers in one response"},
		{name: "one endless header line on a WebSocket handshake", upgrade: true, answer: endless("HTTP/1.1 101 Switching Protocols\r\nX: ", strings.Repeat("a", 32<<10)),
			want: "502 Bad Gateway: the workspace pod sent more than 1048576 bytes of response headers"},
		{name: "endless informational answers on a WebSocket handshake", upgrade: true, answer: endless("", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 64)),
			want: "502 Bad Gateway: the workspace pod sent more than 10 informational (1xx) responses"},
	}
	for _, tc := range cases {
		if tc.headerTimeout == 0 {
			tc.headerTimeout = 10 * time.Minute
		}
		t.Run(tc.name, func(t *testing.T) { runHostile(t, tc) })
	}
}

func runHostile(t *testing.T, tc hostileCase) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "good") }))
	defer good.Close()
	bad := startHostile(t, tc.answer)
	p, err := New(verifierOnly{}, Options{BindAddress: ":0", ResponseHeaderTimeout: tc.headerTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer p.transport.CloseIdleConnections()
	gh, gp, _ := net.SplitHostPort(strings.TrimPrefix(good.URL, "http://"))
	p.PodChanged(podAt("jane", "good", gh, gp, false))
	bh, bp := bad.addr()
	p.PodChanged(podAt("mallory", "evil", bh, bp, true))
	front := httptest.NewServer(p)
	defer front.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	// Every request of the test waits at most until ctx ends (the attack takes seconds): a
	// request that gets no answer (an answer the proxy should refuse forwarded, the pod then
	// deaf to the next request) fails the test within 30 s, not at go test's timeout.
	const bound = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	goodGet := func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/ws/jane/good/", nil)
		req.Header.Set("Authorization", "Bearer good")
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || string(b) != "good" {
			return fmt.Errorf("GET jane's workspace during the attack: %d %q", res.StatusCode, b)
		}
		return nil
	}
	if err := goodGet(); err != nil {
		t.Fatal(err)
	}

	// jane's client runs through the whole attack.
	var (
		attackDone          atomic.Bool
		goodAfter, goodFail atomic.Int64
		goodErr             atomic.Value
		wg                  sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Bounded by time, not by a count of requests: on a fast machine a count
		// ran out before the attack ended, and nothing was tried after it.
		for ctx.Err() == nil {
			done := attackDone.Load()
			if err := goodGet(); err != nil {
				goodFail.Add(1)
				goodErr.Store(err.Error())
			} else if done {
				goodAfter.Add(1)
			}
			if done {
				return
			}
		}
	}()

	stopHeap := make(chan struct{})
	peak := heapPeak(stopHeap, 256<<20, bad.stop)
	const attackers, rounds = 4, 3
	answers := make(chan string, attackers*rounds)
	var aw sync.WaitGroup
	for a := 0; a < attackers; a++ {
		aw.Add(1)
		go func() {
			defer aw.Done()
			for i := 0; i < rounds; i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/preview/mallory/evil/", nil)
				if tc.upgrade {
					req.Header.Set("Connection", "Upgrade")
					req.Header.Set("Upgrade", "websocket")
				}
				res, err := client.Do(req)
				if err != nil {
					answers <- "error: " + err.Error()
					continue
				}
				b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
				_ = res.Body.Close()
				answers <- strings.TrimSpace(fmt.Sprintf("%d %s", res.StatusCode, b))
			}
		}()
	}
	aw.Wait()
	if ctx.Err() != nil {
		t.Errorf("the attack did not end within %v: a request got no answer (the attackers' answers below)", bound)
	}
	attackDone.Store(true)
	close(stopHeap)
	grown := <-peak
	wg.Wait()
	close(answers)

	for a := range answers {
		// a is the status code, then the body, which starts with the status line's text.
		if !strings.HasPrefix(a, "502 ") || !strings.Contains(a, tc.want) {
			t.Errorf("the attacker got %q, want %q", a, tc.want)
		}
	}
	t.Logf("heap growth peak %d KiB, most bytes the pod sent on one connection %d KiB", grown>>10, bad.maxSent.Load()>>10)
	// The proxy stops reading at the 1 MiB bound; loopback socket buffers hold a few MiB more.
	if sent := bad.maxSent.Load(); sent >= 32<<20 {
		t.Errorf("the proxy took %d MiB from one hostile connection, want it to stop near the 1 MiB bound", sent>>20)
	}
	if grown > 256<<20 {
		t.Errorf("the heap grew by %d MiB during the attack, want it bounded", grown>>20)
	}
	if n := goodFail.Load(); n > 0 {
		t.Errorf("jane's workspace failed %d times during the attack, last: %v", n, goodErr.Load())
	}
	if goodAfter.Load() == 0 {
		t.Error("jane's workspace was not served after the attack")
	}
}

func TestTheProxyCapsConnectionsPerClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(verifierOnly{}, Options{Listener: ln, MaxConnsPerClient: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	defer func() { cancel(); waitStopped(t, done) }()
	healthz := func(c net.Conn) string {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, "GET /_nogoo9/healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err.Error()
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err.Error()
		}
		b, _ := io.ReadAll(res.Body)
		return fmt.Sprintf("%d %s", res.StatusCode, b)
	}
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got := healthz(c)
		if i < 2 && !strings.HasPrefix(got, "200") {
			t.Fatalf("connection %d: %q, want 200", i, got)
		}
		if i == 2 && (!strings.HasPrefix(got, "429") || !strings.Contains(got, "more than 2 connections")) {
			t.Fatalf("connection over the cap: %q, want 429", got)
		}
	}
}

// onBothPaths runs check against a proxy routing jane's workspace demo to pod, once on each of its
// paths (NoFastPath=true: ReverseProxy).
func onBothPaths(t *testing.T, pod http.HandlerFunc, check func(t *testing.T, p *Proxy)) {
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	for _, noFast := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoFastPath=%v", noFast), func(t *testing.T) {
			p, err := New(verifierOnly{}, Options{BindAddress: ":0", NoFastPath: noFast})
			if err != nil {
				t.Fatal(err)
			}
			defer p.transport.CloseIdleConnections()
			p.PodChanged(podAt("jane", "demo", host, port, false))
			check(t, p)
		})
	}
}

func TestAWorkspaceCannotSetNogoo9Cookies(t *testing.T) {
	onBothPaths(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Set-Cookie", "sid=1; Path=/")
		h.Add("Set-Cookie", "__Host-nogoo9_token=attacker; Path=/; Secure; HttpOnly")
		h.Add("Set-Cookie", "NOGOO9_TOKEN=attacker; Path=/ws/jane/demo/")
		h.Add("Set-Cookie", "=__Host-nogoo9_token=attacker")
		_, _ = io.WriteString(w, "ok")
	}, func(t *testing.T, p *Proxy) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "http://proxy.example/ws/jane/demo/", nil)
		r.Header.Set("Authorization", "Bearer good")
		p.ServeHTTP(w, r)
		if got := w.Header()["Set-Cookie"]; w.Code != http.StatusOK || len(got) != 1 || got[0] != "sid=1; Path=/" {
			t.Fatalf("answer %d with Set-Cookie %q, want 200 with only the workspace's own cookie", w.Code, got)
		}
	})
}

// TestAWorkspaceCannotReachPastItsPaths: a workspace's answer never carries a field whose effect
// reaches past the workspace's own paths. With Service-Worker-Allowed: / a workspace page
// registers a service worker for the whole proxy origin, /_nogoo9/login (where a person pastes an
// API token) included, and it stays; Clear-Site-Data "cookies" deletes every cookie of the site,
// the proxy's and the UI's sessions with them. Both paths (NoFastPath: ReverseProxy) and the
// informational answers before a final one, to a small GET (the proxy's own transport) and to a
// 100 KiB POST (net/http's Transport, which hands informational answers on through a trace).
func TestAWorkspaceCannotReachPastItsPaths(t *testing.T) {
	onBothPaths(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Service-Worker-Allowed", "/")
		h.Set("Clear-Site-Data", `"cookies", "storage"`)
		h.Set("X-Kept", "1")
		w.WriteHeader(http.StatusEarlyHints)
		_, _ = io.WriteString(w, "ok")
	}, func(t *testing.T, p *Proxy) {
		srv := httptest.NewServer(p)
		defer srv.Close()
		for _, tc := range []struct {
			name string
			body []byte
		}{
			{name: "GET"},
			{name: "100 KiB POST", body: make([]byte, 100<<10)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var early []http.Header
				trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					early = append(early, http.Header(h).Clone())
					return nil
				}}
				method := http.MethodGet
				var body io.Reader
				if tc.body != nil {
					method, body = http.MethodPost, bytes.NewReader(tc.body)
				}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, srv.URL+"/ws/jane/demo/sw.js", body)
				req.Header.Set("Authorization", "Bearer good")
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				if res.StatusCode != http.StatusOK || res.Header.Get("X-Kept") != "1" {
					t.Fatalf("answer %d with X-Kept %q, want 200 with the workspace's own field", res.StatusCode, res.Header.Get("X-Kept"))
				}
				for i, h := range append(early, res.Header) {
					for _, k := range []string{"Service-Worker-Allowed", "Clear-Site-Data"} {
						if v, ok := h[k]; ok {
							t.Errorf("answer %d of %d carries %s: %q", i+1, len(early)+1, k, v)
						}
					}
				}
				if len(early) != 1 || early[0].Get("X-Kept") != "1" {
					t.Errorf("informational answers passed on: %v, want the pod's one 103 with its own field X-Kept", early)
				}
			})
		}
	})
}

// TestAWorkspaceCannotSetCookiesInTrailers: the fields a workspace's answer never carries (a
// nogoo9 cookie, Service-Worker-Allowed, Clear-Site-Data) never pass in its trailers either,
// announced or not, and a Set-Cookie in a trailer would also escape the Set-Cookie cap (a client
// or an intermediary that merges trailers into the header section applies them). Trailers carry
// no Set-Cookie at all through the proxy; the workspace's other trailers pass. Both paths, each
// with a small GET (the proxy's own transport) and a 100 KiB POST (net/http's Transport).
func TestAWorkspaceCannotSetCookiesInTrailers(t *testing.T) {
	dropped := []string{"Set-Cookie", "Service-Worker-Allowed", "Clear-Site-Data"}
	onBothPaths(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Trailer", "Set-Cookie, Service-Worker-Allowed, Clear-Site-Data, X-Checksum")
		h.Set("Set-Cookie", "sid=1; Path=/")
		_, _ = io.WriteString(w, "ok")
		w.(http.Flusher).Flush() // the header section is gone: what follows is trailers
		h.Del("Set-Cookie")
		h.Add("Set-Cookie", "__Host-nogoo9_token=attacker; Path=/; Secure; HttpOnly")
		h.Add("Set-Cookie", "sid=2; Path=/")
		h.Set("Service-Worker-Allowed", "/")
		h.Set("Clear-Site-Data", `"cookies"`)
		h.Set("X-Checksum", "abc")
		// Unannounced ones too.
		h.Set(http.TrailerPrefix+"Set-Cookie", "NOGOO9_TOKEN=late; Path=/")
		h.Set(http.TrailerPrefix+"Clear-Site-Data", `"storage"`)
	}, func(t *testing.T, p *Proxy) {
		srv := httptest.NewServer(p)
		defer srv.Close()
		for _, tc := range []struct {
			name string
			body []byte
		}{
			{name: "GET"},
			{name: "100 KiB POST", body: make([]byte, 100<<10)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				method := http.MethodGet
				var body io.Reader
				if tc.body != nil {
					method, body = http.MethodPost, bytes.NewReader(tc.body)
				}
				req, _ := http.NewRequest(method, srv.URL+"/ws/jane/demo/sum", body)
				req.Header.Set("Authorization", "Bearer good")
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if err != nil || res.StatusCode != http.StatusOK || string(b) != "ok" {
					t.Fatalf("answer %d %q (%v), want 200 ok", res.StatusCode, b, err)
				}
				if got := res.Header["Set-Cookie"]; len(got) != 1 || got[0] != "sid=1; Path=/" {
					t.Errorf("header Set-Cookie %q, want the workspace's own header cookie", got)
				}
				for _, k := range dropped {
					if v, ok := res.Trailer[k]; ok {
						t.Errorf("trailer %s passed (announced or sent): %q; trailers %v", k, v, res.Trailer)
					}
				}
				if got := res.Trailer.Get("X-Checksum"); got != "abc" {
					t.Errorf("trailer X-Checksum %q, want the workspace's abc; trailers %v", got, res.Trailer)
				}
			})
		}
	})
}

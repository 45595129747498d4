package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// dumpHeader prints h sorted, one "Key: value" per line, without the keys in skip.
func dumpHeader(h http.Header, skip ...string) string {
	var lines []string
	for k, vv := range h {
		if contains(skip, k) {
			continue
		}
		for _, v := range vv {
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// recordingPod is a workspace pod's server that remembers the last request it got, as the pod
// sees it, and answers according to the path's last segment.
type recordingPod struct {
	mu   sync.Mutex
	last string
}

func (rp *recordingPod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rp.mu.Lock()
	rp.last = fmt.Sprintf("%s %s %s host=%s len=%d body=%q\n%s", r.Method, r.RequestURI, r.Proto, r.Host, r.ContentLength, body, dumpHeader(r.Header))
	rp.mu.Unlock()
	h := w.Header()
	switch r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:] {
	case "hop":
		h.Set("Connection", "X-Pod-Private, keep-alive")
		h.Set("X-Pod-Private", "secret")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Add("Set-Cookie", "a=1")
		h.Add("Set-Cookie", "b=2")
		h.Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
	case "chunked":
		_, _ = io.WriteString(w, "part1 ")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "part2")
	case "sse":
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "data: two\n\n")
	case "trailers":
		h.Set("Trailer", "X-Checksum")
		_, _ = io.WriteString(w, "body")
		h.Set("X-Checksum", "abc")
		h.Set(http.TrailerPrefix+"X-Late", "unannounced")
	case "status":
		h.Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout")
	case "empty":
		w.WriteHeader(http.StatusNoContent)
	case "cookieflood":
		// More Set-Cookie headers than the proxy passes on: the client gets a 502.
		h.Set("X-Pod-Header", "must not reach the client")
		for i := 0; i <= DefaultMaxSetCookies; i++ {
			h.Add("Set-Cookie", fmt.Sprintf("c%d=1", i))
		}
		h.Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	default:
		_, _ = io.WriteString(w, strings.Repeat("x", 1024))
	}
}

func (rp *recordingPod) lastRequest() string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.last
}

// TestFastPathSendsWhatReverseProxySends sends each request through the proxy twice, on the fast
// path and through httputil.ReverseProxy, and compares what the pod receives and what the client
// receives.
func TestFastPathSendsWhatReverseProxySends(t *testing.T) {
	pod := &recordingPod{}
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))

	tests := []struct {
		name   string
		strip  bool
		method string
		path   string
		body   string
		header map[string][]string
	}{
		{name: "a plain GET with browser headers", strip: true, method: "GET", path: "/ws/jane/demo/index.html?a=1&b=2",
			header: map[string][]string{"Accept": {"text/html"}, "User-Agent": {"Mozilla/5.0"}, "Accept-Encoding": {"gzip, br"}}},
		{name: "credentials are removed, the workspace's cookies kept", strip: true, method: "GET", path: "/ws/jane/demo/",
			header: map[string][]string{"Cookie": {"theme=dark; " + auth.CookieName + "=bench; lang=en", "x=y"}}},
		{name: "a Cookie header holding only the nogoo9 cookie is dropped", strip: true, method: "GET", path: "/ws/jane/demo/",
			header: map[string][]string{"Cookie": {auth.CookieName + "=bench"}}},
		{name: "hop-by-hop headers and the headers Connection names are removed", strip: true, method: "GET", path: "/ws/jane/demo/hop",
			header: map[string][]string{
				"Connection": {"X-Client-Private, keep-alive", " x-other "}, "X-Client-Private": {"1"}, "X-Other": {"2"},
				"Keep-Alive": {"timeout=5"}, "Proxy-Authorization": {"Basic Zm9vOmJhcg=="}, "Proxy-Connection": {"keep-alive"},
				"X-Kept": {"yes"},
			}},
		{name: "the client's forwarding headers are replaced", strip: true, method: "GET", path: "/ws/jane/demo/",
			header: map[string][]string{"X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Host": {"evil"}, "X-Forwarded-Proto": {"https"},
				"Forwarded": {"for=6.6.6.6"}, "X-Forwarded-Prefix": {"/evil"}}},
		{name: "without stripping the client's X-Forwarded-Prefix passes and the full path is sent", strip: false, method: "GET", path: "/ws/jane/demo/a/b",
			header: map[string][]string{"X-Forwarded-Prefix": {"/mine"}}},
		{name: "a query with a semicolon is re-encoded", strip: true, method: "GET", path: "/ws/jane/demo/q?a=1;b=2&c=%zz"},
		{name: "an encoded path keeps its escapes", strip: true, method: "GET", path: "/ws/jane/demo/a%20b/c%3Fd"},
		{name: "a POST with a body", strip: true, method: "POST", path: "/ws/jane/demo/api", body: `{"x":1}`,
			header: map[string][]string{"Content-Type": {"application/json"}}},
		{name: "an empty POST", strip: true, method: "POST", path: "/ws/jane/demo/api"},
		{name: "an empty PUT with Content-Length: 0", strip: true, method: "PUT", path: "/ws/jane/demo/api",
			header: map[string][]string{"Content-Length": {"0"}}},
		{name: "a HEAD request", strip: true, method: "HEAD", path: "/ws/jane/demo/"},
		{name: "a chunked response", strip: true, method: "GET", path: "/ws/jane/demo/chunked"},
		{name: "an event stream", strip: true, method: "GET", path: "/ws/jane/demo/sse"},
		{name: "response trailers, announced and not", strip: true, method: "GET", path: "/ws/jane/demo/trailers"},
		{name: "a status with a body", strip: true, method: "DELETE", path: "/ws/jane/demo/status"},
		{name: "no content", strip: true, method: "OPTIONS", path: "/ws/jane/demo/empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			strip := "true"
			if !tc.strip {
				strip = "false"
			}
			wp := wsPod("fwd", time.Minute, host, true, map[string]string{workspace.AnnWorkspacePort: port, workspace.AnnStripPrefix: strip})
			wp.CreationTimestamp = metav1.Now()
			p.PodChanged(wp)
			front := httptest.NewServer(p)
			defer front.Close()
			defer p.transport.CloseIdleConnections()
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 30 * time.Second}
			defer client.CloseIdleConnections()

			var sent, got [2]string
			for i, fast := range []bool{true, false} {
				p.fast = fast
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				req, err := http.NewRequest(tc.method, front.URL+tc.path, body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer bench")
				if tc.header["User-Agent"] == nil {
					req.Header.Set("User-Agent", "")
				}
				for k, vv := range tc.header {
					req.Header[k] = vv
				}
				if !fastEligible(toServerSide(req)) {
					t.Fatalf("the request is not eligible for the fast path: the comparison would be empty")
				}
				res, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				sent[i] = pod.lastRequest()
				got[i] = fmt.Sprintf("%d %q\n%s\ntrailer:\n%s", res.StatusCode, b, dumpHeader(res.Header, "Date"), dumpHeader(res.Trailer))
			}
			if sent[0] != sent[1] {
				t.Errorf("the pod got\n%s\n\non the fast path, and from ReverseProxy\n%s", sent[0], sent[1])
			}
			if got[0] != got[1] {
				t.Errorf("the client got\n%s\n\non the fast path, and from ReverseProxy\n%s", got[0], got[1])
			}
			if strings.Contains(sent[0], "bench") || strings.Contains(sent[0], "Authorization") {
				t.Errorf("the caller's credentials reached the pod:\n%s", sent[0])
			}
		})
	}
}

// toServerSide is the fields of a client request fastEligible looks at, as the server sees them.
func toServerSide(r *http.Request) *http.Request {
	s := &http.Request{ProtoMajor: 1, Host: r.URL.Host, Header: r.Header, Body: http.NoBody, ContentLength: r.ContentLength}
	if r.ContentLength > 0 {
		s.Body = r.Body
	}
	return s
}

func TestFastEligible(t *testing.T) {
	body := io.NopCloser(strings.NewReader("x"))
	tests := []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"a GET without a body", &http.Request{ProtoMajor: 1, Host: "h", Header: http.Header{}, Body: http.NoBody}, true},
		{"a POST of known length", &http.Request{ProtoMajor: 1, Host: "h", Header: http.Header{}, Body: body, ContentLength: 1}, true},
		{"a chunked upload", &http.Request{ProtoMajor: 1, Host: "h", Header: http.Header{}, Body: body, ContentLength: -1}, false},
		{"an upload over 64 KiB", &http.Request{ProtoMajor: 1, Host: "h", Header: http.Header{}, Body: body, ContentLength: maxSyncBody + 1}, false},
		{"a WebSocket upgrade", &http.Request{ProtoMajor: 1, Host: "h", Header: http.Header{"Upgrade": {"websocket"}}, Body: http.NoBody}, false},
		{"Expect: 100-continue", &http.Request{ProtoMajor: 1, Host: "h", Header: http.Header{"Expect": {"100-continue"}}, Body: body, ContentLength: 1}, false},
		{"TE: trailers", &http.Request{ProtoMajor: 1, Host: "h", Header: http.Header{"Te": {"trailers"}}, Body: http.NoBody}, false},
		{"no Host (HTTP/1.0)", &http.Request{ProtoMajor: 1, Header: http.Header{}, Body: http.NoBody}, false},
		{"HTTP/2", &http.Request{ProtoMajor: 2, Host: "h", Header: http.Header{}, Body: http.NoBody}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fastEligible(tc.req); got != tc.want {
				t.Fatalf("fastEligible = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFastPathForwardsEarlyHints: a 103 answer reaches the client before the final response, as
// ReverseProxy forwards it.
func TestFastPathForwardsEarlyHints(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "page")
	}))
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	wp := wsPod("hints", time.Minute, host, true, map[string]string{workspace.AnnWorkspacePort: port})
	wp.CreationTimestamp = metav1.Now()
	p.PodChanged(wp)
	front := httptest.NewServer(p)
	defer front.Close()
	defer p.transport.CloseIdleConnections()

	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, front.URL+"/ws/jane/demo/", nil)
	req.Header.Set("Authorization", "Bearer bench")
	if !fastEligible(toServerSide(req)) {
		t.Fatal("the request is not eligible for the fast path")
	}
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "page" || res.Header.Get("Link") != "" {
		t.Fatalf("final answer %d %q Link=%q, want 200 \"page\" without Link", res.StatusCode, b, res.Header.Get("Link"))
	}
	if len(hints) != 1 || hints[0] != "103 </app.css>; rel=preload" {
		t.Fatalf("informational answers %q, want one 103 with the Link header", hints)
	}
}

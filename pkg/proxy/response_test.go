package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// checkQuickResponse parses the response in raw (headers, then the body) with
// parseQuickResponse and, when it takes the response, compares the result with what
// http.ReadResponse makes of the same bytes for a GET. It reports whether the quick parser took it.
func checkQuickResponse(t *testing.T, raw string) bool {
	t.Helper()
	end := strings.Index(raw, "\r\n\r\n")
	if end < 0 {
		return false
	}
	got, ok := parseQuickResponse([]byte(raw[:end+4]))
	if !ok {
		return false
	}
	req, _ := http.NewRequest(http.MethodGet, "http://pod.example/", nil)
	want, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), req)
	if err != nil {
		t.Fatalf("parseQuickResponse took %q, which http.ReadResponse refuses: %v", raw, err)
	}
	type view struct {
		Status                  string
		StatusCode              int
		Proto                   string
		ProtoMajor, ProtoMinor  int
		Header, Trailer         http.Header
		ContentLength           int64
		TransferEncoding        []string
		Close, Uncompressed, NB bool
	}
	v := func(r *http.Response) view {
		return view{r.Status, r.StatusCode, r.Proto, r.ProtoMajor, r.ProtoMinor, r.Header, r.Trailer,
			r.ContentLength, r.TransferEncoding, r.Close, r.Uncompressed, r.Body == http.NoBody}
	}
	// The quick parser leaves the body to the transport: NoBody exactly when the length is 0.
	g := v(got)
	g.NB = got.ContentLength == 0
	if w := v(want); !reflect.DeepEqual(g, w) {
		t.Errorf("%q:\nparseQuickResponse %+v\nReadResponse       %+v", raw, g, w)
	}
	// The body the transport reads is the next ContentLength bytes, as ReadResponse's.
	wantBody, _ := io.ReadAll(want.Body)
	rest := raw[end+4:]
	if int64(len(rest)) < got.ContentLength {
		if int64(len(wantBody)) >= got.ContentLength {
			t.Errorf("%q: ReadResponse read a body longer than what was sent", raw)
		}
	} else if gotBody := rest[:got.ContentLength]; gotBody != string(wantBody) {
		t.Errorf("%q: body %q, ReadResponse read %q", raw, gotBody, wantBody)
	}
	return true
}

func TestQuickResponseMatchesReadResponse(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		quick     bool // parseQuickResponse takes it (otherwise http.ReadResponse does)
	}{
		{"a plain answer", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", true},
		{"no reason phrase", "HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", true},
		{"a trailing space after the status", "HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\nx", true},
		{"an odd reason phrase", "HTTP/1.1 299 Fine, thanks\t!\r\nContent-Length: 1\r\n\r\nx", true},
		{"repeated and lower-case headers", "HTTP/1.1 200 OK\r\nset-cookie: a=1\r\nSet-Cookie: b=2\r\nx-custom_key:  v \t\r\ncontent-length:3\r\n\r\nabc", true},
		{"an empty value", "HTTP/1.1 500 Internal Server Error\r\nX-Empty:\r\nContent-Length: 2\r\n\r\nno", true},
		{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nok", true},
		{"Connection: keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", true},
		{"a leading zero in the length", "HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n1234567", true},
		{"a body sent short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true},
		{"no length (chunked or until close)", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello", false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
		{"chunked and a length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
		{"Trailer", "HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 1\r\n\r\nx", false},
		{"Pragma", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx", false},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", false},
		{"a bad length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", false},
		{"an empty length", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\nx", false},
		{"a huge length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nx", false},
		{"204", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", false},
		{"304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", false},
		{"103 Early Hints", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"a status of two digits", "HTTP/1.1 20 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"a status out of range", "HTTP/1.1 600 Odd\r\nContent-Length: 1\r\n\r\nx", false},
		{"a tab after the status", "HTTP/1.1 200\tOK\r\nContent-Length: 1\r\n\r\nx", false},
		{"two spaces before the status", "HTTP/1.1  200 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"a bare LF", "HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\nx", false},
		{"a bare LF between headers", "HTTP/1.1 200 OK\r\nX: a\nContent-Length: 1\r\n\r\nx", false},
		{"line folding", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\nx", false},
		{"a space before the colon", "HTTP/1.1 200 OK\r\nX : a\r\nContent-Length: 1\r\n\r\nx", false},
		{"a control byte in a value", "HTTP/1.1 200 OK\r\nX: a\x01\r\nContent-Length: 1\r\n\r\nx", false},
		{"a line without a colon", "HTTP/1.1 200 OK\r\nX\r\nContent-Length: 1\r\n\r\nx", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkQuickResponse(t, tc.raw); got != tc.quick {
				t.Errorf("parseQuickResponse took it: %v, want %v", got, tc.quick)
			}
		})
	}
}

// TestQuickResponseAllocations: the point of the quick parser. http.ReadResponse makes more
// than a dozen objects for a typical answer; parseQuickResponseInto, with the Response, header
// map and values buffer the client connection keeps (forward.go), one: the header string.
func TestQuickResponseAllocations(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nCache-Control: no-cache\r\nEtag: \"abc\"\r\nContent-Length: 1024\r\n\r\n"
	var (
		res  http.Response
		h    = http.Header{}
		vals []string
	)
	quick := testing.AllocsPerRun(200, func() {
		clear(h)
		vals = vals[:0]
		if !parseQuickResponseInto([]byte(raw), &res, h, &vals) {
			t.Fatal("not taken")
		}
	})
	req, _ := http.NewRequest(http.MethodGet, "http://pod.example/", nil)
	br := bufio.NewReader(nil)
	std := testing.AllocsPerRun(200, func() {
		br.Reset(strings.NewReader(raw))
		if _, err := http.ReadResponse(br, req); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations: parseQuickResponseInto %v, http.ReadResponse %v", quick, std)
	if quick > 1 {
		t.Errorf("parseQuickResponseInto: %v allocations, want at most 1 (http.ReadResponse: %v)", quick, std)
	}
}

// FuzzQuickResponse: whatever the pod sends, parseQuickResponse takes only answers that
// http.ReadResponse reads the same way.
func FuzzQuickResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 404\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 302 Found\r\nLocation: /x\r\nSet-Cookie: a=b\r\ncontent-length: 00\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkQuickResponse(t, raw)
	})
}

// The transport reads a quick-parsed body from the connection itself: the bytes after the
// headers, exactly ContentLength of them, and the connection goes back to the pool.
func TestQuickResponseBodyOnAPooledConnection(t *testing.T) {
	host, port := rawBackend(t)
	tr := newSyncTransport(nil, (&net.Dialer{}).DialContext, responseLimits{}, 4, idleConnTimeout)
	defer tr.CloseIdleConnections()
	addr := host + ":" + port
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequestWithContext(boundedCtx(t), http.MethodGet, "http://"+addr+"/x", nil)
		f := &fastRequest{in: req, w: &discardWriter{h: http.Header{}}, t: &target{addr: addr}}
		res, err := tr.do(req, addr, f)
		if err != nil {
			t.Fatal(err)
		}
		if _, isConnBody := res.Body.(*connBody); !isConnBody || res.Body.(*connBody).body != nil {
			t.Fatalf("answer %d was not read by the quick parser (body %T)", i, res.Body)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil || !bytes.Equal(b, bytes.Repeat([]byte("x"), 1024)) {
			t.Fatalf("answer %d: %d bytes, err %v", i, len(b), err)
		}
		_ = res.Body.Close()
		if n := tr.idleCount(addr); n != 1 {
			t.Fatalf("after answer %d: %d idle connections, want the one back in the pool", i, n)
		}
	}
}

// The response header deadline is left armed after an answer whose body was already read
// (armHeaderDeadline): it must still bound the next request's headers on the same connection,
// and must never cut a body that takes longer than the header timeout.
func TestSyncTransportHeaderDeadlineAcrossRequests(t *testing.T) {
	// Long enough that the answers that must come in time do so on a loaded machine.
	const timeout = 2 * time.Second
	release := make(chan struct{})
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			fmt.Fprint(w, "ok")
		case "/slow-body":
			// Headers at once, then the body over three header timeouts (a slow pod).
			w.Header().Set("Content-Length", "3")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for i := 0; i < 3; i++ {
				select {
				case <-time.After(timeout):
				case <-r.Context().Done():
					return
				}
				fmt.Fprint(w, "x")
				w.(http.Flusher).Flush()
			}
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer close(release)
	tr, _ := newTestTransport(t, timeout)
	fast := func(path string) (string, error) {
		req, _ := http.NewRequestWithContext(boundedCtx(t), http.MethodGet, srv.URL+path, nil)
		f := &fastRequest{in: req, w: &discardWriter{h: http.Header{}}, t: &target{addr: srv.addr()}}
		res, err := tr.do(req, srv.addr(), f)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return string(b), err
	}
	for _, path := range []string{"/small", "/slow-body", "/small", "/small"} {
		if body, err := fast(path); err != nil || body == "" {
			t.Fatalf("%s: %q, %v", path, body, err)
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("%d connections to the pod, want all requests on one", n)
	}
	start := time.Now()
	_, err := fast("/hang")
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "no response headers within") {
		t.Fatalf("error %v, want the response header timeout", err)
	}
	if waited := time.Since(start); waited < timeout*7/8 {
		t.Errorf("the header timeout fired after %s, before 7/8 of %s", waited, timeout)
	}
	// A timeout is not a stale connection: the GET is not sent again on a new one (which would
	// double the wait).
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("%d connections to the pod after the timeout, want 1 (no retry)", n)
	}
}

// TestRawFieldIsRawNames: rawField says, in any case, exactly the class rawNames gives a name,
// and fieldOther for every other name: each name in each case, and every name that differs from
// one of them by a byte (a letter's other case aside), is a prefix or an extension of it, and
// other fields an answer carries.
func TestRawFieldIsRawNames(t *testing.T) {
	var names []string
	for _, e := range rawNames {
		k := e.name
		if valid, canonical := nameForm(k); !valid || !canonical {
			t.Errorf("rawNames holds %q, not a field name in canonical form", k)
		}
		names = append(names, nameVariants(k)...)
	}
	names = append(names, "", "T", "E", "Host", "ETag", "Vary", "Server", "Cache-Control", "Last-Modified", "Content-Disposition",
		"Location", "X-Powered-By", "Content-Security-Policy", "Strict-Transport-Security", "Tee", "Proxy", "Content-")
	for _, s := range names {
		want := fieldOther
		for _, e := range rawNames {
			if len(s) == len(e.name) && strings.EqualFold(s, e.name) {
				want = e.field
			}
		}
		if got := rawField(s); got != want {
			t.Errorf("rawField(%q) = %d, want %d (rawNames)", s, got, want)
		}
	}
}

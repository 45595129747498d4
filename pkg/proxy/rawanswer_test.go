package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The raw answer (parseRawResponse): on the lean loop the pod's header lines go to the client as
// the pod sent them, minus the hop-by-hop ones. These tests send the same answers, hostile ones
// included, through a proxy that copies them raw and one that parses them into a header map
// (Options.NoRawAnswer, the path before the eleventh round), and compare what the client reads.

// scriptedPod is a workspace's server that answers every request with the bytes answer holds,
// then closes the connection (so that whatever an answer leaves unread never reaches the next).
type scriptedPod struct {
	answer atomic.Pointer[string]
	host   string
	port   string
}

func newScriptedPod(tb testing.TB) *scriptedPod {
	tb.Helper()
	p := &scriptedPod{}
	p.host, p.port, _ = net.SplitHostPort(podEvery(tb, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, *p.answer.Load())
	}))
	return p
}

// rawAnswerProxies starts a proxy that copies answers raw and one that parses them into a map,
// both in front of pod.
func rawAnswerProxies(tb testing.TB, pod *scriptedPod) (raw, mapped string) {
	tb.Helper()
	_, raw = startProxy(tb, Options{}, pod.host, pod.port)
	_, mapped = startProxy(tb, Options{NoRawAnswer: true}, pod.host, pod.port)
	return raw, mapped
}

// clientView sends one request for method on a new connection to addr and describes the answer
// as a client reads it: status, framing, body, the headers (keys sorted, each key's values in
// order, values without blanks around them; Date only as present, Content-Length as the
// length), then whether the connection
// serves a next request.
func clientView(tb testing.TB, addr, method string) (string, http.Header) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := method + " /ws/jane/demo/x HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	for err == nil && res.StatusCode >= 100 && res.StatusCode < 200 {
		res, err = http.ReadResponse(br, &http.Request{Method: method})
	}
	if err != nil {
		return "no answer: " + err.Error(), nil
	}
	b, berr := io.ReadAll(res.Body)
	_ = res.Body.Close()
	keys := make([]string, 0, len(res.Header))
	for k := range res.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var hs strings.Builder
	for _, k := range keys {
		if k == "Date" {
			hs.WriteString("Date: (present)\n")
			continue
		}
		if k == "Content-Length" {
			continue // the length above (the raw answer writes its own spelling: 0 for 000)
		}
		for _, v := range res.Header[k] {
			fmt.Fprintf(&hs, "%s: %s\n", k, strings.TrimSpace(v))
		}
	}
	out := fmt.Sprintf("%d %q err=%v length=%d chunked=%v close=%v\n%s", res.StatusCode, b, berr != nil, res.ContentLength,
		len(res.TransferEncoding) > 0, res.Close, hs.String())
	if res.Close || berr != nil {
		return out, res.Header
	}
	if _, err := io.WriteString(c, "GET /_nogoo9/healthz HTTP/1.1\r\nHost: proxy.example\r\n\r\n"); err != nil {
		return out + "next request: " + err.Error(), res.Header
	}
	next, err := http.ReadResponse(br, nil)
	if err != nil {
		return out + "next request: " + err.Error(), res.Header
	}
	nb, _ := io.ReadAll(next.Body)
	_ = next.Body.Close()
	return out + fmt.Sprintf("next request: %d %q", next.StatusCode, nb), res.Header
}

// rawTaken reports whether parseRawResponse takes the head of answer (for a request that is not
// HEAD).
func rawTaken(answer string) bool {
	end := strings.Index(answer, "\r\n\r\n")
	if end < 0 {
		return false
	}
	var res http.Response
	var ra rawAnswer
	return parseRawResponse([]byte(answer[:end+4]), &res, &ra)
}

func TestRawAnswerMatchesTheMapPath(t *testing.T) {
	pod := newScriptedPod(t)
	raw, mapped := rawAnswerProxies(t, pod)
	flood := strings.Repeat("Set-Cookie: a=1\r\n", 33)
	for _, tc := range []struct {
		name, method, answer string
		taken                bool     // parseRawResponse takes it
		absent               []string // headers the client must not get
		present              []string // headers the client must get
	}{
		{"a plain answer", "GET", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", true, nil, []string{"Content-Type"}},
		{"lower case, odd blanks, repeated fields", "GET", "HTTP/1.1 201 Created\r\nx-a:1\r\nX-A: \t2 \r\nset-cookie: s=1\r\nSet-Cookie: t=2\r\ncontent-length:  3 \r\n\r\nabc", true, nil, []string{"X-A", "Set-Cookie"}},
		{"the pod's Date is kept", "GET", "HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nContent-Length: 2\r\n\r\nok", true, nil, []string{"Date"}},
		{"no type: sniffed", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n<html>hi</html>", true, nil, []string{"Content-Type"}},
		{"an empty encoding: still sniffed", "GET", "HTTP/1.1 200 OK\r\nContent-Encoding:\r\nContent-Length: 15\r\n\r\n<html>hi</html>", true, nil, []string{"Content-Type"}},
		{"an encoding: not sniffed", "GET", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", true, []string{"Content-Type"}, []string{"Content-Encoding"}},
		{"hop-by-hop fields in any case", "GET", "HTTP/1.1 200 OK\r\nKEEP-ALIVE: timeout=5\r\nconnection: keep-alive\r\nProxy-Connection: x\r\nupgrade: h2c\r\nTe: x\r\nproxy-authenticate: Basic\r\nProxy-Authorization: x\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok", true,
			[]string{"Keep-Alive", "Connection", "Proxy-Connection", "Upgrade", "Te", "Proxy-Authenticate", "Proxy-Authorization"}, []string{"X-Kept"}},
		{"fields the Connection header names, before and after it", "GET", "HTTP/1.1 200 OK\r\nx-private: 1\r\nConnection: X-Private, x-other\r\nX-Other: 2\r\nX-Kept: 3\r\nContent-Length: 2\r\n\r\nok", true, []string{"X-Private", "X-Other"}, []string{"X-Kept"}},
		{"more than eight names in Connection", "GET", "HTTP/1.1 200 OK\r\nConnection: a, b, c, d, e, f, g, h, i, j\r\nA: 1\r\nJ: 2\r\nK: 3\r\nContent-Length: 2\r\n\r\nok", true, []string{"A", "J"}, []string{"K"}},
		{"Connection names Content-Length: the proxy frames the body", "GET", "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello", true, nil, nil},
		{"Connection names Content-Type and Date", "GET", "HTTP/1.1 200 OK\r\nConnection: content-type, DATE\r\nContent-Type: text/x-evil\r\nDate: x\r\nContent-Length: 15\r\n\r\n<html>hi</html>", true, nil, []string{"Content-Type", "Date"}},
		{"Connection names Transfer-Encoding", "GET", "HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nContent-Length: 2\r\n\r\nok", true, []string{"Transfer-Encoding"}, nil},
		{"Connection: close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true, []string{"Connection"}, nil},
		{"a field named Close stays, as on the map path", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nClose: 1\r\nContent-Length: 2\r\n\r\nok", true, nil, []string{"Close"}},
		{"fields that reach past the workspace (a service worker's scope, clearing the site's cookies): dropped", "GET", "HTTP/1.1 200 OK\r\nService-Worker-Allowed: /\r\nclear-site-data: \"cookies\"\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok", true,
			[]string{"Service-Worker-Allowed", "Clear-Site-Data"}, []string{"X-Kept"}},
		{"the nogoo9 cookie: left to the map path, which removes it", "GET", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nset-cookie: " + CookieName + "=evil; Path=/\r\nContent-Length: 2\r\n\r\nok", false, nil, []string{"Set-Cookie"}},
		{"a Set-Cookie flood: a 502 without the pod's headers", "GET", "HTTP/1.1 200 OK\r\nX-Pod-Header: 1\r\n" + flood + "Content-Length: 2\r\n\r\nok", true, []string{"Set-Cookie", "X-Pod-Header"}, nil},
		{"32 Set-Cookie lines pass", "GET", "HTTP/1.1 200 OK\r\n" + flood[len("Set-Cookie: a=1\r\n"):] + "Content-Length: 2\r\n\r\nok", true, nil, []string{"Set-Cookie"}},
		{"line folding", "GET", "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"a bare LF", "GET", "HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"a bare CR in a value", "GET", "HTTP/1.1 200 OK\r\nX-A: 1\r2\r\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"a NUL in a value", "GET", "HTTP/1.1 200 OK\r\nX-A: 1\x002\r\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"an invalid name", "GET", "HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"a name with a colon-less line", "GET", "HTTP/1.1 200 OK\r\nX-A\r\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"two equal lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nok", false, nil, nil},
		{"two different lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk", false, nil, nil},
		{"a length and chunked", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false, nil, nil},
		{"a bad length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok", false, nil, nil},
		{"no length: until the pod closes", "GET", "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nuntil close", false, nil, nil},
		{"Pragma and Trailer", "GET", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nTrailer: X\r\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"103 Early Hints, then the answer", "GET", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\nSet-Cookie: s=1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, nil, nil},
		{"204 with a stray body", "GET", "HTTP/1.1 204 No Content\r\nX-A: 1\r\nContent-Length: 5\r\n\r\nstray", false, nil, nil},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\nContent-Length: 5\r\n\r\n", false, nil, nil},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n", true, nil, nil},
		{"a header block larger than the pod connection's buffer", "GET", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 20<<10) + "\r\nContent-Length: 2\r\n\r\nok", true, nil, []string{"X-Big"}},
		{"a body sent short", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true, nil, nil},
		{"a status with a reason of its own", "GET", "HTTP/1.1 418 Short and stout\r\nContent-Length: 2\r\n\r\nok", true, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rawTaken(tc.answer); got != tc.taken {
				t.Errorf("parseRawResponse took the answer: %v, want %v", got, tc.taken)
			}
			pod.answer.Store(&tc.answer)
			fromRaw, h := clientView(t, raw, tc.method)
			fromMap, _ := clientView(t, mapped, tc.method)
			if fromRaw != fromMap {
				t.Errorf("the client got\n%s\nwith the raw answer, and with the map\n%s", fromRaw, fromMap)
			}
			for _, k := range tc.absent {
				if _, ok := h[k]; ok {
					t.Errorf("the client got %s: %q", k, h[k])
				}
			}
			for _, k := range tc.present {
				if _, ok := h[k]; !ok {
					t.Errorf("the client did not get %s:\n%s", k, fromRaw)
				}
			}
			if strings.Contains(fromRaw, CookieName+"=") {
				t.Errorf("the client got a nogoo9 cookie from the pod:\n%s", fromRaw)
			}
		})
	}
}

// TestRawAnswerDropsWhatConnectionNamesEvenWhenClosing: the one place where the raw answer and
// the map path differ. http.ReadResponse (and the quick map parser, which matches it) delete the
// Connection header when it says close, so the map path, like ReverseProxy, then passes on the
// fields it named; the raw copy drops them, as RFC 9110 7.6.1 asks.
func TestRawAnswerDropsWhatConnectionNamesEvenWhenClosing(t *testing.T) {
	pod := newScriptedPod(t)
	raw, mapped := rawAnswerProxies(t, pod)
	answer := "HTTP/1.1 200 OK\r\nConnection: close, X-Private\r\nX-Private: secret\r\nContent-Length: 2\r\n\r\nok"
	pod.answer.Store(&answer)
	_, h := clientView(t, raw, "GET")
	if h == nil || h["X-Private"] != nil {
		t.Errorf("raw answer: the client got %v, want no X-Private", h)
	}
	_, h = clientView(t, mapped, "GET")
	if h == nil || h["X-Private"] != nil {
		t.Errorf("map path: the client got %v, want no X-Private", h)
	}
}

// TestRawAnswerKeepsNoBytesOfThePod: the lines buffer is the client connection's, overwritten by
// its next answer, and dropped between requests when an answer made it large.
func TestRawAnswerKeepsNoBytesOfThePod(t *testing.T) {
	head := []byte("HTTP/1.1 200 OK\r\nX-A: first\r\nContent-Length: 0\r\n\r\n")
	var res http.Response
	var ra rawAnswer
	if !parseRawResponse(head, &res, &ra) {
		t.Fatal("not taken")
	}
	copy(head, bytes.Repeat([]byte("z"), len(head))) // the pod connection's buffer, reused
	if string(ra.lines) != "X-A: first\r\n" {
		t.Errorf("lines %q after the pod's buffer changed, want a copy of their own", ra.lines)
	}
	if !parseRawResponse([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), &res, &ra) || len(ra.lines) != 0 {
		t.Errorf("a second answer kept %q of the first", ra.lines)
	}
}

// TestRawAnswerAllocations: parsing an answer raw into buffers the connection keeps allocates
// nothing (the map path's quick parser: one string).
func TestRawAnswerAllocations(t *testing.T) {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nCache-Control: no-cache\r\nEtag: \"abc\"\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\nContent-Length: 1024\r\n\r\n")
	var res http.Response
	var ra rawAnswer
	allocs := testing.AllocsPerRun(200, func() {
		if !parseRawResponse(head, &res, &ra) {
			t.Fatal("not taken")
		}
	})
	if allocs != 0 {
		t.Errorf("parseRawResponse: %v allocations, want 0", allocs)
	}
}

// rawAnswerSeeds are answers' header lines (after the status line, before the blank line).
var rawAnswerSeeds = []string{
	"Content-Type: text/plain\r\nContent-Length: 5\r\n",
	"x-a:1\r\nX-A: \t2 \r\nset-cookie: s=1\r\ncontent-length:  5 \r\n",
	"Connection: X-Private, keep-alive\r\nx-private: 1\r\nKeep-Alive: 5\r\nContent-Length: 5\r\n",
	"Connection: content-length\r\nContent-Length: 5\r\nContent-Encoding:\r\n",
	"Connection: a, b, c, d, e, f, g, h, i, j\r\nA: 1\r\nJ: 2\r\nK: 3\r\nContent-Length: 5\r\n",
	"Set-Cookie: " + CookieName + "=x\r\nContent-Length: 5\r\n",
	"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
	"X: a\r\n b\r\nContent-Length: 5\r\n",
	"Date: x\r\nConnection: close\r\nClose: y\r\nContent-Length: 5\r\n",
}

// FuzzRawAnswer: whatever header lines a pod's answer has, the client reads the same answer from
// a proxy that copies them raw as from one that parses them into a map (values compared without
// the blanks around them; the fields a closing Connection header names aside: see
// TestRawAnswerDropsWhatConnectionNamesEvenWhenClosing).
func FuzzRawAnswer(f *testing.F) {
	for _, s := range rawAnswerSeeds {
		f.Add(uint16(200), s)
		f.Add(uint16(404), s)
	}
	pod := newScriptedPod(f)
	raw, mapped := rawAnswerProxies(f, pod)
	f.Fuzz(func(t *testing.T, status uint16, lines string) {
		if len(lines) > 4<<10 {
			return
		}
		answer := fmt.Sprintf("HTTP/1.1 %d X\r\n%s\r\nhello", status%1000, lines)
		pod.answer.Store(&answer)
		fromRaw, hr := clientView(t, raw, "GET")
		fromMap, hm := clientView(t, mapped, "GET")
		if fromRaw == fromMap {
			return
		}
		// A closing Connection header's names: dropped by the raw copy only.
		if hr != nil && hm != nil {
			for k := range hm {
				if hr[k] == nil && closingNames(lines, k) {
					delete(hm, k)
				}
			}
			if headerView(hr) == headerView(hm) && statusLine(fromRaw) == statusLine(fromMap) {
				return
			}
		}
		t.Fatalf("%q: the client got\n%s\nwith the raw answer, and with the map\n%s", answer, fromRaw, fromMap)
	})
}

// closingNames reports whether the answer's lines hold a Connection header with close and one
// with name k.
func closingNames(lines, k string) bool {
	var closing, named bool
	for _, l := range strings.Split(lines, "\r\n") {
		n, v, ok := strings.Cut(l, ":")
		if !ok || !strings.EqualFold(n, "Connection") {
			continue
		}
		for _, tok := range strings.Split(v, ",") {
			tok = strings.TrimSpace(tok)
			closing = closing || strings.EqualFold(tok, "close")
			named = named || strings.EqualFold(tok, k)
		}
	}
	return closing && named
}

func headerView(h http.Header) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		if k == "Date" || k == "Content-Length" {
			continue
		}
		for _, v := range h[k] {
			fmt.Fprintf(&b, "%s: %s\n", k, strings.TrimSpace(v))
		}
	}
	return b.String()
}

func statusLine(view string) string {
	line, _, _ := strings.Cut(view, "\n")
	return line
}

// TestRawAnswerSeedsAreTaken: every seed of FuzzRawAnswer that should take the raw path does.
func TestRawAnswerSeedsAreTaken(t *testing.T) {
	taken := 0
	for _, s := range rawAnswerSeeds {
		if rawTaken("HTTP/1.1 200 X\r\n" + s + "\r\nhello") {
			taken++
		}
	}
	if taken < 5 {
		t.Errorf("parseRawResponse takes %d of the seeds, want at least 5", taken)
	}
}

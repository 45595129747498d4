package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// keptStrings is every string of a quick-parsed request that its handler can keep: the
// Request's own, its URL's, each header value, and the header lines the fast path forwards.
func keptStrings(q *quickReq) map[string]string {
	r := q.req
	kept := map[string]string{
		"method": r.Method, "host": r.Host, "requestURI": r.RequestURI, "proto": r.Proto,
		"path": r.URL.Path, "rawQuery": r.URL.RawQuery, "remote": r.RemoteAddr, "lines": q.lines,
	}
	for k, vv := range r.Header {
		for i, v := range vv {
			kept[fmt.Sprintf("header %s[%d]", k, i)] = v
		}
	}
	return kept
}

// cloneStrings copies every string of m into memory of its own.
func cloneStrings(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = strings.Clone(v)
	}
	return c
}

// TestQuickParseKeptStringsOutliveTheBufferAndLaterRequests: the strings of a request are cut
// from the connection's head arena (headString). Whatever a handler keeps of them must stay as
// it was when the read buffer is overwritten and when the connection parses more requests, of
// every size (filling chunks, starting new ones, and heads too large for the arena), into the
// same buffer.
func TestQuickParseKeptStringsOutliveTheBufferAndLaterRequests(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprintf("lazy=%t", lazy), func(t *testing.T) {
			q := newQuickReq()
			q.lazy = lazy
			buf := make([]byte, 4*headArenaMax)
			parse := func(head string) {
				t.Helper()
				n := copy(buf, head)
				if _, ok := q.quickParse(buf[:n], "192.0.2.1:1"); !ok {
					t.Fatalf("not taken: %q", head)
				}
			}
			first := "GET /ws/jane/demo/app.js?v=1 HTTP/1.1\r\nHost: ide.example\r\n" + browserLines +
				"Authorization: Bearer secret-one\r\n\r\n"
			parse(first)
			q.wholeHeader()
			kept := keptStrings(q)
			want := cloneStrings(kept)
			if want["header Authorization[0]"] != "Bearer secret-one" || want["header Accept[0]"] == "" {
				t.Fatalf("the first request's strings are not all there: %v", want)
			}
			check := func(when string) {
				t.Helper()
				for k, v := range kept {
					if v != want[k] {
						t.Fatalf("%s: the first request's %s is now %q, was %q", when, k, v, want[k])
					}
				}
			}
			for i := range buf {
				buf[i] = 'z'
			}
			check("after the read buffer was overwritten")
			// Heads of many sizes, so that chunks fill at every offset and new ones start;
			// some are over headArenaMax.
			for i := range 200 {
				filler := strings.Repeat(string(rune('a'+i%26)), (i*37)%(headArenaMax+200))
				parse(fmt.Sprintf("GET /ws/x%d/y/ HTTP/1.1\r\nHost: h%d\r\nX-Filler: %s\r\nAuthorization: Bearer other-%d\r\n\r\n", i, i, filler, i))
				check(fmt.Sprintf("after request %d", i+2))
			}
		})
	}
}

// TestQuickParseAllocatesNoHeadPerRequest: a browser's keep-alive GET costs no allocation of
// its own; the head arena's chunk is allocated once per several requests.
func TestQuickParseAllocatesNoHeadPerRequest(t *testing.T) {
	head := []byte("GET /ws/jane/demo/ HTTP/1.1\r\nHost: ide.example\r\n" + browserLines + "Authorization: Bearer bench\r\n\r\n")
	if len(head) > headChunk/4 {
		t.Fatalf("a head of %d bytes: the chunk (%d) holds fewer than four", len(head), headChunk)
	}
	q := newQuickReq()
	q.lazy = true
	allocs := testing.AllocsPerRun(400, func() {
		if _, ok := q.quickParse(head, "192.0.2.1:1"); !ok {
			t.Fatal("not taken")
		}
		q.header = reuseHeader(q.header)
		q.vals = reuseVals(q.vals)
	})
	// One chunk per headChunk/len(head) requests at most.
	if limit := 1 / float64(headChunk/len(head)); allocs > limit {
		t.Errorf("%.2f allocations per request, want at most %.2f (one chunk per %d requests)", allocs, limit, headChunk/len(head))
	}
}

// TestTokenCacheKeepsACopyOfTheToken: the token a request brings is a view of its head's arena
// chunk; the cache, which keeps it past the request, keeps a copy (a cut of it would hold the
// whole chunk for the entry's life).
func TestTokenCacheKeepsACopyOfTheToken(t *testing.T) {
	tc := newTokenCache(time.Minute)
	head := "Authorization: Bearer a-token\r\n"
	token := head[len("Authorization: Bearer ") : len(head)-2]
	tc.put(token, &auth.Caller{}, monoNow())
	if tc.get("a-token", monoNow()) == nil {
		t.Fatal("the token is not cached")
	}
	for k := range tc.m {
		if unsafe.StringData(k) == unsafe.StringData(token) {
			t.Errorf("the cache keeps the request's own bytes of the token %q", k)
		}
	}
}

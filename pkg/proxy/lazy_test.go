package proxy

import (
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestLazyHeaderFieldsReachThePathsThatReadThem: on the lean loop the request's header map lacks
// the fields lazyField names (Accept, Referer, Sec-Fetch-*...) until a path that may read them
// adds them (wholeHeader). The stopped page reads Accept (HTML for a browser); ReverseProxy
// forwards from the map; the fast path forwards the client's lines. Each gets the fields.
func TestLazyHeaderFieldsReachThePathsThatReadThem(t *testing.T) {
	pod := &recordingPod{}
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, addr := startProxy(t, Options{}, host, port, func(p *Proxy) {
		sp := podAt("jane", "sleepy", host, port, false)
		sp.Annotations[workspace.AnnStopRequested] = "stopped for the test"
		p.PodChanged(sp)
	})
	const browser = "Accept: text/html,application/xhtml+xml\r\nReferer: https://ide.example/ws/jane/demo/\r\n" +
		"sec-fetch-mode: navigate\r\nAccept-Language: en\r\nAccept: */*;q=0.1\r\n"
	served := func() int64 { return p.lean.Load().served.Load() }
	var before int64
	var got string

	want := []string{"Accept: text/html,application/xhtml+xml", "Accept: */*;q=0.1", "Referer: https://ide.example/ws/jane/demo/", "Sec-Fetch-Mode: navigate", "Accept-Language: en"}
	for _, tc := range []struct{ name, extra string }{
		{"the fast path", ""},
		{"ReverseProxy (a TE header)", "TE: trailers\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := served()
			got := rawExchange(t, addr, "GET /ws/jane/demo/x HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n"+tc.extra+browser+"\r\n", "GET")
			if !strings.HasPrefix(got, "200 ") {
				t.Fatalf("answer %s", got)
			}
			if served() == before {
				t.Error("the lean loop did not serve the request")
			}
			sent := pod.lastRequest()
			for _, w := range want {
				if !strings.Contains(sent, w) {
					t.Errorf("the pod did not get %q:\n%s", w, sent)
				}
			}
			// Both of Accept's lines (the recording pod sorts the lines, so their order is not
			// seen here; FuzzForwardedHeaderLines compares the forwarded block itself).
			if i, j := strings.Index(sent, want[0]), strings.Index(sent, want[1]); i < 0 || j < 0 {
				t.Errorf("Accept's lines missing:\n%s", sent)
			}
		})
	}
	// After the requests above, the token is in the cache: the verifier (which gets the whole
	// header) is not asked again.
	before = served()
	got = rawExchange(t, addr, "GET /ws/jane/sleepy/ HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n"+browser+"\r\n", "GET")
	if !strings.HasPrefix(got, "503 ") || !strings.Contains(got, "Content-Type: text/html") {
		t.Errorf("a browser asking for a stopped workspace got\n%s\nwant the 503 page in HTML (the page reads Accept)", got)
	}
	if served() == before {
		t.Error("the lean loop did not serve the request")
	}
	// The proxy's own pages read Sec-Fetch-Site (the logout's cross-site check): a cross-site
	// logout the lean loop parsed is refused, not obeyed.
	before = served()
	got = rawExchange(t, addr, "POST "+ReservedPrefix+"logout HTTP/1.1\r\nHost: proxy.example\r\nSec-Fetch-Site: cross-site\r\n\r\n", "POST")
	if !strings.HasPrefix(got, "403 ") {
		t.Errorf("a cross-site logout got\n%s\nwant 403 (the check reads Sec-Fetch-Site)", got)
	}
	if served() == before {
		t.Error("the lean loop did not serve the logout")
	}
}

// TestLazyParseIsTheWholeParse: with lazy, quickParse leaves exactly the lazy fields out of the
// map, reports that it did, and wholeHeader brings the map to what the full parse makes.
func TestLazyParseIsTheWholeParse(t *testing.T) {
	for _, head := range []string{
		"GET /x HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer t\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: h\r\nACCEPT: a\r\nUser-Agent: u\r\naccept: b\r\nSec-Fetch-Site: same-origin\r\nCookie: c=1\r\nreferer:  r \r\nUpgrade-Insecure-Requests: 1\r\nSec-Ch-Ua-Platform: \"Linux\"\r\n\r\n",
	} {
		full := newQuickReq()
		want, ok := full.quickParse([]byte(head), "192.0.2.1:1")
		if !ok {
			t.Fatalf("quickParse refuses %q", head)
		}
		lq := newQuickReq()
		lq.lazy = true
		got, ok := lq.quickParse([]byte(head), "192.0.2.1:1")
		if !ok {
			t.Fatalf("the lazy quickParse refuses %q", head)
		}
		lazyKeys := 0
		for k, vv := range want.Header {
			if lazyField(k) {
				lazyKeys++
				if got.Header[k] != nil {
					t.Errorf("%q: the lazy parse kept %s", head, k)
				}
			} else if strings.Join(got.Header[k], "\n") != strings.Join(vv, "\n") {
				t.Errorf("%q: %s is %q, want %q", head, k, got.Header[k], vv)
			}
		}
		if lq.partial != (lazyKeys > 0) {
			t.Errorf("%q: partial %v with %d lazy fields", head, lq.partial, lazyKeys)
		}
		lq.wholeHeader()
		if dumpHeader(got.Header) != dumpHeader(want.Header) || len(got.Header) != len(want.Header) {
			t.Errorf("%q: after wholeHeader\n%s\nwant\n%s", head, dumpHeader(got.Header), dumpHeader(want.Header))
		}
		for k, vv := range want.Header {
			if strings.Join(got.Header[k], "\n") != strings.Join(vv, "\n") {
				t.Errorf("%q: %s is %q after wholeHeader, want %q (in order)", head, k, got.Header[k], vv)
			}
		}
		if lq.partial {
			t.Error("still partial after wholeHeader")
		}
	}
}

// TestLazyKeyAndLazyFieldAreLazyNames: lazyKey (canonical names, fillHeader's first look) and
// lazyField (any case: fillHeader's second look, wholeHeader) both say exactly lazyNames, or
// wholeHeader would not add back a field the parse left out, or add one it kept. Each name in
// each case is found, and no name that differs from one of them by a byte is.
func TestLazyKeyAndLazyFieldAreLazyNames(t *testing.T) {
	var names []string
	for _, k := range lazyNames {
		if valid, canonical := nameForm(k); !valid || !canonical {
			t.Errorf("lazyNames holds %q, not a field name in canonical form", k)
		}
		names = append(names, nameVariants(k)...)
	}
	names = append(names, "", "A", "Host", "User-Agent", "Cookie", "Authorization", "Connection", "Content-Type", "Origin", "X-Forwarded-For", "Sec-Ch-Ua-Arch")
	for _, s := range names {
		exact, folded := inLazyNames(s)
		if lazyKey(s) != exact || lazyField(s) != folded {
			t.Errorf("%q: lazyKey %t, lazyField %t; want %t, %t (lazyNames)", s, lazyKey(s), lazyField(s), exact, folded)
		}
	}
}

// inLazyNames reports whether lazyNames holds s (exact) or s in another ASCII case (folded: of
// the same length, so no rune outside ASCII folds to a letter of it, as U+017F does to 's').
func inLazyNames(s string) (exact, folded bool) {
	for _, k := range lazyNames {
		exact = exact || s == k
		folded = folded || len(s) == len(k) && strings.EqualFold(s, k)
	}
	return exact, folded
}

// nameVariants are k and the names close to it: in other cases, a byte shorter or longer at
// either end, and every change of one byte (the other case of a letter, another byte for '-',
// or 'q').
func nameVariants(k string) []string {
	names := []string{k, strings.ToLower(k), strings.ToUpper(k), k[:len(k)-1], k + "s", "X" + k, k[1:]}
	for i := range len(k) {
		b := []byte(k)
		b[i] ^= 0x20
		names = append(names, string(b))
		b[i] = 'q'
		names = append(names, string(b))
	}
	return names
}

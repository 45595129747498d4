package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

type ctxKey struct{}

func newQuickReq() *quickReq {
	ctx := context.WithValue(context.Background(), ctxKey{}, "conn")
	return &quickReq{base: (&http.Request{}).WithContext(ctx), req: new(http.Request)}
}

// checkQuickParse parses head with quickParse and, when it takes the request, compares the
// result with what http.ReadRequest (and the server's own checks) make of the same bytes. It
// reports whether quickParse took it.
func checkQuickParse(t *testing.T, q *quickReq, head string) bool {
	t.Helper()
	got, ok := q.quickParse([]byte(head), "192.0.2.1:1234")
	want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
	if !ok {
		return false
	}
	if err != nil || !validForServer(want) {
		t.Fatalf("quickParse took %q, which net/http refuses (err=%v)", head, err)
	}
	if !leanEligible([]byte(head)) {
		t.Fatalf("quickParse took %q, which the lean loop hands to net/http", head)
	}
	if got.Context().Value(ctxKey{}) != "conn" {
		t.Errorf("%q: the request lost the connection's context", head)
	}
	type view struct {
		Method, Proto, Host, RequestURI, RemoteAddr         string
		ProtoMajor, ProtoMinor                              int
		Path, RawPath, RawQuery, EscapedPath, Scheme, UHost string
		ForceQuery, Close, NoBody                           bool
		ContentLength                                       int64
		Header, Trailer                                     http.Header
		TransferEncoding                                    []string
	}
	v := func(r *http.Request, remote string) view {
		return view{r.Method, r.Proto, r.Host, r.RequestURI, remote, r.ProtoMajor, r.ProtoMinor,
			r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.URL.EscapedPath(), r.URL.Scheme, r.URL.Host,
			r.URL.ForceQuery, r.Close, r.Body == http.NoBody, r.ContentLength, r.Header, r.Trailer, r.TransferEncoding}
	}
	if g, w := v(got, got.RemoteAddr), v(want, "192.0.2.1:1234"); !reflect.DeepEqual(g, w) {
		t.Errorf("%q:\nquickParse    %+v\nReadRequest   %+v", head, g, w)
	}
	// The lean loop's lazy parse (lazyField) takes the same requests and, once wholeHeader has
	// added what it left out, makes the same header map.
	lq := newQuickReq()
	lq.lazy = true
	lazy, ok := lq.quickParse([]byte(head), "192.0.2.1:1234")
	if !ok {
		t.Fatalf("the lazy quickParse refuses %q, which the full one takes", head)
	}
	lq.wholeHeader()
	if !reflect.DeepEqual(lazy.Header, want.Header) {
		t.Errorf("%q: the lazy parse and wholeHeader make\n%v\nReadRequest\n%v", head, lazy.Header, want.Header)
	}
	return true
}

func TestQuickParseMatchesReadRequest(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		quick      bool // quickParse takes it (otherwise http.ReadRequest does)
	}{
		{"a plain GET", "GET /ws/jane/demo/x HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer t\r\n\r\n", true},
		{"a query, repeated and lower-case headers", "GET /ws/a/b/?x=1&y=%20z;w HTTP/1.1\r\nhost: h:8080\r\naccept: a\r\nAccept: b\r\nx-custom_key:  v \t\r\n\r\n", true},
		{"an empty query", "GET /p? HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"an empty header value", "HEAD /p HTTP/1.1\r\nHost: h\r\nX-Empty:\r\n\r\n", true},
		{"Connection: close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Close\r\n\r\n", true},
		{"sub-delims in the path", "DELETE /a/b;c=d/@x:y/$&+,= HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"a sub-delim EscapedPath escapes", "GET /a/!b HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"an escape in the path", "GET /ws/a%2Fb HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"a path byte EscapedPath changes", "GET /a{b} HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"a fragment", "GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"a control byte in the query", "GET /a?b\x01 HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"an absolute URI", "GET http://h/a HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"a path starting with //", "GET //h/a HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"an asterisk", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"CONNECT", "CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: h\r\n\r\n", false},
		{"a bad method", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"Pragma", "GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n", false},
		{"Content-Length 0", "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", false},
		{"Trailer", "GET / HTTP/1.1\r\nHost: h\r\nTrailer: X\r\n\r\n", false},
		{"a folded line", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n 2\r\n\r\n", false},
		{"a space before the colon", "GET / HTTP/1.1\r\nHost: h\r\nX-A : 1\r\n\r\n", false},
		{"a bare LF in a value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\n2\r\n\r\n", false},
		{"a line without a colon", "GET / HTTP/1.1\r\nHost: h\r\nX-A\r\n\r\n", false},
		{"no Host", "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n", false},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n", false},
		{"a bad Host", "GET / HTTP/1.1\r\nHost: h/i\r\n\r\n", false},
		{"an upgrade (net/http serves it)", "GET / HTTP/1.1\r\nHost: h\r\nupgrade: websocket\r\nConnection: Upgrade\r\n\r\n", false},
		{"Expect (net/http serves it)", "GET / HTTP/1.1\r\nHost: h\r\nEXPECT: 100-continue\r\n\r\n", false},
		{"Transfer-Encoding (net/http serves it)", "GET / HTTP/1.1\r\nHost: h\r\ntransfer-encoding: chunked\r\n\r\n", false},
		{"a bare LF ending a line", "GET / HTTP/1.1\r\nHost: h\nX-A: 1\r\n\r\n", false},
		{"a bare LF ending the request line", "GET / HTTP/1.1\nHost: h\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkQuickParse(t, newQuickReq(), tc.head); got != tc.quick {
				t.Errorf("quickParse took it: %v, want %v", got, tc.quick)
			}
		})
	}
}

// TestQuickParseReusedRequestKeepsNothingOfTheLast: the connection's Request and header map are
// reused; a second request must not see the first one's headers, query or Close.
func TestQuickParseReusedRequestKeepsNothingOfTheLast(t *testing.T) {
	q := newQuickReq()
	if !checkQuickParse(t, q, "POST /a?x=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer one\r\nConnection: close\r\n\r\n") {
		t.Fatal("first request not taken")
	}
	first := q.req.Header
	if !checkQuickParse(t, q, "GET /b HTTP/1.1\r\nHost: h\r\n\r\n") {
		t.Fatal("second request not taken")
	}
	if len(first) != 0 || q.req.Close || q.req.URL.RawQuery != "" {
		t.Errorf("second request kept the first one's parts: header %v close %v query %q", first, q.req.Close, q.req.URL.RawQuery)
	}
}

// TestQuickParseRepeatedAndCollidingFields: fillHeader adds a key it has not seen with one map
// assignment, told apart by a bit per key (keyBit) that different keys may share; a key repeated
// (in another case, with other lines between) or sharing its bit with an earlier one keeps every
// value in order, as http.ReadRequest's map does.
func TestQuickParseRepeatedAndCollidingFields(t *testing.T) {
	var b strings.Builder
	b.WriteString("GET /a HTTP/1.1\r\nHost: h\r\nCookie: a=1\r\n")
	bits := map[uint64]string{}
	collided := false
	for i := range 80 { // more keys than bits: some must share one
		key := fmt.Sprintf("X-F%d", i)
		if other, ok := bits[keyBit(key)]; ok && other != key {
			collided = true
		}
		bits[keyBit(key)] = key
		fmt.Fprintf(&b, "%s: %d\r\n", key, i)
		if i%7 == 0 {
			fmt.Fprintf(&b, "x-f%d: again %d\r\ncookie: b=%d\r\n", i/2, i, i)
		}
	}
	b.WriteString("Accept: */*\r\nACCEPT: text/html\r\n\r\n")
	if !collided {
		t.Fatal("no two keys share a bit: the test does not reach the lookup")
	}
	if !checkQuickParse(t, newQuickReq(), b.String()) { // and the lazy parse
		t.Fatal("not taken")
	}
}

// TestQuickParseStringsOutliveTheReadBuffer: the connection's read buffer is overwritten by the
// next request while strings of this one are still held (the token cache keeps the token).
func TestQuickParseStringsOutliveTheReadBuffer(t *testing.T) {
	buf := []byte("GET /ws/a/b/ HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer secret-one\r\n\r\n")
	r, ok := newQuickReq().quickParse(buf, "192.0.2.1:1")
	if !ok {
		t.Fatal("not taken")
	}
	copy(buf, bytes.Repeat([]byte("z"), len(buf)))
	if got := r.Header.Get("Authorization"); got != "Bearer secret-one" || r.URL.Path != "/ws/a/b/" || r.Host != "h" {
		t.Errorf("after the buffer was reused: Authorization %q, path %q, host %q", got, r.URL.Path, r.Host)
	}
}

// FuzzQuickParse: whatever head the lean loop hands it, quickParse either refuses it or makes of
// it what http.ReadRequest makes (checkQuickParse), the lazy parse too.
func FuzzQuickParse(f *testing.F) {
	for _, s := range []string{
		"GET /ws/jane/demo/x HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer t\r\n\r\n",
		"GET /a?b=c&d HTTP/1.1\r\nhost: h\r\nx-a: 1\r\nX-A: 2\r\nConnection: close\r\n\r\n",
		"PUT /a;b/@c HTTP/1.1\r\nHost: [::1]:80\r\nCookie: a=b\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, head string) {
		// The lean loop hands quickParse exactly one head, cut after its first blank line: so
		// is every input shaped, rather than dropped unless a mutation kept the one blank line
		// at the end (most did not).
		head += "\r\n\r\n"
		head = head[:strings.Index(head, "\r\n\r\n")+4]
		checkQuickParse(t, newQuickReq(), head)
	})
}

// FuzzHeaderChecks: nameForm and validValue, the quick parsers' checks of a header line, say
// what httpguts and textproto say, and lazyKey and lazyField what lazyNames holds.
func FuzzHeaderChecks(f *testing.F) {
	for _, s := range []string{"", "Content-Type", "content-type", "X-A", "x-", "-x", "a b", "Ä", "\x7f", "text/html; q=0.9\t", "abcdefg\x1fhij", "abcdefgh\x7f", "abc\x7fdefghi", "\xff\xfe\xa0\xa1\xa2\xa3\xa4\xa5\xa6", "ab\tcdefghijklmnop\r", "sec-fetch-SITE", "Accept-Encodinh"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		valid, canonical := nameForm(s)
		if want := httpguts.ValidHeaderFieldName(s); valid != want {
			t.Fatalf("nameForm(%q) valid %t, ValidHeaderFieldName %t", s, valid, want)
		}
		if want := textproto.CanonicalMIMEHeaderKey(s) == s; valid && canonical != want {
			t.Fatalf("nameForm(%q) canonical %t, CanonicalMIMEHeaderKey %q", s, canonical, textproto.CanonicalMIMEHeaderKey(s))
		}
		if got, want := validValue(s), httpguts.ValidHeaderFieldValue(s); got != want {
			t.Fatalf("validValue(%q) = %t, ValidHeaderFieldValue %t", s, got, want)
		}
		if exact, folded := inLazyNames(s); lazyKey(s) != exact || lazyField(s) != folded {
			t.Fatalf("%q: lazyKey %t, lazyField %t; want %t, %t (lazyNames)", s, lazyKey(s), lazyField(s), exact, folded)
		}
	})
}

// TestPathByteIsWhatEscapedPathKeeps: pathByte's table holds exactly the bytes url.URL's
// EscapedPath leaves as they are, so a path quickParse takes spells itself.
func TestPathByteIsWhatEscapedPathKeeps(t *testing.T) {
	for c := range 256 {
		p := "/a" + string([]byte{byte(c)})
		if kept := (&url.URL{Path: p}).EscapedPath() == p; pathByte(byte(c)) != kept {
			t.Errorf("pathByte(%q) = %t, EscapedPath keeps it: %t", byte(c), !kept, kept)
		}
	}
}

// TestNameFormIsValidAndCanonical: nameForm's table walk says what httpguts and textproto say of
// every name of up to two bytes, and of some longer ones (FuzzHeaderChecks goes further).
func TestNameFormIsValidAndCanonical(t *testing.T) {
	names := []string{"", "Content-Length", "content-length", "X--A", "-A", "A-", "X-a", "Sec-Ch-Ua", "sec-CH-ua", "ÄB", "A B", "A:B"}
	for a := range 256 {
		names = append(names, string([]byte{byte(a)}))
		for _, b := range []byte{'a', 'A', '-', '0', ' ', 0x80} {
			names = append(names, string([]byte{byte(a), b}), string([]byte{b, byte(a)}))
		}
	}
	for _, name := range names {
		valid, canonical := nameForm(name)
		wantValid := httpguts.ValidHeaderFieldName(name)
		if valid != wantValid || valid && canonical != (textproto.CanonicalMIMEHeaderKey(name) == name) {
			t.Errorf("nameForm(%q) = %t, %t; ValidHeaderFieldName %t, CanonicalMIMEHeaderKey %q", name, valid, canonical, wantValid, textproto.CanonicalMIMEHeaderKey(name))
		}
	}
}

// TestFillHeaderKeepsWhatTheMapHeld: fillHeader's one-assignment add of a key it has not seen
// (seen) holds only for a map that starts empty; given one that already holds a key, a line of
// that key (in any case) adds its value after the ones there, as Header.Add would. A lazy field
// left out of the map is added the same way (wholeHeader).
func TestFillHeaderKeepsWhatTheMapHeld(t *testing.T) {
	for _, tc := range []struct {
		name, lines string
		lazy        bool
	}{
		{"a key in another case", "x-a: v\r\nAccept: v\r\n\r\n", false},
		{"a key in canonical form", "X-A: v\r\nAccept: v\r\n\r\n", false},
		{"a lazy field, in another case", "x-a: v\r\naccept: v\r\n\r\n", true},
		{"a lazy field, in canonical form", "X-A: v\r\nAccept: v\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"X-A": {"pre"}, "Accept": {"pre"}}
			var vals []string
			var partial bool
			var lazy *bool
			if tc.lazy {
				lazy = &partial
			}
			if _, _, ok := fillHeader(h, &vals, tc.lines, requestSpecial, "Host", false, lazy); !ok {
				t.Fatalf("fillHeader refuses %q", tc.lines)
			}
			if tc.lazy {
				if !partial {
					t.Fatal("fillHeader did not report the lazy field it left out")
				}
				q := &quickReq{header: h, lines: tc.lines, partial: true}
				q.wholeHeader()
			}
			want := http.Header{"X-A": {"pre", "v"}, "Accept": {"pre", "v"}}
			if !reflect.DeepEqual(h, want) {
				t.Errorf("fillHeader(%q) into a map holding X-A and Accept gives %v, want %v", tc.lines, h, want)
			}
		})
	}
}

package proxy

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httputil"
	"reflect"
	"strings"
	"testing"
)

func TestSetXForwardedMatchesTheStandardLibrary(t *testing.T) {
	tests := []struct {
		name       string
		remoteAddr string
		tls        bool
	}{
		{"plain HTTP from an IPv4 client", "10.0.0.7:51234", false},
		{"TLS from an IPv6 client", "[2001:db8::1]:443", true},
		{"a remote address without a port sets no X-Forwarded-For", "unix-socket", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := http.NewRequest(http.MethodGet, "http://ide.example.com/ws/jane/demo/", nil)
			in.RemoteAddr = tc.remoteAddr
			if tc.tls {
				in.TLS = &tls.ConnectionState{}
			}
			want := &httputil.ProxyRequest{In: in, Out: &http.Request{Header: http.Header{}}}
			want.SetXForwarded()
			got := http.Header{}
			setXForwarded(got, in)
			if !reflect.DeepEqual(got, want.Out.Header) {
				t.Fatalf("setXForwarded = %v, httputil sets %v", got, want.Out.Header)
			}
		})
	}
}

// namedInReference is what the proxy asked of a Connection header before hopNames: is k one of
// the names it lists, compared with strings.EqualFold (one scan of the header per field).
func namedInReference(conn []string, k string) bool {
	for _, v := range conn {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
		}
	}
	return false
}

// TestHopNamesAnswerAsEqualFold: whether a field is named in a Connection header, for a few names
// (compared in turn) and for many (looked up by their ASCII fold), is what strings.EqualFold
// says, the Kelvin sign and the long s (the two non-ASCII runes it equates with ASCII letters),
// other non-ASCII names and invalid UTF-8 included.
func TestHopNamesAnswerAsEqualFold(t *testing.T) {
	names := []string{"X-Trace", "x-trace", "X-\u212Aey", "X-Key", "x-key", "\u017Fecret", "Secret", "SECRET",
		"caf\u00e9", "CAF\u00c9", "\xff", "\xfe", "Keep-Alive", "a", "", " X-Pad ", "X-\u00c5ngstr\u00f6m", "x-\u212Bngstr\u00f6m"}
	var lots []string
	for i := range 40 {
		lots = append(lots, fmt.Sprintf("X-Filler-%d", i))
	}
	for _, conn := range [][]string{
		{"X-Trace, X-\u212Aey"},
		{"\u017Fecret,caf\u00e9", "\xff"},
		{strings.Join(append(lots, "X-\u212Aey", "\u017Fecret", "caf\u00e9", "\xff", "x-\u212Bngstr\u00f6m"), ", ")},
		{strings.Join(lots[:20], ","), strings.Join(lots[20:], " , ") + ", X-Trace"},
	} {
		var h hopNames
		h.cut(conn, nil)
		if many := len(strings.Split(strings.Join(conn, ","), ",")) > len(h.few); many != (h.many != nil) {
			t.Errorf("%q: names looked up by their folds: %v, want %v", conn, h.many != nil, many)
		}
		for _, k := range append(names, lots...) {
			if got, want := h.has(k), namedInReference(conn, k); got != want {
				t.Errorf("Connection %q names %q: %v, EqualFold says %v", conn, k, got, want)
			}
		}
	}
}

// TestAHostileConnectionHeaderIsCutOnce: an answer whose Connection header lists thousands of
// names, and as many fields, loses exactly the fields it names; the names are held in the fold
// map, so each field costs one lookup (before, each field scanned the whole header: minutes of
// CPU for a 1 MiB header from a hostile workspace).
func TestAHostileConnectionHeaderIsCutOnce(t *testing.T) {
	const n = 3000
	var conn strings.Builder
	h := http.Header{}
	for i := range n {
		if i > 0 {
			conn.WriteString(", ")
		}
		fmt.Fprintf(&conn, "x-named-%d", i)
		h[http.CanonicalHeaderKey(fmt.Sprintf("X-Named-%d", i))] = []string{"v"}
		h[http.CanonicalHeaderKey(fmt.Sprintf("X-Kept-%d", i))] = []string{"v"}
	}
	h["Connection"] = []string{conn.String()}
	var hop hopNames
	hop.cut(h["Connection"], nil)
	if len(hop.many) != n {
		t.Fatalf("%d names in the fold map, want %d", len(hop.many), n)
	}
	dropHopHeaders(h)
	if len(h) != n {
		t.Fatalf("%d fields left, want the %d kept ones", len(h), n)
	}
	for k := range h {
		if !strings.HasPrefix(k, "X-Kept-") {
			t.Errorf("%s was kept", k)
		}
	}
}

// hopByHopFields is RFC 9110 7.6.1's list as net/http/httputil has it: the one table the three
// classifiers of field names (hopHeader for the map paths, skipRequestHeaderFold for the
// forwarded request's lines, rawField for the raw answer) must each agree with.
var hopByHopFields = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// TestHopByHopClassifiersAgree: every hop-by-hop field, in any case, is dropped by all three
// classifiers, and no other field is taken for one (each has extras of its own: Host and the
// forwarding headers for requests, Content-Length and Set-Cookie for answers).
func TestHopByHopClassifiersAgree(t *testing.T) {
	hop := map[string]bool{}
	for _, k := range hopByHopFields {
		hop[k] = true
	}
	others := []string{"Host", "Content-Length", "Content-Type", "Content-Encoding", "Date", "Set-Cookie",
		"Cookie", "Pragma", "Expect", "Authorization", "Forwarded", "X-Forwarded-For", "X-Forwarded-Prefix",
		"Accept", "Tee", "T", "Keep-Alivf", "Connections", "Upgrade-Insecure-Requests", "Proxy"}
	for _, k := range append(append([]string{}, hopByHopFields...), others...) {
		for _, v := range []string{k, strings.ToLower(k), strings.ToUpper(k)} {
			if got := hopHeader(http.CanonicalHeaderKey(v)); got != hop[k] {
				t.Errorf("hopHeader(%q) = %t, want %t", http.CanonicalHeaderKey(v), got, hop[k])
			}
			if hop[k] && !skipRequestHeaderFold(v, false) {
				t.Errorf("skipRequestHeaderFold(%q) = false: a hop-by-hop field forwarded", v)
			}
			if got := skipRequestHeaderFold(v, false); got != skipRequestHeader(http.CanonicalHeaderKey(v), false) {
				t.Errorf("skipRequestHeaderFold(%q) = %t, skipRequestHeader of its canonical name %t", v, got, !got)
			}
			f := rawField(v)
			if isHop := f == fieldHop || f == fieldConnection || k == "Trailer" && f == fieldRefused ||
				k == "Transfer-Encoding" && f == fieldRefused; isHop != hop[k] {
				t.Errorf("rawField(%q) = %d: hop-by-hop %t, want %t", v, f, isHop, hop[k])
			}
		}
	}
}

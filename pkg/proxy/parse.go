package proxy

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The lean loop's request parser for the plain request (quickParse): http.ReadRequest builds
// a Request, a URL, a header map and a string per line and value, a dozen allocations for a
// request that is forwarded and forgotten. quickParse copies the request headers once into one
// string and cuts everything from it, reusing the connection's Request, URL and header map; a
// request it does not fully understand (escapes or unusual characters in the path, line folding,
// Content-Length, Pragma, Trailer, an invalid name or value) is left to http.ReadRequest, so it
// only ever answers what http.ReadRequest would, with the same Request (parse_test.go compares
// them).

// quickReq is the connection's reusable request: base is a Request with only the connection's
// context set, copied over req before each parse.
type quickReq struct {
	base, req *http.Request
	url       url.URL
	header    http.Header
	// vals holds the header values of the request (fillHeader), reused like header.
	vals []string
	// lines is the header lines of the request req holds (after the request line, with the
	// final blank line), as the client sent them and fillHeader checked them; "" when req
	// holds none. The fast path writes the forwarded header block from them (forward.go).
	lines string
	// lazy: leave the fields lazyField names out of header (the lean loop does when its
	// handler is the Proxy, which adds them on the paths that read them); partial: req's
	// header lacks some.
	lazy, partial bool
}

// wholeHeader adds to req's header map the fields quickParse left out of it (lazyField), in
// the order the client sent them.
func (q *quickReq) wholeHeader() {
	if !q.partial {
		return
	}
	q.partial = false
	for rest := q.lines; len(rest) > 2; {
		i := strings.IndexByte(rest, '\n')
		l := rest[:i-1]
		rest = rest[i+1:]
		name, value, _ := strings.Cut(l, ":")
		if lazyField(name) {
			key := textproto.CanonicalMIMEHeaderKey(name)
			q.header[key] = append(q.header[key], trimBlanks(value))
		}
	}
}

// quickParse parses head (the request line and headers with the final blank line) into q's
// Request. ok is false when http.ReadRequest must do it, or the request is not for the lean loop
// (leanEligible then decides). A request it takes is one leanEligible takes: HTTP/1.1, one
// Host, no Content-Length, Expect, Upgrade or Transfer-Encoding (parse_test.go checks).
func (q *quickReq) quickParse(head []byte, remote string) (*http.Request, bool) {
	q.lines, q.partial = "", false
	// One copy of the whole head: every string of the request is cut from it, so none of them
	// changes when the connection's buffer is reused (the token cache keeps a token, for one).
	s := string(head)
	i := strings.IndexByte(s, '\n')
	if i < 1 || s[i-1] != '\r' {
		return nil, false
	}
	line, rest := s[:i-1], s[i+1:]
	method, line, ok1 := strings.Cut(line, " ")
	uri, proto, ok2 := strings.Cut(line, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || !validMethod(method) || method == http.MethodConnect || !quickURI(uri) {
		return nil, false
	}
	// Pragma, Trailer and Content-Length are http.ReadRequest's special cases.
	if q.header == nil {
		q.header = make(http.Header)
	}
	h := q.header
	if len(h) > 0 { // empty after every request the loop served (reuseHeader)
		clear(h)
	}
	clear(q.vals) // the last request's strings
	q.vals = q.vals[:0]
	// Host goes to the Request's Host, not its header.
	var lazy *bool
	if q.lazy {
		lazy = &q.partial
	}
	host, hosts, ok := fillHeader(h, &q.vals, rest, requestSpecial, "Host", false, lazy)
	if !ok || hosts != 1 || host == "" || !httpguts.ValidHostHeader(host) {
		return nil, false
	}
	path, query, hasQuery := strings.Cut(uri, "?")
	q.url = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	r := q.req
	*r = *q.base
	r.Method = method
	r.URL = &q.url
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.Header = h
	r.Body = http.NoBody
	r.Host = host
	r.Close = httpguts.HeaderValuesContainsToken(h["Connection"], "close")
	r.RemoteAddr = remote
	r.RequestURI = uri
	q.lines = rest
	return r, true
}

// validMethod: a method is a token (RFC 9110 9.1), as http.ReadRequest checks.
func validMethod(m string) bool {
	return m != "" && httpguts.ValidHeaderFieldName(m)
}

// quickURI accepts an origin-form request target whose path needs no unescaping and spells
// itself (so url.URL's Path is the target's path and RawPath stays empty), and whose query has
// no control or non-ASCII byte and no '#'.
func quickURI(uri string) bool {
	if uri == "" || uri[0] != '/' || strings.HasPrefix(uri, "//") {
		return false
	}
	i := 0
	for ; i < len(uri) && uri[i] != '?'; i++ {
		if !pathByte(uri[i]) {
			return false
		}
	}
	for ; i < len(uri); i++ {
		if c := uri[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

// pathByte: the bytes url.URL.EscapedPath leaves as they are (letters, digits, "-._~" and
// "$&+,/:;=@"); a path with any other byte goes to http.ReadRequest.
func pathByte(c byte) bool { return pathBytes[c] }

// pathBytes is pathByte's table: one load per byte of a path instead of a dozen comparisons.
var pathBytes = func() (t [256]bool) {
	for c := range t {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/$&+,;=:@", byte(c)) >= 0
	}
	return t
}()

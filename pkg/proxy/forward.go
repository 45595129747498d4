package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// The fast path forwards a plain request (no upgrade, no Expect or TE, a body of known length up
// to maxSyncBody) without httputil.ReverseProxy: the outgoing request is written straight from
// the incoming one onto a pooled connection (no request clone, no header map copy), and the
// response is copied back with a pooled buffer. What reaches the pod and the client is what
// ReverseProxy with the Rewrite of newReverseProxy sends: forward_test.go compares the two.
// Everything else (WebSocket and other upgrades, uploads, StandardTransport) uses ReverseProxy.

// fastEligible reports whether r can take the fast path.
func fastEligible(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.Host == "" {
		return false
	}
	h := r.Header
	if h["Upgrade"] != nil || h["Expect"] != nil || h["Te"] != nil {
		return false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	return r.ContentLength > 0 && r.ContentLength <= maxSyncBody
}

// fastRequest is one request on the fast path: the incoming request, its target, and the
// ResponseWriter informational answers go to.
type fastRequest struct {
	in       *http.Request
	w        http.ResponseWriter
	t        *target
	rawQuery string
	cookies  []string // the Cookie values to send when the nogoo9 cookie was removed
	cookieOK bool     // cookies is set
	// lines is r's header lines as the client sent them (quickReq.lines) when the lean loop's
	// parser read r: writeRequest copies them instead of walking r's header map.
	lines    string
	bodySent bool
	ans      answerStore
}

func (f *fastRequest) answer() *answerStore { return &f.ans }

var fastPool = sync.Pool{New: func() any { return new(fastRequest) }}

// forwardFast forwards r (path already rewritten) to t's pod.
func (p *Proxy) forwardFast(w http.ResponseWriter, r *http.Request, t *target) {
	f := fastPool.Get().(*fastRequest)
	*f = fastRequest{in: r, w: w, t: t, rawQuery: cleanQueryParams(r.URL.RawQuery)}
	defer func() { *f = fastRequest{}; fastPool.Put(f) }()
	if c, ok := r.Header["Cookie"]; ok && containsCookie(c) {
		f.cookies, f.cookieOK = keptCookies(c), true
	}
	r.URL.Host = t.addr // for the error log
	h := w.Header()
	if lw, ok := w.(*leanResponse); ok && r == lw.lc.quick.req {
		f.lines = lw.lc.quick.lines
	}
	if lw, ok := w.(*leanResponse); ok && len(h) == 0 {
		// The pod's answer is parsed straight into the client response's header map, its
		// values into a buffer of the client connection: no header map of its own, no copy.
		vals := &lw.lc.respVals
		clear(*vals) // the last answer's strings
		*vals = (*vals)[:0]
		f.ans.h, f.ans.vals = h, vals
		if !p.opts.NoRawAnswer {
			// Better still: the answer's header lines copied to the client as they are.
			f.ans.raw = &lw.lc.rawAns
		}
	}
	res, err := p.transport.do(r, t.addr, f)
	if err != nil {
		if f.ans.direct {
			clear(h)
		}
		p.errorHandler(w, r, err)
		return
	}
	if f.ans.rawDirect {
		// The answer's lines go to the client as they are (parseRawResponse dropped the
		// hop-by-hop ones and refused a nogoo9 cookie); h is empty.
		if f.ans.raw.cookies > p.opts.MaxSetCookies {
			_ = res.Body.Close()
			p.errorHandler(w, r, tooManyCookiesError(p.opts.MaxSetCookies)) // none of the pod's headers
			return
		}
		w.(*leanResponse).raw = f.ans.raw
	} else {
		if err := p.filterResponseHeaders(res.Header, r); err != nil {
			_ = res.Body.Close()
			if f.ans.direct {
				clear(h) // the 502 carries none of the pod's headers
			}
			p.errorHandler(w, r, err)
			return
		}
		if f.ans.direct {
			dropHopHeaders(h)
		} else {
			copyHeaderSkipping(h, res.Header)
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if err := p.copyBody(w, res.Body); err != nil {
		_ = res.Body.Close()
		if r.Context().Value(http.ServerContextKey) != nil {
			// Streaming: all that can be done is abort the client's response, as ReverseProxy does.
			panic(http.ErrAbortHandler)
		}
		return
	}
	_ = res.Body.Close()
	if len(res.Trailer) > 0 {
		_ = http.NewResponseController(w).Flush()
		if len(res.Trailer) == announced {
			copyHeader(h, res.Trailer)
			return
		}
		for k, vv := range res.Trailer {
			for _, v := range vv {
				h.Add(http.TrailerPrefix+k, v)
			}
		}
	}
}

// copyBody copies the response body to w, flushing after every write as ReverseProxy does with
// FlushInterval -1 (SSE events and chunked streams reach the client at once; for a body of known
// length the flush only moves the server's final write earlier).
func (p *Proxy) copyBody(w http.ResponseWriter, body io.Reader) error {
	fl, _ := w.(http.Flusher)
	buf := p.bufPool.Get()
	defer p.bufPool.Put(buf)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if !errors.Is(rerr, context.Canceled) {
				p.log.Info("proxy read error during body copy", "error", rerr.Error())
			}
			return rerr
		}
	}
}

// writeRequest writes the outgoing request: request line, Host, the incoming headers minus
// hop-by-hop headers, forwarding headers and the caller's credentials, then the body.
func (f *fastRequest) writeRequest(bw *bufio.Writer) error {
	r := f.in
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	bw.WriteString(path)
	if f.rawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(f.rawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(r.Host)
	bw.WriteString("\r\n")
	conn := r.Header["Connection"]
	if f.lines != "" {
		f.writeLines(bw, conn)
	} else {
		var hop hopNames
		hop.cut(conn, nil)
		for k, vv := range r.Header {
			if skipRequestHeader(k, f.t.strip) || hop.has(k) {
				continue
			}
			if k == "Cookie" && f.cookieOK {
				vv = f.cookies
			}
			for _, v := range vv {
				writeHeaderLine(bw, k, v)
			}
		}
	}
	if r.TLS == nil {
		writeHeaderLine(bw, "X-Forwarded-Proto", "http")
	} else {
		writeHeaderLine(bw, "X-Forwarded-Proto", "https")
	}
	writeHeaderLine(bw, "X-Forwarded-Host", r.Host)
	if ip, ok := clientIP(r, f.w); ok {
		writeHeaderLine(bw, "X-Forwarded-For", ip)
	}
	if f.t.strip {
		writeHeaderLine(bw, "X-Forwarded-Prefix", f.t.prefix[:len(f.t.prefix)-1])
	}
	if r.ContentLength > 0 && r.Body != nil && r.Body != http.NoBody {
		if f.bodySent {
			return errors.New("request body already sent") // never: bodies are not replayed
		}
		f.bodySent = true
		var num [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(num[:0], r.ContentLength, 10))
		bw.WriteString("\r\n\r\n")
		n, err := io.CopyN(bw, r.Body, r.ContentLength)
		if err != nil {
			return err
		}
		if n != r.ContentLength {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
		// As http.Request.Write: many servers insist on a length for these methods.
		bw.WriteString("Content-Length: 0\r\n")
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// writeLines writes the request's header lines as the client sent them (f.lines, each checked
// by fillHeader: a valid name, a colon, a valid value, CRLF), minus those the map walk above
// skips, and the kept cookies in place of the first Cookie line. What the pod reads is what the
// map walk sends (the same fields and values, in the client's order and spelling instead of the
// map's order and canonical names; fuzz_test.go's FuzzForwardedHeaderLines compares the two):
// one IndexByte per line and a length switch per name instead of a map walk, with no per-line
// canonical key.
func (f *fastRequest) writeLines(bw *bufio.Writer, conn []string) {
	all := f.lines
	cookiesDone := false
	// The Connection header's names, cut once instead of for every line: those every line of
	// that name is skipped for anyway (keep-alive, what a browser sends) are left out.
	var hop hopNames
	hop.cut(conn, func(tok string) bool { return isASCII(tok) && skipRequestHeaderFold(tok, f.t.strip) })
	// Lines kept in a row are written together, as one slice of all (run is where the lines
	// not written yet begin): one write per run of kept lines instead of one per line.
	run, off := 0, 0
	for len(all)-off > 2 {
		i := strings.IndexByte(all[off:], '\n')
		if i < 0 {
			break // never: fillHeader checked every line
		}
		line := all[off : off+i+1]
		next := off + i + 1
		// The name is short: a loop finds its colon faster than IndexByte's setup.
		c := 0
		for c < len(line) && line[c] != ':' {
			c++
		}
		name := line[:c]
		skip := c == len(line) || // never, as above
			skipRequestHeaderFold(name, f.t.strip) || hop.has(name)
		cookie := !skip && f.cookieOK && len(name) == len("Cookie") && asciiEqualFold(name, "Cookie")
		if skip || cookie {
			if run < off {
				_, _ = bw.WriteString(all[run:off])
			}
			run = next
			if cookie && !cookiesDone {
				cookiesDone = true
				for _, v := range f.cookies {
					writeHeaderLine(bw, "Cookie", v)
				}
			}
		}
		off = next
	}
	if run < off {
		_, _ = bw.WriteString(all[run:off])
	}
}

// hopNames is the set of names one Connection header lists (the fields it makes hop-by-hop), cut
// once per request or answer. Up to eight are compared in turn; past that they are looked up by
// their ASCII fold in a map, so that a peer listing thousands of names (a hostile workspace's
// answer may carry 1 MiB of header) costs a lookup per field, not a scan of the Connection header
// per field, which was quadratic in the header's size. has answers as strings.EqualFold against
// every listed name did.
type hopNames struct {
	few  [8]string
	n    int
	many map[string]struct{} // the names' ASCII folds, once more than eight; nil before
	odd  []string            // with many: the names that have no ASCII fold
}

// cut reads the Connection header's values conn, leaving out blanks and the names skip reports
// (nil: none).
func (h *hopNames) cut(conn []string, skip func(string) bool) {
	for _, v := range conn {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if tok = strings.TrimSpace(tok); tok == "" || skip != nil && skip(tok) {
				continue
			}
			h.add(tok)
		}
	}
}

func (h *hopNames) add(tok string) {
	if h.many == nil && h.n < len(h.few) {
		h.few[h.n] = tok
		h.n++
		return
	}
	if h.many == nil {
		h.many = make(map[string]struct{}, 2*len(h.few))
		for _, t := range h.few[:h.n] {
			h.addFold(t)
		}
	}
	h.addFold(tok)
}

func (h *hopNames) addFold(tok string) {
	var buf [64]byte
	if f, ok := asciiFold(buf[:0], tok); ok {
		h.many[string(f)] = struct{}{}
	} else {
		h.odd = append(h.odd, tok)
	}
}

// has reports whether the header named k is one of the names.
func (h *hopNames) has(k string) bool {
	if h.many == nil {
		for _, t := range h.few[:h.n] {
			if strings.EqualFold(t, k) {
				return true
			}
		}
		return false
	}
	var buf [64]byte
	if f, ok := asciiFold(buf[:0], k); ok {
		_, hit := h.many[string(f)]
		return hit
	}
	for _, t := range h.odd { // k has no ASCII fold: never a parsed field name
		if strings.EqualFold(t, k) {
			return true
		}
	}
	return false
}

// asciiFold appends to dst s in ASCII lower case, and reports false when s has a rune that
// strings.EqualFold equates with no ASCII character. The Kelvin sign and the long s are the two
// non-ASCII runes it equates with ASCII letters (k and s), so two strings that have ASCII folds
// are EqualFold exactly when their folds are equal, and a string without one equals no ASCII name.
func asciiFold(dst []byte, s string) ([]byte, bool) {
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			}
			dst = append(dst, byte(r))
		case r == '\u212A': // KELVIN SIGN
			dst = append(dst, 'k')
		case r == '\u017F': // LATIN SMALL LETTER LONG S
			dst = append(dst, 's')
		default:
			return dst, false
		}
	}
	return dst, true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// skipRequestHeaderFold is skipRequestHeader for a name in any case (a valid field name: ASCII).
func skipRequestHeaderFold(k string, strip bool) bool {
	var want string
	switch len(k) {
	case 2:
		want = "Te"
	case 4:
		want = "Host"
	case 7:
		if asciiEqualFold(k, "Trailer") {
			return true
		}
		want = "Upgrade"
	case 9:
		want = "Forwarded"
	case 10:
		if asciiEqualFold(k, "Connection") {
			return true
		}
		want = "Keep-Alive"
	case 13:
		want = "Authorization"
	case 14:
		want = "Content-Length"
	case 15:
		want = "X-Forwarded-For"
	case 16:
		if asciiEqualFold(k, "Proxy-Connection") {
			return true
		}
		want = "X-Forwarded-Host"
	case 17:
		if asciiEqualFold(k, "Transfer-Encoding") {
			return true
		}
		want = "X-Forwarded-Proto"
	case 18:
		if asciiEqualFold(k, "Proxy-Authenticate") {
			return true
		}
		if !strip {
			return false
		}
		want = "X-Forwarded-Prefix"
	case 19:
		want = "Proxy-Authorization"
	default:
		return false
	}
	return asciiEqualFold(k, want)
}

// got1xx passes an informational answer on to the client, as ReverseProxy does.
func (f *fastRequest) got1xx(code int, hdr http.Header) error {
	// hdr has no Set-Cookie nor originWide field (the transport removed them).
	h := f.w.Header()
	copyHeader(h, hdr)
	f.w.WriteHeader(code)
	clear(h)
	return nil
}

// clientIP is the host part of r.RemoteAddr: on the lean loop the connection's, split once.
func clientIP(r *http.Request, w http.ResponseWriter) (string, bool) {
	if lw, ok := w.(*leanResponse); ok && r.RemoteAddr == lw.lc.remote {
		return lw.lc.remoteIP, lw.lc.remoteIPOK
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	return ip, err == nil
}

// writeHeaderLine writes "k: v" and CRLF: appended to the writer's free space in one step when
// it fits (four WriteString calls otherwise).
func writeHeaderLine(bw *bufio.Writer, k, v string) {
	if len(k)+len(v)+4 <= bw.Available() {
		b := bw.AvailableBuffer()
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
		_, _ = bw.Write(b)
		return
	}
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

// skipRequestHeader reports the incoming headers the fast path does not copy: hop-by-hop
// headers, the ones it writes itself (Host, Content-Length, the forwarding headers) and the
// caller's Authorization. With strip, X-Forwarded-Prefix is replaced; without, passed on.
func skipRequestHeader(k string, strip bool) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Host", "Content-Length", "Authorization",
		"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	case "X-Forwarded-Prefix":
		return strip
	}
	return false
}

// hopHeader reports the headers removed from responses (RFC 9110 7.6.1, net/http/httputil's
// list); a switch, not a map: it runs for every header of every answer.
func hopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// copyHeaderSkipping adds src's end-to-end headers to dst. src is a response's header, dropped
// afterwards: its value slices are handed over instead of copied.
func copyHeaderSkipping(dst, src http.Header) {
	var hop hopNames
	hop.cut(src["Connection"], nil)
	for k, vv := range src {
		if hopHeader(k) || hop.has(k) {
			continue
		}
		if old, ok := dst[k]; ok {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv
		}
	}
}

// dropHopHeaders removes from h what copyHeaderSkipping would not copy: the answer's hop-by-hop
// headers.
func dropHopHeaders(h http.Header) {
	var hop hopNames
	hop.cut(h["Connection"], nil)
	for k := range h {
		if hopHeader(k) || hop.has(k) {
			delete(h, k)
		}
	}
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append(dst[k], vv...)
	}
}

// cleanQueryParams is ReverseProxy's: a query with a semicolon or a bad escape is re-encoded.
func cleanQueryParams(s string) string {
	reencode := func(s string) string {
		v, _ := url.ParseQuery(s)
		return v.Encode()
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return reencode(s)
		case '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				return reencode(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

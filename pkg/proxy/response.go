package proxy

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strings"
	"unsafe"

	"golang.org/x/net/http/httpguts"
)

// The fast path's response parser (quickResponse): http.ReadResponse builds a textproto reader,
// a header map grown line by line, a string per value and a body reader over a LimitedReader, a
// dozen allocations for an answer that is copied to the client and forgotten. For the common
// answer (HTTP/1.1, a final status with a body, one Content-Length, plain header lines, all of it
// already in the connection's read buffer) the headers are copied once into one string and every
// field is cut from it. Anything else (an informational or bodiless status, chunked or
// close-delimited bodies, Trailer, Pragma, line folding, an invalid name or value, headers not yet
// read in full, a HEAD request) is left to http.ReadResponse, which reads the same bytes, so the
// parser only ever answers what http.ReadResponse would, with the same Response
// (response_test.go and FuzzQuickResponse compare them).

// parseQuickResponse parses head (the status line and headers with the final blank line) of the
// answer to a request that is not HEAD. ok is false when http.ReadResponse must do it. The
// Response has no Body and no Request: the caller sets them.
func parseQuickResponse(head []byte) (res *http.Response, ok bool) {
	res = new(http.Response)
	var vals []string
	if len(head) > 2 {
		vals = make([]string, 0, headerLines(head))
	}
	if !parseQuickResponseInto(head, res, make(http.Header), &vals) {
		return nil, false
	}
	return res, true
}

// parseQuickResponseInto is parseQuickResponse into storage the caller keeps: res, h (empty; the
// answer's header map; on false it may hold some of the lines, the caller clears it) and vals
// (fillHeader's values buffer). The fast path parses the pod's answer straight into the client
// response's header map, with buffers kept by the client connection (forward.go).
func parseQuickResponseInto(head []byte, res *http.Response, h http.Header, vals *[]string) bool {
	// "HTTP/1.1 " and a three-digit status 200-599, then the end of the line or a space and the
	// reason phrase.
	if len(head) < 16 || string(head[:9]) != "HTTP/1.1 " || head[9] < '2' || head[9] > '5' || !isDigit(head[10]) || !isDigit(head[11]) {
		return false
	}
	code := int(head[9]-'0')*100 + int(head[10]-'0')*10 + int(head[11]-'0')
	if code == http.StatusNoContent || code == http.StatusNotModified {
		return false // no body: http.ReadResponse's rules for those
	}
	s := string(head)
	i := strings.IndexByte(s, '\n')
	if i < 1 || s[i-1] != '\r' {
		return false
	}
	line, rest := s[:i-1], s[i+1:]
	if len(line) > 12 && (line[12] != ' ' || !httpguts.ValidHeaderFieldValue(line[13:])) {
		return false
	}
	// Pragma, Trailer and Transfer-Encoding are http.ReadResponse's special cases.
	value, lengths, ok := fillHeader(h, vals, rest, "Transfer-Encoding", "Content-Length", true, nil)
	if !ok || lengths == 0 {
		return false // lengths 0: chunked or read until the pod closes: http.ReadResponse
	}
	length, ok := parseLength(value)
	if !ok || lengths > 1 {
		return false // invalid, or repeated (net/http's rules for those)
	}
	*res = http.Response{
		Status:     line[9:],
		StatusCode: code,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1,
		Header:        h,
		ContentLength: length,
	}
	if c, ok := h["Connection"]; ok && httpguts.HeaderValuesContainsToken(c, "close") {
		// http.ReadResponse removes the header it has turned into Close; the fields it names go
		// first (RFC 9110 7.6.1), as the raw copy drops them, or nothing would drop them later.
		res.Close = true
		for _, v := range c {
			for _, name := range strings.Split(v, ",") {
				if name = textproto.TrimString(name); name != "" && !asciiEqualFold(name, "close") {
					h.Del(name)
				}
			}
		}
		delete(h, "Connection")
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseLength is a Content-Length value: 1 to 18 digits (so it fits an int64).
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

// The raw answer (eleventh round): on the lean loop, the fast path does not need the pod's
// answer as a header map at all. The client gets the answer's header lines byte for byte minus
// the hop-by-hop ones, so parseRawResponse checks the head in one pass and copies the lines to
// keep into a buffer of the client connection, and the lean response writer writes that buffer
// after its status line (server.go): no string copy of the head, no map, no canonical keys, no
// second walk to drop hop-by-hop fields and a third to write the rest. It takes exactly the
// answers parseQuickResponseInto takes, except one that sets a nogoo9 cookie (the map path
// removes that Set-Cookie and logs it); FuzzRawAnswer checks the client reads the same answer
// from both.

// rawAnswer is a quick answer's header block as the client gets it.
type rawAnswer struct {
	// lines is the kept header lines, each as the pod sent it ("name:value" and CRLF): the
	// client connection's buffer (leanConn.rawAns), overwritten by its next answer.
	lines []byte
	// length is the answer's Content-Length, which the writer sends itself; -1 when the
	// answer's Connection header named Content-Length (then the writer frames the body as for
	// an answer without one, as the map path does once it dropped the field).
	length int64
	// cookies is how many Set-Cookie lines the answer has (MaxSetCookies bounds them).
	cookies int
	// What the writer looks for in the headers it sends.
	hasType, hasEncoding, hasDate bool
}

// quickStatus checks the status line of head as parseQuickResponseInto takes it and returns the
// status code and the offset of the header lines.
func quickStatus(head []byte) (code, rest int, ok bool) {
	if len(head) < 16 || string(head[:9]) != "HTTP/1.1 " || head[9] < '2' || head[9] > '5' || !isDigit(head[10]) || !isDigit(head[11]) {
		return 0, 0, false
	}
	code = int(head[9]-'0')*100 + int(head[10]-'0')*10 + int(head[11]-'0')
	if code == http.StatusNoContent || code == http.StatusNotModified {
		return 0, 0, false // no body: http.ReadResponse's rules for those
	}
	i := bytes.IndexByte(head, '\n')
	if i < 1 || head[i-1] != '\r' {
		return 0, 0, false
	}
	if line := head[:i-1]; len(line) > 12 && (line[12] != ' ' || !validValue(unsafeString(line[13:]))) {
		return 0, 0, false
	}
	return code, i + 1, true
}

// unsafeString views b as a string without copying it. Only for a look that keeps nothing: the
// bytes belong to a pod connection's read buffer, which its next read overwrites.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// parseRawResponse parses head (the status line and headers with the final blank line) of the
// answer to a request that is not HEAD into res (no Header, Status, Body or Request: the caller
// sets what it needs) and ra, whose lines buffer it reuses. ok is false when the map path
// (parseQuickResponseInto, then http.ReadResponse) must do it: every answer parseQuickResponseInto
// refuses, and one that sets a nogoo9 cookie. No string of head is kept.
func parseRawResponse(head []byte, res *http.Response, ra *rawAnswer) bool {
	code, off, ok := quickStatus(head)
	if !ok {
		return false
	}
	*ra = rawAnswer{lines: ra.lines[:0], length: -1}
	rest := unsafeString(head[off:])
	var (
		hop       hopNames
		length    string
		lengths   int
		closing   bool
		encodings bool // a Content-Encoding line was seen (the writer looks at the first)
	)
	for len(rest) > 2 {
		i := strings.IndexByte(rest, '\n')
		if i < 1 || rest[i-1] != '\r' {
			return false // a bare LF
		}
		line := rest[:i+1]
		l := rest[:i-1]
		rest = rest[i+1:]
		c := strings.IndexByte(l, ':')
		if c < 0 {
			return false
		}
		name, value := l[:c], l[c+1:]
		if !httpguts.ValidHeaderFieldName(name) || !validValue(value) {
			return false
		}
		switch rawField(name) {
		case fieldRefused:
			return false // Pragma, Trailer, Transfer-Encoding: http.ReadResponse's special cases
		case fieldLength:
			length, lengths = trimBlanks(value), lengths+1
			continue // the writer sends its own
		case fieldConnection:
			v := trimBlanks(value)
			if !closing && headerHasToken([]string{v}, "close") {
				closing = true
			}
			hop.cut([]string{v}, connectionOption)
			continue
		case fieldHop, fieldDropped:
			continue
		case fieldSetCookie:
			if setsReservedCookie(trimBlanks(value)) {
				return false // the map path removes it, and logs that it did
			}
			ra.cookies++
		case fieldDate:
			ra.hasDate = true
		case fieldType:
			ra.hasType = true
		case fieldEncoding:
			if !encodings {
				encodings, ra.hasEncoding = true, trimBlanks(value) != ""
			}
		}
		ra.lines = append(ra.lines, line...)
	}
	if lengths != 1 {
		return false // none: chunked or read until the pod closes; more: net/http's rules
	}
	n, ok := parseLength(length)
	if !ok {
		return false
	}
	ra.length = n
	if hop.n > 0 || hop.many != nil {
		ra.dropNamed(&hop)
	}
	*res = http.Response{
		StatusCode: code,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1,
		ContentLength: n,
		Close:         closing,
	}
	return true
}

// dropNamed removes from ra the fields the answer's Connection header names (RFC 9110 7.6.1),
// wherever they came in the head, and looks again at what is left.
func (ra *rawAnswer) dropNamed(hop *hopNames) {
	if hop.has("Content-Length") {
		ra.length = -1
	}
	ra.hasType, ra.hasEncoding, ra.hasDate = false, false, false
	encodings := false
	kept := ra.lines[:0]
	for rest := ra.lines; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		c := bytes.IndexByte(line, ':')
		name := unsafeString(line[:c])
		if hop.has(name) {
			continue
		}
		switch rawField(name) {
		case fieldDate:
			ra.hasDate = true
		case fieldType:
			ra.hasType = true
		case fieldEncoding:
			if !encodings {
				encodings, ra.hasEncoding = true, trimBlanks(unsafeString(line[c+1:len(line)-2])) != ""
			}
		}
		kept = append(kept, line...) // never ahead of line: an in-place compaction
	}
	ra.lines = kept
}

// connectionOption reports the Connection tokens that name no field the raw copy would keep
// anyway: close and keep-alive (connection options, as the map path treats them) and the
// fields dropped in any case.
func connectionOption(tok string) bool {
	if asciiEqualFold(tok, "close") {
		return true
	}
	if !isASCII(tok) {
		return false
	}
	f := rawField(tok)
	return f == fieldHop || f == fieldConnection
}

// The fields parseRawResponse treats apart, by name in any case.
const (
	fieldOther = iota
	fieldRefused
	fieldLength
	fieldConnection
	fieldHop
	fieldSetCookie
	fieldDate
	fieldType
	fieldEncoding
	fieldDropped // originWide: never passed on
)

// rawNames are, in canonical form, the fields parseRawResponse treats apart, each with its
// class: the one list rawField looks names up in (rawTable, built from it). The hop-by-hop
// fields are RFC 9110 7.6.1's (TestHopByHopClassifiersAgree).
var rawNames = [...]struct {
	name  string
	field int
}{
	{"Connection", fieldConnection},
	{"Te", fieldHop}, {"Upgrade", fieldHop}, {"Keep-Alive", fieldHop}, {"Proxy-Connection", fieldHop},
	{"Proxy-Authenticate", fieldHop}, {"Proxy-Authorization", fieldHop},
	{"Pragma", fieldRefused}, {"Trailer", fieldRefused}, {"Transfer-Encoding", fieldRefused},
	{"Content-Length", fieldLength}, {"Set-Cookie", fieldSetCookie}, {"Date", fieldDate},
	{"Content-Type", fieldType}, {"Content-Encoding", fieldEncoding},
	{"Service-Worker-Allowed", fieldDropped}, {"Clear-Site-Data", fieldDropped},
}

// rawTable is rawNames by rawSlot, at most one a slot (as lazyTable on the request side): a name
// is compared with the one name of its slot, if any.
var rawTable = func() (t [64]struct {
	name  string
	field int
}) {
	for _, e := range rawNames {
		i := rawSlot(e.name)
		if len(e.name) < 2 || e.field == fieldOther || t[i].name != "" {
			panic("rawNames: " + e.name + " is shorter than two bytes, of no class, or shares its slot with " + t[i].name + ": change rawSlot's mix")
		}
		t[i] = e
	}
	return t
}()

// rawSlot is the slot of rawTable for a name of at least two bytes, the same for every case of
// it; its mix puts no two of rawNames in the same slot, and of the other fields a typical answer
// carries (Cache-Control, ETag, Vary, Last-Modified, Server, Location, the security headers...)
// only Content-Disposition in one of theirs.
func rawSlot(name string) uint {
	n := len(name)
	return (uint(n) + uint(name[n-1]|0x20)*10 + uint(name[n-2]|0x20)*45) % 64
}

// rawField classifies a header name (a token: ASCII), in any case: its class in rawNames, or
// fieldOther.
func rawField(name string) int {
	if len(name) < 2 {
		return fieldOther
	}
	if e := &rawTable[rawSlot(name)]; asciiEqualFold(name, e.name) {
		return e.field
	}
	return fieldOther
}

package proxy

import (
	"net/http"
	"strings"

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
	value, lengths, ok := fillHeader(h, vals, rest, "Transfer-Encoding", "Content-Length", true)
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
		// http.ReadResponse removes the header it has turned into Close.
		res.Close = true
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

package proxy

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The header lines of a head, as the quick parsers (quickParse for requests, parseQuickResponse
// for answers) read them: rest is what follows the first line, each line "name: value" ending in
// CRLF, then the final blank line; every string is cut from the one copy of the head.
//
// fillHeader reads the lines in one pass (each line is found with one IndexByte and checked as
// it is added): an earlier version checked every line in a first pass and added them in a
// second, cutting each with a two-byte search twice, which cost as much as the rest of the
// request's user-space work beside the system calls.

// fillHeader checks the header lines in rest and adds them to h (empty), values without the
// blanks around them, except those of canonical key pick: it returns the value of the last of
// those and how many there were, and adds them to h only with keepPick. A line must be a valid
// name, a colon and a valid value, and no name may be Pragma, Trailer or special (the fields
// http.ReadRequest or http.ReadResponse treat in ways the quick parsers do not), nor, for a
// request (special is requestSpecial), Expect, Upgrade or Transfer-Encoding. ok is false
// when net/http must parse the head; h then holds some of the lines (the caller clears it).
//
// A key's first value is a slice of *vals (capacity 1, so a second value appends to a copy):
// the values of a whole head cost no allocation when *vals is a buffer kept by its owner (the
// client connection's, reused for each of its requests or answers), and one otherwise.
//
// With lazy not nil (a request on the lean loop whose handler is the Proxy), the fields
// lazyField names are checked but not added, and *lazy reports whether there were any: the
// request's handler adds them (quickReq.wholeHeader) only on the paths that read them.
func fillHeader(h http.Header, vals *[]string, rest string, special, pick string, keepPick bool, lazy *bool) (picked string, n int, ok bool) {
	for len(rest) > 2 {
		i := strings.IndexByte(rest, '\n')
		if i < 1 || rest[i-1] != '\r' {
			return "", 0, false // a bare LF (CRLF ends every line, the head with a blank one)
		}
		l := rest[:i-1]
		rest = rest[i+1:]
		c := strings.IndexByte(l, ':')
		if c < 0 {
			return "", 0, false
		}
		name, value := l[:c], l[c+1:]
		if lazy != nil && lazyField(name) {
			if !validValue(value) {
				return "", 0, false
			}
			*lazy = true // a lazy field's name is valid: lazyField compares it with one
			continue
		}
		key, ok := canonicalName(name)
		if !ok || !validValue(value) {
			return "", 0, false
		}
		if n := len(name); (n == 6 || n == 7 || n == len(special) || special == requestSpecial && n == 17) &&
			(strings.EqualFold(name, "Pragma") || strings.EqualFold(name, "Trailer") || strings.EqualFold(name, special) ||
				special == requestSpecial && refusedRequestField(name)) {
			return "", 0, false
		}
		value = trimBlanks(value)
		if key == pick {
			picked, n = value, n+1
			if !keepPick {
				continue
			}
		}
		v := append(*vals, value)
		*vals = v
		if old, ok := h[key]; ok {
			h[key] = append(old, value)
		} else {
			h[key] = v[len(v)-1 : len(v) : len(v)]
		}
	}
	return picked, n, true
}

// lazyField reports, in any case, the request fields a browser sends that nothing on the proxy's
// hot path reads (routing, authentication, activity, the fast path, which forwards the client's
// lines as they are): content negotiation, caching and fetch metadata. Every other path of
// Proxy.ServeHTTP adds them to the header map first (wholeHeader).
func lazyField(name string) bool {
	switch len(name) {
	case 6:
		return asciiEqualFold(name, "Accept")
	case 7:
		return asciiEqualFold(name, "Referer")
	case 8:
		return asciiEqualFold(name, "Priority")
	case 9:
		return asciiEqualFold(name, "Sec-Ch-Ua")
	case 13:
		return asciiEqualFold(name, "Cache-Control") || asciiEqualFold(name, "If-None-Match")
	case 14:
		return asciiEqualFold(name, "Sec-Fetch-Dest") || asciiEqualFold(name, "Sec-Fetch-Mode") ||
			asciiEqualFold(name, "Sec-Fetch-Site") || asciiEqualFold(name, "Sec-Fetch-User")
	case 15:
		return asciiEqualFold(name, "Accept-Encoding") || asciiEqualFold(name, "Accept-Language")
	case 16:
		return asciiEqualFold(name, "Sec-Ch-Ua-Mobile")
	case 17:
		return asciiEqualFold(name, "If-Modified-Since")
	case 18:
		return asciiEqualFold(name, "Sec-Ch-Ua-Platform")
	case 25:
		return asciiEqualFold(name, "Upgrade-Insecure-Requests")
	}
	return false
}

// requestSpecial is quickParse's special: with it fillHeader also refuses the fields that make
// a request one the lean loop hands to net/http (leanEligible), so that a request quickParse
// takes needs no other look at its lines.
const requestSpecial = "Content-Length"

// refusedRequestField: Expect, Upgrade and Transfer-Encoding, whatever their case.
func refusedRequestField(name string) bool {
	switch len(name) {
	case 6:
		return strings.EqualFold(name, "Expect")
	case 7:
		return strings.EqualFold(name, "Upgrade")
	case 17:
		return strings.EqualFold(name, "Transfer-Encoding")
	}
	return false
}

// headerLines is how many header lines head holds at most (the size of a values buffer).
func headerLines(head []byte) int {
	return bytes.Count(head, []byte("\n"))
}

// trimBlanks is strings.Trim(v, " \t") without building a cut set for every value.
func trimBlanks(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// canonicalName is textproto.CanonicalMIMEHeaderKey(name) for a name httpguts.ValidHeaderFieldName
// accepts, and ok false for one it refuses: one pass over a name already in canonical form (what
// browsers and servers send) instead of one to check it and another to canonicalize it.
func canonicalName(name string) (key string, ok bool) {
	if name == "" {
		return "", false
	}
	upper, canonical := true, true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !httpguts.IsTokenRune(rune(c)) {
			return "", false
		}
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
		}
		upper = c == '-'
	}
	if canonical {
		return name, true
	}
	return textproto.CanonicalMIMEHeaderKey(name), true
}

// validValue is httpguts.ValidHeaderFieldValue eight bytes at a time: a word with no byte below
// 0x20 and none equal to 0x7f (no control byte, tab included) is valid; one with such a byte is
// looked at byte by byte. The word test is exact ("hasless" and "haszero" of Bit Twiddling Hacks:
// a borrow can only come from a byte that already makes the test true).
func validValue(v string) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(v); i += 8 {
		x := uint64(v[i]) | uint64(v[i+1])<<8 | uint64(v[i+2])<<16 | uint64(v[i+3])<<24 |
			uint64(v[i+4])<<32 | uint64(v[i+5])<<40 | uint64(v[i+6])<<48 | uint64(v[i+7])<<56
		y := x ^ (ones * 0x7f)
		if (x-ones*0x20)&^x&highs != 0 || (y-ones)&^y&highs != 0 {
			if !httpguts.ValidHeaderFieldValue(v[i : i+8]) {
				return false
			}
		}
	}
	return httpguts.ValidHeaderFieldValue(v[i:])
}

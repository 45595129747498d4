package proxy

import (
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The header lines of a head, as the quick parsers (quickParse for requests, parseQuickResponse
// for answers) read them: rest is what follows the first line, each line "name: value" ending in
// CRLF, then the final blank line; every string is cut from the one copy of the head.

// countHeaderLines checks the header lines in rest: each is a valid name, a colon and a valid
// value, and no name is Pragma, Trailer or special (the fields http.ReadRequest or
// http.ReadResponse treat in ways the quick parsers do not). It returns how many there are; ok
// is false when net/http must parse the head.
func countHeaderLines(rest, special string) (lines int, ok bool) {
	for len(rest) > 2 {
		var l string
		l, rest, _ = strings.Cut(rest, "\r\n")
		name, value, ok := strings.Cut(l, ":")
		if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return 0, false
		}
		if n := len(name); (n == 6 || n == 7 || n == len(special)) &&
			(strings.EqualFold(name, "Pragma") || strings.EqualFold(name, "Trailer") || strings.EqualFold(name, special)) {
			return 0, false
		}
		lines++
	}
	return lines, true
}

// cutHeaderLine cuts the next line from rest (checked by countHeaderLines, and not the final
// blank line): its canonical key, its value without the blanks around it, and what follows.
func cutHeaderLine(rest string) (key, value, more string) {
	l, more, _ := strings.Cut(rest, "\r\n")
	name, value, _ := strings.Cut(l, ":")
	return textproto.CanonicalMIMEHeaderKey(name), strings.Trim(value, " \t"), more
}

// addHeaderValue adds value, the i-th header line's, to h[key]. vals holds a slot for every
// line: a key's first value is the slice vals[i:i+1] (capacity 1, so a second value appends to
// a copy), and the values of a whole head cost one allocation.
func addHeaderValue(h http.Header, vals []string, i int, key, value string) {
	vals[i] = value
	if old, ok := h[key]; ok {
		h[key] = append(old, value)
	} else {
		h[key] = vals[i : i+1 : i+1]
	}
}

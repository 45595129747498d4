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

// fillHeader adds the lines header lines in rest (checked by countHeaderLines) to h, values
// without the blanks around them, except those of canonical key pick: it returns the value of the
// last of those and how many there were, and adds them to h only with keepPick. A key's first
// value is a slice of one array that holds a slot for every line (capacity 1, so a second value
// appends to a copy): the values of a whole head cost one allocation.
func fillHeader(h http.Header, rest string, lines int, pick string, keepPick bool) (picked string, n int) {
	vals := make([]string, lines)
	for i := 0; len(rest) > 2; i++ {
		var l string
		l, rest, _ = strings.Cut(rest, "\r\n")
		name, value, _ := strings.Cut(l, ":")
		value = strings.Trim(value, " \t")
		key := textproto.CanonicalMIMEHeaderKey(name)
		if key == pick {
			picked, n = value, n+1
			if !keepPick {
				continue
			}
		}
		vals[i] = value
		if old, ok := h[key]; ok {
			h[key] = append(old, value)
		} else {
			h[key] = vals[i : i+1 : i+1]
		}
	}
	return picked, n
}

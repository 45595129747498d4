package workspace

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxQuoted bounds how much of a caller's value Quote shows.
const MaxQuoted = 80

// Quote is s quoted for an error message (Go syntax, valid UTF-8 whatever s holds). A value
// longer than MaxQuoted bytes is cut at a character boundary and marked as cut, with its length:
// "aaaa..."... (500000 bytes). An error never echoes an oversized input back whole: it would make
// a 500 KB request's answer (and its log line) megabytes long.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	n := MaxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:n]), len(s))
}

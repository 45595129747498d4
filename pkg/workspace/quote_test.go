package workspace

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuoteCutsOversizedValues(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"node", `"node"`},
		{"a\x00b", `"a\x00b"`},
		{strings.Repeat("a", MaxQuoted), `"` + strings.Repeat("a", MaxQuoted) + `"`},
		{strings.Repeat("a", MaxQuoted+1), `"` + strings.Repeat("a", MaxQuoted) + `"... (81 bytes)`},
		// A cut inside a character backs off to its start: no half character is shown.
		{strings.Repeat("a", MaxQuoted-1) + "é" + "b", `"` + strings.Repeat("a", MaxQuoted-1) + `"... (82 bytes)`},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%.20q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, big := range []string{strings.Repeat("\x01", 500_000), strings.Repeat("é", 250_000), strings.Repeat("\xff", 500_000)} {
		got := Quote(big)
		if len(got) > 4*MaxQuoted+32 || !utf8.ValidString(got) || !strings.Contains(got, "... (") {
			t.Errorf("Quote of %d bytes = %d bytes %.100q: want a short, valid, marked cut", len(big), len(got), got)
		}
	}
}

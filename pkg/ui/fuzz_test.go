package ui

import (
	"net/url"
	"strings"
	"testing"
)

// browserView is how a browser reads a Location path: TAB, CR and LF removed, "\" as "/".
func browserView(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '\t', '\r', '\n':
			return -1
		case '\\':
			return '/'
		}
		return r
	}, s)
}

// FuzzSafeNext: the redirect after login is "/" or the input unchanged, and stays on this site as
// a browser reads it (also after one more decoding).
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/", "/workspaces/demo", "//evil.example", "/\\evil.example", "/%2F%2Fevil.example", "https://evil.example/", "", "/?q=1", "/\r\n/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if got != "/" && got != next {
			t.Fatalf("safeNext(%q) = %q: want the input or /", next, got)
		}
		dec, _ := url.PathUnescape(got)
		for _, v := range []string{got, dec} {
			b := browserView(v)
			if !strings.HasPrefix(b, "/") || strings.HasPrefix(b, "//") {
				t.Fatalf("safeNext(%q) = %q, which a browser reads as %q: it leaves the site", next, got, b)
			}
			if u, err := url.Parse(b); err == nil && (u.Host != "" || u.Scheme != "") {
				t.Fatalf("safeNext(%q) = %q names host %q", next, got, u.Host)
			}
		}
	})
}

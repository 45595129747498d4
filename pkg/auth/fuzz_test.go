package auth

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzTokenFromRequest: a token is taken only from "Bearer <token>", comes back without the
// surrounding blanks and never empty; everything else is refused with a reason.
func FuzzTokenFromRequest(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  abc  ", "Basic Zm9v", "Bearer", "Bearer ", "  Bearer\tabc", "Bearer a b c", "Bearer \x00", "BEARER abc\r\n", strings.Repeat("Bearer ", 100)} {
		f.Add(s, "")
	}
	f.Add("", "nogoo9_token=abc")
	f.Add("", "__Host-nogoo9_token=abc; other=1")
	f.Fuzz(func(t *testing.T, header, cookie string) {
		r := httptest.NewRequest("GET", "http://api.example/api/v1/whoami", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		if cookie != "" {
			r.Header.Set("Cookie", cookie)
		}
		tok, err := TokenFromRequest(r)
		if err != nil {
			if tok != "" || err.Error() == "" {
				t.Fatalf("TokenFromRequest(%q) = %q, %v", header, tok, err)
			}
			return
		}
		if header == "" {
			t.Fatalf("a token %q without an Authorization header (cookie %q)", tok, cookie)
		}
		if tok == "" || tok != strings.TrimSpace(tok) {
			t.Fatalf("TokenFromRequest(%q) = %q", header, tok)
		}
		scheme, _, _ := strings.Cut(strings.TrimSpace(header), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			t.Fatalf("TokenFromRequest(%q) took a token from scheme %q", header, scheme)
		}
	})
}

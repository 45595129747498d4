package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

func TestHTTPDateIsTheWallClocksSecond(t *testing.T) {
	// Across several second boundaries: the cached value must follow the wall clock's second.
	deadline := time.Now().Add(2500 * time.Millisecond)
	checks := 0
	for time.Now().Before(deadline) {
		before := time.Now().UTC().Format(http.TimeFormat)
		got := httpDate()
		after := time.Now().UTC().Format(http.TimeFormat)
		if got != before && got != after {
			t.Fatalf("httpDate() = %q, want %q or %q (the wall clock's second)", got, before, after)
		}
		checks++
	}
	if checks < 3 {
		t.Fatalf("only %d checks in 2.5 s", checks)
	}
}

func TestTokenCacheEntryEndsWithTheTTLOrTheTokenWhicheverIsFirst(t *testing.T) {
	const ttl = 30 * time.Second
	tc := newTokenCache(ttl)
	now := monoNow()
	tc.put("a", &auth.Caller{}, now)                                         // no expiry: the TTL
	tc.put("b", &auth.Caller{Expiry: time.Now().Add(10 * time.Second)}, now) // expires first
	tc.put("c", &auth.Caller{Expiry: time.Now().Add(time.Hour)}, now)        // the TTL first
	for _, tt := range []struct {
		token string
		at    time.Duration
		hit   bool
	}{
		{"a", 0, true}, {"a", ttl - time.Millisecond, true}, {"a", ttl, false},
		{"b", 9 * time.Second, true}, {"b", 10 * time.Second, false},
		{"c", ttl - time.Millisecond, true}, {"c", ttl, false},
		{"d", 0, false},
	} {
		if got := tc.get(tt.token, now+tt.at) != nil; got != tt.hit {
			t.Errorf("token %s at +%v: cached %v, want %v", tt.token, tt.at, got, tt.hit)
		}
	}
}

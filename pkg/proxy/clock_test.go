package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unsafe"

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
	tc.put("a", &auth.Caller{}, now) // no expiry: the TTL
	// Expiries as a token carries them: wall times without a monotonic reading.
	tc.put("b", &auth.Caller{Expiry: time.Now().Add(10 * time.Second).Round(0)}, now)   // expires first
	tc.put("c", &auth.Caller{Expiry: time.Now().Add(time.Hour).Round(0)}, now)          // the TTL first
	tc.put("e", &auth.Caller{Expiry: time.Now().Add(-time.Second).Round(0)}, now)       // expired already
	tc.put("f", &auth.Caller{Expiry: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, now) // far: the TTL
	for _, tt := range []struct {
		token string
		at    time.Duration
		hit   bool
	}{
		{"a", 0, true}, {"a", ttl - time.Millisecond, true}, {"a", ttl, false},
		{"b", 9 * time.Second, true}, {"b", 10 * time.Second, false},
		{"c", ttl - time.Millisecond, true}, {"c", ttl, false},
		{"d", 0, false},
		{"e", 0, false},
		{"f", 0, true}, {"f", ttl, false},
	} {
		if got := tc.get(tt.token, now+tt.at) != nil; got != tt.hit {
			t.Errorf("token %s at +%v: cached %v, want %v", tt.token, tt.at, got, tt.hit)
		}
	}
}

// The token's expiry is a wall time: once the wall clock has passed it, the cache refuses the
// token even when the monotonic clock says little time went by (a wall clock stepped forward, or
// a suspended host, whose monotonic clock stops), as the verifier would refuse it.
func TestTokenCacheRefusesATokenTheWallClockSaysExpired(t *testing.T) {
	tc := newTokenCache(30 * time.Second)
	now := monoNow()
	exp := time.Now().Add(100 * time.Millisecond).Round(0)
	tc.put("t", &auth.Caller{Expiry: exp}, now)
	if tc.get("t", now) == nil {
		t.Fatal("a token with time left is not cached")
	}
	for deadline := time.Now().Add(5 * time.Second); !time.Now().After(exp); {
		if time.Now().After(deadline) {
			t.Fatal("the wall clock did not pass the expiry within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tc.get("t", now+10*time.Millisecond) != nil {
		t.Error("a token whose expiry the wall clock has passed was accepted from the cache")
	}
}

// TestTokenCacheKeepsItsOwnCopyOfTheToken: the token a request names is a slice of its whole
// head (quickParse); the cache keeps a copy, so an entry holds its token, not the head it came in.
func TestTokenCacheKeepsItsOwnCopyOfTheToken(t *testing.T) {
	head := "GET /ws/jane/demo/ HTTP/1.1\r\nAuthorization: Bearer tok-123\r\n" + strings.Repeat("X-Pad: x\r\n", 40) + "\r\n"
	i := strings.Index(head, "tok-")
	token := head[i : i+len("tok-123")]
	tc := newTokenCache(time.Minute)
	tc.put(token, &auth.Caller{Subject: "jane"}, monoNow())
	if tc.get("tok-123", monoNow()) == nil {
		t.Fatal("the token is not cached")
	}
	for k := range tc.m {
		if unsafe.StringData(k) == unsafe.StringData(token) {
			t.Fatal("the cache's key is the request head's bytes: the entry keeps the whole head alive")
		}
	}
}

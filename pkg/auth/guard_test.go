package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingAuth accepts "good-*" tokens and counts every check that reaches it.
type countingAuth struct{ calls atomic.Int64 }

func (c *countingAuth) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, c.VerifyToken)
}

func (c *countingAuth) VerifyToken(_ context.Context, token string) (*Caller, error) {
	c.calls.Add(1)
	if len(token) > 5 && token[:5] == "good-" {
		return &Caller{Subject: token[5:]}, nil
	}
	return nil, &Error{Reason: "token rejected"}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func verifyFrom(g *Guard, client, token string) (*Caller, error) {
	return g.VerifyToken(WithClientAddr(context.Background(), client+":1234"), token)
}

func TestGuardBoundsVerifierCallsForGarbageTokens(t *testing.T) {
	const n = 1000
	tests := []struct {
		name      string
		token     func(i int) string
		client    func(i int) string
		wantCalls int64 // the most checks that may reach the verifier
	}{
		{"one garbage token sent n times is checked once (negative cache)",
			func(int) string { return "garbage" }, func(int) string { return "10.0.0.1" }, 1},
		{"n distinct garbage tokens from one client: at most the client's burst",
			func(i int) string { return fmt.Sprintf("garbage-%d", i) }, func(int) string { return "10.0.0.1" }, 10},
		{"n distinct garbage tokens from n clients: at most the global burst",
			func(i int) string { return fmt.Sprintf("garbage-%d", i) }, func(i int) string { return fmt.Sprintf("10.0.%d.%d", i/250, i%250) }, 50},
		{"one good token sent n times is checked once (positive cache)",
			func(int) string { return "good-alice" }, func(int) string { return "10.0.0.1" }, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inner := &countingAuth{}
			clock := &fakeClock{t: time.Unix(1_000_000, 0)}
			g := NewGuard(inner, GuardOptions{Now: clock.now})
			for i := range n {
				_, _ = verifyFrom(g, tc.client(i), tc.token(i))
			}
			if got := inner.calls.Load(); got > tc.wantCalls {
				t.Errorf("%d requests reached the verifier %d times, want at most %d", n, got, tc.wantCalls)
			}
		})
	}

	t.Run("concurrent garbage from one client cannot overrun the burst", func(t *testing.T) {
		inner := &countingAuth{}
		g := NewGuard(inner, GuardOptions{Now: (&fakeClock{t: time.Unix(1_000_000, 0)}).now})
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = verifyFrom(g, "10.0.0.9", fmt.Sprintf("junk-%d", i)) }()
		}
		wg.Wait()
		if got := inner.calls.Load(); got > 10 {
			t.Errorf("200 concurrent garbage tokens reached the verifier %d times, want at most 10", got)
		}
	})
}

func TestGuardAnswersLimitedClientsWith429AndKeepsServingOthers(t *testing.T) {
	inner := &countingAuth{}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	g := NewGuard(inner, GuardOptions{Now: clock.now})
	for i := range 100 {
		_, _ = verifyFrom(g, "10.0.0.1", fmt.Sprintf("garbage-%d", i))
	}
	_, err := verifyFrom(g, "10.0.0.1", "good-alice")
	var ae *Error
	if !errors.As(err, &ae) || ae.RetryAfter <= 0 {
		t.Fatalf("a new token from the flooding client = %v, want a refusal with RetryAfter", err)
	}
	if c, err := verifyFrom(g, "10.0.0.2", "good-bob"); err != nil || c.Subject != "bob" {
		t.Fatalf("another client's good token = %v, %v; want bob", c, err)
	}
	clock.add(30 * time.Second) // the client's bucket refills
	if c, err := verifyFrom(g, "10.0.0.1", "good-alice"); err != nil || c.Subject != "alice" {
		t.Fatalf("after the bucket refilled = %v, %v; want alice", c, err)
	}

	r := httptest.NewRequest(http.MethodGet, "/api/v1/whoami", nil)
	r.RemoteAddr = "10.0.0.3:999"
	for i := range 100 {
		r.Header.Set("Authorization", fmt.Sprintf("Bearer junk-%d", i))
		rec := httptest.NewRecorder()
		Middleware(g, nil, http.NotFoundHandler()).ServeHTTP(rec, r)
		if rec.Code == http.StatusTooManyRequests {
			if rec.Header().Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After")
			}
			return
		}
	}
	t.Fatalf("100 garbage tokens from one address never got a 429")
}

func TestGuardExpiresEntries(t *testing.T) {
	inner := &countingAuth{}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	g := NewGuard(inner, GuardOptions{Now: clock.now, MaxEntries: 3})
	_, _ = verifyFrom(g, "a", "good-x")
	clock.add(11 * time.Second)
	_, _ = verifyFrom(g, "a", "good-x")
	if got := inner.calls.Load(); got != 2 {
		t.Errorf("a verified token was checked %d times across its 10s TTL, want 2", got)
	}
	for i := range 10 {
		_, _ = verifyFrom(g, "a", fmt.Sprintf("good-%d", i))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ok) > 3 || len(g.bad) > 3 {
		t.Errorf("caches hold %d and %d entries, want at most 3 each", len(g.ok), len(g.bad))
	}
}

// blockingAuth accepts good- tokens, but only once release is closed; inflight counts the checks
// waiting on it.
type blockingAuth struct {
	inflight atomic.Int64
	release  chan struct{}
}

func (b *blockingAuth) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, b.VerifyToken)
}

func (b *blockingAuth) VerifyToken(ctx context.Context, token string) (*Caller, error) {
	b.inflight.Add(1)
	defer b.inflight.Add(-1)
	<-b.release
	return (&countingAuth{}).VerifyToken(ctx, token)
}

// Many valid tokens at once from one address (users behind one ingress or NAT) are all served:
// only failed checks may use up the buckets, never checks that are still in flight.
func TestGuardServesManyValidTokensAtOnceFromOneAddress(t *testing.T) {
	inner := &blockingAuth{release: make(chan struct{})}
	g := NewGuard(inner, GuardOptions{Now: (&fakeClock{t: time.Unix(1_000_000, 0)}).now})
	const n = 30 // three times the per-client burst
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := verifyFrom(g, "10.0.0.7", fmt.Sprintf("good-user-%d", i))
			errs <- err
		}()
	}
	// Wait until the per-client burst's worth of checks is in flight, then let them finish.
	deadline := time.Now().Add(10 * time.Second)
	for inner.inflight.Load() < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := inner.inflight.Load(); got < 10 {
		t.Fatalf("only %d checks in flight after 10s, want the burst of 10", got)
	}
	close(inner.release)
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("a valid token was refused: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a check did not end within 10s")
		}
	}
}

// slowAuth accepts good- tokens; each check moves the clock on, as a TokenReview under load
// takes real time while other checks start.
type slowAuth struct{ clock *fakeClock }

func (s *slowAuth) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, s.VerifyToken)
}

func (s *slowAuth) VerifyToken(ctx context.Context, token string) (*Caller, error) {
	s.clock.add(200 * time.Millisecond)
	return (&countingAuth{}).VerifyToken(ctx, token)
}

// Valid tokens never use up the buckets, however long their checks take and however many run at
// once (the bulk e2e: 10 users spawning 16 at a time through one loopback address).
func TestGuardNeverChargesSlowValidChecks(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	g := NewGuard(&slowAuth{clock: clock}, GuardOptions{Now: clock.now, SuccessTTL: time.Millisecond})
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if _, err := verifyFrom(g, "127.0.0.1", fmt.Sprintf("good-user-%d-%d", w, i)); err != nil {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Errorf("%d of 320 valid token checks were refused", n)
	}
}

// revocableAuth accepts "good-*" tokens unless revoked, with an optional expiry per token.
type revocableAuth struct {
	mu      sync.Mutex
	revoked map[string]bool
	expiry  map[string]time.Time
	calls   atomic.Int64
}

func (a *revocableAuth) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, a.VerifyToken)
}

func (a *revocableAuth) VerifyToken(_ context.Context, token string) (*Caller, error) {
	a.calls.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(token) > 5 && token[:5] == "good-" && !a.revoked[token] {
		return &Caller{Subject: token[5:], Expiry: a.expiry[token]}, nil
	}
	return nil, &Error{Reason: "token rejected"}
}

// Behind an ingress every client has the ingress's address. An anonymous client that sends a
// couple of garbage tokens a second keeps that address's bucket (and with more addresses, the
// global one) empty: before known-good tokens bypassed the limiters, every periodic re-check of a
// valid token (each 10 s on the API and MCP, 30 s through the proxy) was answered 429.
func TestGuardNeverRefusesAVerifiedTokenBecauseOfOthersFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attacker func(i int) string // the address of the attacker's i-th garbage token
		perSec   int
	}{
		{"the attacker shares the user's (ingress) address", func(int) string { return "10.0.0.1" }, 2},
		{"the attacker drains the global bucket from many addresses", func(i int) string { return fmt.Sprintf("10.9.%d.%d", i/200%200, i%200) }, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &revocableAuth{}
			clock := &fakeClock{t: time.Unix(1_000_000, 0)}
			g := NewGuard(inner, GuardOptions{Now: clock.now})
			for _, tok := range []string{"good-alice", "good-bob"} {
				if _, err := verifyFrom(g, "10.0.0.1", tok); err != nil {
					t.Fatalf("first check of %s: %v", tok, err)
				}
			}
			garbage := 0
			const step = 50 * time.Millisecond
			for tick := range int(10 * time.Minute / step) {
				clock.add(step)
				for garbage < (tick+1)*tc.perSec*int(step/time.Millisecond)/1000 {
					_, _ = verifyFrom(g, tc.attacker(garbage), fmt.Sprintf("garbage-%d", garbage))
					garbage++
				}
				if tick%(int(time.Second/step)) == 0 {
					if _, err := verifyFrom(g, "10.0.0.1", "good-alice"); err != nil {
						t.Fatalf("after %v and %d garbage tokens, alice's verified token was refused: %v", time.Duration(tick)*step, garbage, err)
					}
				}
				if tick%(int(30*time.Second/step)) == 0 {
					if _, err := verifyFrom(g, "10.0.0.1", "good-bob"); err != nil {
						t.Fatalf("after %v, bob's verified token (re-checked each 30 s, as the proxy does) was refused: %v", time.Duration(tick)*step, err)
					}
				}
			}
			if garbage < 1000 {
				t.Fatalf("the attacker sent only %d garbage tokens", garbage)
			}
		})
	}
}

// A known-good token bypasses the limiters, never the verifier: revoked, it is refused at its next
// check (at most SuccessTTL later) and forgotten.
func TestGuardRechecksKnownTokensAndForgetsRevokedOnes(t *testing.T) {
	inner := &revocableAuth{revoked: map[string]bool{}}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	g := NewGuard(inner, GuardOptions{Now: clock.now})
	if _, err := verifyFrom(g, "10.0.0.1", "good-carol"); err != nil {
		t.Fatal(err)
	}
	inner.mu.Lock()
	inner.revoked["good-carol"] = true
	inner.mu.Unlock()
	clock.add(11 * time.Second)
	if _, err := verifyFrom(g, "10.0.0.1", "good-carol"); err == nil {
		t.Fatal("a revoked token was accepted after the verified-tokens TTL")
	}
	g.mu.Lock()
	_, known := g.ok[sha256.Sum256([]byte("good-carol"))]
	g.mu.Unlock()
	if known {
		t.Fatal("a revoked token is still remembered as verified")
	}
}

// Known-good tokens are remembered until their expiry (KnownTTL at most), in at most MaxEntries
// entries; expired ones are evicted first.
func TestGuardBoundsKnownTokens(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	inner := &revocableAuth{expiry: map[string]time.Time{
		"good-short": clock.now().Add(time.Minute), "good-long": clock.now().Add(time.Hour),
	}}
	g := NewGuard(inner, GuardOptions{Now: clock.now, MaxEntries: 2})
	_, _ = verifyFrom(g, "a", "good-short")
	_, _ = verifyFrom(g, "a", "good-long")
	clock.add(2 * time.Minute) // good-short has expired
	_, _ = verifyFrom(g, "a", "good-new")
	g.mu.Lock()
	n := len(g.ok)
	g.mu.Unlock()
	if n > 2 {
		t.Fatalf("the verified-tokens cache holds %d entries, want at most MaxEntries 2", n)
	}
	// good-short (expired) was evicted, not good-long: with this address's bucket empty, good-long
	// is still served; it is past SuccessTTL, so it is re-checked, bypassing the limiter.
	for i := range 20 {
		_, _ = verifyFrom(g, "a", fmt.Sprintf("garbage-%d", i))
	}
	if _, err := verifyFrom(g, "a", "good-long"); err != nil {
		t.Fatalf("a known token whose entry should have been kept was refused: %v", err)
	}
	clock.add(time.Hour) // good-long has expired: a new check, under the limiter
	for i := range 20 {
		_, _ = verifyFrom(g, "a", fmt.Sprintf("junk-%d", i))
	}
	if _, err := verifyFrom(g, "a", "good-long"); err == nil {
		t.Fatal("a token past its expiry still bypassed the limiter")
	}
}

// IPv6 clients are keyed by their /64: one host commonly holds a whole /64 and can send from as
// many of its addresses as it likes.
func TestClientAddrKeysIPv6ByPrefix(t *testing.T) {
	for remote, want := range map[string]string{
		"10.0.0.1:1234":                 "10.0.0.1",
		"[::ffff:10.0.0.1]:1234":        "10.0.0.1",
		"[2001:db8:1:2::a]:443":         "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:1:2:3]:443": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":             "fe80::/64",
		"[::1]:80":                      "::/64",
		"2001:db8:1:2::a":               "2001:db8:1:2::/64",
		"not-an-address":                "not-an-address",
		"@":                             "@",
	} {
		if got := clientFrom(WithClientAddr(context.Background(), remote), nil); got != want {
			t.Errorf("WithClientAddr(%q) keys the client as %q, want %q", remote, got, want)
		}
	}

	inner := &countingAuth{}
	g := NewGuard(inner, GuardOptions{Now: (&fakeClock{t: time.Unix(1_000_000, 0)}).now})
	for i := range 1000 {
		_, _ = g.VerifyToken(WithClientAddr(context.Background(), fmt.Sprintf("[2001:db8:1:2::%x]:1", i+1)), fmt.Sprintf("garbage-%d", i))
	}
	if got := inner.calls.Load(); got > 10 {
		t.Errorf("garbage tokens from 1000 addresses of one /64 reached the verifier %d times, want at most the client burst of 10", got)
	}
}

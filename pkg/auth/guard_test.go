package auth

import (
	"context"
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

package auth

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func newTestLimiter(clock *fakeClock, o FailureLimits) *FailureLimiter {
	o.Now = clock.now
	return NewFailureLimiter(o)
}

// admitN admits n attempts of client and fails the test if any is refused.
func admitN(t *testing.T, l *FailureLimiter, client string, n int) []func(bool) {
	t.Helper()
	var dones []func(bool)
	for i := range n {
		done, wait, retry := l.TryAdmit(client)
		if done == nil {
			t.Fatalf("attempt %d of %s refused (wait %v, retry %v), want admitted", i+1, client, wait != nil, retry)
		}
		dones = append(dones, done)
	}
	return dones
}

func TestFailureLimiterAdmitsUpToTheBurstInFlight(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := newTestLimiter(clock, FailureLimits{ClientBurst: 3, Burst: 5})
	dones := admitN(t, l, "a", 3)
	done, wait, retry := l.TryAdmit("a")
	if done != nil || wait == nil || retry != 0 {
		t.Fatalf("4th attempt in flight with a burst of 3: done %v, wait %v, retry %v; want only a wait channel", done != nil, wait != nil, retry)
	}
	// Another client: its own bucket is full, the global one holds 2 beyond the 3 in flight.
	others := admitN(t, l, "b", 2)
	if done, wait, _ := l.TryAdmit("c"); done != nil || wait == nil {
		t.Fatalf("6th attempt in flight with a global burst of 5: done %v, wait %v; want a wait channel", done != nil, wait != nil)
	}
	for _, d := range append(dones, others...) {
		d(false)
	}
	if l.all != 0 || len(l.inflight) != 0 {
		t.Errorf("after every attempt ended: %d in flight (%v), want none", l.all, l.inflight)
	}
}

func TestFailureLimiterOnlyFailuresConsume(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := newTestLimiter(clock, FailureLimits{ClientBurst: 3, Burst: 5})
	// Successes, many more than the bursts: nothing consumed.
	for range 20 {
		admitN(t, l, "a", 1)[0](false)
	}
	now := clock.now()
	if c, g := l.clients["a"].TokensAt(now), l.global.TokensAt(now); c != 3 || g != 5 {
		t.Fatalf("after 20 successes: client bucket %v, global %v; want 3 and 5 (full)", c, g)
	}
	admitN(t, l, "a", 1)[0](true)
	if c, g := l.clients["a"].TokensAt(now), l.global.TokensAt(now); c != 2 || g != 4 {
		t.Fatalf("after one failure: client bucket %v, global %v; want 2 and 4", c, g)
	}
	// A second call of done does nothing.
	done := admitN(t, l, "a", 1)[0]
	done(true)
	done(true)
	if c, g := l.clients["a"].TokensAt(now), l.global.TokensAt(now); c != 1 || g != 3 || l.all != 0 {
		t.Fatalf("after a failure whose done was called twice: client bucket %v, global %v, %d in flight; want 1, 3, 0", c, g, l.all)
	}
}

func TestFailureLimiterWaitEndsWithAnAttempt(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := newTestLimiter(clock, FailureLimits{ClientBurst: 1, Burst: 5})
	done := admitN(t, l, "a", 1)[0]
	_, wait, _ := l.TryAdmit("a")
	if wait == nil {
		t.Fatal("second attempt with a burst of 1 and one in flight: no wait channel")
	}
	select {
	case <-wait:
		t.Fatal("wait channel closed while the attempt is in flight")
	default:
	}
	done(false) // a success gives the token back
	select {
	case <-wait:
	default:
		t.Fatal("wait channel not closed when the attempt ended")
	}
	admitN(t, l, "a", 1)[0](true)

	// Admit waits the same way, and gives up with its context.
	l2 := newTestLimiter(clock, FailureLimits{ClientBurst: 1, Burst: 5})
	held := admitN(t, l2, "b", 1)[0]
	admitted := make(chan func(bool))
	go func() {
		d, _, _ := l2.Admit(context.Background(), "b")
		admitted <- d
	}()
	held(false)
	if d := <-admitted; d == nil {
		t.Error("Admit refused after the attempt in flight succeeded")
	} else {
		d(false)
	}
	held = admitN(t, l2, "b", 1)[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, retry, err := l2.Admit(ctx, "b"); d != nil || retry != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("Admit with an ended context behind an attempt in flight: done %v, retry %v, err %v; want context.Canceled", d != nil, retry, err)
	}
	held(false)
}

func TestFailureLimiterRetryAfterWhenSpent(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := newTestLimiter(clock, FailureLimits{ClientFailures: 0.5, ClientBurst: 2, Burst: 50})
	for _, d := range admitN(t, l, "a", 2) {
		d(true)
	}
	done, wait, retry := l.TryAdmit("a")
	if done != nil || wait != nil || retry != 2*time.Second {
		t.Fatalf("client bucket spent: done %v, wait %v, retry %v; want only a retry after 2s", done != nil, wait != nil, retry)
	}
	if d, retry, err := l.Admit(context.Background(), "a"); d != nil || retry != 2*time.Second || err != nil {
		t.Errorf("Admit with a spent bucket: done %v, retry %v, err %v; want a retry after 2s", d != nil, retry, err)
	}
	clock.add(2 * time.Second)
	admitN(t, l, "a", 1)[0](false)
}

func TestFailureLimiterClientsAreIndependentUntilTheGlobalBucketIsSpent(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := newTestLimiter(clock, FailureLimits{ClientBurst: 3, Burst: 10})
	for _, d := range admitN(t, l, "attacker", 3) {
		d(true)
	}
	if _, _, retry := l.TryAdmit("attacker"); retry <= 0 {
		t.Fatal("the attacker's spent bucket did not refuse it")
	}
	// Another client still gets in, as many times as the global bucket has left (7).
	for i := range 7 {
		for _, d := range admitN(t, l, fmt.Sprintf("other-%d", i), 1) {
			d(true)
		}
	}
	if done, wait, retry := l.TryAdmit("innocent"); done != nil || wait != nil || retry <= 0 {
		t.Fatalf("a new client once the global bucket is spent: done %v, wait %v, retry %v; want a retry-after", done != nil, wait != nil, retry)
	}
	clock.add(100 * time.Millisecond) // the global bucket refills one token a 1/10s
	admitN(t, l, "innocent", 1)[0](false)
}

func TestFailureLimiterBoundsItsClients(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	const maxClients = 100
	l := newTestLimiter(clock, FailureLimits{ClientFailures: 1e-9, Failures: 1e9, Burst: 1 << 30, MaxClients: maxClients})
	// One client in flight all along: it is never forgotten.
	held := admitN(t, l, "held", 1)[0]
	scans := 0
	for i := range 10 * maxClients {
		before := len(l.clients)
		// Each new address fails once: no bucket is full again, so the arbitrary ones go.
		admitN(t, l, fmt.Sprintf("10.0.%d.%d", i/250, i%250), 1)[0](true)
		if n := len(l.clients); n > maxClients {
			t.Fatalf("after %d new addresses: %d clients kept, want at most %d", i+1, n, maxClients)
		} else if n < before {
			scans++
		}
		if _, ok := l.clients["held"]; !ok {
			t.Fatalf("after %d new addresses: the client with an attempt in flight was forgotten", i+1)
		}
	}
	// A tenth goes at once: about one scan per maxClients/10 arrivals, not one per arrival.
	if scans == 0 || scans > 10*maxClients/(maxClients/10)+1 {
		t.Errorf("%d new addresses scanned the map %d times, want at most about %d", 10*maxClients, scans, 10*maxClients/(maxClients/10))
	}
	held(false)
}

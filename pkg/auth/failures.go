package auth

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// FailureLimits bound the attempts that fail. Zero fields take the defaults below (the Guard's).
type FailureLimits struct {
	// ClientFailures per second (burst ClientBurst) may fail from one client; defaults 1 and 10.
	ClientFailures float64
	ClientBurst    int
	// Failures per second (burst Burst) may fail from all clients together; defaults 10 and 50.
	Failures float64
	Burst    int
	// MaxClients bounds the per-client buckets kept; default 10000.
	MaxClients int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// FailureLimiter admits attempts that may fail and cost something (a token check that makes an
// outbound call, an OIDC code exchange) under token buckets per client and overall that only
// failures consume. An attempt may start only while both its client's bucket and the global one
// hold a token for it beyond the attempts already in flight (per client and overall, each of which
// may still fail), so concurrent attempts cannot overrun them either. A failed attempt then
// consumes one token of each; a successful one consumes nothing.
//
// The per-client buckets are bounded (MaxClients): when full, the clients whose buckets are full
// again are forgotten, and if too few are, arbitrary ones, a tenth at once (a stream of new clients
// scans the map once per MaxClients/10 arrivals). A forgotten client starts with a full bucket,
// still bounded by the global one. A client with attempts in flight is not forgotten, so the
// buckets kept are at most MaxClients plus the attempts in flight (at most Burst).
type FailureLimiter struct {
	o FailureLimits

	mu       sync.Mutex
	clients  map[string]*rate.Limiter
	global   *rate.Limiter
	inflight map[string]int
	all      int
	// settled is closed (and replaced) whenever an attempt ends: a caller refused only because of
	// attempts in flight waits for it and looks again.
	settled chan struct{}
}

// NewFailureLimiter returns a limiter with full buckets.
func NewFailureLimiter(o FailureLimits) *FailureLimiter {
	if o.ClientFailures <= 0 {
		o.ClientFailures = 1
	}
	if o.ClientBurst <= 0 {
		o.ClientBurst = 10
	}
	if o.Failures <= 0 {
		o.Failures = 10
	}
	if o.Burst <= 0 {
		o.Burst = 50
	}
	if o.MaxClients <= 0 {
		o.MaxClients = 10000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &FailureLimiter{
		o: o, clients: map[string]*rate.Limiter{}, global: rate.NewLimiter(rate.Limit(o.Failures), o.Burst),
		inflight: map[string]int{}, settled: make(chan struct{}),
	}
}

// TryAdmit decides at once whether client may start an attempt. Exactly one result is set:
//   - done: admitted; call done once with the attempt's outcome when it is known (done(false) also
//     gives back an admission left unused);
//   - wait: refused only because attempts in flight hold the tokens left (most of them succeed and
//     give them back: many clients behind one NAT or ingress); wait is closed when one ends, then
//     try again;
//   - retryAfter > 0: refused because failures spent a bucket; no attempt ending can help, and a
//     token comes back in about retryAfter.
func (l *FailureLimiter) TryAdmit(client string) (done func(failed bool), wait <-chan struct{}, retryAfter time.Duration) {
	now := l.o.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	cl := l.client(client, now)
	ct, gt := cl.TokensAt(now), l.global.TokensAt(now)
	if ct >= float64(l.inflight[client]+1) && gt >= float64(l.all+1) {
		l.inflight[client]++
		l.all++
		ended := false
		return func(failed bool) { l.end(client, cl, failed, &ended) }, nil, 0
	}
	if ct < 1 || gt < 1 {
		return nil, nil, max(untilToken(cl, now), untilToken(l.global, now), time.Nanosecond)
	}
	return nil, l.settled, 0
}

// Admit is TryAdmit that waits while attempts in flight hold the tokens. It returns done, or nil
// and either how long until a token comes back, or ctx's error when ctx ended while it waited.
func (l *FailureLimiter) Admit(ctx context.Context, client string) (done func(failed bool), retryAfter time.Duration, err error) {
	for {
		done, wait, retryAfter := l.TryAdmit(client)
		if wait == nil {
			return done, retryAfter, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// end records the outcome of an attempt TryAdmit let through (once: a second call does nothing).
func (l *FailureLimiter) end(client string, cl *rate.Limiter, failed bool, ended *bool) {
	now := l.o.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if *ended {
		return
	}
	*ended = true
	if l.inflight[client]--; l.inflight[client] <= 0 {
		delete(l.inflight, client)
	}
	l.all--
	if failed {
		cl.ReserveN(now, 1)
		l.global.ReserveN(now, 1)
	}
	close(l.settled)
	l.settled = make(chan struct{})
}

// client returns the bucket of one client, making room for it when the map is full. l.mu is held.
func (l *FailureLimiter) client(client string, now time.Time) *rate.Limiter {
	if b, ok := l.clients[client]; ok {
		return b
	}
	if len(l.clients) >= l.o.MaxClients {
		for k, b := range l.clients {
			if l.inflight[k] == 0 && b.TokensAt(now) >= float64(l.o.ClientBurst) {
				delete(l.clients, k)
			}
		}
		for k := range l.clients {
			if len(l.clients) < l.o.MaxClients*9/10 {
				break
			}
			if l.inflight[k] == 0 {
				delete(l.clients, k)
			}
		}
	}
	b := rate.NewLimiter(rate.Limit(l.o.ClientFailures), l.o.ClientBurst)
	l.clients[client] = b
	return b
}

// untilToken is how long until lim holds a whole token again.
func untilToken(lim *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - lim.TokensAt(now)
	if missing <= 0 || lim.Limit() <= 0 {
		return time.Second
	}
	return time.Duration(missing / float64(lim.Limit()) * float64(time.Second))
}

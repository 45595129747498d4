package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// GuardOptions bound what token checks may cost. Zero fields take the defaults below.
type GuardOptions struct {
	// SuccessTTL is how long a verified token is remembered (never past its expiry); default 10s,
	// the Kubernetes API server's own token cache TTL. A revoked token keeps working that long.
	SuccessTTL time.Duration
	// FailureTTL is how long a refused token is remembered; default 30s.
	FailureTTL time.Duration
	// MaxEntries bounds each of the two caches; default 10000.
	MaxEntries int
	// ClientFailures per second (burst ClientBurst) may reach the verifier from one client
	// address; defaults 1 and 10.
	ClientFailures float64
	ClientBurst    int
	// Failures per second (burst Burst) may reach the verifier from all clients together;
	// defaults 10 and 50.
	Failures float64
	Burst    int
	// MaxClients bounds the per-client limiters kept; default 10000.
	MaxClients int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Guard makes failed token checks cheap: it wraps an Authenticator with a bounded cache of
// verified tokens, a bounded negative cache of refused ones, and token-bucket limits on checks
// that fail (per client address and overall). A garbage token thus costs at most one
// TokenReview or JWKS refetch, and a flood of distinct garbage tokens costs at most the
// limiters' rate; when a limiter is empty, an unknown token is answered 429 without a check.
// Successful checks consume nothing.
type Guard struct {
	inner Authenticator
	o     GuardOptions

	mu       sync.Mutex
	ok       map[[32]byte]okEntry
	bad      map[[32]byte]badEntry
	clients  map[string]*rate.Limiter
	global   *rate.Limiter
	inflight map[[32]byte]*flight
	// checking counts the checks in flight per client address and in all: each may still fail,
	// so it holds one token of its buckets until it ends (a success then gives it back by
	// consuming nothing). settled is closed (and replaced) whenever a check ends: a request
	// refused only because of checks in flight waits for it and looks again.
	checking    map[string]int
	checkingAll int
	settled     chan struct{}
}

type okEntry struct {
	c       *Caller
	expires time.Time
}

type badEntry struct {
	err     *Error
	expires time.Time
}

// flight lets concurrent checks of one token share a single verifier call.
type flight struct {
	done chan struct{}
	c    *Caller
	err  error
}

// NewGuard wraps inner.
func NewGuard(inner Authenticator, o GuardOptions) *Guard {
	if o.SuccessTTL <= 0 {
		o.SuccessTTL = 10 * time.Second
	}
	if o.FailureTTL <= 0 {
		o.FailureTTL = 30 * time.Second
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10000
	}
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
	return &Guard{
		inner: inner, o: o,
		ok: map[[32]byte]okEntry{}, bad: map[[32]byte]badEntry{}, clients: map[string]*rate.Limiter{},
		global: rate.NewLimiter(rate.Limit(o.Failures), o.Burst), inflight: map[[32]byte]*flight{}, checking: map[string]int{}, settled: make(chan struct{}),
	}
}

// Authenticate implements Authenticator.
func (g *Guard) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, g.VerifyToken)
}

// VerifyToken implements Authenticator: from the caches when it can, else through the inner
// verifier if the failure limiters allow it.
func (g *Guard) VerifyToken(ctx context.Context, token string) (*Caller, error) {
	key := sha256.Sum256([]byte(token))
retry:
	now := g.o.Now()
	g.mu.Lock()
	if e, ok := g.ok[key]; ok {
		if now.Before(e.expires) {
			g.mu.Unlock()
			return e.c, nil
		}
		delete(g.ok, key)
	}
	if e, ok := g.bad[key]; ok {
		if now.Before(e.expires) {
			g.mu.Unlock()
			return nil, e.err
		}
		delete(g.bad, key)
	}
	if f, ok := g.inflight[key]; ok {
		g.mu.Unlock()
		select {
		case <-f.done:
			return f.c, f.err
		case <-ctx.Done():
			return nil, &Error{Reason: "request ended while its token was being checked", Err: ctx.Err(), Transient: true}
		}
	}
	// A check may fail, so it may start only while both buckets hold a token for it beyond the
	// checks already in flight: concurrent garbage cannot overrun them. Only a failure consumes.
	client := clientFrom(ctx)
	cl := g.clientLimiter(client)
	if cl.TokensAt(now) < float64(g.checking[client]+1) || g.global.TokensAt(now) < float64(g.checkingAll+1) {
		if g.checkingAll > 0 {
			// Checks in flight hold the tokens; most of them succeed and give them back (many
			// valid tokens at once from one address: users behind an ingress or NAT). Wait for
			// one to end, then look again.
			settled := g.settled
			g.mu.Unlock()
			select {
			case <-settled:
				goto retry
			case <-ctx.Done():
				return nil, &Error{Reason: "request ended while waiting for other token checks", Err: ctx.Err(), Transient: true}
			}
		}
		d := max(untilToken(cl, now), untilToken(g.global, now))
		g.mu.Unlock()
		return nil, &Error{Reason: "too many failed token checks recently; try again in a few seconds with a valid token", RetryAfter: d}
	}
	g.checking[client]++
	g.checkingAll++
	f := &flight{done: make(chan struct{})}
	g.inflight[key] = f
	g.mu.Unlock()

	c, err := g.inner.VerifyToken(ctx, token)

	now = g.o.Now()
	g.mu.Lock()
	delete(g.inflight, key)
	if g.checking[client]--; g.checking[client] <= 0 {
		delete(g.checking, client)
	}
	g.checkingAll--
	if err != nil {
		cl.ReserveN(now, 1)
		g.global.ReserveN(now, 1)
	}
	if err == nil {
		exp := now.Add(g.o.SuccessTTL)
		if !c.Expiry.IsZero() && c.Expiry.Before(exp) {
			exp = c.Expiry
		}
		g.evict(len(g.ok), func() { evictOne(g.ok, now, func(e okEntry) time.Time { return e.expires }) })
		g.ok[key] = okEntry{c: c, expires: exp}
	} else {
		var ae *Error
		if !errors.As(err, &ae) {
			ae = &Error{Reason: "invalid token", Err: err}
			err = ae
		}
		if !ae.Transient {
			g.evict(len(g.bad), func() { evictOne(g.bad, now, func(e badEntry) time.Time { return e.expires }) })
			g.bad[key] = badEntry{err: ae, expires: now.Add(g.o.FailureTTL)}
		}
	}
	f.c, f.err = c, err
	close(f.done)
	close(g.settled)
	g.settled = make(chan struct{})
	g.mu.Unlock()
	return c, err
}

// clientLimiter returns the failure limiter of one client address. g.mu is held.
func (g *Guard) clientLimiter(client string) *rate.Limiter {
	if l, ok := g.clients[client]; ok {
		return l
	}
	if len(g.clients) >= g.o.MaxClients {
		// Drop the limiters that are full again (their clients have been quiet); if none is,
		// drop any: a forgotten client starts with a full bucket, still bounded by the global one.
		now := g.o.Now()
		for k, l := range g.clients {
			if l.TokensAt(now) >= float64(g.o.ClientBurst) {
				delete(g.clients, k)
			}
		}
		for k := range g.clients {
			if len(g.clients) < g.o.MaxClients {
				break
			}
			delete(g.clients, k)
		}
	}
	l := rate.NewLimiter(rate.Limit(g.o.ClientFailures), g.o.ClientBurst)
	g.clients[client] = l
	return l
}

// evict makes room for one entry when a cache is full. g.mu is held.
func (g *Guard) evict(n int, one func()) {
	if n >= g.o.MaxEntries {
		one()
	}
}

// evictOne deletes every expired entry of m, or, if none has expired, one arbitrary entry.
func evictOne[V any](m map[[32]byte]V, now time.Time, expires func(V) time.Time) {
	removed := false
	for k, v := range m {
		if !now.Before(expires(v)) {
			delete(m, k)
			removed = true
		}
	}
	if removed {
		return
	}
	for k := range m {
		delete(m, k)
		return
	}
}

// untilToken is how long until lim holds a whole token again.
func untilToken(lim *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - lim.TokensAt(now)
	if missing <= 0 || lim.Limit() <= 0 {
		return time.Second
	}
	return time.Duration(missing / float64(lim.Limit()) * float64(time.Second))
}

package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
	"time"
)

// GuardOptions bound what token checks may cost. Zero fields take the defaults below.
type GuardOptions struct {
	// SuccessTTL is how long a verified token is remembered (never past its expiry); default 10s,
	// the Kubernetes API server's own token cache TTL. A revoked token keeps working that long.
	SuccessTTL time.Duration
	// FailureTTL is how long a refused token is remembered; default 30s.
	FailureTTL time.Duration
	// KnownTTL is how long a verified token stays known-good after its last successful check
	// (never past its expiry; for a token of unknown expiry, this long); default 24h. Once its
	// SuccessTTL has passed, a known-good token is checked again, but without the failure limiters:
	// other clients' failures (behind one ingress every client has its address) never get its
	// holder answered 429. A known-good token that then fails is forgotten.
	KnownTTL time.Duration
	// MaxEntries bounds each of the two caches (the verified one holds the known-good tokens);
	// default 10000. A full cache evicts its expired entries first.
	MaxEntries int
	// Limits bound the checks that may fail and reach the verifier, per client address and from
	// all together (FailureLimits' defaults: 1 a second, burst 10, per client; 10, burst 50, in
	// all). Their clock is Now.
	Limits FailureLimits
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the client the limits
	// count (TrustedProxies.ClientOf); none: the peer address.
	TrustedProxies TrustedProxies
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Guard makes failed token checks cheap: it wraps an Authenticator with a bounded cache of
// verified tokens, a bounded negative cache of refused ones, and token-bucket limits on checks
// that fail (per client address, an IPv6 client by its /64, and overall). A garbage token thus
// costs at most one TokenReview or JWKS refetch, and a flood of distinct garbage tokens costs at
// most the limiters' rate; when a limiter is empty, an unknown token is answered 429 without a
// check. Successful checks consume nothing. The limiters guard only what costs an outbound call:
// a verifier that can decide a token locally (OIDC, against the signing keys it holds) does so
// without them, and a token verified recently (known-good, see KnownTTL) is re-checked without
// them.
type Guard struct {
	inner Authenticator
	o     GuardOptions

	// failures limits the checks that make an outbound call, by client address and overall.
	failures *FailureLimiter

	mu       sync.Mutex
	ok       map[[32]byte]okEntry
	bad      map[[32]byte]badEntry
	inflight map[[32]byte]*flight
}

// okEntry is a verified token: served from the cache until expires, known-good until known.
type okEntry struct {
	c       *Caller
	expires time.Time
	known   time.Time
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
	if o.KnownTTL <= 0 {
		o.KnownTTL = 24 * time.Hour
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	limits := o.Limits
	limits.Now = o.Now
	return &Guard{
		inner: inner, o: o,
		failures: NewFailureLimiter(limits),
		ok:       map[[32]byte]okEntry{}, bad: map[[32]byte]badEntry{}, inflight: map[[32]byte]*flight{},
	}
}

// Authenticate implements Authenticator.
func (g *Guard) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, g.VerifyToken)
}

// localVerifier is a verifier that can decide some tokens without an outbound call (OIDC: a
// signature that the signing keys it holds verify, or a token that is not even a signed JWT).
type localVerifier interface {
	// verifyLocal decides token without an outbound call; outbound is true when it could not
	// (c and err are then nil), and only VerifyToken (which may make one) can. Errors are *Error.
	verifyLocal(ctx context.Context, token string) (c *Caller, outbound bool, err error)
}

// VerifyToken implements Authenticator: from the caches when it can, else locally when the inner
// verifier can decide without an outbound call, else through the inner verifier if the token is
// known-good or the failure limiters allow it.
func (g *Guard) VerifyToken(ctx context.Context, token string) (*Caller, error) {
	key := sha256.Sum256([]byte(token))
	local, _ := g.inner.(localVerifier)
	for {
		now := g.o.Now()
		g.mu.Lock()
		known := false
		if e, ok := g.ok[key]; ok {
			switch {
			case now.Before(e.expires):
				g.mu.Unlock()
				return e.c, nil
			case now.Before(e.known):
				known = true
			default:
				delete(g.ok, key)
			}
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
		if local != nil {
			// Free: no limiter. Only a token the verifier cannot decide from what it holds goes on.
			g.mu.Unlock()
			c, outbound, err := local.verifyLocal(ctx, token)
			if !outbound {
				// A refusal decided locally is not remembered: deciding it again costs about what a
				// cache entry does, and these come unlimited (each insertion into a full cache
				// scans it).
				g.mu.Lock()
				err = g.remember(key, c, err, g.o.Now(), false)
				g.mu.Unlock()
				return c, err
			}
			local = nil
			continue
		}
		// A check may fail, so unless the token is known-good it may start only while both buckets
		// hold a token for it beyond the checks already in flight: concurrent garbage cannot
		// overrun them. Only a failure consumes. Admitted under g.mu, it is this token's only
		// check in flight.
		var done func(failed bool)
		if !known {
			var settled <-chan struct{}
			var retryAfter time.Duration
			if done, settled, retryAfter = g.failures.TryAdmit(clientFrom(ctx, g.o.TrustedProxies)); done == nil {
				g.mu.Unlock()
				if settled == nil {
					return nil, &Error{Reason: "too many failed token checks recently; try again in a few seconds with a valid token", RetryAfter: retryAfter}
				}
				// Checks in flight hold the tokens; most of them succeed and give them back (many
				// valid tokens at once from one address: users behind an ingress or NAT). Wait for
				// one to end, then look again (locally too: it may have fetched new keys).
				select {
				case <-settled:
					local, _ = g.inner.(localVerifier)
					continue
				case <-ctx.Done():
					return nil, &Error{Reason: "request ended while waiting for other token checks", Err: ctx.Err(), Transient: true}
				}
			}
		}
		f := &flight{done: make(chan struct{})}
		g.inflight[key] = f
		g.mu.Unlock()

		c, err := g.inner.VerifyToken(ctx, token)

		now = g.o.Now()
		g.mu.Lock()
		delete(g.inflight, key)
		if done != nil {
			done(err != nil)
		}
		// A known-good token that fails now (revoked, expired) costs nothing: each can fail once
		// (it is then forgotten), and only its holder could send it.
		err = g.remember(key, c, err, now, true)
		f.c, f.err = c, err
		close(f.done)
		g.mu.Unlock()
		return c, err
	}
}

// remember caches the outcome of a check (a refusal only when negative) and returns err as an
// *Error. g.mu is held.
func (g *Guard) remember(key [32]byte, c *Caller, err error, now time.Time, negative bool) error {
	if err == nil {
		exp, known := now.Add(g.o.SuccessTTL), now.Add(g.o.KnownTTL)
		if !c.Expiry.IsZero() {
			exp, known = minTime(exp, c.Expiry), minTime(known, c.Expiry)
		}
		if _, ok := g.ok[key]; !ok {
			g.evict(len(g.ok), func() { evictOne(g.ok, now, func(e okEntry) time.Time { return e.known }) })
		}
		g.ok[key] = okEntry{c: c, expires: exp, known: known}
		return nil
	}
	var ae *Error
	if !errors.As(err, &ae) {
		ae = &Error{Reason: "invalid token", Err: err}
		err = ae
	}
	if !ae.Transient {
		// Refused: no longer known-good (revoked, or past its expiry).
		delete(g.ok, key)
		if !negative {
			return err
		}
		if _, ok := g.bad[key]; !ok {
			g.evict(len(g.bad), func() { evictOne(g.bad, now, func(e badEntry) time.Time { return e.expires }) })
		}
		g.bad[key] = badEntry{err: ae, expires: now.Add(g.o.FailureTTL)}
	}
	return err
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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

package session

import (
	"container/heap"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"slices"
	"sync"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// Session is one logged-in browser. A Session is never changed once the store holds it: a recheck
// replaces it with a copy (Rechecked), so a request keeps the one it read.
type Session struct {
	// Caller is who logged in, as the authenticator verified them at login or at the last
	// recheck.
	Caller *auth.Caller
	// CSRF is the token every state-changing request of this session must carry (a form field or
	// a header): a cross-site page cannot read it.
	CSRF string
	// Expires is when the session ends: the store's TTL after login, or the token's expiry when
	// that is sooner.
	Expires time.Time
	// Checked is when the authenticator last verified the session's token: at login, then at
	// every recheck (Rechecked).
	Checked time.Time
	// token is the bearer token the session started with: held here, in memory, so that the
	// authenticator can verify it again (a revoked token ends the session); never in the cookie.
	token string
}

// Token returns the bearer token the session started with, for the authenticator to verify again.
func (s *Session) Token() string { return s.token }

// ValidCSRF reports whether token is the session's CSRF token (constant time).
func (s *Session) ValidCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.CSRF)) == 1
}

// Options configure a Store.
type Options struct {
	// TTL is how long a session lives after login (8 h when 0).
	TTL time.Duration
	// MaxEntries bounds the sessions held at once (10,000 when 0).
	MaxEntries int
	// MaxPerCaller bounds the sessions one caller (by subject) holds at once (20 when 0); a
	// caller's next login ends their oldest session.
	MaxPerCaller int
	// RecheckAfter is how long a verified token is trusted before the session's next request
	// has it verified again (Stale); 30 s when 0.
	RecheckAfter time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Store is an in-memory session store, safe for concurrent use. Sessions are keyed by the SHA-256
// of their id, so the map never holds a usable cookie value.
//
// Room is shared fairly: one caller holds at most MaxPerCaller sessions, and when the store is
// full a login ends sessions of the callers holding the most, never those of a caller holding
// fewer. So a user who logs in in a loop ends only their own sessions.
type Store struct {
	o  Options
	mu sync.Mutex
	m  map[[sha256.Size]byte]*Session
	// by holds each subject's session keys, oldest first.
	by map[string][][sha256.Size]byte
}

// NewStore returns an empty Store.
func NewStore(o Options) *Store {
	if o.TTL <= 0 {
		o.TTL = 8 * time.Hour
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10000
	}
	if o.MaxPerCaller <= 0 {
		o.MaxPerCaller = 20
	}
	if o.RecheckAfter <= 0 {
		o.RecheckAfter = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{o: o, m: map[[sha256.Size]byte]*Session{}, by: map[string][][sha256.Size]byte{}}
}

// RandomToken returns 32 random bytes, base64url-encoded.
func RandomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func key(id string) [sha256.Size]byte { return sha256.Sum256([]byte(id)) }

// Create starts a session for c, whose token the authenticator has just verified, and returns its
// id (the cookie value) and the session.
func (s *Store) Create(c *auth.Caller, token string) (string, *Session) {
	now := s.o.Now()
	sess := &Session{Caller: c, CSRF: RandomToken(), Expires: now.Add(s.o.TTL), Checked: now, token: token}
	if !c.Expiry.IsZero() && c.Expiry.Before(sess.Expires) {
		sess.Expires = c.Expiry
	}
	id := RandomToken()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.by[c.Subject]) >= s.o.MaxPerCaller {
		s.deleteLocked(s.by[c.Subject][0])
	}
	if len(s.m) >= s.o.MaxEntries {
		s.evictLocked(now)
	}
	k := key(id)
	s.m[k] = sess
	s.by[c.Subject] = append(s.by[c.Subject], k)
	return id, sess
}

// deleteLocked removes the session with key k, if held.
func (s *Store) deleteLocked(k [sha256.Size]byte) {
	sess, ok := s.m[k]
	if !ok {
		return
	}
	delete(s.m, k)
	sub := sess.Caller.Subject
	keys := slices.DeleteFunc(s.by[sub], func(x [sha256.Size]byte) bool { return x == k })
	if len(keys) == 0 {
		delete(s.by, sub)
		return
	}
	s.by[sub] = keys
}

// evictLocked drops expired sessions and, if the store is still full, ends the oldest sessions
// of the callers holding the most (among equals, the caller whose oldest session expires first)
// until a tenth of the room is free, so a flood of logins does not evict on every call.
func (s *Store) evictLocked(now time.Time) {
	for k, v := range s.m {
		if !now.Before(v.Expires) {
			s.deleteLocked(k)
		}
	}
	if len(s.m) < s.o.MaxEntries {
		return
	}
	h := make(holders, 0, len(s.by))
	for _, keys := range s.by {
		h = append(h, holder{keys: slices.Clone(keys), first: s.m[keys[0]].Expires})
	}
	heap.Init(&h)
	for drop := len(s.m) - s.o.MaxEntries + max(1, s.o.MaxEntries/10); drop > 0 && len(h) > 0; drop-- {
		top := &h[0]
		k := top.keys[0]
		top.keys = top.keys[1:]
		if len(top.keys) == 0 {
			heap.Pop(&h)
		} else {
			top.first = s.m[top.keys[0]].Expires
			heap.Fix(&h, 0)
		}
		s.deleteLocked(k)
	}
}

// holder is one caller's sessions during an eviction; holders is a heap whose top is the caller
// to evict from next.
type holder struct {
	keys  [][sha256.Size]byte
	first time.Time
}

type holders []holder

func (h holders) Len() int { return len(h) }
func (h holders) Less(i, j int) bool {
	if len(h[i].keys) != len(h[j].keys) {
		return len(h[i].keys) > len(h[j].keys)
	}
	return h[i].first.Before(h[j].first)
}
func (h holders) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *holders) Push(x any)   { *h = append(*h, x.(holder)) }
func (h *holders) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Get returns the live session with id; an expired one is deleted and not returned.
func (s *Store) Get(id string) (*Session, bool) {
	if id == "" {
		return nil, false
	}
	k := key(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[k]
	if !ok {
		return nil, false
	}
	if !s.o.Now().Before(sess.Expires) {
		s.deleteLocked(k)
		return nil, false
	}
	return sess, true
}

// Stale reports whether sess's token was last verified RecheckAfter ago or longer: it must be
// verified again before the session serves another request.
func (s *Store) Stale(sess *Session) bool {
	return !s.o.Now().Before(sess.Checked.Add(s.o.RecheckAfter))
}

// Rechecked records that the session with id had its token verified again, as c, and returns the
// session as it now stands: a copy whose caller is c (an admin demoted is a user from now on),
// checked now, ending no later than c's expiry. False when the session ended meanwhile, or when c
// is another subject than the one who logged in: the session then ends (its owner logs in again).
func (s *Store) Rechecked(id string, c *auth.Caller) (*Session, bool) {
	k := key(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.m[k]
	if !ok {
		return nil, false
	}
	if c.Subject != old.Caller.Subject {
		s.deleteLocked(k)
		return nil, false
	}
	sess := *old
	sess.Caller, sess.Checked = c, s.o.Now()
	if !c.Expiry.IsZero() && c.Expiry.Before(sess.Expires) {
		sess.Expires = c.Expiry
	}
	s.m[k] = &sess
	return &sess, true
}

// Delete ends the session with id (logout). Unknown ids are ignored.
func (s *Store) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteLocked(key(id))
}

// Len is the number of sessions held (expired ones included until evicted).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

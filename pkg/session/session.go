package session

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sort"
	"sync"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// Session is one logged-in browser.
type Session struct {
	// Caller is who logged in, as the authenticator verified them at login.
	Caller *auth.Caller
	// CSRF is the token every state-changing request of this session must carry (a form field or
	// a header): a cross-site page cannot read it.
	CSRF string
	// Expires is when the session ends: the store's TTL after login, or the token's expiry when
	// that is sooner.
	Expires time.Time
}

// ValidCSRF reports whether token is the session's CSRF token (constant time).
func (s *Session) ValidCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.CSRF)) == 1
}

// Options configure a Store.
type Options struct {
	// TTL is how long a session lives after login (8 h when 0).
	TTL time.Duration
	// MaxEntries bounds the sessions held at once (10,000 when 0); when full, a login evicts the
	// session that would expire first.
	MaxEntries int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Store is an in-memory session store, safe for concurrent use. Sessions are keyed by the SHA-256
// of their id, so the map never holds a usable cookie value.
type Store struct {
	o  Options
	mu sync.Mutex
	m  map[[sha256.Size]byte]*Session
}

// NewStore returns an empty Store.
func NewStore(o Options) *Store {
	if o.TTL <= 0 {
		o.TTL = 8 * time.Hour
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{o: o, m: map[[sha256.Size]byte]*Session{}}
}

// RandomToken returns 32 random bytes, base64url-encoded.
func RandomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func key(id string) [sha256.Size]byte { return sha256.Sum256([]byte(id)) }

// Create starts a session for c and returns its id (the cookie value) and the session.
func (s *Store) Create(c *auth.Caller) (string, *Session) {
	now := s.o.Now()
	sess := &Session{Caller: c, CSRF: RandomToken(), Expires: now.Add(s.o.TTL)}
	if !c.Expiry.IsZero() && c.Expiry.Before(sess.Expires) {
		sess.Expires = c.Expiry
	}
	id := RandomToken()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= s.o.MaxEntries {
		s.evictLocked(now)
	}
	s.m[key(id)] = sess
	return id, sess
}

// evictLocked drops expired sessions and, if the store is still full, those expiring first
// until a tenth of the room is free (so a flood of logins does not sort on every call).
func (s *Store) evictLocked(now time.Time) {
	for k, v := range s.m {
		if !now.Before(v.Expires) {
			delete(s.m, k)
		}
	}
	if len(s.m) < s.o.MaxEntries {
		return
	}
	type kv struct {
		k [sha256.Size]byte
		t time.Time
	}
	all := make([]kv, 0, len(s.m))
	for k, v := range s.m {
		all = append(all, kv{k, v.Expires})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].t.Before(all[j].t) })
	drop := len(s.m) - s.o.MaxEntries + max(1, s.o.MaxEntries/10)
	for _, e := range all[:min(drop, len(all))] {
		delete(s.m, e.k)
	}
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
		delete(s.m, k)
		return nil, false
	}
	return sess, true
}

// Delete ends the session with id (logout). Unknown ids are ignored.
func (s *Store) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key(id))
}

// Len is the number of sessions held (expired ones included until evicted).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

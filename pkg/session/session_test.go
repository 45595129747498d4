package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestSessionLivesUntilTTLOrTokenExpiryWhicheverIsFirst(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := NewStore(Options{TTL: time.Hour, Now: c.now})
	id, sess := s.Create(&auth.Caller{Subject: "jane"}, "token")
	if got, ok := s.Get(id); !ok || got != sess {
		t.Fatalf("Get(new id) = %v, %v; want the session", got, ok)
	}
	short, _ := s.Create(&auth.Caller{Subject: "bob", Expiry: c.t.Add(10 * time.Minute)}, "token")
	c.t = c.t.Add(11 * time.Minute)
	if _, ok := s.Get(short); ok {
		t.Fatal("a session outlived its token's expiry")
	}
	if _, ok := s.Get(id); !ok {
		t.Fatal("a session ended before its TTL")
	}
	c.t = c.t.Add(time.Hour)
	if _, ok := s.Get(id); ok {
		t.Fatal("a session outlived its TTL")
	}
	if s.Len() != 0 {
		t.Fatalf("expired sessions are still held: %d", s.Len())
	}
}

func TestDeleteEndsTheSessionAndUnknownIdsFindNothing(t *testing.T) {
	s := NewStore(Options{})
	id, _ := s.Create(&auth.Caller{Subject: "jane"}, "token")
	s.Delete(id)
	for _, probe := range []string{id, "", "not-a-session"} {
		if _, ok := s.Get(probe); ok {
			t.Errorf("Get(%q) found a session", probe)
		}
	}
}

func TestStoreIsBoundedAndAFullStoreEvictsFromTheCallersHoldingTheMost(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := NewStore(Options{TTL: time.Hour, MaxEntries: 10, Now: c.now})
	first, _ := s.Create(&auth.Caller{Subject: "first"}, "token")
	var last string
	for i := 0; i < 50; i++ {
		c.t = c.t.Add(time.Second)
		last, _ = s.Create(&auth.Caller{Subject: "u"}, "token")
		if s.Len() > 10 {
			t.Fatalf("store holds %d sessions, bound is 10", s.Len())
		}
	}
	if _, ok := s.Get(first); !ok {
		t.Error("50 logins of one caller into a store of 10 ended another caller's only session")
	}
	if _, ok := s.Get(last); !ok {
		t.Error("the newest session was evicted")
	}
}

// Before the store was shared fairly, one user who logged in 10,000 times (a script, a valid
// token, the login form) ended every other user's session, the admins' included: a full store
// evicted the sessions expiring first, and the flood's all expired last.
func TestOneCallersLoginsNeverEndAnotherCallersSession(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := NewStore(Options{Now: c.now})
	admin, _ := s.Create(&auth.Caller{Subject: "root", IsAdmin: true}, "token")
	oidc, _ := s.Create(&auth.Caller{Subject: "jane", Expiry: c.t.Add(time.Hour)}, "token")
	c.t = c.t.Add(time.Second)
	var mallory []string
	for i := 0; i < 10000; i++ {
		id, _ := s.Create(&auth.Caller{Subject: "mallory"}, "token")
		mallory = append(mallory, id)
	}
	for name, id := range map[string]string{"the admin's": admin, "an OIDC user's (expiring first)": oidc, "mallory's newest": mallory[len(mallory)-1]} {
		if _, ok := s.Get(id); !ok {
			t.Errorf("10,000 logins by mallory ended %s session", name)
		}
	}
	if _, ok := s.Get(mallory[0]); ok {
		t.Error("mallory's first session outlived 10,000 of her own logins; a caller holds at most MaxPerCaller")
	}
	if s.Len() != 2+20 {
		t.Errorf("store holds %d sessions, want the two others' and mallory's 20", s.Len())
	}
}

// Callers holding equal shares of a full store lose the sessions that expire first.
func TestAFullStoreOfEqualCallersEvictsWhatExpiresFirst(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := NewStore(Options{TTL: time.Hour, MaxEntries: 10, Now: c.now})
	var ids []string
	for i := 0; i < 11; i++ {
		id, _ := s.Create(&auth.Caller{Subject: fmt.Sprintf("user-%d", i)}, "token")
		ids = append(ids, id)
		c.t = c.t.Add(time.Second)
	}
	if _, ok := s.Get(ids[0]); ok {
		t.Error("the session expiring first survived a full store's eviction")
	}
	for _, id := range ids[2:] {
		if _, ok := s.Get(id); !ok {
			t.Fatal("a full store evicted more than a tenth of its room, or a later session")
		}
	}
}

func TestCSRFTokenIsPerSessionAndComparedExactly(t *testing.T) {
	s := NewStore(Options{})
	_, a := s.Create(&auth.Caller{Subject: "a"}, "token")
	_, b := s.Create(&auth.Caller{Subject: "b"}, "token")
	if a.CSRF == b.CSRF || len(a.CSRF) < 40 {
		t.Fatalf("CSRF tokens not random per session: %q %q", a.CSRF, b.CSRF)
	}
	for _, tc := range []struct {
		name  string
		token string
		want  bool
	}{
		{"own token", a.CSRF, true},
		{"another session's token", b.CSRF, false},
		{"empty", "", false},
		{"prefix", a.CSRF[:10], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.ValidCSRF(tc.token); got != tc.want {
				t.Errorf("ValidCSRF = %v, want %v", got, tc.want)
			}
		})
	}
}

// A session keeps its token to have it verified again: due RecheckAfter after the last check,
// replaced (never changed in place: a request keeps the session it read) by a copy with the caller
// the authenticator gives now, and ended when that is another subject.
func TestARecheckedSessionTakesTheCallerAsVerifiedNow(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := NewStore(Options{RecheckAfter: 30 * time.Second, Now: c.now})
	id, sess := s.Create(&auth.Caller{Subject: "root", IsAdmin: true}, "root-token")
	if sess.Token() != "root-token" {
		t.Fatalf("Token() = %q, want the token the session started with", sess.Token())
	}
	c.t = c.t.Add(29 * time.Second)
	if s.Stale(sess) {
		t.Fatal("a session checked 29 s ago is due for a recheck (RecheckAfter 30 s)")
	}
	c.t = c.t.Add(time.Second)
	if !s.Stale(sess) {
		t.Fatal("a session checked 30 s ago is not due for a recheck")
	}
	expiry := c.t.Add(time.Minute)
	now, ok := s.Rechecked(id, &auth.Caller{Subject: "root", Expiry: expiry})
	if !ok || now.Caller.IsAdmin || !now.Checked.Equal(c.t) || !now.Expires.Equal(expiry) || now.CSRF != sess.CSRF || now.Token() != "root-token" {
		t.Fatalf("Rechecked = %+v, %v; want the demoted caller, checked now, ending at the token's expiry, same CSRF and token", now, ok)
	}
	if !sess.Caller.IsAdmin {
		t.Error("Rechecked changed the session a request already holds")
	}
	if got, _ := s.Get(id); got != now || s.Stale(got) {
		t.Errorf("Get after Rechecked = %+v, want the rechecked session, not due", got)
	}
	if _, ok := s.Rechecked(id, &auth.Caller{Subject: "someone-else"}); ok {
		t.Fatal("a recheck as another subject kept the session")
	}
	if _, ok := s.Get(id); ok || s.Len() != 0 {
		t.Error("a recheck as another subject did not end the session")
	}
	if _, ok := s.Rechecked(id, &auth.Caller{Subject: "root"}); ok {
		t.Error("Rechecked brought back a session that had ended")
	}
}

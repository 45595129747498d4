package session

import (
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestSessionLivesUntilTTLOrTokenExpiryWhicheverIsFirst(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := NewStore(Options{TTL: time.Hour, Now: c.now})
	id, sess := s.Create(&auth.Caller{Subject: "jane"})
	if got, ok := s.Get(id); !ok || got != sess {
		t.Fatalf("Get(new id) = %v, %v; want the session", got, ok)
	}
	short, _ := s.Create(&auth.Caller{Subject: "bob", Expiry: c.t.Add(10 * time.Minute)})
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
	id, _ := s.Create(&auth.Caller{Subject: "jane"})
	s.Delete(id)
	for _, probe := range []string{id, "", "not-a-session"} {
		if _, ok := s.Get(probe); ok {
			t.Errorf("Get(%q) found a session", probe)
		}
	}
}

func TestStoreIsBoundedAndEvictsWhatExpiresFirst(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := NewStore(Options{TTL: time.Hour, MaxEntries: 10, Now: c.now})
	first, _ := s.Create(&auth.Caller{Subject: "first"})
	var last string
	for i := 0; i < 50; i++ {
		c.t = c.t.Add(time.Second)
		last, _ = s.Create(&auth.Caller{Subject: "u"})
		if s.Len() > 10 {
			t.Fatalf("store holds %d sessions, bound is 10", s.Len())
		}
	}
	if _, ok := s.Get(first); ok {
		t.Error("the oldest session survived 50 logins into a store of 10")
	}
	if _, ok := s.Get(last); !ok {
		t.Error("the newest session was evicted")
	}
}

func TestCSRFTokenIsPerSessionAndComparedExactly(t *testing.T) {
	s := NewStore(Options{})
	_, a := s.Create(&auth.Caller{Subject: "a"})
	_, b := s.Create(&auth.Caller{Subject: "b"})
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

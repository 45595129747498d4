package mcp

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// TestListsKeepTheSDKSessionAlive: calls fastList answers never reach the SDK, whose session
// idles out after sessionIdle without a request. A client that only lists must keep its session:
// once the SDK has not seen the session for half that time, the next call goes to the SDK, and
// fastList answers again after it. Sessions the SDK did not hand this subject never reach fastList.
func TestListsKeepTheSDKSessionAlive(t *testing.T) {
	var toSDK, toFast int
	var l *sessionLimiter
	closed := make(chan struct{})
	t.Cleanup(func() { close(closed) })
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toSDK++
		if r.Header.Get(sessionHeader) == "" { // an initialize that succeeds
			c, _ := auth.CallerFrom(r.Context())
			l.opened(c.Subject, openSession{"s1", closed})
			w.Header().Set(sessionHeader, "s1")
		}
		w.WriteHeader(http.StatusOK)
	})
	l = limitSessions(next, 4, time.Hour)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	l.fast = func(http.ResponseWriter, *http.Request) (bool, *http.Request) { toFast++; return true, nil }
	post := func(user, session string) {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		if session != "" {
			r.Header.Set(sessionHeader, session)
		}
		l.ServeHTTP(httptest.NewRecorder(), r.WithContext(auth.WithCaller(r.Context(), &auth.Caller{Subject: user})))
	}
	want := func(step string, sdk, fast int) {
		t.Helper()
		if toSDK != sdk || toFast != fast {
			t.Fatalf("%s: %d requests reached the SDK and %d fastList; want %d and %d", step, toSDK, toFast, sdk, fast)
		}
	}
	post("alice", "")
	want("initialize", 1, 0)
	post("alice", "s1")
	want("a call on the new session", 1, 1)
	post("bob", "s1")
	post("alice", "s2")
	want("another subject's session, an id the SDK never handed out", 3, 1)
	now = now.Add(29 * time.Minute)
	post("alice", "s1")
	want("29 minutes later", 3, 2)
	now = now.Add(time.Minute)
	post("alice", "s1")
	want("30 minutes after the SDK last saw the session", 4, 2)
	post("alice", "s1")
	want("the call after it", 4, 3)
}

// openSession is a session the SDK keeps open until closed is closed.
type openSession struct {
	id     string
	closed chan struct{}
}

func (s openSession) ID() string   { return s.id }
func (s openSession) Close() error { return nil }
func (s openSession) Wait() error  { <-s.closed; return nil }

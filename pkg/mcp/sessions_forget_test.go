package mcp

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// TestClosedSessionsAreForgotten: the limiter's table must hold exactly the sessions the SDK
// holds, or fastList answers on a session the SDK closed (it trusts the table) and a closed
// session counts against its user's cap. A session is forgotten once the SDK closed it, whatever
// closed it (here: its idle timeout, as the SDK sees it), and its next call goes to the SDK.
func TestClosedSessionsAreForgotten(t *testing.T) {
	var toSDK, toFast int
	l := limitSessions(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { toSDK++ }), 1, time.Hour)
	l.fast = func(http.ResponseWriter, *http.Request) (bool, *http.Request) { toFast++; return true, nil }
	post := func(session string) {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		r.Header.Set(sessionHeader, session)
		l.ServeHTTP(httptest.NewRecorder(), r.WithContext(auth.WithCaller(r.Context(), &auth.Caller{Subject: "alice"})))
	}
	s1 := openSession{"s1", make(chan struct{})}
	l.opened("alice", s1)
	post("s1")
	if toFast != 1 || toSDK != 0 {
		t.Fatalf("a call on an open session reached fastList %d times and the SDK %d; want 1 and 0", toFast, toSDK)
	}
	close(s1.closed) // the SDK closed it
	NewWithT(t).Eventually(func() bool { return l.held("alice", "s1") }, 30*time.Second, time.Millisecond).Should(BeFalse(),
		"the limiter still holds a session the SDK closed")
	post("s1")
	if toFast != 1 || toSDK != 1 {
		t.Errorf("a call on a closed session reached fastList %d times and the SDK %d; want it to reach the SDK", toFast-1, toSDK)
	}
	// It no longer counts against the cap of one: a new session closes nothing.
	s2 := openSession{"s2", make(chan struct{})}
	t.Cleanup(func() { close(s2.closed) })
	if old := l.admit("alice", s2); len(old) != 0 {
		t.Errorf("opening a session after the only one closed closed %d more", len(old))
	}
}

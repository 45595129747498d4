package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/mcp"
)

// asUser authenticates each request as the subject in the X-Test-User header (the real
// auth.Middleware's part, which pkg/api tests against a real API server).
func asUser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &auth.Caller{Subject: r.Header.Get("X-Test-User")}
		next.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), c)))
	})
}

type userTransport struct{ user string }

func (u userTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-User", u.user)
	r.Header.Set("Authorization", "Bearer test")
	return http.DefaultTransport.RoundTrip(r)
}

// TestOneUserCannotHoldUnboundedSessions: an agent that opens a session per call and never
// closes one made the SDK keep every session (goroutines and buffers) for 30 minutes; the load
// test left 1,781 sessions behind. Now opening one beyond the cap closes that user's least
// recently used session, and other users' sessions are untouched.
func TestOneUserCannotHoldUnboundedSessions(t *testing.T) {
	const max = 3
	srv := httptest.NewServer(asUser(mcp.NewHandler(nil, mcp.Options{Version: "test", MaxSessionsPerUser: max})))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(user string) *sdk.ClientSession {
		t.Helper()
		c := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil)
		s, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: userTransport{user}}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		return s
	}
	works := func(s *sdk.ClientSession) error {
		_, err := s.ListTools(ctx, nil)
		return err
	}

	bob := connect("bob")
	defer bob.Close()
	var mallory []*sdk.ClientSession
	for i := 0; i < max+2; i++ {
		mallory = append(mallory, connect("mallory"))
	}
	defer func() {
		for _, s := range mallory {
			_ = s.Close()
		}
	}()
	// The two least recently used were closed; the newest max still work.
	for i, s := range mallory {
		err := works(s)
		if i < 2 && err == nil {
			t.Errorf("mallory's session %d is still open after %d newer ones: sessions are not bounded per user", i, max)
		}
		if i >= 2 && err != nil {
			t.Errorf("mallory's session %d (one of the newest %d): %v", i, max, err)
		}
	}
	if err := works(bob); err != nil {
		t.Errorf("bob's session was closed by mallory's: %v", err)
	}
}

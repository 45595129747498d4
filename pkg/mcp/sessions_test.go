package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestPostsThatOpenNoSessionCloseNone: every POST without a session id closed one of its
// user's sessions when the user held the most, before the SDK had decided whether the POST opens
// a session at all: a client whose calls went out without the header (or with a wrong content
// type) closed its own working sessions one by one. Now a session is closed only to make room
// for one the SDK handed out.
func TestPostsThatOpenNoSessionCloseNone(t *testing.T) {
	const max = 2
	srv := httptest.NewServer(asUser(mcp.NewHandler(nil, mcp.Options{Version: "test", MaxSessionsPerUser: max})))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func() *sdk.ClientSession {
		t.Helper()
		c := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil)
		s, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: userTransport{"alice"}}, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	sessions := []*sdk.ClientSession{connect(), connect()}
	for _, stray := range []struct{ name, contentType, body string }{
		{"a wrong content type", "text/plain", "garbage"},
		{"a tool call without a session", "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_templates","arguments":{}}}`},
		{"malformed JSON", "application/json", `{"jsonrpc":`},
		{"a notification", "application/json", `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(stray.body))
		req.Header.Set("Content-Type", stray.contentType)
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := (&http.Client{Transport: userTransport{"alice"}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("Mcp-Session-Id") != "" {
			t.Fatalf("%s opened a session: the test needs POSTs that open none", stray.name)
		}
	}
	for i, s := range sessions {
		if _, err := s.ListTools(ctx, nil); err != nil {
			t.Errorf("alice's session %d was closed by POSTs that opened no session: %v", i, err)
		}
	}
	// A session the SDK does hand out still makes room: the least recently used one closes.
	third := connect()
	if _, err := third.ListTools(ctx, nil); err != nil {
		t.Fatalf("the new session: %v", err)
	}
	if _, err := sessions[0].ListTools(ctx, nil); err == nil {
		t.Errorf("alice holds %d sessions after opening a third with a cap of %d", max+1, max)
	}
	if _, err := sessions[1].ListTools(ctx, nil); err != nil {
		t.Errorf("alice's more recently used session was closed: %v", err)
	}
}

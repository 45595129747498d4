package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/nogoo9/no-crd/pkg/api"
	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
)

// vanishingConn is the server's side of a connection whose client vanished without a word (no
// FIN, no RST: a laptop that lost its network, a NAT that forgot the flow): nothing more
// arrives, so the server's read never ends, and once vanished every write fails, as it does when
// TCP gives up or an ingress resets the connection. Only a write can tell the server.
type vanishingConn struct {
	net.Conn
	gone atomic.Bool
}

var errVanished = errors.New("test: the client vanished")

func (c *vanishingConn) Write(b []byte) (int, error) {
	if c.gone.Load() {
		return 0, errVanished
	}
	return c.Conn.Write(b)
}

type vanishingListener struct{ net.Listener }

func (l vanishingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &vanishingConn{Conn: c}, nil
}

type connKey struct{}

// A REST follow writes a heartbeat (an SSE comment) when nothing happened for a while, so the
// follow of a client that vanished fails its next write and frees its place among its user's
// follows (shared with MCP) instead of holding it until its timeout.
func TestRESTFollowOfAVanishedClientFreesItsSlot(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	owner := fmt.Sprintf("vanish-%d", time.Now().UnixNano())
	seed(t, owner, "vanishing-box", "1.0")
	tok := userToken(owner)
	authn, err := (&auth.Options{Mode: "oidc", OIDC: auth.OIDCConfig{IssuerURL: env.issuer.srv.URL, ClientID: clientID, CAFile: env.issuer.caFile}}).New(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewHandler(env.svc, authn, api.Options{Version: "test", FollowHeartbeat: 50 * time.Millisecond})
	marked := make(chan *vanishingConn, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Vanish") != "" {
			marked <- r.Context().Value(connKey{}).(*vanishingConn)
		}
		h.ServeHTTP(w, r)
	}))
	srv.Listener = vanishingListener{srv.Listener}
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx := boundedCtx(t)
	follow := func(vanish bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/workspaces/vanishing-box/events?follow=true&timeout=120s", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if vanish {
			req.Header.Set("X-Test-Vanish", "1")
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	// The user's first follow is on the connection that will vanish; the others fill the cap.
	g.Expect(follow(true).StatusCode).To(Equal(http.StatusOK))
	var gone *vanishingConn
	select {
	case gone = <-marked:
	case <-ctx.Done():
		t.Fatal("the vanishing follow's connection was not seen")
	}
	live := make([]*http.Response, 0, frontend.DefaultMaxFollowsPerUser-1)
	for range frontend.DefaultMaxFollowsPerUser - 1 {
		resp := follow(false)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		live = append(live, resp)
	}
	refused := follow(false)
	g.Expect(refused.StatusCode).To(Equal(http.StatusTooManyRequests), "the cap holds before the client vanishes")
	refused.Body.Close()

	// The client vanishes: its connection stays open, nothing is read from it, writes fail.
	gone.gone.Store(true)
	g.Eventually(func() int {
		resp := follow(false)
		defer resp.Body.Close()
		return resp.StatusCode
	}, 10*time.Second, 50*time.Millisecond).Should(Equal(http.StatusOK),
		"the vanished client's follow still holds its slot: no heartbeat was written to find it gone")

	// A live follow reads the heartbeats: SSE comments, which clients ignore.
	beat := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(live[0].Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), ":") {
				beat <- sc.Text()
				return
			}
		}
	}()
	select {
	case line := <-beat:
		g.Expect(line).To(Equal(": ping"))
	case <-time.After(10 * time.Second):
		t.Fatal("a live follow read no heartbeat in 10s with a 50ms heartbeat interval")
	}
}

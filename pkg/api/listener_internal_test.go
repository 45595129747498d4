package api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTheListenerCapsEachClientAtTheConfiguredNumber: --api-max-conns-per-client reaches the
// REST/MCP listener (it was fixed at 128: behind an ingress, where every client has one address,
// 128 event streams of one tenant got everyone else a 429, and nothing could change it).
func TestTheListenerCapsEachClientAtTheConfiguredNumber(t *testing.T) {
	for _, tc := range []struct {
		max      int
		wantOver string // the answer on the connection over 2
	}{
		{2, "429"},
		{-1, "200"}, // no cap
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s := &server{ln: ln, maxConns: tc.max, handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
		done := make(chan error, 1)
		go func() { done <- s.Start(ctx) }()
		get := func(c net.Conn) string {
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return "write: " + err.Error()
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return "read: " + err.Error()
			}
			_ = res.Body.Close()
			return res.Status
		}
		var conns []net.Conn
		for i := 0; i < 3; i++ {
			c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			got := get(c)
			want := "200"
			if i == 2 {
				want = tc.wantOver
			}
			if !strings.HasPrefix(got, want) {
				t.Errorf("max %d, connection %d: %q, want %s", tc.max, i+1, got, want)
			}
		}
		for _, c := range conns {
			_ = c.Close()
		}
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the server did not stop")
		}
	}
}

package connlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// dialFrom connects to addr from the loopback address src (127.0.0.0/8 is all loopback).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serve runs an HTTP server answering "ok" on a capped listener.
func serve(t *testing.T, max int) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, max)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l, ln.Addr().String()
}

// roundTrip sends one GET on c and returns the status line.
func roundTrip(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "write: " + err.Error()
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "read: " + err.Error()
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	_ = res.Body.Close()
	return res.Status + " " + string(b)
}

// waitOpen polls until ip holds n connections on l (the server's accept loop runs on its own).
func waitOpen(t *testing.T, l *Listener, ip string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.Open(ip) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d connections, want %d", ip, l.Open(ip), n)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

func TestAClientOverTheCapGetsAClear429AndOtherClientsAreServed(t *testing.T) {
	l, addr := serve(t, 3)
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c := dialFrom(t, "127.0.0.2", addr)
		if got := roundTrip(t, c); !strings.HasPrefix(got, "200") {
			t.Fatalf("connection %d under the cap: %q, want 200", i, got)
		}
		held = append(held, c)
	}
	over := dialFrom(t, "127.0.0.2", addr)
	got := roundTrip(t, over)
	if !strings.HasPrefix(got, "429") || !strings.Contains(got, "more than 3 connections are open from your address") {
		t.Fatalf("connection over the cap: %q, want a 429 naming the cap", got)
	}
	if l.Rejected() != 1 {
		t.Fatalf("rejected %d connections, want 1", l.Rejected())
	}

	if got := roundTrip(t, dialFrom(t, "127.0.0.3", addr)); !strings.HasPrefix(got, "200") {
		t.Fatalf("another client while the first is at its cap: %q, want 200", got)
	}

	_ = held[0].Close()
	waitOpen(t, l, "127.0.0.2", 2)
	if got := roundTrip(t, dialFrom(t, "127.0.0.2", addr)); !strings.HasPrefix(got, "200") {
		t.Fatalf("a new connection after one was closed: %q, want 200", got)
	}
}

func TestAHijackedConnectionHoldsItsSlotUntilClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, 1)
	hijacked := make(chan net.Conn, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		hijacked <- c
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	c := dialFrom(t, "127.0.0.4", ln.Addr().String())
	if got := roundTrip(t, c); !strings.HasPrefix(got, "101") {
		t.Fatalf("upgrade: %q", got)
	}
	hc := <-hijacked
	if got := roundTrip(t, dialFrom(t, "127.0.0.4", ln.Addr().String())); !strings.HasPrefix(got, "429") {
		t.Fatalf("a second connection while the upgraded one is open: %q, want 429", got)
	}
	_ = hc.Close()
	waitOpen(t, l, "127.0.0.4", 0)
}

func TestNoCapWhenMaxIsZero(t *testing.T) {
	l, addr := serve(t, 0)
	for i := 0; i < 5; i++ {
		if got := roundTrip(t, dialFrom(t, "127.0.0.5", addr)); !strings.HasPrefix(got, "200") {
			t.Fatalf("connection %d: %q, want 200", i, got)
		}
	}
	if l.Rejected() != 0 {
		t.Fatalf("rejected %d, want 0", l.Rejected())
	}
}

// TestIPv6ClientsAreCappedPerSlash64: one host commonly holds a whole /64, so counting each IPv6
// address on its own let a client open the cap's connections from every address it has.
func TestIPv6ClientsAreCappedPerSlash64(t *testing.T) {
	key := func(ip string) string { return clientIP(&net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}) }
	if a, b := key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::2"); a != b {
		t.Errorf("two addresses of one /64 count as %q and %q, want one client", a, b)
	}
	if a, b := key("2001:db8:1:2::1"), key("2001:db8:1:3::1"); a == b {
		t.Errorf("two /64s count as one client %q", a)
	}
	if got := key("::ffff:192.0.2.7"); got != "192.0.2.7" {
		t.Errorf("an IPv4-mapped address counts as %q, want its IPv4 address", got)
	}
	if got := key("127.0.0.2"); got != "127.0.0.2" {
		t.Errorf("an IPv4 address counts as %q", got)
	}
}

// Package connlimit caps the connections one client address may hold open on a listener, so a
// single client cannot take every connection (and the memory each one may pin) of a server that
// many users share.
package connlimit

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// DefaultMaxPerClient is the default cap on concurrent connections from one client IP: far above
// a browser's 6 connections per host plus a handful of WebSockets, far below what would let one
// address pin a large part of the process's memory.
const DefaultMaxPerClient = 128

// Listener wraps a net.Listener. Accept hands out at most max connections per client (clientIP) at a
// time; a connection over the cap gets a short plain-HTTP 429 answer and is closed, and Accept
// waits for the next one (the server never sees it). A max of 0 or less means no cap.
type Listener struct {
	net.Listener
	max      int
	rejected atomic.Int64
	mu       sync.Mutex
	open     map[string]int
	refusal  []byte
}

// NewListener caps ln at max concurrent connections per client IP (0 or less: no cap).
func NewListener(ln net.Listener, max int) *Listener {
	body := fmt.Sprintf("429 Too Many Requests: more than %d connections are open from your address; close some and retry.\n", max)
	return &Listener{
		Listener: ln,
		max:      max,
		open:     map[string]int{},
		refusal: []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n" +
			"Retry-After: 5\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body),
	}
}

// refusalWriteTimeout bounds writing the 429 answer; it fits in an empty socket buffer, so the
// write only waits when the client is gone.
const refusalWriteTimeout = 100 * time.Millisecond

// Accept returns the next connection whose client is under the cap.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.max <= 0 {
			return c, err
		}
		ip := clientIP(c.RemoteAddr())
		l.mu.Lock()
		n := l.open[ip]
		if n >= l.max {
			l.mu.Unlock()
			l.rejected.Add(1)
			_ = c.SetWriteDeadline(time.Now().Add(refusalWriteTimeout))
			_, _ = c.Write(l.refusal)
			_ = c.Close()
			continue
		}
		l.open[ip] = n + 1
		l.mu.Unlock()
		return &conn{Conn: c, l: l, ip: ip}, nil
	}
}

// Rejected is the number of connections refused so far.
func (l *Listener) Rejected() int64 { return l.rejected.Load() }

// Open is the number of connections open from ip.
func (l *Listener) Open(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[ip]
}

func (l *Listener) release(ip string) {
	l.mu.Lock()
	if n := l.open[ip] - 1; n > 0 {
		l.open[ip] = n
	} else {
		delete(l.open, ip)
	}
	l.mu.Unlock()
}

// clientIP is the client addr counts as, keyed like the failure limits (auth.ClientKey): an IPv4
// address, an IPv4-mapped IPv6 address as its IPv4 address, an IPv6 address by its /64 (one host
// commonly holds a whole /64, and could otherwise open max connections from each of its addresses).
func clientIP(addr net.Addr) string { return auth.ClientKey(addr.String()) }

// conn gives its slot back when closed (http.Server closes it, or whoever hijacked it).
type conn struct {
	net.Conn
	l    *Listener
	ip   string
	once sync.Once
}

// CloseWrite lets http.Server half-close the connection after an error answer, as it does on a
// bare *net.TCPConn.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the accepted connection under c (the proxy's WebSocket copy reads its socket).
func (c *conn) NetConn() net.Conn { return c.Conn }

func (c *conn) Close() error {
	c.once.Do(func() { c.l.release(c.ip) })
	return c.Conn.Close()
}

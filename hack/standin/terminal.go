package standin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/websocket"
)

// Terminal is a client of a stand-in's terminal, usually through nogoo9's proxy. The demo's
// `standin term` and the e2e suite both use it.
type Terminal struct {
	// Banner is the first message the backend sent: it names the pod and template version.
	Banner string

	conn    *websocket.Conn
	replies chan string
	closed  chan struct{}
}

// DialTerminal opens a WebSocket to rawURL (ws:// or http://) with "Authorization: Bearer token"
// (none when token is "") and an Origin equal to the URL's own origin, as a browser on the proxy's
// page sends, and waits for the banner. Dial, handshake and banner are bounded by ctx and 10 s.
func DialTerminal(ctx context.Context, rawURL, token string) (*Terminal, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("terminal URL %q: %w", rawURL, err)
	}
	origin := *u
	switch u.Scheme {
	case "ws", "http":
		u.Scheme, origin.Scheme = "ws", "http"
	default:
		return nil, fmt.Errorf("terminal URL %q: use ws:// or http:// (the demo proxy's address)", rawURL)
	}
	origin.Path, origin.RawPath, origin.RawQuery, origin.Fragment = "", "", "", ""
	cfg, err := websocket.NewConfig(u.String(), origin.String())
	if err != nil {
		return nil, fmt.Errorf("terminal URL %q: %w", rawURL, err)
	}
	if token != "" {
		cfg.Header = http.Header{"Authorization": {"Bearer " + token}}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	d := net.Dialer{}
	nc, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", host, err)
	}
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	conn, err := websocket.NewClient(cfg, nc)
	if err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("WebSocket handshake with %s: %w (a 401 or 403 means the token is missing or not the owner's)", rawURL, err)
	}
	conn.MaxPayloadBytes = maxMessage
	var banner string
	if err := websocket.Message.Receive(conn, &banner); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("no banner from %s: %w", rawURL, err)
	}
	_ = nc.SetDeadline(time.Time{})
	t := &Terminal{Banner: banner, conn: conn, replies: make(chan string, 64), closed: make(chan struct{})}
	go func() {
		defer close(t.closed)
		for {
			var s string
			if err := websocket.Message.Receive(conn, &s); err != nil {
				return
			}
			select {
			case t.replies <- s:
			default: // nobody reads: drop rather than block the reader
			}
		}
	}()
	return t, nil
}

// Send sends msg and returns the next message, failing after 10 s or when the connection ends.
func (t *Terminal) Send(msg string) (string, error) {
	if err := websocket.Message.Send(t.conn, msg); err != nil {
		return "", fmt.Errorf("send on the WebSocket: %w", err)
	}
	select {
	case s := <-t.replies:
		return s, nil
	case <-t.closed:
		return "", errors.New("the WebSocket was closed")
	case <-time.After(10 * time.Second):
		return "", errors.New("no reply on the WebSocket within 10 s")
	}
}

// Closed is closed when the connection has ended (the proxy closes it when the pod goes away).
func (t *Terminal) Closed() <-chan struct{} { return t.closed }

// Close closes the connection.
func (t *Terminal) Close() error { return t.conn.Close() }

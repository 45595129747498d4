package standin

import (
	"encoding/json"
	"fmt"
	"html/template"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"
)

// maxMessage bounds one WebSocket message from a client.
const maxMessage = 64 << 10

// Info is the JSON answer of a backend (Accept: application/json): the workload, which port
// answered, and what the backend saw of the request.
type Info struct {
	Backend
	// Path is the request path as the backend received it (after the proxy stripped its prefix).
	Path string `json:"path"`
	// Authorization is true when the request carried an Authorization header (the proxy must
	// never forward one).
	Authorization bool `json:"authorization"`
}

// Banner is the first message of a terminal WebSocket: it names the pod and its template version.
func Banner(b Backend) string {
	return fmt.Sprintf("connected to pod %s of workspace %s (owner %s), template version %s",
		b.Pod, b.DisplayName(), b.Owner, b.TemplateVersion)
}

// EchoReply is how the terminal answers msg.
func EchoReply(b Backend, msg string) string {
	return fmt.Sprintf("[%s, version %s] %s", b.Pod, b.TemplateVersion, msg)
}

// listener serves one Backend until closed.
type listener struct {
	backend Backend
	bound   string // the address actually bound (b.Addr may ask for port 0 in tests)
	srv     *http.Server
	done    chan struct{}

	mu     sync.Mutex
	ws     map[*websocket.Conn]struct{}
	closed bool
	once   sync.Once
}

// listen binds b.Addr (loopback only) and serves b on it.
func listen(b Backend, errorLog *log.Logger) (*listener, error) {
	host, _, err := net.SplitHostPort(b.Addr)
	if err != nil {
		return nil, fmt.Errorf("backend address %q: %w", b.Addr, err)
	}
	if err := CheckLoopback(host); err != nil {
		return nil, fmt.Errorf("refusing to listen on %s: %w", b.Addr, err)
	}
	ln, err := net.Listen("tcp4", b.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s for pod %s/%s: %w", b.Addr, b.Namespace, b.Pod, err)
	}
	l := &listener{backend: b, bound: ln.Addr().String(), done: make(chan struct{}), ws: map[*websocket.Conn]struct{}{}}
	l.srv = &http.Server{
		Handler:           l,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          errorLog,
	}
	go func() {
		_ = l.srv.Serve(ln)
		close(l.done)
	}()
	return l, nil
}

// Close stops the server and ends its WebSockets (hijacked connections outlive http.Server.Close),
// as the container's death would.
func (l *listener) Close() {
	l.once.Do(func() {
		_ = l.srv.Close()
		<-l.done
		l.mu.Lock()
		l.closed = true
		for c := range l.ws {
			_ = c.Close()
		}
		l.mu.Unlock()
	})
}

func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// No origin check here: the proxy in front checks it, as it would for a real workspace.
		websocket.Server{Handler: l.terminal}.ServeHTTP(w, r)
		return
	}
	info := Info{Backend: l.backend, Path: r.URL.Path, Authorization: r.Header.Get("Authorization") != ""}
	w.Header().Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	_ = page.Execute(w, info)
}

// wantsJSON: the page's own polling and programs ask for JSON; browsers and curl get the page.
func wantsJSON(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if strings.TrimSpace(strings.SplitN(a, ";", 2)[0]) == "application/json" {
			return true
		}
	}
	return false
}

// terminal sends the banner, then echoes every message.
func (l *listener) terminal(c *websocket.Conn) {
	c.MaxPayloadBytes = maxMessage
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	l.ws[c] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.ws, c)
		l.mu.Unlock()
		_ = c.Close()
	}()
	if websocket.Message.Send(c, Banner(l.backend)) != nil {
		return
	}
	for {
		var msg string
		if websocket.Message.Receive(c, &msg) != nil {
			return
		}
		if websocket.Message.Send(c, EchoReply(l.backend, msg)) != nil {
			return
		}
	}
}

var page = template.Must(template.New("page").Parse(pageHTML))

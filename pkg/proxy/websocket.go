package proxy

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// connRegistry knows every open upgraded (WebSocket) connection by the pod it was opened on.
// Closing the backend side of one makes httputil.ReverseProxy close the client side too, so the
// client sees the connection end and reconnects, landing on the current pod.
type connRegistry struct {
	mu    sync.Mutex
	byPod map[types.UID]map[*trackedConn]struct{}
	log   logr.Logger
	// rawCopies counts client-to-pod copies that read the client's socket directly (wscopy.go),
	// rawActive those still running (tests).
	rawCopies, rawActive atomic.Int64
}

func newConnRegistry(log logr.Logger) *connRegistry {
	return &connRegistry{byPod: map[types.UID]map[*trackedConn]struct{}{}, log: log}
}

// trackedConn is the backend side of an upgraded connection, as ReverseProxy sees it (the
// response body of a 101 answer).
type trackedConn struct {
	io.ReadWriteCloser
	reg  *connRegistry
	pod  types.UID
	once sync.Once
	// opened is when the connection was upgraded (the idle culler's WebSocket age).
	opened time.Time
	// person is set when the handshake was authenticated (not an anonymous one to a public
	// preview): only a person's WebSocket counts as activity (newestOpen).
	person bool
}

func (c *trackedConn) Close() error {
	c.untrack()
	return c.ReadWriteCloser.Close()
}

// untrack removes c from the registry (once).
func (c *trackedConn) untrack() { c.once.Do(func() { c.reg.remove(c) }) }

// track registers rwc as a connection to pod and returns the wrapper ReverseProxy must use;
// person says whether a person opened it (an authenticated handshake).
//
// A connection the synchronous transport upgraded also leaves the registry when the connection
// itself is closed, by whatever closes it (persistConn.close): ReverseProxy drops the body of an
// upgrade it gives up on without closing it (a client that cannot be hijacked), and the request's
// context then closes the pod connection (roundTrip's canceller), not the body. So an entry lives
// exactly as long as its pod connection.
func (reg *connRegistry) track(pod types.UID, rwc io.ReadWriteCloser, person bool) *trackedConn {
	c := &trackedConn{ReadWriteCloser: rwc, reg: reg, pod: pod, opened: time.Now(), person: person}
	reg.mu.Lock()
	m := reg.byPod[pod]
	if m == nil {
		m = map[*trackedConn]struct{}{}
		reg.byPod[pod] = m
	}
	m[c] = struct{}{}
	reg.mu.Unlock()
	if u, ok := rwc.(*upgradedConn); ok && !u.pc.setTracked(c) {
		c.untrack() // closed already (the request was cancelled meanwhile)
	}
	return c
}

func (reg *connRegistry) remove(c *trackedConn) {
	reg.mu.Lock()
	if m := reg.byPod[c.pod]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(reg.byPod, c.pod)
		}
	}
	reg.mu.Unlock()
}

func (reg *connRegistry) has(pod types.UID) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return len(reg.byPod[pod]) > 0
}

// newestOpen is when the most recent open connection a person opened to pod was opened. An
// anonymous one (public preview) is left out: anyone may hold it open, the workspace's own
// process included, and it would keep the workspace from ever being idle.
func (reg *connRegistry) newestOpen(pod types.UID) (time.Time, bool) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	var newest time.Time
	for c := range reg.byPod[pod] {
		if c.person && c.opened.After(newest) {
			newest = c.opened
		}
	}
	return newest, !newest.IsZero()
}

// count is the number of open connections to pod.
func (reg *connRegistry) count(pod types.UID) int {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return len(reg.byPod[pod])
}

// closePod closes every connection opened on pod.
func (reg *connRegistry) closePod(pod types.UID, why string) {
	reg.mu.Lock()
	m := reg.byPod[pod]
	delete(reg.byPod, pod)
	reg.mu.Unlock()
	if len(m) == 0 {
		return
	}
	reg.log.Info("closing WebSockets of a pod", "podUID", pod, "connections", len(m), "reason", why)
	for c := range m {
		c.once.Do(func() {}) // already removed from the registry
		_ = c.ReadWriteCloser.Close()
	}
}

// closeAll closes every tracked connection (shutdown: http.Server.Shutdown leaves hijacked ones).
func (reg *connRegistry) closeAll() {
	reg.mu.Lock()
	pods := make([]types.UID, 0, len(reg.byPod))
	for uid := range reg.byPod {
		pods = append(pods, uid)
	}
	reg.mu.Unlock()
	for _, uid := range pods {
		reg.closePod(uid, "proxy shutting down")
	}
}

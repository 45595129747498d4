package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// A request's body is read while the request is forwarded: the fast path copies it onto the pod
// connection, ReverseProxy's transports likewise. net/http's server bounds only the wait for the
// request headers (ReadHeaderTimeout); a ReadTimeout would bound the whole body (an upload over a
// slow link) and, on a hijacked connection, every WebSocket's life. So a body is watched for
// progress instead, as nginx's client_body_timeout does: a read that waits RequestBodyTimeout
// without a byte arriving ends the request. The read deadline of the client's connection is moved
// to the past (http.ResponseController), the read fails, net/http cancels the request's context,
// which closes the pod connection, and the client gets 408 and loses the connection.
//
// Only a request with a body pays (this wrapper, the controller and one timer); the lean loop
// serves no request with a body (validForServer), so its requests never get here. A read notes
// when it started; the timer is not re-armed for every read (a 64 KiB body arrives in a few
// dozen): when it fires it looks at the read that waits, if any, and waits on for what is left
// of that read's timeout. Only time spent in a read counts: a body the proxy does not read for a
// while (a pod slow to take the bytes) is not the client's stall.

// bodyWatch is a request body whose reads end when the client sends nothing for timeout.
type bodyWatch struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	timer   *time.Timer
	// left is what a body of known length has still to deliver (-1: unknown): the watch ends
	// when it is all read, since a reader of a known length (io.CopyN) never reads on to the end.
	left int64

	mu sync.Mutex
	// reading: a Read waits on the client, since when (monoNow); armed: the timer runs;
	// stalled: the timer ended a read; done: no read is watched any more (the body ended, failed
	// or was closed, or the handler returned); complete: it was read to its end.
	reading, armed, stalled, done, complete bool
	since                                   time.Duration
}

// errBodyStalled is what a read of a stalled body returns.
var errBodyStalled = errors.New("the request body stalled")

// bodyWatchKey is the context key of a request's bodyWatch: the error handler looks for it there,
// since ReverseProxy hands it a copy of the request whose body is its own wrapper.
type bodyWatchKey struct{}

// watchBody returns r with its body replaced by a bodyWatch, and the watch (finish it when the
// handler returns); r itself and nil when w cannot set its connection's read deadline (only
// net/http's server serves bodies).
func (p *Proxy) watchBody(w http.ResponseWriter, r *http.Request) (*http.Request, *bodyWatch) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Time{}) != nil {
		return r, nil
	}
	b := &bodyWatch{body: r.Body, rc: rc, timeout: p.opts.RequestBodyTimeout, left: r.ContentLength}
	if b.left <= 0 {
		b.left = -1
	}
	b.timer = time.AfterFunc(b.timeout, b.expire)
	b.timer.Stop() // armed by the first read
	r = r.WithContext(context.WithValue(r.Context(), bodyWatchKey{}, b))
	r.Body = b
	return r, b
}

// finish ends the watch when the handler returns. net/http reads what is left of a body the
// handler did not read (up to 256 KiB, to keep the connection: an answer of 401 or 404 to an
// upload) before it sends the answer, with no deadline of its own: that read gets one timeout in
// all, after which net/http closes the connection.
func (b *bodyWatch) finish() {
	b.mu.Lock()
	b.endLocked()
	left := !b.complete && !b.stalled
	b.mu.Unlock()
	if left {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.reading, b.since = true, monoNow()
	if !b.armed && !b.done {
		b.armed = true
		b.timer.Reset(b.timeout)
	}
	b.mu.Unlock()
	n, err := b.body.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	b.mu.Lock()
	b.reading = false
	stalled := b.stalled
	if stalled && n > 0 && err == nil {
		// The bytes came as the timer fired: the read made progress after all.
		b.stalled, stalled = false, false
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	if err == io.EOF || b.left == 0 {
		b.complete = true
	}
	if err != nil || b.left == 0 {
		b.endLocked()
	}
	b.mu.Unlock()
	if stalled {
		return n, fmt.Errorf("%w: %w", errBodyStalled, err)
	}
	return n, err
}

func (b *bodyWatch) Close() error {
	b.mu.Lock()
	b.endLocked()
	b.mu.Unlock()
	return b.body.Close()
}

func (b *bodyWatch) endLocked() {
	b.done = true
	if b.armed {
		b.armed = false
		b.timer.Stop()
	}
}

// expire ends the read that has waited timeout, if one does; a read that started later gets
// the rest of its timeout.
func (b *bodyWatch) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
	if !b.reading || b.done {
		return // the next read arms the timer again
	}
	if wait := b.since + b.timeout - monoNow(); wait > 0 {
		b.armed = true
		b.timer.Reset(wait)
		return
	}
	b.stalled = true
	_ = b.rc.SetReadDeadline(aLongTimeAgo)
}

// bodyStalled reports whether r's body was ended by its watch.
func bodyStalled(r *http.Request) bool {
	b, ok := r.Context().Value(bodyWatchKey{}).(*bodyWatch)
	if !ok {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stalled
}

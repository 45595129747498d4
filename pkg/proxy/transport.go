package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"syscall"
	"time"
)

// syncTransport is an HTTP/1.1 RoundTripper that does the whole exchange on the calling
// goroutine: it takes an idle keep-alive connection to the target (or dials one), writes the
// request, reads the response headers, and hands back a body that returns the connection to the
// pool when it has been read to the end. http.Transport runs two goroutines per connection
// (readLoop, writeLoop) and hands every request and response across channels between them and the
// caller; on a busy proxy those hand-offs cost more than the proxying itself.
//
// Requests it does not handle go to fallback (the standard Transport): protocol upgrades that
// carry a body (a WebSocket handshake has none and stays here), "Expect: 100-continue", request
// bodies of unknown length or larger than maxSyncBody (a large upload must be read concurrently
// with the response, in case the pod answers early), and anything that is not plain http.
type syncTransport struct {
	fallback       http.RoundTripper
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	limits         responseLimits
	maxIdlePerHost int
	idleTimeout    time.Duration

	mu    sync.Mutex
	pools map[string]*idlePool
}

// maxSyncBody is the largest request body sent by syncTransport: it fits in the socket buffers,
// so writing it cannot block on a pod that answers without reading it.
const maxSyncBody = 64 << 10

// idlePool holds the idle connections to one address, most recently used last.
type idlePool struct {
	conns []*persistConn
	sweep *time.Timer // closes connections idle longer than idleTimeout; nil when not armed
}

// responseLimits bound what a pod's answer may make the proxy read before its body: a process in
// a workspace is not trusted, and without them one endless header line grows the heap until the
// whole process is killed.
type responseLimits struct {
	// headerTimeout bounds the wait for the response headers (informational answers included);
	// 0: none.
	headerTimeout time.Duration
	// maxHeaderBytes bounds the bytes read from the pod until the final response's headers end,
	// informational answers included.
	maxHeaderBytes int64
	// max1xx bounds the informational (1xx) answers before the final one.
	max1xx int
}

// boundError is a pod's answer that broke a responseLimits bound, or that the proxy refuses
// (badStatus, switchRefused); its text is the reason the client reads in the 502.
type boundError struct{ reason string }

func (e *boundError) Error() string { return e.reason }

// badStatus refuses a status no ResponseWriter takes (WriteHeader panics outside 100-999):
// http.ReadResponse reads any three digits, "099" included, and a status under 100 must not be
// taken for an informational answer either.
func badStatus(code int) error {
	if code < 100 || code > 999 {
		return &boundError{fmt.Sprintf("the workspace pod answered with the invalid status %d", code)}
	}
	return nil
}

func headerBytesError(max int64) error {
	return &boundError{fmt.Sprintf("the workspace pod sent more than %d bytes of response headers", max)}
}

func too1xxError(max int) error {
	return &boundError{fmt.Sprintf("the workspace pod sent more than %d informational (1xx) responses", max)}
}

// limitedConnReader is the reader under a pooled connection's bufio.Reader: while n >= 0 it
// counts down the bytes the pod may still send before the response headers end.
type limitedConnReader struct {
	conn net.Conn
	n    int64 // bytes left; noLimit while reading a body
	// The write-then-wait read (rawread.go): raw is conn's RawConn (nil when conn is not a
	// *net.TCPConn, in tests), flush the request writer the next Read sends first.
	raw   syscall.RawConn
	rawFn func(fd uintptr) bool // r.rawRead, bound once per connection
	flush *bufio.Writer
	cw    *sentCounter // flush's destination: written with writeFD inside the read
	werr  error        // the flush's error
	p     []byte       // the read's buffer while in raw.Read
	rn    int
	rerr  error
}

const noLimit = math.MaxInt64

func (r *limitedConnReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errHeaderLimit
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	var n int
	var err error
	if r.flush != nil {
		n, err = r.writeThenRead(p)
	} else {
		n, err = r.conn.Read(p)
	}
	r.n -= int64(n)
	return n, err
}

// errHeaderLimit is what the bufio.Reader sees when the header budget is spent; roundTrip turns
// it into headerBytesError.
var errHeaderLimit = errors.New("response header limit reached")

type persistConn struct {
	t      *syncTransport
	addr   string
	conn   net.Conn
	lr     limitedConnReader
	raw    syscall.RawConn // nil when conn is not a *net.TCPConn (tests)
	br     *bufio.Reader
	bw     *bufio.Writer // writes to cw
	cw     sentCounter
	idleAt time.Duration // monoNow when put in the pool
	// rdl is conn's read deadline; see armHeaderDeadline.
	rdl readDeadline
	// relay is the relay loop's WebSocket on this (upgraded) connection, if any; relayClosed
	// is set by close, after which none is made (wscopy.go, endRelay). tracked is the
	// connection registry's entry for it (setTracked), removed by close.
	relayMu     sync.Mutex
	relay       *relayPair
	relayClosed bool
	tracked     *trackedConn
}

// sentCounter is the request writer's destination: the pod connection, counting the bytes that
// went out. A request whose headers or body filled the writer reached the pod in part before its
// last flush, and the pod may answer (a 401, a 404) before the rest: such a request is not written
// inside the read of its answer (rawread.go), whose readiness reset would forget that answer.
type sentCounter struct {
	conn net.Conn
	n    int64
	// fd is conn's socket while the request is written inside the read of its answer
	// (rawread.go), -1 otherwise.
	fd int
}

func (w *sentCounter) Write(p []byte) (int, error) {
	if w.fd >= 0 {
		n, err := writeRaw(w.conn, w.fd, p)
		w.n += int64(n)
		return n, err
	}
	n, err := w.conn.Write(p)
	w.n += int64(n)
	return n, err
}

func newSyncTransport(fallback http.RoundTripper, dial func(ctx context.Context, network, addr string) (net.Conn, error), limits responseLimits, maxIdlePerHost int, idleTimeout time.Duration) *syncTransport {
	return &syncTransport{
		fallback:       fallback,
		dial:           dial,
		limits:         limits.withDefaults(),
		maxIdlePerHost: maxIdlePerHost,
		idleTimeout:    idleTimeout,
		pools:          map[string]*idlePool{},
	}
}

// withDefaults fills in the zero bounds (tests build transports directly).
func (l responseLimits) withDefaults() responseLimits {
	if l.maxHeaderBytes <= 0 {
		l.maxHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	if l.max1xx <= 0 {
		l.max1xx = DefaultMax1xxResponses
	}
	return l
}

// handles reports whether req is a plain HTTP/1.1 exchange syncTransport does itself.
func handles(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.Header["Expect"] != nil {
		return false
	}
	if req.Body == nil || req.Body == http.NoBody {
		return true // an upgrade too: its connection is the answer's body (upgradedConn)
	}
	if req.Header["Upgrade"] != nil {
		return false
	}
	return req.ContentLength > 0 && req.ContentLength <= maxSyncBody
}

// replayable reports whether req may be sent a second time after a kept-alive connection turned
// out to be closed by the pod: an idempotent method and no body (net/http's rule too).
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header["Idempotency-Key"] != nil || req.Header["X-Idempotency-Key"] != nil
}

// RoundTrip implements http.RoundTripper.
func (t *syncTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !handles(req) {
		return t.fallback.RoundTrip(req)
	}
	return t.do(req, req.URL.Host, nil)
}

// exchange is a request sent by something other than http.Request.Write: the proxy's fast path
// writes the outgoing request straight from the incoming one.
type exchange interface {
	// writeRequest writes the request (line, headers, body) to bw; it may be called twice when a
	// request without a body is re-sent on a fresh connection.
	writeRequest(bw *bufio.Writer) error
	// got1xx passes on an informational response (103 Early Hints).
	got1xx(code int, h http.Header) error
	// answer is where the exchange's answer is kept (its Response, body and header map): an
	// exchange lives as long as its answer, so they cost no allocation.
	answer() *answerStore
}

// answerStore holds an exchange's answer.
type answerStore struct {
	res  http.Response
	body connBody
	// h, when not nil, is the (empty) header map a quick-parsed answer's headers go to, and
	// vals fillHeader's values buffer for it: the client response's own (forward.go). direct
	// reports that the answer's headers were parsed into h.
	h      http.Header
	vals   *[]string
	direct bool
	// raw, when not nil, is where a quick answer's header lines go for the client
	// (parseRawResponse), tried before h; rawDirect reports they went there (res.Header is
	// then h, empty).
	raw       *rawAnswer
	rawDirect bool
}

// do sends req to addr on a pooled or new connection, written by ex (nil: req.Write). req's
// method, headers and body decide whether it may be replayed.
func (t *syncTransport) do(req *http.Request, addr string, ex exchange) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	retry := replayable(req)
	pc, reused := t.get(addr, !retry)
	for {
		if pc == nil {
			var err error
			if pc, err = t.dialConn(ctx, addr); err != nil {
				closeBody(req)
				return nil, err
			}
		}
		res, err, stale := pc.roundTrip(req, ex)
		if err == nil {
			return res, nil
		}
		pc.close()
		if stale && reused && retry && ctx.Err() == nil {
			// The pod closed the kept-alive connection before it saw the request (an idle timeout
			// or a restart): send it once more on a fresh connection.
			pc, reused, retry = nil, false, false
			continue
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// roundTrip sends req on pc and reads the response headers. stale is true when the connection
// failed before any byte of a response arrived, so the pod cannot have acted on the request.
func (pc *persistConn) roundTrip(req *http.Request, ex exchange) (res *http.Response, err error, stale bool) {
	ctx := req.Context()
	// Cancellation (the client went away) closes the connection, which ends any read or write.
	var stop canceller
	if lc, ok := ctx.(*leanCtx); ok {
		if !lc.onCancel(pc) {
			return nil, ctx.Err(), false
		}
		stop = canceller{lean: lc, pc: pc}
	} else if ctx.Done() != nil {
		stop.stop = context.AfterFunc(ctx, pc.abort)
	}
	defer func() {
		if err != nil {
			stop.do()
		}
	}()
	sentBefore := pc.cw.n
	if ex != nil {
		err = ex.writeRequest(pc.bw)
	} else {
		err = req.Write(pc.bw)
	}
	if err != nil {
		return nil, fmt.Errorf("write request to %s: %w", pc.addr, err), true
	}
	// The request is sent by the first read of the answer when it can (rawread.go): one
	// system call less per request than a write and a read that finds nothing yet. It can only
	// when none of it has gone out yet (a request larger than the writer's buffer has).
	rawWrite := pc.lr.raw != nil && pc.br.Buffered() == 0 && pc.cw.n == sentBefore
	if !rawWrite {
		if err := pc.bw.Flush(); err != nil {
			return nil, fmt.Errorf("write request to %s: %w", pc.addr, err), true
		}
	}
	lim := &pc.t.limits
	if lim.headerTimeout > 0 {
		pc.armHeaderDeadline(lim.headerTimeout)
	}
	// Everything the pod sends from here until the final response's headers end counts against
	// maxHeaderBytes (a pooled connection has nothing buffered: put checks).
	pc.lr.n = lim.maxHeaderBytes
	if rawWrite {
		pc.lr.flush, pc.lr.werr = pc.bw, nil
	}
	if _, err := pc.br.Peek(1); err != nil {
		if rawWrite && pc.lr.werr != nil {
			return nil, fmt.Errorf("write request to %s: %w", pc.addr, pc.lr.werr), true
		}
		// Closed before any byte of an answer: stale, the request may be sent again. A timeout
		// is not: the pod has had the request for the whole header timeout (sending it again
		// would double the wait).
		var ne net.Error
		return nil, pc.readErr(err), !(errors.As(err, &ne) && ne.Timeout())
	}
	for n1xx := 0; ; n1xx++ {
		if ex != nil && req.Method != http.MethodHead {
			if res = pc.quickResponse(req, ex.answer()); res != nil {
				break // a final answer with a Content-Length
			}
		}
		res, err = http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, pc.readErr(err), false
		}
		if err := badStatus(res.StatusCode); err != nil {
			return nil, err, false
		}
		if res.StatusCode >= 200 || res.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n1xx >= lim.max1xx {
			return nil, too1xxError(lim.max1xx), false
		}
		// An informational answer (103 Early Hints, 100 Continue): pass it on (ReverseProxy
		// forwards it through the client trace) and read on. It never sets cookies through the
		// proxy, nor carries a field that reaches past the workspace (originWide).
		delete(res.Header, "Set-Cookie")
		dropOriginWide(res.Header)
		if ex != nil {
			if err := ex.got1xx(res.StatusCode, res.Header); err != nil {
				return nil, err, false
			}
		} else if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(res.StatusCode, textproto.MIMEHeader(res.Header)); err != nil {
				return nil, err, false
			}
		}
	}
	pc.lr.n = noLimit
	if res.Trailer != nil {
		// Announced trailers (only http.ReadResponse reads an answer that has them): the keys
		// the client is told of. Their values, and any not announced, arrive at the body's end
		// (connBody).
		dropTrailerFields(res.Trailer)
	}
	if !bodyBuffered(res, pc.br) {
		// The body may take any time (an event stream): no deadline while it is read. A body
		// that is all in the buffer already is read without touching the connection, so the
		// deadline can stay for the next request (armHeaderDeadline).
		pc.rdl.clear()
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		if req.Header["Upgrade"] == nil {
			// A pod that switches protocols unasked is broken.
			return nil, fmt.Errorf("pod %s switched protocols without an Upgrade request", pc.addr), false
		}
		// The connection is the answer's body from now on, never pooled; it is closed when the
		// request's context ends (ReverseProxy closes it too), and reads have no deadline.
		pc.rdl.clear()
		res.Body = &upgradedConn{pc: pc}
		return res, nil, false
	}
	// The fast path never asks the pod to close: the client's Connection header is hop-by-hop.
	reuse := !res.Close && (ex != nil || !req.Close)
	if res.Body == http.NoBody {
		if !stop.do() {
			reuse = false // cancelled at this very moment: the connection is being closed
		}
		if reuse {
			pc.t.put(pc)
		} else {
			pc.close()
		}
		return res, nil, false
	}
	if res.Body == nil {
		// quickResponse: the body is the next ContentLength bytes on the connection.
		var body *connBody
		if ex != nil {
			st := ex.answer()
			st.body = connBody{pc: pc, n: res.ContentLength, stop: stop, reuse: reuse}
			body = &st.body
		} else {
			body = &connBody{pc: pc, n: res.ContentLength, stop: stop, reuse: reuse}
		}
		res.Body = body
		return res, nil, false
	}
	res.Body = &connBody{body: res.Body, res: res, pc: pc, stop: stop, reuse: reuse}
	return res, nil, false
}

// quickResponse parses the response headers with parseQuickResponseInto when they are all in
// the read buffer already (nearly always: a pod's headers come in one segment), consuming them,
// into st. nil: http.ReadResponse must read the response (nothing was consumed). A response
// with a Content-Length of 0 gets http.NoBody, as from http.ReadResponse; otherwise Body is nil
// and roundTrip reads ContentLength bytes from the connection.
func (pc *persistConn) quickResponse(req *http.Request, st *answerStore) *http.Response {
	buf, _ := pc.br.Peek(pc.br.Buffered())
	end := bytes.Index(buf, crlfcrlf)
	if end < 0 {
		return nil
	}
	head := buf[:end+len(crlfcrlf)]
	res := &st.res
	if st.raw != nil && st.h != nil && parseRawResponse(head, res, st.raw) {
		res.Header = st.h
		st.rawDirect = true
	} else if st.h != nil {
		n := len(*st.vals)
		if !parseQuickResponseInto(head, res, st.h, st.vals) {
			clear(st.h)
			clear((*st.vals)[n:])
			*st.vals = (*st.vals)[:n]
			return nil
		}
		st.direct = true
	} else {
		vals := make([]string, 0, headerLines(head))
		if !parseQuickResponseInto(head, res, make(http.Header), &vals) {
			return nil
		}
	}
	_, _ = pc.br.Discard(len(head))
	res.Request = req
	if res.ContentLength == 0 {
		res.Body = http.NoBody
	}
	return res
}

// readErr names a failed response read; a timeout names the response header timeout.
func (pc *persistConn) readErr(err error) error {
	if errors.Is(err, errHeaderLimit) || pc.lr.n <= 0 {
		return headerBytesError(pc.t.limits.maxHeaderBytes)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("read response from %s: no response headers within %s: %w", pc.addr, pc.t.limits.headerTimeout, err)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read response from %s: %w", pc.addr, err)
}

func (pc *persistConn) abort() { pc.close() }

// armHeaderDeadline bounds the wait for the response headers by timeout. Re-arming the deadline
// would cost a timer update twice per request (set, then cleared for the body); a deadline still
// armed from an earlier request is kept while it is at least 7/8 of timeout away
// (readDeadline.arm): the pod gets between 7/8 of timeout and timeout to answer.
func (pc *persistConn) armHeaderDeadline(timeout time.Duration) {
	pc.rdl.arm(timeout)
}

// bodyBuffered reports whether res's whole body is in br already (or there is none), so reading
// it never waits on the connection.
func bodyBuffered(res *http.Response, br *bufio.Reader) bool {
	return res.Body == http.NoBody || res.Body == nil && res.ContentLength <= int64(br.Buffered())
}

// canceller undoes what closes a request's pod connection when its context ends: a lean
// connection's registration, or a context.AfterFunc.
type canceller struct {
	lean *leanCtx
	pc   *persistConn
	stop func() bool
}

// do reports false when the context has ended (the connection is being closed).
func (c canceller) do() bool {
	switch {
	case c.lean != nil:
		return c.lean.stop(c.pc)
	case c.stop != nil:
		return c.stop()
	}
	return true
}

// close closes the connection; a relay loop holding its socket (an upgraded connection's) ends
// that WebSocket first (endRelay), and the connection registry forgets it, whatever closed it
// (the body's Close, a cancelled request's canceller, closePod).
func (pc *persistConn) close() error {
	tc := pc.endRelay()
	err := pc.conn.Close()
	if tc != nil {
		tc.untrack()
	}
	return err
}

// connBody is a response body on a pooled connection: read to its end and closed, it gives the
// connection back to the pool; closed early, it closes the connection (never draining a long
// body nobody reads).
type connBody struct {
	// body is the body http.ReadResponse made; nil: the body is the next n bytes of pc.br.
	body io.ReadCloser
	// res is the answer body belongs to: http.ReadResponse's body reader merges the trailers
	// into res.Trailer in the Read that ends the body (nil with body).
	res   *http.Response
	n     int64
	pc    *persistConn // nil once released
	stop  canceller
	reuse bool
	eof   bool
}

func (b *connBody) Read(p []byte) (int, error) {
	if b.pc == nil && !b.eof {
		return 0, errors.New("read on a closed response body")
	}
	if b.eof {
		return 0, io.EOF
	}
	var n int
	var err error
	if b.body != nil {
		n, err = b.body.Read(p)
	} else {
		n, err = b.readN(p)
	}
	if err == io.EOF {
		b.eof = true
		if b.res != nil {
			dropTrailerFields(b.res.Trailer)
		}
		b.release(b.reuse)
	} else if err != nil {
		b.release(false)
	}
	return n, err
}

// readN reads the rest of a body of known length from the connection: io.EOF with its last
// bytes (so the connection goes back to the pool without one more Read), io.ErrUnexpectedEOF
// when the pod closes the connection early, as net/http's body reader says.
func (b *connBody) readN(p []byte) (int, error) {
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.pc.br.Read(p)
	b.n -= int64(n)
	if b.n == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *connBody) Close() error {
	if b.pc != nil {
		b.release(false)
	}
	return nil
}

// release ends the body's hold on its connection: back to the pool, or closed.
func (b *connBody) release(reuse bool) {
	pc := b.pc
	if pc == nil {
		return
	}
	b.pc = nil
	if !b.stop.do() {
		reuse = false // the request was cancelled: the connection is being closed
	}
	if reuse {
		pc.t.put(pc)
	} else {
		pc.close()
	}
}

func (t *syncTransport) dialConn(ctx context.Context, addr string) (*persistConn, error) {
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pc := &persistConn{t: t, addr: addr, conn: c, rdl: readDeadline{conn: c}, lr: limitedConnReader{conn: c, n: noLimit}, cw: sentCounter{conn: c, fd: -1}}
	pc.bw = bufio.NewWriterSize(&pc.cw, 4<<10)
	pc.br = bufio.NewReaderSize(&pc.lr, 16<<10)
	if sc, ok := c.(syscall.Conn); ok {
		pc.raw, _ = sc.SyscallConn()
	}
	if _, ok := c.(*net.TCPConn); ok && pc.raw != nil {
		pc.lr.raw = pc.raw
		pc.lr.rawFn = pc.lr.rawRead
		pc.lr.cw = &pc.cw
	}
	return pc, nil
}

// get takes the most recently used idle connection to addr. With check (a request that cannot
// be retried), a connection the pod has already closed is skipped: a non-blocking peek costs one
// system call and saves a 502 on a POST after a dev server's keep-alive timeout.
func (t *syncTransport) get(addr string, check bool) (*persistConn, bool) {
	for {
		t.mu.Lock()
		p := t.pools[addr]
		if p == nil || len(p.conns) == 0 {
			t.mu.Unlock()
			return nil, false
		}
		pc := p.conns[len(p.conns)-1]
		p.conns[len(p.conns)-1] = nil
		p.conns = p.conns[:len(p.conns)-1]
		t.mu.Unlock()
		if t.idleTimeout > 0 && monoNow()-pc.idleAt > t.idleTimeout {
			pc.close()
			continue
		}
		if check && !pc.alive() {
			pc.close()
			continue
		}
		return pc, true
	}
}

// alive reports whether the pod has neither closed the idle connection nor sent anything on it.
func (pc *persistConn) alive() bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	if pc.raw == nil {
		return true
	}
	// A header deadline left from the last answer (armHeaderDeadline) may have passed: the
	// peek would fail on it, not on the connection.
	pc.rdl.clear()
	var buf [1]byte
	ok := false
	err := pc.raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true // never wait for readiness
	})
	return err == nil && ok
}

// put returns an idle connection to its pool, or closes it when the pool is full.
func (t *syncTransport) put(pc *persistConn) {
	if pc.br.Buffered() > 0 {
		pc.close() // the pod sent more than one response: the connection is out of step
		return
	}
	pc.idleAt = monoNow()
	t.mu.Lock()
	p := t.pools[pc.addr]
	if p == nil {
		p = &idlePool{}
		t.pools[pc.addr] = p
	}
	if len(p.conns) >= t.maxIdlePerHost {
		t.mu.Unlock()
		pc.close()
		return
	}
	p.conns = append(p.conns, pc)
	if p.sweep == nil && t.idleTimeout > 0 {
		p.sweep = time.AfterFunc(t.idleTimeout, func() { t.sweepIdle(pc.addr, p) })
	}
	t.mu.Unlock()
}

// sweepIdle closes the connections to addr that have been idle longer than idleTimeout (pods
// that were deleted keep none open for long) and re-arms itself while any remain.
func (t *syncTransport) sweepIdle(addr string, p *idlePool) {
	now := monoNow()
	var expired []*persistConn
	t.mu.Lock()
	if t.pools[addr] != p {
		t.mu.Unlock()
		return // dropped by CloseIdleConnections
	}
	p.sweep = nil
	keep := p.conns[:0]
	for _, pc := range p.conns {
		if now-pc.idleAt >= t.idleTimeout {
			expired = append(expired, pc)
		} else {
			keep = append(keep, pc)
		}
	}
	clear(p.conns[len(keep):])
	p.conns = keep
	if len(keep) == 0 {
		delete(t.pools, addr)
	} else {
		p.sweep = time.AfterFunc(t.idleTimeout, func() { t.sweepIdle(addr, p) })
	}
	t.mu.Unlock()
	for _, pc := range expired {
		pc.close()
	}
}

// CloseIdleConnections closes every idle connection (shutdown, tests), here and in the fallback.
func (t *syncTransport) CloseIdleConnections() {
	t.mu.Lock()
	pools := t.pools
	t.pools = map[string]*idlePool{}
	t.mu.Unlock()
	for _, p := range pools {
		if p.sweep != nil {
			p.sweep.Stop()
		}
		for _, pc := range p.conns {
			pc.close()
		}
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// idleCount is the number of idle connections to addr (tests).
func (t *syncTransport) idleCount(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pools[addr]; p != nil {
		return len(p.conns)
	}
	return 0
}

// limit1xx wraps the standard Transport (upgrades with a body, large uploads) with the cap on informational
// answers: ReverseProxy forwards every 1xx it is told about, and net/http's own header limit
// starts over for each one it delivers, so a pod could otherwise send them forever.
type limit1xx struct {
	next *http.Transport
	max  int
}

func (l *limit1xx) RoundTrip(req *http.Request) (*http.Response, error) {
	// A composed trace hook's error is dropped (httptrace calls both hooks and returns the
	// second's), so going over the cap cancels the request instead, with the reason as cause.
	// The context ends with the incoming request's.
	ctx, cancel := context.WithCancelCause(req.Context())
	n, max := 0, l.max
	trace := &httptrace.ClientTrace{Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
		if n++; n > max {
			err := too1xxError(max)
			cancel(err)
			return err
		}
		// Called before ReverseProxy's hook, on the same map: an informational answer never
		// sets cookies through the proxy, nor carries a field that reaches past the workspace
		// (originWide), as on the proxy's own transport (roundTrip).
		delete(h, "Set-Cookie")
		dropOriginWide(http.Header(h))
		return nil
	}}
	res, err := l.next.RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	if err != nil {
		var be *boundError
		if cause := context.Cause(ctx); errors.As(cause, &be) {
			return nil, be
		}
		return res, err
	}
	if res.Trailer != nil {
		dropTrailerFields(res.Trailer) // the announced keys
	}
	if res.StatusCode != http.StatusSwitchingProtocols && (res.Trailer != nil || len(res.TransferEncoding) > 0) {
		// A chunked body may end in trailers, announced or not.
		res.Body = &trailerFilter{ReadCloser: res.Body, res: res}
	}
	return res, nil
}

// dropTrailerFields removes the fields a workspace's answer never carries in its trailers: Set-Cookie
// (filterSetCookies and its cap see the header section only, and a workspace has no reason to
// set a cookie after its body; a client or an intermediary that merges trailers into the header
// section would apply it) and originWide's.
func dropTrailerFields(tr http.Header) {
	delete(tr, "Set-Cookie")
	dropOriginWide(tr)
}

// trailerFilter is the body of an answer of net/http's Transport that may end in trailers: in
// the Read that ends the body, net/http merges them into res.Trailer, where ReverseProxy (or
// forwardFast) copies them from after the body; trailerDropped's are removed first.
type trailerFilter struct {
	io.ReadCloser
	res *http.Response
}

func (b *trailerFilter) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		dropTrailerFields(b.res.Trailer)
	}
	return n, err
}

func (l *limit1xx) CloseIdleConnections() { l.next.CloseIdleConnections() }

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The proxy's own connection loop. net/http's server spends more on a small keep-alive request
// than the forwarding itself: a context with cancel, a response with two buffered writers and,
// for every request, a goroutine blocked in a background read that notices a client going away.
// leanServer serves the common request (HTTP/1.1, no body, no upgrade) on the connection's own
// goroutine with per-connection buffers, calling the same Proxy.ServeHTTP. Any other request, or
// anything it does not fully understand, hands the connection, with the bytes it has read but not
// consumed, to the net/http server for the rest of the connection's life: WebSocket upgrades,
// uploads, Expect, HTTP/1.0, malformed requests (net/http writes the 400) all behave exactly as
// before.
//
// A client that goes away while its request waits for the pod is noticed the way net/http does
// (a read on the connection), but only once the request has waited watchAfter: the pod's
// connection is freed a moment later than with net/http, and nothing is spent on the requests
// that are answered quickly, which is nearly all of them.

// leanServer serves connections accepted from ln.
type leanServer struct {
	handler http.Handler
	// srv is the net/http server connections are handed to (through handoff); it also supplies
	// the timeouts and the value of http.ServerContextKey.
	srv     *http.Server
	handoff *handoffListener
	// watchAfter is how long a request waits before a read watches for the client going away.
	watchAfter time.Duration

	mu       sync.Mutex
	conns    map[*leanConn]struct{}
	shutdown atomic.Bool
	wg       sync.WaitGroup
	// tick counts the watch's ticks (every watchAfter/2): a request stores it when it starts,
	// instead of reading the clock.
	tick atomic.Int64
	// served and handedOff count requests served and connections handed to net/http (tests).
	served, handedOff atomic.Int64
	// rawConns counts connections served inside their RawConn.Read, and waits how often such a
	// connection waited for readiness instead of reading first (tests).
	rawConns, waits atomic.Int64
	// forced counts connections that close had to close after its grace ran out (tests).
	forced atomic.Int64
	// polls counts pollGone's peeks (tests).
	polls atomic.Int64
}

// defaultWatchAfter: a pod answering later than this is a slow request; its client leaving is
// noticed from then on.
const defaultWatchAfter = 500 * time.Millisecond

// watchTicks: a request that started while the tick count was c (busySince c+1) is slow from
// tick c+1+watchTicks on, 2 to 3 ticks (of watchAfter/2) after it started. maxPollGap: the
// longest gap between two peeks of a slow request's client, in ticks.
const (
	watchTicks = 2
	maxPollGap = 16
)

// leanHeaderBuf is the connection's read buffer: request headers that do not fit are handed to
// net/http (which allows up to its MaxHeaderBytes).
const leanHeaderBuf = 8 << 10

func newLeanServer(h http.Handler, srv *http.Server, addr net.Addr) *leanServer {
	return &leanServer{
		handler:    h,
		srv:        srv,
		handoff:    newHandoffListener(addr),
		watchAfter: defaultWatchAfter,
		conns:      map[*leanConn]struct{}{},
	}
}

// serve accepts connections until ln fails (it is closed on shutdown). Temporary accept errors
// are retried with a backoff, as net/http does.
func (s *leanServer) serve(ctx context.Context, ln net.Listener) error {
	stop := make(chan struct{})
	defer close(stop)
	go s.watchSlowRequests(stop)
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTemporaryAccept) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		lc := s.newConn(ctx, c)
		if lc == nil {
			_ = c.Close()
			continue
		}
		go lc.serve()
	}
}

var errTemporaryAccept = errors.New("temporary accept error") // tests

// watchSlowRequests starts the client-gone watch of every request that has waited watchAfter.
// One ticker for all connections keeps timers and the clock out of the per-request path: a
// request notes the tick count when it starts (busySince), and is slow from the first tick at
// least watchAfter after it started (between watchAfter and 1.5 watchAfter), as when the watch
// compared the clock. A connection served inside its RawConn.Read is watched by peeking at its
// socket (pollGone), at the first tick the request is slow, then after 1, 2, 4, 8 and from then
// on every 16 ticks (at the default, 0.25 s doubling to 4 s): an event stream held open for
// hours costs a peek every 4 s, not four a second, and a client that leaves is still noticed
// within 4 s.
func (s *leanServer) watchSlowRequests(stop <-chan struct{}) {
	t := time.NewTicker(s.watchAfter / 2)
	defer t.Stop()
	var slow []*leanConn
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		k := s.tick.Add(1)
		slow = slow[:0]
		s.mu.Lock()
		for lc := range s.conns {
			if lc.watchDue(k, lc.busySince.Load()) {
				slow = append(slow, lc)
			}
		}
		s.mu.Unlock()
		// Outside the lock: a watch of a connection read inside its RawConn.Read is a system
		// call.
		for _, lc := range slow {
			lc.startWatch()
		}
		clear(slow)
	}
}

// watchDue reports whether the request that started at since (busySince) is watched at tick k:
// from the first tick it is slow, and for a connection that is peeked at, with the backoff.
// Only watchSlowRequests calls it (the poll fields are its own).
func (lc *leanConn) watchDue(k, since int64) bool {
	if since == 0 || k-since < watchTicks {
		return false
	}
	if lc.r.raw == nil {
		return true // startWatch starts one read per request, once
	}
	if lc.pollSince != since {
		lc.pollSince, lc.pollAt, lc.pollGap = since, k, 1
	}
	if k < lc.pollAt {
		return false
	}
	lc.pollAt = k + lc.pollGap
	lc.pollGap = min(2*lc.pollGap, maxPollGap)
	return true
}

func (s *leanServer) newConn(ctx context.Context, c net.Conn) *leanConn {
	connCtx := context.WithValue(ctx, http.ServerContextKey, s.srv)
	connCtx = context.WithValue(connCtx, http.LocalAddrContextKey, c.LocalAddr())
	lc := &leanConn{s: s, c: c, rdl: readDeadline{conn: c}, remote: c.RemoteAddr().String()}
	if ip, _, err := net.SplitHostPort(lc.remote); err == nil {
		lc.remoteIP, lc.remoteIPOK = ip, true
	}
	lc.ctx = &leanCtx{}
	lc.ctx.Context, lc.cancel = context.WithCancel(connCtx)
	// One AfterFunc for the connection's life instead of one per request (transport.go).
	context.AfterFunc(lc.ctx, lc.ctx.abortPod)
	lc.quick.base = (&http.Request{}).WithContext(lc.ctx)
	lc.quick.req = new(http.Request)
	// The Proxy adds the fields a parse leaves out on the paths that read them (wholeHeader);
	// another handler gets them all.
	_, lc.quick.lazy = s.handler.(*Proxy)
	lc.r.c = c
	lc.r.raw, _ = rawSource(c)
	lc.r.waits = &s.waits
	lc.br = bufio.NewReaderSize(&lc.r, leanHeaderBuf)
	lc.bw = bufio.NewWriterSize(clientWriter{lc}, 4<<10)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return nil
	}
	s.conns[lc] = struct{}{}
	s.wg.Add(1)
	return lc
}

// close stops serving: idle connections are closed at once (their wait for the next request
// ends), busy ones after their current answer (whose request context, from Start's, has ended
// already); it waits for them until ctx ends, then cancels and closes what is left.
func (s *leanServer) close(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown.Store(true)
	for lc := range s.conns {
		if lc.idle.Load() {
			_ = lc.c.SetReadDeadline(aLongTimeAgo)
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for lc := range s.conns {
			// A connection served inside its RawConn.Read is closed only when that read ends
			// (Close waits for it): the request's context ends first, which frees a request
			// waiting for its pod, and the close does not hold the lock.
			lc.cancel()
			s.forced.Add(1)
			go func(c net.Conn) { _ = c.Close() }(lc.c)
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// leanConn is one client connection served by the lean loop.
type leanConn struct {
	s      *leanServer
	c      net.Conn
	ctx    *leanCtx
	remote string
	r      watchedReader
	br     *bufio.Reader
	bw     *bufio.Writer
	idle   atomic.Bool
	// headerArmed: the header deadline of the request being read is set; handOffNow: the loop
	// ended to hand the connection to net/http.
	headerArmed, handOffNow bool
	// rdl is c's read deadline (set only by this goroutine).
	rdl readDeadline
	// header is the handler's response header map, cleared and reused for every request;
	// respVals holds the values of a pod's answer parsed straight into it (forward.go).
	header   http.Header
	respVals []string
	// rawAns is a pod's answer kept as its header lines for the client (parseRawResponse),
	// its buffer reused for every request.
	rawAns rawAnswer

	// ctx is every request's context: cancelled when the client is gone (the connection ends
	// then) or the connection closes.
	cancel context.CancelFunc
	// parse reads the request headers (http.ReadRequest) from head, a copy of them.
	head  bytes.Reader
	parse *bufio.Reader

	// The client-gone watch of the request being served.
	// busySince is 1 + the watch's tick count when the request being served arrived; 0
	// between requests.
	busySince atomic.Int64
	// The backoff of the slow request's peeks (watchSlowRequests): the request (its busySince),
	// the tick of the next peek, and the gap after it, in ticks.
	pollSince, pollAt, pollGap int64
	watchMu                    sync.Mutex
	watching                   bool
	watchDone                  chan struct{}
	// watchOver: pollGone has seen the client leave, or its next request (raw connections).
	watchOver bool

	res leanResponse // reused for every request
	// bodyArr holds the start of an answer's body while its header is not sent (leanResponse's
	// buf): kept here, not in leanResponse, so that resetting the response for every request
	// does not clear 2 KiB twice. Only the connection's own goroutine uses it, and a response
	// reads no more of it than it wrote.
	bodyArr [leanBodyBuf]byte
	// remoteIP is remote's host part (X-Forwarded-For), split once per connection; remoteIPOK
	// reports that remote split.
	remoteIP   string
	remoteIPOK bool
	// quick is the request quickParse fills in, reused for every request (parse.go).
	quick quickReq
}

// leanCtx is the context of a lean connection's requests. The pod connection a request is
// waiting on registers itself here (onCancel) instead of with a context.AfterFunc per request
// (two allocations and a lock of the parent context); one AfterFunc for the connection's life
// closes it when the context ends (the client went away, or the proxy shuts down).
type leanCtx struct {
	context.Context
	mu   sync.Mutex
	pc   *persistConn
	done bool
}

// onCancel registers pc to be closed when the context ends; false when it has ended already.
func (c *leanCtx) onCancel(pc *persistConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.pc = pc
	return true
}

// stop undoes onCancel(pc); false when the context ended meanwhile (pc is being closed), as a
// context.AfterFunc's stop reports.
func (c *leanCtx) stop(pc *persistConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pc == pc {
		c.pc = nil
	}
	return !c.done
}

func (c *leanCtx) abortPod() {
	c.mu.Lock()
	c.done = true
	pc := c.pc
	c.pc = nil
	c.mu.Unlock()
	if pc != nil {
		pc.abort()
	}
}

// watchedReader is the reader under the connection's bufio.Reader. Inside the connection's
// RawConn.Read (inRaw) it reads the socket itself and answers errWouldBlock instead of reading
// when the last read emptied the socket: the loop then waits for readiness (server.go, "The
// client's next request"). Otherwise it reads c, first returning the byte a client-gone watch
// read, if any.
type watchedReader struct {
	c       net.Conn
	pending []byte // 0 or 1 byte
	err     error  // what the watch's read returned (not a deadline), or what its poll saw
	b       [1]byte

	// raw is the socket under c when it is a TCP connection (possibly under the per-client
	// limit); nil otherwise (the connection is then read with c.Read).
	raw syscall.RawConn
	// waits is the server's count of waits without a read before them (tests).
	waits *atomic.Int64
	// fd is the socket while inRaw: the loop runs inside raw.Read.
	fd    int
	inRaw bool
	// drained: the last read returned less than it asked for, so the socket was empty then; the
	// next read waits for readiness first.
	drained bool
}

// errWouldBlock: the socket has nothing now; the loop returns from its RawConn.Read function to
// wait for readiness, and is called again when the socket is readable.
var errWouldBlock = errors.New("proxy: would block")

func (r *watchedReader) Read(p []byte) (int, error) {
	if len(r.pending) > 0 && len(p) > 0 {
		p[0] = r.pending[0]
		r.pending = r.pending[:0]
		return 1, nil
	}
	if r.err != nil {
		return 0, r.err
	}
	if !r.inRaw {
		return r.c.Read(p)
	}
	if r.drained {
		r.drained = false
		r.waits.Add(1)
		return 0, errWouldBlock
	}
	n, empty, err := readFD(uintptr(r.fd), p)
	switch {
	case empty:
		return 0, errWouldBlock
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: err}
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	r.drained = n < len(p)
	return n, nil
}

// clientWriter is the answer writer's destination: the client connection, written with writeFD
// while the loop runs inside the connection's RawConn.Read (rawread.go, readFD).
type clientWriter struct{ lc *leanConn }

func (w clientWriter) Write(p []byte) (int, error) {
	if r := &w.lc.r; r.inRaw {
		return writeRaw(w.lc.c, r.fd, p)
	}
	return w.lc.c.Write(p)
}

// The client's next request. net.Conn.Read tries the socket before it waits, and after an
// answer the client's next request has not arrived yet: that read finds nothing, one system call
// per request. So a TCP connection is served inside one syscall.RawConn.Read for its whole life
// (until it ends or is handed to net/http): the runtime resets the read readiness once, when the
// connection's loop starts, and never again, so no readiness notice can be lost. After a read
// that emptied the socket the loop does not read again: it returns false from the function, the
// runtime waits for readiness (or the read deadline, or a close), and calls it again; the loop
// resumes where it waited (waiting for a request, or for the rest of its headers). Data that
// arrived before the wait (a pipelined request, the rest of the headers) left a readiness notice
// that nothing reset, so the wait returns at once; a notice for data already read costs one read
// that finds nothing. The handler runs inside the function too, so nothing else may read the
// socket meanwhile: the client-gone watch looks at the socket without reading it (startWatch).

func (lc *leanConn) serve() {
	handedOff := false
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler { //nolint:errorlint // a panic value
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			lc.s.logf("http: panic serving %v: %v\n%s", lc.remote, v, buf)
		}
		lc.cancel()
		if !handedOff {
			_ = lc.c.Close()
		}
		lc.s.mu.Lock()
		delete(lc.s.conns, lc)
		lc.s.mu.Unlock()
		lc.s.wg.Done()
	}()
	if raw := lc.r.raw; raw != nil {
		lc.s.rawConns.Add(1)
		// An error here is a deadline (idle, headers, the proxy stopping) or a close: the
		// connection ends.
		_ = raw.Read(func(fd uintptr) bool {
			lc.r.fd, lc.r.inRaw = int(fd), true
			wait := lc.loop()
			lc.r.inRaw = false
			return !wait
		})
	} else {
		lc.loop()
	}
	if lc.handOffNow {
		handedOff = lc.handOff()
	}
}

// loop serves requests until the connection ends or must go to net/http (handOffNow), and
// returns false then; inside the connection's RawConn.Read it returns true when it must wait for
// the client, and is called again to resume.
func (lc *leanConn) loop() (wait bool) {
	srv := lc.s.srv
	for {
		// Wait for the next request; an idle client loses the connection after IdleTimeout.
		// Its headers must arrive within ReadHeaderTimeout; a deadline is set only when they do
		// not arrive in one piece.
		if lc.br.Buffered() == 0 {
			if !lc.idle.Load() {
				// Idle, then the idle deadline, then the check: a close that came before the
				// check is seen here, and one after it sees the connection idle and sets the
				// deadline that ends the wait after this one (close).
				lc.idle.Store(true)
				lc.armIdleDeadline(srv.IdleTimeout)
				if lc.s.shutdown.Load() {
					return false
				}
			}
			_, err := lc.br.Peek(1)
			if err == errWouldBlock { //nolint:errorlint // returned as is
				return true
			}
			lc.idle.Store(false)
			if err != nil {
				return false
			}
		}
		n, ok, err := lc.headerEnd(srv.ReadHeaderTimeout)
		if err == errWouldBlock { //nolint:errorlint // returned as is
			return true
		}
		lc.headerArmed = false
		if err != nil {
			return false
		}
		if !ok {
			lc.handOffNow = true
			return false
		}
		req, ok := lc.readRequest(n)
		if !ok {
			lc.handOffNow = true
			return false
		}
		if !lc.serveRequest(req) || lc.s.shutdown.Load() {
			return false
		}
	}
}

// armIdleDeadline makes the connection end after idle without a request: an idle connection
// is closed after 7/8 of idle at the earliest, and after idle at the latest (readDeadline.arm).
func (lc *leanConn) armIdleDeadline(idle time.Duration) {
	if idle <= 0 {
		lc.rdl.clear()
		return
	}
	lc.rdl.arm(idle)
}

func deadline(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return monoTime(monoNow() + d)
}

var crlfcrlf = []byte("\r\n\r\n")

// headerEnd waits for the end of the request headers in the read buffer and returns their
// length with the final blank line. ok is false when they do not fit in the buffer.
func (lc *leanConn) headerEnd(timeout time.Duration) (n int, ok bool, err error) {
	from := 0
	for {
		buf, _ := lc.br.Peek(lc.br.Buffered())
		if i := bytes.Index(buf[from:], crlfcrlf); i >= 0 {
			return from + i + len(crlfcrlf), true, nil
		}
		if len(buf) >= lc.br.Size() {
			return 0, false, nil
		}
		from = max(len(buf)-len(crlfcrlf)+1, 0)
		if !lc.headerArmed {
			// Once per request: the loop comes back here after each wait.
			lc.headerArmed = true
			lc.rdl.set(deadline(timeout))
		}
		if _, err := lc.br.Peek(len(buf) + 1); err != nil {
			if err == errWouldBlock { //nolint:errorlint // returned as is
				return 0, false, err
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return 0, false, nil
			}
			return 0, false, err
		}
	}
}

// readRequest parses the n bytes of request headers at the start of the read buffer without
// consuming them, and consumes them when the lean loop serves the request. ok is false for a
// request net/http must serve.
func (lc *leanConn) readRequest(n int) (*http.Request, bool) {
	head, _ := lc.br.Peek(n)
	// quickParse takes only requests leanEligible takes: one pass over the lines, not two.
	if req, ok := lc.quick.quickParse(head, lc.remote); ok {
		_, _ = lc.br.Discard(n)
		return req, true
	}
	if !leanEligible(head) {
		return nil, false
	}
	lc.head.Reset(head)
	if lc.parse == nil {
		lc.parse = bufio.NewReaderSize(&lc.head, leanHeaderBuf)
	} else {
		lc.parse.Reset(&lc.head)
	}
	req, err := http.ReadRequest(lc.parse)
	lc.head.Reset(nil)
	if err != nil || !validForServer(req) {
		return nil, false
	}
	_, _ = lc.br.Discard(n)
	req.RemoteAddr = lc.remote
	return req.WithContext(lc.ctx), true
}

// leanEligible is a quick look at the raw request headers: HTTP/1.1, exactly one Host header,
// and no header that asks for a body, an upgrade or an interim answer. Content-Length is allowed
// only as 0. A bare LF (not after a CR) sends the request to net/http: http.ReadRequest ends a
// line there and the lines below are cut at CRLF only, so "X: y\nUpgrade: websocket" would
// hide an upgrade in X's value (fillHeader refuses it too).
func leanEligible(head []byte) bool {
	if hasBareLF(head) {
		return false
	}
	line, rest, ok := bytes.Cut(head, []byte("\r\n"))
	if !ok || !bytes.HasSuffix(line, []byte(" HTTP/1.1")) {
		return false
	}
	hosts := 0
	for len(rest) > 2 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return false // net/http answers the malformed line
		}
		switch len(name) {
		case 4:
			if asciiEqualFold(name, "Host") {
				hosts++
			}
		case 6: // Expect
			if asciiEqualFold(name, "Expect") {
				return false
			}
		case 7: // Upgrade
			if asciiEqualFold(name, "Upgrade") {
				return false
			}
		case 14: // Content-Length
			if asciiEqualFold(name, "Content-Length") && string(bytes.TrimSpace(value)) != "0" {
				return false
			}
		case 17: // Transfer-Encoding
			if asciiEqualFold(name, "Transfer-Encoding") {
				return false
			}
		}
	}
	return hosts == 1
}

// hasBareLF reports whether b has an LF that is not preceded by a CR.
func hasBareLF(b []byte) bool {
	for off := 0; ; {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			return false
		}
		if off+i == 0 || b[off+i-1] != '\r' {
			return true
		}
		off += i + 1
	}
}

// asciiEqualFold compares a field name (bytes of the request or a string) with s, folding ASCII
// letters only, no Unicode folding (a field name is ASCII).
func asciiEqualFold[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// validForServer is what net/http's server checks beyond http.ReadRequest, and what the lean
// loop cannot serve: a request failing it goes to net/http, which answers 400 or serves it. The
// parsed request is checked again for what leanEligible looked for in the raw lines (an upgrade,
// which needs a Hijacker; Expect; a body), so that a line leanEligible read otherwise than
// http.ReadRequest can never bring such a request to the loop.
func validForServer(req *http.Request) bool {
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.Method == http.MethodConnect || req.ContentLength > 0 {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody || len(req.TransferEncoding) > 0 {
		return false
	}
	if req.Header["Upgrade"] != nil || req.Header["Expect"] != nil {
		return false
	}
	// http.ReadRequest has moved the Host header (one: leanEligible counted them) to req.Host.
	if _, ok := req.Header["Host"]; ok || req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// handOff gives the connection, with its unread bytes, to the net/http server.
func (lc *leanConn) handOff() bool {
	lc.s.handedOff.Add(1)
	lc.rdl.set(time.Time{}) // net/http sets its own
	return lc.s.handoff.give(&handoffConn{Conn: lc.c, r: lc.br})
}

// serveRequest runs the handler for req and finishes its answer. It reports whether the
// connection can serve another request.
func (lc *leanConn) serveRequest(req *http.Request) (keep bool) {
	lc.s.served.Add(1)
	lc.busySince.Store(lc.s.tick.Load() + 1)
	if lc.header == nil {
		lc.header = make(http.Header)
	}
	w := &lc.res
	*w = leanResponse{lc: lc, req: req, header: lc.header, contentLen: -1}
	func() {
		defer func() {
			if v := recover(); v != nil {
				lc.endWatch()
				keep = false
				if v != http.ErrAbortHandler { //nolint:errorlint // a panic value
					panic(v)
				}
				w.abort = true
			}
		}()
		lc.s.handler.ServeHTTP(w, req)
	}()
	if !lc.endWatch() {
		w.closeAfter = true
	}
	if w.abort {
		return false
	}
	w.finish()
	keep = !w.closeAfter && w.err == nil
	*w = leanResponse{}
	lc.header = reuseHeader(lc.header)
	lc.respVals = reuseVals(lc.respVals)
	if cap(lc.rawAns.lines) > maxKeptRawLines {
		lc.rawAns.lines = nil // a large answer's lines are not kept while the connection idles
	}
	lc.quick.header = reuseHeader(lc.quick.header)
	lc.quick.vals = reuseVals(lc.quick.vals)
	lc.quick.lines, lc.quick.partial = "", false
	return keep
}

// maxKeptHeaders bounds the header map and value buffer a connection keeps between requests: a
// request or an answer with more headers (a hostile pod's thousands of short lines) leaves them
// to the collector instead of pinning them while the connection idles.
const maxKeptHeaders = 64

// maxKeptRawLines bounds the buffer of an answer's header lines a connection keeps between
// requests (at most the pod connection's read buffer, 16 KiB, while it is used).
const maxKeptRawLines = 4 << 10

// reuseHeader empties h for the connection's next request, or drops it when it grew past
// maxKeptHeaders keys (clear never shrinks a map).
func reuseHeader(h http.Header) http.Header {
	if len(h) > maxKeptHeaders {
		return nil
	}
	clear(h)
	return h
}

// reuseVals empties v for the connection's next request, its strings released, or drops it when
// it grew past maxKeptHeaders values.
func reuseVals(v []string) []string {
	if cap(v) > maxKeptHeaders {
		return nil
	}
	clear(v)
	return v[:0]
}

// startWatch runs when a request has waited watchAfter: a read on the connection notices the
// client closing it (the request's context is cancelled) while the handler waits for the pod.
func (lc *leanConn) startWatch() {
	lc.watchMu.Lock()
	defer lc.watchMu.Unlock()
	if lc.r.raw != nil {
		lc.pollGone()
		return
	}
	if lc.busySince.Load() == 0 || lc.watching {
		return // done already
	}
	lc.watching = true
	lc.watchDone = make(chan struct{})
	done := lc.watchDone
	if lc.br.Buffered() > 0 {
		// The client sent its next request early (pipelining): nothing to watch.
		close(done)
		return
	}
	_ = lc.c.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		n, err := lc.c.Read(lc.r.b[:])
		if n == 1 {
			lc.r.pending = lc.r.b[:1]
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return // endWatch ended the read
			}
			lc.r.err = err
			lc.cancel()
		}
	}()
}

// pollGone is the client-gone watch of a connection served inside its RawConn.Read, where
// nothing else may read the socket: at every tick of watchSlowRequests while the request waits,
// it looks at the socket without reading it (recv with MSG_PEEK and MSG_DONTWAIT, from
// RawConn.Control, which the read does not lock out). The end of the stream or an error (the
// client closed or reset the connection) cancels the request, as the watch's read does; bytes
// waiting (the client sent its next request early) end the watch, as they end the read. Called
// with watchMu held.
func (lc *leanConn) pollGone() {
	if lc.busySince.Load() == 0 || lc.watchOver || lc.br.Buffered() > 0 {
		return
	}
	var (
		n   int
		err error
	)
	lc.s.polls.Add(1)
	if cerr := lc.r.raw.Control(func(fd uintptr) {
		for {
			n, _, err = syscall.Recvfrom(int(fd), lc.r.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	}); cerr != nil {
		return // closed: the loop's read or write fails
	}
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return // still there
	case err != nil:
		lc.r.err = &net.OpError{Op: "read", Net: "tcp", Source: lc.c.LocalAddr(), Addr: lc.c.RemoteAddr(), Err: os.NewSyscallError("recvfrom", err)}
	case n == 0:
		lc.r.err = io.EOF
	default:
		lc.watchOver = true
		return
	}
	lc.watchOver = true
	lc.cancel()
}

// endWatch stops the request's client-gone watch and waits for its read to end. It reports
// whether the connection is still good for another request.
func (lc *leanConn) endWatch() bool {
	lc.watchMu.Lock()
	lc.busySince.Store(0)
	watching, done := lc.watching, lc.watchDone
	lc.watching, lc.watchDone = false, nil
	if lc.r.raw != nil {
		// pollGone sets r.err under watchMu.
		gone := lc.r.err != nil
		lc.watchOver = false
		lc.watchMu.Unlock()
		return !gone
	}
	lc.watchMu.Unlock()
	if !watching {
		return true
	}
	_ = lc.c.SetReadDeadline(aLongTimeAgo)
	<-done
	lc.rdl.set(time.Time{})
	return lc.r.err == nil
}

func (s *leanServer) logf(format string, args ...any) {
	if s.srv.ErrorLog != nil {
		s.srv.ErrorLog.Printf(format, args...)
	}
}

// leanResponse is the http.ResponseWriter (and http.Flusher) of the lean loop. Like net/http's,
// it holds the start of a body so that a short answer gets a Content-Length, sniffs a missing
// Content-Type, adds Date, chunks an answer of unknown length and sends announced trailers.
type leanResponse struct {
	lc     *leanConn
	req    *http.Request
	header http.Header
	// raw, when not nil, is the pod's answer as header lines to send besides header (the fast
	// path's raw answer: forward.go); set before WriteHeader.
	raw *rawAnswer

	status     int // 0 until WriteHeader
	headerSent bool
	chunked    bool
	bodyless   bool // HEAD, or a status without a body
	closeAfter bool
	abort      bool
	err        error
	buf        []byte   // the start of the body while the header is not sent (in lc.bodyArr)
	trailers   []string // announced trailer keys
	contentLen int64    // what the handler's Content-Length says, -1 when none
	written    int64
}

// leanBodyBuf is how much of a body is held back to compute a Content-Length: net/http's value.
const leanBodyBuf = 2 << 10

var _ http.Flusher = (*leanResponse)(nil)

func (w *leanResponse) Header() http.Header { return w.header }

func (w *leanResponse) WriteHeader(code int) {
	if w.status != 0 {
		w.lc.s.logf("http: superfluous response.WriteHeader call with status %d", code)
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational answer (103 Early Hints): sent at once, the final one follows.
		bw := w.lc.bw
		writeStatusLine(bw, code)
		w.writeHeaders(bw, func(k string) bool { return k == "Content-Length" || k == "Transfer-Encoding" })
		bw.WriteString("\r\n")
		if err := bw.Flush(); err != nil {
			w.err = err
		}
		return
	}
	w.status = code
	w.contentLen = -1
	if w.raw != nil {
		w.contentLen = w.raw.length
	}
	// The keys are canonical: an index, not Header.Get, which canonicalizes its key again.
	if v := headerFirst(w.header, "Content-Length"); v != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
			w.contentLen = n
		} else {
			w.lc.s.logf("http: invalid Content-Length of %q", v)
			w.header.Del("Content-Length")
		}
	}
	w.bodyless = w.req.Method == http.MethodHead || !bodyAllowedForStatus(code)
	for _, v := range w.header["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" && httpguts.ValidTrailerHeader(k) {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	w.buf = w.lc.bodyArr[:0]
}

func bodyAllowedForStatus(code int) bool {
	switch {
	case code >= 100 && code <= 199, code == http.StatusNoContent, code == http.StatusNotModified:
		return false
	}
	return true
}

func (w *leanResponse) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLen >= 0 && w.written > w.contentLen {
		return 0, http.ErrContentLength
	}
	if !w.headerSent && w.contentLen >= 0 && w.hasType() {
		// The start of the body is held only to count it for a Content-Length or to sniff a
		// Content-Type: with both set (the pod's answer on the fast path) the header goes now
		// and the body straight to the connection's writer, one copy fewer.
		w.sendHeader(false)
		if w.err != nil {
			return 0, w.err
		}
	}
	if !w.headerSent {
		if len(w.buf)+len(p) <= cap(w.buf) {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.sendHeader(false)
		if w.err != nil {
			return 0, w.err
		}
	}
	return w.writeBody(p)
}

// writeBody writes p to the connection, framed.
func (w *leanResponse) writeBody(p []byte) (int, error) {
	if w.bodyless || len(p) == 0 {
		return len(p), nil
	}
	bw := w.lc.bw
	if w.chunked {
		var num [16]byte
		bw.Write(strconv.AppendInt(num[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	if _, err := bw.Write(p); err != nil {
		w.err = err
		return 0, err
	}
	if w.chunked {
		if _, err := bw.WriteString("\r\n"); err != nil {
			w.err = err
			return 0, err
		}
	}
	return len(p), nil
}

// Flush sends the header and what has been written so far.
func (w *leanResponse) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		w.sendHeader(false)
	}
	if w.err == nil {
		if err := w.lc.bw.Flush(); err != nil {
			w.err = err
		}
	}
}

// sendHeader writes the status line and headers, then the held start of the body. final: the
// handler is done, so a body of unknown length is all in buf.
func (w *leanResponse) sendHeader(final bool) {
	w.headerSent = true
	h := w.header
	if w.req.Close || headerHasToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	allowed := bodyAllowedForStatus(w.status)
	setLength := false
	switch {
	case !allowed:
	case w.contentLen >= 0:
	case w.req.Method == http.MethodHead:
		setLength = final && len(w.buf) > 0
	case final && !w.hasTrailers():
		setLength = true
	default:
		w.chunked = true
	}
	sniff := allowed && !w.hasType() && !w.hasEncoding() && len(w.buf) > 0
	bw := w.lc.bw
	writeStatusLine(bw, w.status)
	if ra := w.raw; ra != nil {
		// The pod's lines as it sent them, then its length (contentLen: WriteHeader took it).
		_, _ = bw.Write(ra.lines)
		if ra.length >= 0 && allowed {
			writeLengthLine(bw, ra.length)
		}
	}
	w.writeHeaders(bw, func(k string) bool {
		switch k {
		case "Transfer-Encoding":
			return true
		case "Connection":
			return w.closeAfter
		case "Content-Length":
			return !allowed
		case "Content-Type":
			return w.status == http.StatusNotModified
		}
		return false
	})
	if sniff {
		writeHeaderLine(bw, "Content-Type", http.DetectContentType(w.buf))
	}
	if setLength {
		var num [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(num[:0], int64(len(w.buf)), 10))
		bw.WriteString("\r\n")
		w.contentLen = int64(len(w.buf))
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if _, ok := h["Date"]; !ok && (w.raw == nil || !w.raw.hasDate) {
		bw.WriteString("Date: ")
		bw.WriteString(httpDate())
		bw.WriteString("\r\n")
	}
	if w.closeAfter {
		bw.WriteString("Connection: close\r\n")
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		w.err = err
		return
	}
	if len(w.buf) > 0 {
		buf := w.buf
		w.buf = nil
		_, _ = w.writeBody(buf)
	}
}

// writeLengthLine writes a Content-Length line of n, in the writer's free space when it fits
// (a number array of its own would escape through bufio.Writer.Write: an allocation).
func writeLengthLine(bw *bufio.Writer, n int64) {
	const k = "Content-Length: "
	if bw.Available() < len(k)+20+2 {
		_ = bw.Flush() // an error stays in bw and ends the answer
	}
	if bw.Available() < len(k)+20+2 {
		bw.WriteString(k + strconv.FormatInt(n, 10) + "\r\n")
		return
	}
	b := bw.AvailableBuffer()
	b = append(b, k...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, "\r\n"...)
	_, _ = bw.Write(b)
}

// hasType reports whether the answer has a Content-Type (in the header map or the raw lines).
func (w *leanResponse) hasType() bool {
	return w.header["Content-Type"] != nil || w.raw != nil && w.raw.hasType
}

// hasEncoding reports whether the answer has a non-empty Content-Encoding.
func (w *leanResponse) hasEncoding() bool {
	return headerFirst(w.header, "Content-Encoding") != "" || w.raw != nil && w.raw.hasEncoding
}

// hasTrailers reports whether the answer has trailers, announced or with the trailer prefix
// (a look at every key, done only for an answer whose framing depends on it).
func (w *leanResponse) hasTrailers() bool {
	if len(w.trailers) > 0 {
		return true
	}
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// headerFirst is h.Get(key) for a canonical key, without canonicalizing it again.
func headerFirst(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// finish ends the answer after the handler returned.
func (w *leanResponse) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		w.sendHeader(true)
	}
	if w.err != nil {
		return
	}
	bw := w.lc.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			for _, v := range w.header[k] {
				writeSafeHeaderLine(bw, k, v)
			}
		}
		for k, vv := range w.header {
			if after, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					writeSafeHeaderLine(bw, after, v)
				}
			}
		}
		bw.WriteString("\r\n")
	}
	if err := bw.Flush(); err != nil {
		w.err = err
		return
	}
	if !w.bodyless && w.contentLen >= 0 && w.written != w.contentLen {
		w.closeAfter = true // the client is still waiting for bytes that will never come
	}
}

func writeStatusLine(bw *bufio.Writer, code int) {
	bw.WriteString("HTTP/1.1 ")
	// Three digits (WriteHeader allows 100-999), written byte by byte: nothing escapes.
	bw.WriteByte(byte('0' + code/100))
	bw.WriteByte(byte('0' + code/10%10))
	bw.WriteByte(byte('0' + code%10))
	bw.WriteByte(' ')
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	bw.WriteString(text)
	bw.WriteString("\r\n")
}

// writeHeaders writes the handler's headers except skipped ones, trailers (announced or with the
// trailer prefix) and invalid names; line breaks in values become spaces, as net/http does.
func (w *leanResponse) writeHeaders(bw *bufio.Writer, skip func(string) bool) {
	for k, vv := range w.header {
		if skip(k) || strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			writeSafeHeaderLine(bw, k, v)
		}
	}
}

func writeSafeHeaderLine(bw *bufio.Writer, k, v string) {
	if hasCRorLF(v) {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	writeHeaderLine(bw, k, strings.TrimSpace(v))
}

// hasCRorLF is strings.ContainsAny(v, "\r\n") without building a set for every header value.
func hasCRorLF(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			return true
		}
	}
	return false
}

// headerHasToken reports whether a comma-separated header holds token (any case).
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// httpDate is the Date header value, formatted once a second. Within the second it was made
// for, only the monotonic clock is read (clock.go): the value is kept until shortly before the
// monotonic time of the next second's start, then the wall clock is read again. The wall clock
// may run faster than the monotonic one (a clock being corrected: 0.5% was seen on a test
// machine, which made the kept value a second late for the last 5 ms of each second), so the
// monotonic span ends a sixteenth of the second's rest early (drifts up to 6%); until the wall
// clock's second ends, each call reads the wall clock and keeps the value, without a new one.
func httpDate() string {
	mono := monoNow()
	d := dateCache.Load()
	if d != nil && mono >= d.from && mono < d.until {
		return d.s
	}
	now := time.Now()
	sec := now.Unix()
	if d != nil && d.sec == sec {
		return d.s
	}
	mono = now.Sub(monoEpoch)
	left := time.Duration(1e9 - now.Nanosecond())
	d = &cachedDate{
		from:  mono,
		until: mono + left - left/16,
		sec:   sec,
		s:     time.Unix(sec, 0).UTC().Format(http.TimeFormat),
	}
	dateCache.Store(d)
	return d.s
}

// cachedDate is the Date value s of the wall clock's second sec, kept from monotonic offset from
// until until (monoNow).
type cachedDate struct {
	from, until time.Duration
	sec         int64
	s           string
}

var dateCache atomic.Pointer[cachedDate]

// handoffListener is the listener of the net/http server: Accept returns the connections the
// lean loop hands over.
type handoffListener struct {
	addr   net.Addr
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

// give hands c to the server; false when the server is closed (c is closed then).
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		_ = c.Close()
		return true
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// handoffConn is a connection handed to net/http: reads start with what the lean loop had read.
type handoffConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *handoffConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets http.Server half-close the connection after an error answer.
func (c *handoffConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Compile-time check that a handed-off reader never blocks on an empty buffer.
var _ io.Reader = (*handoffConn)(nil)

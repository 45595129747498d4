package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/go-logr/logr"
)

// The two halves of an upgraded (WebSocket) connection. httputil.ReverseProxy copies them with
// io.Copy(backend, client) and io.Copy(client, backend), which call the backend's ReadFrom and
// WriteTo: trackedConn's. A plain copy loop reads one side, writes the other and reads the first
// side again, and in a request-answer exchange (a keystroke and its echo) that second read always
// finds nothing: one system call per message and direction for nothing. When the side read is a
// TCP connection with nothing buffered (the client's, possibly under the lean server's hand-off
// and the per-client limit; the pod's, when the synchronous transport made the upgrade), the
// whole copy runs inside one syscall.RawConn.Read: the runtime resets the read
// readiness once, at the start, and never again until the copy ends, so after a read that
// emptied the socket the loop waits for readiness instead of reading again, and no readiness
// notice can be lost (a notice for data already read costs one read that finds nothing). Closing
// the connection (the pod went away, the proxy stops) ends the wait, and deadlines apply, as with
// net.Conn.Read. On Linux such a WebSocket is relayed by a relay loop (wsrelay.go) instead, with
// no goroutine parked per message; this copy runs where no loop can take it.

// The copy's buffers. A copy reads into a small buffer of its own (wsSmallBuf: a keystroke, its
// echo, most terminal output fit); a read that fills it takes a large one (wsCopyBuf, io.Copy's
// size) from wsBufPool, moves what it read there and reads on into it before it writes (a 5-30
// KiB message, a full-screen redraw or a notebook's frame, is still one read after the first and
// one send), keeps it for the rest of the burst, and gives it back when a read finds the socket
// empty or drained and everything read is written. An open WebSocket, mostly waiting, holds 2 x 4 KiB instead of
// 2 x 32 KiB; a small message touches only the small buffer, as before only the bytes received.
const (
	wsSmallBuf = 4 << 10
	wsCopyBuf  = 32 << 10
)

var wsBufPool = sync.Pool{New: func() any { return new([wsCopyBuf]byte) }}

// wsBufBytes is the copy buffers' bytes the open copies hold (tests).
var wsBufBytes atomic.Int64

// ReadFrom copies src to the pod until src ends (io.EOF is not an error, as for io.Copy).
func (c *trackedConn) ReadFrom(src io.Reader) (int64, error) {
	if raw, ok := rawSource(src); ok {
		if wraw, ok := rawSink(c.ReadWriteCloser); ok {
			c.reg.rawCopies.Add(1)
			c.reg.rawActive.Add(1)
			defer c.reg.rawActive.Add(-1)
			if n, err, ok := c.relay(raw, true); ok {
				return n, err
			}
			return copyRaw(c.ReadWriteCloser, wraw, raw)
		}
	}
	return io.Copy(onlyWriter{c.ReadWriteCloser}, src)
}

// WriteTo copies the pod's side to dst until the pod ends it.
func (c *trackedConn) WriteTo(dst io.Writer) (int64, error) {
	u, ok := c.ReadWriteCloser.(*upgradedConn)
	wraw, sink := rawSink(dst)
	if !ok || u.pc.lr.raw == nil || !sink {
		return io.Copy(dst, onlyReader{c.ReadWriteCloser})
	}
	var n int64
	if b := u.pc.br.Buffered(); b > 0 {
		// What the pod sent with its 101 answer.
		buf, _ := u.pc.br.Peek(b)
		m, err := dst.Write(buf)
		_, _ = u.pc.br.Discard(m)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	c.reg.rawCopies.Add(1)
	c.reg.rawActive.Add(1)
	defer c.reg.rawActive.Add(-1)
	if m, err, ok := c.relay(wraw, false); ok {
		return n + m, err
	}
	m, err := copyRaw(dst, wraw, u.pc.lr.raw)
	return n + m, err
}

// onlyWriter hides a writer's ReadFrom and onlyReader a reader's WriteTo (io.Copy would call them
// back).
type (
	onlyWriter struct{ io.Writer }
	onlyReader struct{ io.Reader }
)

// upgradedConn is a pod connection the synchronous transport upgraded (101 Switching Protocols):
// the answer's body, never pooled.
type upgradedConn struct{ pc *persistConn }

func (u *upgradedConn) Read(p []byte) (int, error)  { return u.pc.br.Read(p) }
func (u *upgradedConn) Write(p []byte) (int, error) { return u.pc.conn.Write(p) }
func (u *upgradedConn) Close() error                { return u.pc.close() }

// relayLoopsOff turns the relay loops off: WebSockets are copied by copyRaw (tests of the
// fallback).
var relayLoopsOff atomic.Bool

// relayLoopsLog is the log of the first proxy that relayed a WebSocket (a loop that stops says
// so there: the loops are the process's, not one proxy's).
var relayLoopsLog atomic.Pointer[logr.Logger]

// relay runs one half of c (client to pod with c2p) in a relay loop (wsrelay.go) when c is a
// TCP connection the synchronous transport upgraded; the first half to come registers the
// WebSocket, the second joins it. client is the client's socket. ok is false when no loop can
// take it: the caller copies as before.
func (c *trackedConn) relay(client syscall.RawConn, c2p bool) (n int64, err error, ok bool) {
	u, isUpgraded := c.ReadWriteCloser.(*upgradedConn)
	if !relayLoopsBuilt || relayLoopsOff.Load() || !isUpgraded || u.pc.lr.raw == nil {
		return 0, nil, false
	}
	if relayLoopsLog.Load() == nil {
		lg := c.reg.log // a copy: a pointer into the registry would keep that proxy's alive
		relayLoopsLog.CompareAndSwap(nil, &lg)
	}
	pc := u.pc
	pc.relayMu.Lock()
	p := pc.relay
	if p == nil && !pc.relayClosed {
		if p, err = newRelayPair(client, pc.lr.raw); err == nil {
			pc.relay = p
		}
	}
	pc.relayMu.Unlock()
	if p == nil {
		return 0, nil, false
	}
	n, err = p.run(c2p)
	return n, err, true
}

// endRelay marks pc closed for the relay loops and ends the WebSocket a loop relays on it: the
// loop holds a duplicate of its descriptor, so closing the net.Conn alone would leave the socket
// open. shutdown(2) acts on the socket; the loop sees it and ends both halves. It returns the
// registry entry of the WebSocket on pc, if any (close removes it).
func (pc *persistConn) endRelay() *trackedConn {
	pc.relayMu.Lock()
	pc.relayClosed = true
	p, tc := pc.relay, pc.tracked
	pc.relayMu.Unlock()
	if p != nil {
		p.close()
		shutdownRaw(pc.raw)
	}
	return tc
}

// setTracked records tc as the registry entry of the WebSocket on pc, removed when pc is closed;
// false when pc is closed already.
func (pc *persistConn) setTracked(tc *trackedConn) bool {
	pc.relayMu.Lock()
	defer pc.relayMu.Unlock()
	if pc.relayClosed {
		return false
	}
	pc.tracked = tc
	return true
}

// rawSource is the RawConn under r when r is a TCP connection (possibly wrapped by the lean
// server's hand-off or the per-client connection limit) with nothing buffered above it.
func rawSource(r io.Reader) (syscall.RawConn, bool) {
	for {
		switch c := r.(type) {
		case *handoffConn:
			if c.r != nil && c.r.Buffered() > 0 {
				return nil, false
			}
			r = c.Conn
		case *net.TCPConn:
			raw, err := c.SyscallConn()
			return raw, err == nil
		case *tls.Conn:
			return nil, false // its NetConn carries ciphertext
		case interface{ NetConn() net.Conn }: // pkg/connlimit's conn
			r = c.NetConn()
		default:
			return nil, false
		}
	}
}

// rawSink is the RawConn under w when w writes straight to a TCP connection: the pod's side of
// an upgraded connection, or the client's (under the lean server's hand-off and the per-client
// limit).
func rawSink(w io.Writer) (syscall.RawConn, bool) {
	for {
		switch c := w.(type) {
		case *upgradedConn:
			w = c.pc.conn
		case *handoffConn:
			w = c.Conn
		case *net.TCPConn:
			raw, err := c.SyscallConn()
			return raw, err == nil
		case interface{ NetConn() net.Conn }: // pkg/connlimit's conn
			if _, ok := c.(*tls.Conn); ok {
				return nil, false
			}
			w = c.NetConn()
		default:
			return nil, false
		}
	}
}

// copyRaw copies from raw's socket to dst, whose socket is wraw's, inside raw.Read (see above).
// Each chunk read is written with writeFD inside dst's RawConn.Write, which never waits (the
// runtime's monitor does not hand the processor off during these calls: rawread.go, readFD).
// What does not fit in dst's send buffer at once (dst's reader is slow, or not reading) is
// written after leaving raw.Read, with dst.Write, which waits for room: a wait for dst inside
// raw.Read would hold raw's socket, and closing it (the pod deleted, the client gone) waits for
// every operation on it to end, so it would wait as long as dst's reader does. raw.Read is
// entered again after that write; its first call reads before it waits, so no readiness notice
// is lost.
func copyRaw(dst io.Writer, wraw, raw syscall.RawConn) (int64, error) {
	return (&rawCopy{wraw: wraw}).run(dst, raw)
}

// run is copyRaw's loop on c.
func (c *rawCopy) run(dst io.Writer, raw syscall.RawConn) (int64, error) {
	c.buf = c.small[:]
	wsBufBytes.Add(wsSmallBuf)
	defer func() {
		c.release()
		wsBufBytes.Add(-wsSmallBuf)
	}()
	// The functions raw.Read and wraw.Write call, bound once per copy: a closure made for each
	// message (it captured the chunk) cost two allocations per message and direction.
	c.readFn, c.writeFn = c.read, c.write
	for {
		err := raw.Read(c.readFn)
		switch {
		case c.werr != nil:
			return c.written, c.werr
		case c.rerr != nil:
			return c.written, c.rerr
		case err != nil || len(c.rest) == 0:
			return c.written, err
		}
		m, err := dst.Write(c.rest)
		c.written += int64(m)
		if err != nil {
			return c.written, err
		}
		c.rest = nil
	}
}

// rawCopy is the state of one copyRaw.
type rawCopy struct {
	wraw syscall.RawConn
	wsBuffers
	written    int64
	sends      int // write calls that sent something (tests)
	rerr, werr error
	rest       []byte // read, not yet written: for dst.Write after raw.Read
	p          []byte // what write writes
	readFn     func(fd uintptr) bool
	writeFn    func(fd uintptr) bool
}

// read is raw.Read's function: it reads and writes until the socket is empty (then it waits),
// the other side's send buffer is full, or either side fails or ends.
func (c *rawCopy) read(fd uintptr) bool {
	for {
		// drained: a read found the socket empty (EAGAIN), so the next bytes or the end raise a
		// readiness notice. A short read does not say so: it may have taken the peer's end (FIN)
		// with the last bytes, and no notice follows it; after a short read the loop reads again
		// (the end, or EAGAIN), one read that finds nothing per message. The relay loops
		// (wsrelay.go), which see the end in their events, do without it.
		n, empty, drained, _, err := c.readChunk(fd)
		switch {
		case empty:
			c.release() // rest is empty: nothing was read, or all of it written
			return false
		case err != nil:
			c.rerr = err
			return true
		case n == 0:
			return true // the other end closed its side
		}
		if c.tryWrite(c.buf[:n]); c.werr != nil || len(c.rest) > 0 {
			return true
		}
		if drained {
			// The socket is empty: wait for readiness, without the large buffer (everything
			// read was written: rest is empty).
			c.release()
			return false
		}
	}
}

// wsBuffers are the buffers of a copy (rawCopy) or of a relay loop's half (relayHalf), and
// readChunk their read step.
type wsBuffers struct {
	buf   []byte // small's, or large's during a burst
	small [wsSmallBuf]byte
	large *[wsCopyBuf]byte // from wsBufPool; nil when buf is small's
}

// readChunk reads fd (non-blocking) into buf once; a read that fills the small buffer is a
// burst, or a message over the small buffer: what it read moves to a large buffer and the read
// goes on into it before anything is written, so that such a message still costs one send, as
// with a large buffer only. n is what was read (buf[:n]); empty: the first read found nothing
// (EAGAIN); drained: the read on into the large buffer found nothing; short: the last read
// that returned bytes returned fewer than it was given room for; err: the first read failed;
// none of them and no bytes: the end. An error or the end on the read on into the large buffer
// is left for the next call (after a reset, the end rather than the error): what was read is
// written first.
func (b *wsBuffers) readChunk(fd uintptr) (n int, empty, drained, short bool, err error) {
	n, empty, err = readFD(fd, b.buf)
	if empty || err != nil || n == 0 {
		return n, empty, false, false, err
	}
	if n < len(b.buf) || b.large != nil {
		return n, false, false, n < len(b.buf), nil
	}
	b.large = wsBufPool.Get().(*[wsCopyBuf]byte)
	wsBufBytes.Add(wsCopyBuf)
	copy(b.large[:], b.buf[:n])
	b.buf = b.large[:]
	m, drained, err := readFD(fd, b.buf[n:])
	if drained || err != nil || m == 0 {
		return n, false, drained, false, nil
	}
	return n + m, false, false, n+m < len(b.buf), nil
}

// release gives the large buffer back, if there is one; nothing may refer to it (what was
// read is all written).
func (b *wsBuffers) release() {
	if b.large != nil {
		wsBufPool.Put(b.large)
		b.large, b.buf = nil, b.small[:]
		wsBufBytes.Add(-wsCopyBuf)
	}
}

// tryWrite writes as much of p to dst as its send buffer takes now; the rest is left in rest.
func (c *rawCopy) tryWrite(p []byte) {
	c.p = p
	if err := c.wraw.Write(c.writeFn); err != nil && c.werr == nil {
		c.werr = err // closed
	}
	c.rest, c.p = c.p, nil
}

// write is wraw.Write's function: it never waits.
func (c *rawCopy) write(fd uintptr) bool {
	m, _, err := writeFD(int(fd), c.p)
	if m > 0 {
		c.sends++
	}
	c.written += int64(m)
	c.p = c.p[m:]
	if err != nil {
		c.werr = err
	}
	return true
}

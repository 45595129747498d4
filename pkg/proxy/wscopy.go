package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"syscall"
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
// net.Conn.Read.

// wsCopyBuf is the copy buffer (io.Copy's size).
const wsCopyBuf = 32 << 10

// ReadFrom copies src to the pod until src ends (io.EOF is not an error, as for io.Copy).
func (c *trackedConn) ReadFrom(src io.Reader) (int64, error) {
	if raw, ok := rawSource(src); ok {
		c.reg.rawCopies.Add(1)
		c.reg.rawActive.Add(1)
		defer c.reg.rawActive.Add(-1)
		return copyRaw(c.ReadWriteCloser, raw)
	}
	return io.Copy(onlyWriter{c.ReadWriteCloser}, src)
}

// WriteTo copies the pod's side to dst until the pod ends it.
func (c *trackedConn) WriteTo(dst io.Writer) (int64, error) {
	u, ok := c.ReadWriteCloser.(*upgradedConn)
	if !ok || u.pc.lr.raw == nil {
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
	m, err := copyRaw(dst, u.pc.lr.raw)
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
func (u *upgradedConn) Close() error                { return u.pc.conn.Close() }

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

// copyRaw copies from raw's socket to dst inside one raw.Read (see above). When dst is a TCP
// connection its writes are made with writeFD inside dst's RawConn.Write (rawread.go, readFD:
// the runtime's monitor does not hand the processor off during them).
func copyRaw(dst io.Writer, raw syscall.RawConn) (int64, error) {
	buf := make([]byte, wsCopyBuf)
	var (
		written    int64
		rerr, werr error
	)
	if wraw, ok := rawSink(dst); ok {
		var out []byte
		writeOut := func(fd uintptr) bool {
			m, again, err := writeFD(int(fd), out)
			out = out[m:]
			if err != nil {
				werr = err
				return true
			}
			return !again
		}
		dst = writerFunc(func(p []byte) (int, error) {
			out = p
			if err := wraw.Write(writeOut); err != nil && werr == nil {
				werr = err // closed, or a deadline
			}
			return len(p) - len(out), werr
		})
	}
	err := raw.Read(func(fd uintptr) bool {
		for {
			n, empty, err := readFD(fd, buf)
			switch {
			case empty:
				return false
			case err != nil:
				rerr = err
				return true
			case n == 0:
				return true // the client closed its side
			}
			m, err := dst.Write(buf[:n])
			written += int64(m)
			if err != nil {
				werr = err
				return true
			}
			if n < len(buf) {
				// The socket is empty: wait for readiness rather than read again.
				return false
			}
		}
	})
	switch {
	case werr != nil:
		return written, werr
	case rerr != nil:
		return written, rerr
	}
	return written, err
}

// writerFunc is a func as an io.Writer.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// The client-to-pod half of an upgraded (WebSocket) connection. httputil.ReverseProxy copies it
// with io.Copy(backend, client), which calls the backend's ReadFrom: trackedConn.ReadFrom. A
// plain copy loop reads the client, writes the pod and reads the client again, and in a
// request-answer exchange (a keystroke and its echo) that second read always finds nothing: one
// system call per message for nothing. When the client side is a TCP connection with nothing
// buffered, the whole copy runs inside one syscall.RawConn.Read: the runtime resets the read
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

// onlyWriter hides a writer's ReadFrom (io.Copy would call it back).
type onlyWriter struct{ io.Writer }

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
		case interface{ NetConn() net.Conn }:
			r = c.NetConn()
		default:
			return nil, false
		}
	}
}

// copyRaw copies from raw's socket to dst inside one raw.Read (see above).
func copyRaw(dst io.Writer, raw syscall.RawConn) (int64, error) {
	buf := make([]byte, wsCopyBuf)
	var (
		written    int64
		rerr, werr error
	)
	err := raw.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN):
				return false
			case err != nil:
				rerr = os.NewSyscallError("read", err)
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

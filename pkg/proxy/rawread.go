package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// The write-then-wait read of a pod's answer. net.Conn.Read tries the socket before it waits for
// the poller, and right after the request is written the pod has not answered yet (on a busy
// node it has not even run): that first read always finds nothing (EAGAIN), one system call per
// request for nothing. Skipping it is safe only if no readiness notice can be lost, and
// syscall.RawConn.Read resets the connection's read readiness before it calls its function: a
// notice for data that arrived earlier is forgotten, and a wait after it would last until more
// data comes (with a client that pipelines, a hang). So the request is written inside the read:
// raw.Read resets readiness, the function writes the request and returns false, the runtime
// waits for readiness, and the function reads once. The answer can only arrive after the
// request, so its notice comes after the reset and is never lost. That holds only when all of
// the request is written inside the read: a request larger than the writer's buffer (headers or
// a body over 4 KiB) went out in part while it was written, the pod may answer before the rest
// (a 401 to an upload), and such a request is flushed and its answer read the usual way
// (roundTrip checks sentCounter). Read deadlines apply (the
// runtime's wait honours them) and closing the connection (the client went away, the proxy
// stops) ends the wait, as with net.Conn.Read.
//
// What the pod sent before the request (nothing, for an HTTP/1.1 server: the pooled connection
// was left with its last answer read to the end) is not lost either: it is read together with the
// answer, whose arrival wakes the wait. A pod that sends something unasked and then never answers
// waits out the response header timeout, as a pod that never answers does.

// writeThenRead writes r.flush and then reads into p once the connection is readable.
func (r *limitedConnReader) writeThenRead(p []byte) (int, error) {
	r.p, r.rn, r.rerr = p, 0, nil
	err := r.raw.Read(r.rawFn)
	r.p = nil
	if r.flush != nil {
		// raw.Read failed before calling rawRead (the connection is closed): nothing was
		// written.
		r.flush = nil
		r.werr = err
		return 0, err
	}
	if r.werr != nil {
		return 0, r.werr
	}
	if err != nil {
		return 0, err // a deadline, or the connection was closed while waiting
	}
	if r.rerr != nil {
		return r.rn, r.rerr
	}
	return r.rn, nil
}

// rawRead is raw.Read's function: the first call writes the request and asks to wait; later
// calls read, and ask to wait again when there is nothing (a stale readiness notice).
func (r *limitedConnReader) rawRead(fd uintptr) bool {
	if bw := r.flush; bw != nil {
		r.flush = nil
		r.cw.fd = int(fd)
		r.werr = bw.Flush()
		r.cw.fd = -1
		if r.werr != nil {
			return true
		}
		return false
	}
	n, empty, err := readFD(fd, r.p)
	switch {
	case empty:
		return false
	case err != nil:
		r.rerr = &net.OpError{Op: "read", Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: err}
	case n == 0 && len(r.p) > 0:
		r.rerr = io.EOF
	default:
		r.rn = n
	}
	return true
}

// readFD reads the socket fd into p once, inside a syscall.RawConn.Read: empty when it has
// nothing now (EAGAIN: wait for readiness), else what recv(2) gave (EINTR is retried).
//
// It is recvfrom(2) with no flags and no address, as nginx's recv: for a socket that is read(2),
// without the file layer read(2) goes through first (measured on this machine's kernel with
// BenchmarkSocketCalls: a 64-byte send and its receive on loopback cost about 2% less CPU than
// write and read).
//
// The socket is non-blocking, so read(2) returns at once, and it is made with RawSyscall: the
// runtime is not told the goroutine is in a system call. Told (syscall.Read does, as net.Conn's
// reads and writes do), the runtime's monitor thread takes the processor away from a system call
// it sees running across two of its ticks and starts another thread to run it; on a busy proxy
// on one CPU, where that other thread has nothing to run and no CPU to run on, that cost context
// switches, futex wake-ups and the monitor's own wake-ups (counted with perf stat: 0.05-0.08
// futex and 0.10-0.14 nanosleep calls per request). The call cannot block, so nothing waits
// behind it.
func readFD(fd uintptr, p []byte) (n int, empty bool, err error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	for {
		r, _, e := syscall.RawSyscall6(sysRecv, fd, uintptr(ptr), uintptr(len(p)), 0, 0, 0)
		switch e {
		case 0:
			return int(r), false, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, true, nil
		}
		return 0, false, os.NewSyscallError("read", e)
	}
}

// writeFD writes p to the non-blocking socket fd with RawSyscall (see readFD), from inside a
// syscall.RawConn.Read of that socket (which keeps fd open). It returns how much went out; again
// when the socket's send buffer is full (the caller writes the rest with net.Conn.Write, which
// waits for room). It is sendto(2) with MSG_NOSIGNAL and no address, as nginx's send: write(2)
// without the file layer, and a peer that reset the connection gives EPIPE without a SIGPIPE
// sent to the process (which Go's handler then ignores for a socket).
func writeFD(fd int, p []byte) (n int, again bool, err error) {
	for n < len(p) {
		r, _, e := syscall.RawSyscall6(sysSend, uintptr(fd), uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n), msgNoSignal, 0, 0)
		switch e {
		case 0:
			n += int(r)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return n, true, nil
		}
		return n, false, os.NewSyscallError("write", e)
	}
	return n, false, nil
}

// writeRaw writes p to conn, whose socket is fd (inside conn's RawConn.Read): with writeFD, and
// what does not fit now with conn.Write.
func writeRaw(conn net.Conn, fd int, p []byte) (int, error) {
	n, again, err := writeFD(fd, p)
	if err != nil {
		return n, &net.OpError{Op: "write", Net: "tcp", Source: conn.LocalAddr(), Addr: conn.RemoteAddr(), Err: err}
	}
	if again {
		m, err := conn.Write(p[n:])
		return n + m, err
	}
	return n, nil
}

package proxy

import (
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkSocketCalls is one 64-byte message sent on a loopback TCP connection and received at
// its other end, by one thread: with the system calls readFD and writeFD make (recvfrom and
// sendto) and with read and write. The send runs the receiver's TCP processing too, so an op is
// most of what a proxy pays per message and direction in the kernel. cpu-ns/op is the thread's
// CPU time (the process's other threads are idle).
func BenchmarkSocketCalls(b *testing.B) {
	for _, bc := range []struct {
		name       string
		send, recv func(fd uintptr, p []byte) (int, error)
	}{
		{"recvfrom-sendto", func(fd uintptr, p []byte) (int, error) {
			n, _, err := writeFD(int(fd), p)
			return n, err
		}, func(fd uintptr, p []byte) (int, error) {
			n, _, err := readFD(fd, p)
			return n, err
		}},
		{"read-write", func(fd uintptr, p []byte) (int, error) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if e != 0 {
				return 0, e
			}
			return int(r), nil
		}, func(fd uintptr, p []byte) (int, error) {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if e != 0 {
				return 0, e
			}
			return int(r), nil
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a, z := tcpPair(b)
			ra, _ := a.SyscallConn()
			rz, _ := z.SyscallConn()
			msg, buf := make([]byte, 64), make([]byte, wsCopyBuf)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var err error
			cpu0 := threadCPU()
			b.ResetTimer()
			// Inside Control both descriptors stay open; both sockets are non-blocking, and on
			// loopback a sent message is in the receiver's queue when send returns.
			cerr := ra.Control(func(afd uintptr) {
				err = rz.Control(func(zfd uintptr) {
					for i := 0; i < b.N && err == nil; i++ {
						var n int
						if n, err = bc.send(afd, msg); err == nil && n == len(msg) {
							n, err = bc.recv(zfd, buf)
						}
						if err == nil && n != len(msg) {
							err = io.ErrShortWrite
						}
					}
				})
			})
			b.StopTimer()
			b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			if cerr != nil || err != nil {
				b.Fatal(cerr, err)
			}
		})
	}
}

// threadCPU is the calling thread's user and system CPU time.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWebSocketRelay is echo round trips of 64-byte messages on 32 upgraded connections
// through the proxy (the lean server, the synchronous transport's upgrade, both halves copied by
// copyRaw) to an echo pod, as figure 6's WebSocket rows do, all in this process: cpu-ns/op is
// the client's, the pod's and the proxy's CPU per round trip together. For profiles
// (-cpuprofile) and comparisons of the relay's code; proxybench measures the proxy's own CPU.
func BenchmarkWebSocketRelay(b *testing.B) {
	host, port := upgradeEcho(b)
	_, addr := startProxy(b, Options{}, host, port)
	const conns = 32
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, br := openUpgraded(b, addr)
		if br.Buffered() > 0 {
			b.Fatal("bytes after the 101 answer")
		}
		cs[i] = c
	}
	msg := make([]byte, 64)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i, c := range cs {
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for range n {
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadAtLeast(c, buf, len(msg)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

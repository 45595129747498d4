package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// upgradeEcho is a pod that switches protocols on any request and echoes the raw bytes.
func upgradeEcho(t testing.TB) (host, port string) {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_, _ = io.Copy(c, brw.Reader)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}))
	t.Cleanup(backend.Close)
	host, port, _ = net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	return host, port
}

// dialProxy opens a connection to the proxy at addr, closed when the test ends, with a 30 s
// deadline.
func dialProxy(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// openUpgraded opens an upgraded connection through the proxy at addr.
func openUpgraded(t testing.TB, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialProxy(t, addr)
	if _, err := io.WriteString(c, "GET /ws/jane/demo/echo HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	return c, br
}

// waitFor polls cond for at most 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The client-to-pod half of an upgraded connection reads the client's socket inside one
// RawConn.Read and waits for readiness after a read that emptied it (wscopy.go). These are the
// cases a lost readiness notice or a missed wake-up would break.
func TestWebSocketCopyWaitsOnTheClientSocket(t *testing.T) {
	host, port := upgradeEcho(t)
	for _, tc := range []struct {
		name string
		opts Options
		// raw is how many halves read their socket directly: both when the synchronous
		// transport made the upgrade; none through http.Transport's, whose pod connection is
		// not a socket the copy can write without waiting (copyRaw).
		raw int64
	}{
		{"lean server, per-client limit", Options{}, 2},
		{"net/http's server", Options{StandardServer: true}, 2},
		{"net/http's transport", Options{StandardTransport: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, addr := startProxy(t, tc.opts, host, port)
			before := p.conns.rawCopies.Load()
			c, br := openUpgraded(t, addr)
			echo := func(msg []byte) {
				t.Helper()
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(br, got); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("echo of %d bytes: %d bytes back, %v", len(msg), len(got), err)
				}
			}
			// Messages one at a time, each after the last one's echo: every read but the
			// first waits for readiness.
			for i := 0; i < 200; i++ {
				msg := []byte(strings.Repeat(string(rune('a'+i%26)), 1+i%50))
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				echo(msg)
			}
			waitFor(t, "the copies reading the sockets", func() bool { return p.conns.rawCopies.Load() == before+tc.raw })
			// Messages that arrive while the copy is busy with the one before.
			var all []byte
			for i := 0; i < 50; i++ {
				msg := []byte(strings.Repeat("m", 10+i))
				all = append(all, msg...)
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
			}
			echo(all)
			// A message larger than the copy buffer, sent while its echo is read.
			big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
			errc := make(chan error, 1)
			go func() { _, err := c.Write(big); errc <- err }()
			echo(big)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			// The client half-closes: the proxy ends the WebSocket (trackedConn has no CloseWrite, so
			// ReverseProxy closes both connections) and the client sees the end.
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
				t.Fatalf("after the client's end: %q, %v; want the end", b, err)
			}
			waitFor(t, "the copies ending", func() bool { return p.conns.rawActive.Load() == 0 })
		})
	}
	t.Run("closing the pod's connections ends the copies waiting on either side", func(t *testing.T) {
		p, addr := startProxy(t, Options{}, host, port)
		c, br := openUpgraded(t, addr)
		echoOnce(t, p, c, br)
		p.conns.closePod("uid-lean", "test")
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("the client's connection is still open after its pod's connections were closed")
		}
		waitFor(t, "the copies ending", func() bool { return p.conns.rawActive.Load() == 0 })
	})
	// A reader that stops reading backs the copy up to the other socket. The copy must not wait
	// for that socket while it holds its source's: closing the source (the pod deleted, or
	// ReverseProxy ending the WebSocket) would wait as long as the reader that does not read.
	t.Run("closing the pod's connections is not held up by a client that stopped reading", func(t *testing.T) {
		stuck := make(chan struct{})
		host, port := upgradePod(t, func(c net.Conn) {
			flood(c, stuck)
			_, _ = io.Copy(io.Discard, c)
		})
		p, addr := startProxy(t, Options{}, host, port)
		openUpgraded(t, addr) // and never read
		<-stuck
		closed := make(chan struct{})
		go func() { p.conns.closePod("uid-lean", "test"); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("closing the pod's WebSocket connections did not return within 10s: the copy to the client holds the pod's socket")
		}
	})
	t.Run("what the pod sends with its 101 answer reaches the client", func(t *testing.T) {
		h, pt, _ := net.SplitHostPort(rawPod(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readHead(br); err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello")
			_, _ = io.WriteString(c, " world")
			_, _ = io.Copy(io.Discard, c)
		}))
		_, addr := startProxy(t, Options{}, h, pt)
		_, br := openUpgraded(t, addr)
		got := make([]byte, len("hello world"))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != "hello world" {
			t.Fatalf("got %q, %v; want hello world", got, err)
		}
	})
}

// upgradePod is a pod that answers one request with 101 Switching Protocols and then hands the
// connection to then.
func upgradePod(t *testing.T, then func(c net.Conn)) (host, port string) {
	t.Helper()
	host, port, _ = net.SplitHostPort(rawPod(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"); err != nil {
			return
		}
		then(c)
	}))
	return host, port
}

// flood writes to c until at least 1 MiB went out and then a write makes no progress for
// 300 ms (everything between c and its reader is full), closes stuck, and stops. It gives up
// after 30 s.
func flood(c net.Conn, stuck chan<- struct{}) {
	defer close(stuck)
	chunk := make([]byte, 64<<10)
	total := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Write(chunk)
		total += n
		if err != nil && total >= 1<<20 {
			return
		}
	}
}

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// rawCopyRun is one direction of an upgraded connection under test: a copy from the client's
// socket to the pod's, as the proxy runs it. The client writes, the pod reads.
type rawCopyRun struct {
	client, pod *net.TCPConn
	done        chan error
}

// startRawCopy runs c (a new rawCopy if nil) between two new loopback pairs, each socket with a
// 60 s deadline; tune, if not nil, adjusts the sockets first.
func startRawCopy(t *testing.T, c *rawCopy, tune func(client, toPod, pod *net.TCPConn)) *rawCopyRun {
	t.Helper()
	client, fromClient := tcpPair(t)
	toPod, pod := tcpPair(t)
	if tune != nil {
		tune(client, toPod, pod)
	}
	for _, conn := range []net.Conn{client, pod} {
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	}
	raw, _ := fromClient.SyscallConn()
	wraw, _ := toPod.SyscallConn()
	if c == nil {
		c = &rawCopy{}
	}
	c.wraw = wraw
	r := &rawCopyRun{client: client, pod: pod, done: make(chan error, 1)}
	go func() { _, err := c.run(toPod, raw); _ = toPod.CloseWrite(); r.done <- err }()
	return r
}

// end half-closes the client's side and waits, at most 30 s, for the copy to end without error.
func (r *rawCopyRun) end(t *testing.T) {
	t.Helper()
	_ = r.client.CloseWrite()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("copy: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the copy did not end within 30s of the client's half-close")
	}
}

// TestWebSocketCopyAllocatesNothingPerMessage: copyRaw's functions are bound once per copy, so
// a message costs no allocation (a closure per message cost two, in each direction).
func TestWebSocketCopyAllocatesNothingPerMessage(t *testing.T) {
	r := startRawCopy(t, nil, nil)
	client, pod := r.client, r.pod
	msg := []byte("a WebSocket frame's worth of bytes")
	got := make([]byte, len(msg))
	exchange := func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(pod, got); err != nil {
			t.Fatal(err)
		}
	}
	exchange() // the copy's buffer and state
	if n := testing.AllocsPerRun(200, exchange); n != 0 {
		t.Errorf("%v allocations per message, want 0", n)
	}
	if string(got) != string(msg) {
		t.Errorf("the pod got %q, want %q", got, msg)
	}
	r.end(t)
}

// TestWebSocketCopyHoldsALargeBufferOnlyDuringABurst: a waiting copy holds its small buffer
// only (4 KiB, not 32); a burst larger than it arrives whole, in large reads, and the large
// buffer goes back once the socket is empty.
func TestWebSocketCopyHoldsALargeBufferOnlyDuringABurst(t *testing.T) {
	base := wsBufBytes.Load()
	r := startRawCopy(t, nil, nil)
	client, pod := r.client, r.pod
	small := []byte("a keystroke")
	got := make([]byte, 1<<20)
	if _, err := client.Write(small); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(pod, got[:len(small)]); err != nil {
		t.Fatal(err)
	}
	if n := wsBufBytes.Load() - base; n != wsSmallBuf {
		t.Errorf("after a small message the copy holds %d bytes of buffer, want %d", n, wsSmallBuf)
	}
	burst := make([]byte, 1<<20)
	for i := range burst {
		burst[i] = byte(i * 7)
	}
	sent := make(chan error, 1)
	go func() { _, err := client.Write(burst); sent <- err }()
	if _, err := io.ReadFull(pod, got); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, burst) {
		t.Fatal("the pod got the burst changed")
	}
	// The copy gives the large buffer back when its read finds the socket empty, which may be
	// just after the pod read the last bytes.
	waitFor(t, "the large buffer given back", func() bool { return wsBufBytes.Load()-base == wsSmallBuf })
	r.end(t)
	if n := wsBufBytes.Load() - base; n != 0 {
		t.Errorf("after the copy ended %d bytes of buffer are held, want 0", n)
	}
}

// TestWebSocketCopySendsAMessageOverTheSmallBufferAtOnce: a message larger than the small
// buffer (a full-screen redraw) that arrived whole is sent to the other side in one send, not
// as the small buffer's 4 KiB and then the rest.
func TestWebSocketCopySendsAMessageOverTheSmallBufferAtOnce(t *testing.T) {
	c := &rawCopy{}
	r := startRawCopy(t, c, nil)
	client, pod := r.client, r.pod
	msg := make([]byte, 10<<10)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	if _, err := client.Write(msg); err != nil { // one write: on loopback it arrives whole
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(pod, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("the pod got the message changed")
	}
	r.end(t)
	if c.sends != 1 {
		t.Errorf("a %d-byte message took %d sends, want 1", len(msg), c.sends)
	}
}

// TestWebSocketCopiesWithSlowReadersKeepTheirStreams: copies at once, each to a reader slower than
// its sender (small socket buffers, small reads), so that every copy keeps its large buffer with
// bytes not yet written and hands it back and takes one again, many times: every stream arrives
// intact (a large buffer given back while still holding bytes, and taken by another copy, would
// change them).
func TestWebSocketCopiesWithSlowReadersKeepTheirStreams(t *testing.T) {
	const copies, size = 6, 1 << 20
	errs := make(chan error, copies)
	for k := range copies {
		r := startRawCopy(t, nil, func(_, toPod, pod *net.TCPConn) {
			_ = pod.SetReadBuffer(8 << 10)
			_ = toPod.SetWriteBuffer(8 << 10)
		})
		client, pod := r.client, r.pod
		stream := func(i int) byte { return byte(i*31 + k*7 + i>>12) }
		go sendStream(client, size, stream)
		go func() {
			if err := receiveStream(pod, size, stream); err != nil {
				errs <- fmt.Errorf("copy %d: %w", k, err)
				return
			}
			errs <- nil
		}()
	}
	for range copies {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// sendStream writes size bytes of stream to c, then half-closes it (a failed write ends it: the
// receiver reports the bytes missing).
func sendStream(c *net.TCPConn, size int, stream func(int) byte) {
	buf := make([]byte, 48<<10)
	for off := 0; off < size; {
		n := min(len(buf), size-off)
		for i := range n {
			buf[i] = stream(off + i)
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
		off += n
	}
	_ = c.CloseWrite()
}

// receiveStream reads c, in small reads, to its end: nil if exactly size bytes of stream arrived.
func receiveStream(c *net.TCPConn, size int, stream func(int) byte) error {
	buf := make([]byte, 1<<10)
	off := 0
	for {
		n, err := c.Read(buf)
		for i := range n {
			if buf[i] != stream(off+i) {
				return fmt.Errorf("byte %d changed", off+i)
			}
		}
		off += n
		if err != nil {
			if off != size {
				return fmt.Errorf("%d of %d bytes arrived: %v", off, size, err)
			}
			return nil
		}
	}
}

// TestWebSocketCopySeesTheEndThatCameWithTheLastBytes: the client writes its last bytes and
// half-closes at once, so the copy's read may take the end (FIN) with the bytes, and no readiness
// notice follows; the copy must end all the same. (It waited for a notice after a short read,
// and hung in about one of 50 runs; through the proxy, the pod's last words and close hung the
// client: TestWebSocketPodsLastWordsAndEndReachTheClient.)
func TestWebSocketCopySeesTheEndThatCameWithTheLastBytes(t *testing.T) {
	for i := range 200 {
		r := startRawCopy(t, nil, nil)
		if _, err := r.client.Write([]byte("bye")); err != nil {
			t.Fatal(err)
		}
		r.end(t)
		if b, err := io.ReadAll(r.pod); string(b) != "bye" || err != nil {
			t.Fatalf("run %d: the pod read %q, %v; want bye and the end", i, b, err)
		}
		_ = r.client.Close()
		_ = r.pod.Close()
	}
}

// TestWebSocketPodsLastWordsAndEndReachTheClient: a pod that answers and closes at once (a
// process that exits, a server's close frame and close) ends the client's WebSocket after its
// last bytes, relayed by the loops and by the copy they fall back to. Both hung until the client
// sent something more, the copy on the first run: a read took the end with the last bytes, and
// the half waited for a readiness notice that never came.
func TestWebSocketPodsLastWordsAndEndReachTheClient(t *testing.T) {
	// Every connection: 101, a 4-byte message, then "bye!" and the close at once.
	host, port, _ := net.SplitHostPort(podEvery(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"); err != nil {
			return
		}
		if _, err := io.ReadFull(br, make([]byte, 4)); err != nil {
			return
		}
		_, _ = c.Write([]byte("bye!"))
	}))
	_, addr := startProxy(t, Options{}, host, port)
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("relay loops off %v", off), func(t *testing.T) {
			defer relayLoopsOff.Store(relayLoopsOff.Load())
			relayLoopsOff.Store(off)
			for i := range 20 {
				c, br := openUpgraded(t, addr)
				if _, err := io.WriteString(c, "ping"); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if b, err := io.ReadAll(br); string(b) != "bye!" || err != nil {
					t.Fatalf("run %d: the client read %q, %v; want bye! and the end", i, b, err)
				}
				_ = c.Close()
			}
		})
	}
}

// echoOnce sends "ping" on the upgraded connection c through p, reads its echo, and waits until
// both halves of the WebSocket run in p (copied or relayed).
func echoOnce(t *testing.T, p *Proxy, c net.Conn, br *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both halves to run", func() bool { return p.conns.rawActive.Load() == 2 })
}

//go:build linux && !386

package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// relayRun is a WebSocket relayed by a loop between two loopback pairs, as the proxy runs it:
// client writes to fromClient, the loop relays to toPod, pod reads (and back).
type relayRun struct {
	client, fromClient, toPod, pod *net.TCPConn
	p                              *relayPair
	c2p, p2c                       chan error
}

// startRelay registers a new WebSocket with a loop and runs both halves; tune, if not nil,
// adjusts the sockets first. client and pod have a 60 s deadline.
func startRelay(t *testing.T, tune func(client, fromClient, toPod, pod *net.TCPConn)) *relayRun {
	t.Helper()
	return startRelayOn(t, nil, tune)
}

// startRelayOn is startRelay on loop l (nil: the loop newRelayPair picks).
func startRelayOn(t *testing.T, l *relayLoop, tune func(client, fromClient, toPod, pod *net.TCPConn)) *relayRun {
	t.Helper()
	r := &relayRun{c2p: make(chan error, 1), p2c: make(chan error, 1)}
	r.client, r.fromClient = tcpPair(t)
	r.toPod, r.pod = tcpPair(t)
	if tune != nil {
		tune(r.client, r.fromClient, r.toPod, r.pod)
	}
	for _, c := range []net.Conn{r.client, r.pod} {
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	}
	craw, _ := r.fromClient.SyscallConn()
	praw, _ := r.toPod.SyscallConn()
	var p *relayPair
	var err error
	if l == nil {
		p, err = newRelayPair(craw, praw)
	} else {
		p, err = l.add(craw, praw)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	// At the end of one side's stream the other side is half-closed, as ReverseProxy does.
	go func() {
		_, err := p.run(true)
		if err == nil {
			_ = r.toPod.CloseWrite()
		}
		r.c2p <- err
	}()
	go func() {
		_, err := p.run(false)
		if err == nil {
			_ = r.fromClient.CloseWrite()
		}
		r.p2c <- err
	}()
	// Both halves joined: from now on the loop relays what is sent.
	waitFor(t, "both halves in the loop", func() bool {
		p.l.mu.Lock()
		defer p.l.mu.Unlock()
		return p.c2p.active && p.p2c.active
	})
	return r
}

// ended waits at most waitBound for a half's end and returns its error.
func ended(t *testing.T, what string, c chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(waitBound):
		t.Fatalf("%s did not end within %v", what, waitBound)
		return nil
	}
}

// end half-closes the client's side, then shuts the pod's socket down as the proxy's close does
// (endRelay), and checks that both halves end: the client's half at the end of its stream.
func (r *relayRun) end(t *testing.T) {
	t.Helper()
	_ = r.client.CloseWrite()
	if err := ended(t, "the client-to-pod half", r.c2p); err != nil {
		t.Errorf("client-to-pod half: %v, want the end of the stream", err)
	}
	r.p.close()
	praw, _ := r.toPod.SyscallConn()
	shutdownRaw(praw)
	if err := ended(t, "the pod-to-client half", r.p2c); !errors.Is(err, net.ErrClosed) {
		t.Errorf("pod-to-client half after the close: %v, want %v", err, net.ErrClosed)
	}
}

// relayMsg sends msg from one end and reads it at the other.
func relayMsg(t *testing.T, from, to net.Conn, msg []byte) {
	t.Helper()
	if _, err := from.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(to, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("got %q, %v; want %q", got, err, msg)
	}
}

// sockets names the sockets under conns as /proc/self/fd shows them ("socket:[inode]"): a
// duplicate (dup(2)) of a descriptor names its original's socket.
func (r *relayRun) sockets(t *testing.T) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, c := range []*net.TCPConn{r.client, r.fromClient, r.toPod, r.pod} {
		raw, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var id string
		var lerr error
		if err := raw.Control(func(fd uintptr) { id, lerr = os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd))) }); err != nil || lerr != nil {
			t.Fatalf("the socket of a descriptor: %v, %v", err, lerr)
		}
		ids[id] = true
	}
	return ids
}

// heldFDs counts the process's descriptors that refer to one of the sockets ids names. Unlike a
// count of every open descriptor it does not move when another test's connection closes late.
func heldFDs(t *testing.T, ids map[string]bool) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if id, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && ids[id] {
			n++
		}
	}
	return n
}

// fdOf is c's descriptor number.
func fdOf(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	if err := raw.Control(func(fd uintptr) { n = int(fd) }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWebSocketRelayNeverUsesADescriptorClosedElsewhere: the loop uses descriptors of its own
// (duplicates). When the pod side's net.Conn is closed by someone who does not go through
// endRelay, its number is given to the next socket the process opens (another tenant's): the
// loop must go on writing to the socket it relayed, never to that number.
func TestWebSocketRelayNeverUsesADescriptorClosedElsewhere(t *testing.T) {
	r := startRelay(t, nil)
	relayMsg(t, r.client, r.pod, []byte("hello pod"))
	relayMsg(t, r.pod, r.client, []byte("hello client"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	old := fdOf(t, r.toPod)
	_ = r.toPod.Close() // no shutdown first
	// Another tenant's connection on the freed number: the lowest free one, taken by the next
	// socket made.
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	other, otherPeer := d.(*net.TCPConn), a.(*net.TCPConn)
	if fdOf(t, other) != old {
		other, otherPeer = otherPeer, other
	}
	if fdOf(t, other) != old {
		t.Fatalf("descriptor %d was not reused by the next connection (%d, %d)", old, fdOf(t, other), fdOf(t, otherPeer))
	}
	relayMsg(t, r.client, r.pod, []byte("for the pod only"))
	_ = otherPeer.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := otherPeer.Read(make([]byte, 64)); b > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection that took descriptor %d got %d bytes (%v): the loop wrote to a number closed elsewhere", old, b, err)
	}
	// The pod ends its side: the loop ends the relay and closes its descriptors.
	_ = r.client.CloseWrite()
	if err := ended(t, "the client-to-pod half", r.c2p); err != nil {
		t.Errorf("client-to-pod half: %v", err)
	}
	_ = r.pod.CloseWrite()
	if err := ended(t, "the pod-to-client half", r.p2c); err != nil {
		t.Errorf("pod-to-client half: %v", err)
	}
}

// TestWebSocketRelayClosesItsDescriptorsAndBuffers: once both halves have ended the loop holds
// no descriptor and no buffer of the WebSocket.
func TestWebSocketRelayClosesItsDescriptorsAndBuffers(t *testing.T) {
	if _, err := pickRelayLoop(); err != nil { // its epoll descriptor, once for all tests
		t.Fatal(err)
	}
	// The buffers are counted for the whole process: an earlier test's WebSocket that ends late
	// gives its own back during this one.
	waitFor(t, "every earlier WebSocket's buffers given back", func() bool { return wsBufBytes.Load() == 0 })
	r := startRelay(t, nil)
	socks := r.sockets(t)
	relayMsg(t, r.client, r.pod, bytes.Repeat([]byte("x"), 100<<10))
	relayMsg(t, r.pod, r.client, []byte("back"))
	r.end(t)
	for _, c := range []net.Conn{r.client, r.fromClient, r.toPod, r.pod} {
		_ = c.Close()
	}
	waitFor(t, "the loop's descriptors closed", func() bool { return heldFDs(t, socks) == 0 })
	if n := wsBufBytes.Load(); n != 0 {
		t.Errorf("after the relay ended %d bytes of buffer are held, want 0", n)
	}
}

// TestWebSocketRelayLoopWaitsWithoutPolling: an idle loop is parked (no CPU): with a WebSocket
// open and nothing sent, it makes no epoll_wait calls.
func TestWebSocketRelayLoopWaitsWithoutPolling(t *testing.T) {
	r := startRelay(t, nil)
	relayMsg(t, r.client, r.pod, []byte("ping"))
	relayMsg(t, r.pod, r.client, []byte("pong"))
	polls := func() (n int64) {
		for _, l := range relayLoops {
			n += l.polls.Load()
		}
		return n
	}
	// A readiness notice for bytes the loop already read may wake it once more.
	time.Sleep(20 * time.Millisecond)
	before := polls()
	time.Sleep(200 * time.Millisecond) // the window observed
	if n := polls() - before; n > 2 {
		t.Errorf("idle loops made %d epoll_wait calls in 200ms, want none", n)
	}
	r.end(t)
}

// TestWebSocketRelayAllocatesNothingPerMessage: a message relayed either way costs no
// allocation (the loop's batch and the halves' buffers are kept).
func TestWebSocketRelayAllocatesNothingPerMessage(t *testing.T) {
	r := startRelay(t, nil)
	msg := []byte("a WebSocket frame's worth of bytes")
	got := make([]byte, len(msg))
	round := func() {
		if _, err := r.client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r.pod, got); err != nil {
			t.Fatal(err)
		}
		if _, err := r.pod.Write(got); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r.client, got); err != nil {
			t.Fatal(err)
		}
	}
	round()
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Errorf("%v allocations per round trip, want 0", n)
	}
	r.end(t)
}

// TestWebSocketRelayBuffers: a waiting half holds its small buffer only; a message over it that
// arrived whole goes out in one send; a 1 MiB burst arrives whole and the large buffer goes back
// after it.
func TestWebSocketRelayBuffers(t *testing.T) {
	base := wsBufBytes.Load()
	r := startRelay(t, nil)
	relayMsg(t, r.client, r.pod, []byte("a keystroke"))
	if n := wsBufBytes.Load() - base; n != 2*wsSmallBuf {
		t.Errorf("after a small message the relay holds %d bytes of buffer, want %d", n, 2*wsSmallBuf)
	}
	msg := make([]byte, 10<<10)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	l := r.p.l
	l.mu.Lock()
	sends := r.p.c2p.sends
	l.mu.Unlock()
	relayMsg(t, r.client, r.pod, msg) // one write: on loopback it arrives whole
	l.mu.Lock()
	sends = r.p.c2p.sends - sends
	l.mu.Unlock()
	if sends != 1 {
		t.Errorf("a %d-byte message took %d sends, want 1", len(msg), sends)
	}
	burst := make([]byte, 1<<20)
	for i := range burst {
		burst[i] = byte(i * 7)
	}
	sent := make(chan error, 1)
	go func() { _, err := r.client.Write(burst); sent <- err }()
	got := make([]byte, len(burst))
	if _, err := io.ReadFull(r.pod, got); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, burst) {
		t.Fatal("the pod got the burst changed")
	}
	waitFor(t, "the large buffer given back", func() bool { return wsBufBytes.Load()-base == 2*wsSmallBuf })
	r.end(t)
	if n := wsBufBytes.Load() - base; n != 0 {
		t.Errorf("after the relay ended %d bytes of buffer are held, want 0", n)
	}
}

// TestWebSocketRelaysWithSlowReadersKeepTheirStreams: relays at once, each to a reader slower
// than its sender (small socket buffers, small reads), both ways, so that every half keeps its
// large buffer with bytes not yet written and gives it back and takes one again many times:
// every stream arrives intact.
func TestWebSocketRelaysWithSlowReadersKeepTheirStreams(t *testing.T) {
	const relays, size = 6, 1 << 20
	errs := make(chan error, 2*relays)
	stream := func(k, i int) byte { return byte(i*31 + k*7 + i>>12) }
	send := func(c *net.TCPConn, k int) { sendStream(c, size, func(i int) byte { return stream(k, i) }) }
	receive := func(c *net.TCPConn, k int) {
		if err := receiveStream(c, size, func(i int) byte { return stream(k, i) }); err != nil {
			errs <- fmt.Errorf("stream %d: %w", k, err)
			return
		}
		errs <- nil
	}
	for k := range relays {
		r := startRelay(t, func(client, fromClient, toPod, pod *net.TCPConn) {
			_ = pod.SetReadBuffer(8 << 10)
			_ = toPod.SetWriteBuffer(8 << 10)
			_ = client.SetReadBuffer(8 << 10)
			_ = fromClient.SetWriteBuffer(8 << 10)
		})
		go send(r.client, 2*k)
		go receive(r.pod, 2*k)
		go send(r.pod, 2*k+1)
		go receive(r.client, 2*k+1)
	}
	for range 2 * relays {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestWebSocketRelayCloseIsNotHeldUpByAReaderThatStopped: the pod floods a client that does not
// read; closing the pod's side (endRelay) ends both halves at once.
func TestWebSocketRelayCloseIsNotHeldUpByAReaderThatStopped(t *testing.T) {
	r := startRelay(t, nil)
	stuck := make(chan struct{})
	go flood(r.pod, stuck)
	<-stuck
	r.p.close()
	praw, _ := r.toPod.SyscallConn()
	shutdownRaw(praw)
	for _, h := range []chan error{r.c2p, r.p2c} {
		if err := ended(t, "a half", h); !errors.Is(err, net.ErrClosed) {
			t.Errorf("after the close: %v, want %v", err, net.ErrClosed)
		}
	}
}

// TestWebSocketThroughTheProxyIsRelayedByALoop: an upgraded connection through the proxy (the
// lean server, the synchronous transport) is relayed by a loop, both halves.
func TestWebSocketThroughTheProxyIsRelayedByALoop(t *testing.T) {
	host, port := upgradeEcho(t)
	p, addr := startProxy(t, Options{}, host, port)
	c, br := openUpgraded(t, addr)
	echoOnce(t, p, c, br)
	var pc *persistConn
	p.conns.mu.Lock()
	for _, m := range p.conns.byPod {
		for tc := range m {
			pc = tc.ReadWriteCloser.(*upgradedConn).pc
		}
	}
	p.conns.mu.Unlock()
	if pc == nil {
		t.Fatal("no tracked WebSocket")
	}
	pc.relayMu.Lock()
	rp := pc.relay
	pc.relayMu.Unlock()
	if rp == nil {
		t.Fatal("the WebSocket is not relayed by a loop")
	}
	waitFor(t, "both halves in the loop", func() bool {
		rp.l.mu.Lock()
		defer rp.l.mu.Unlock()
		return rp.c2p.active && rp.p2c.active
	})
}

// TestWebSocketRelayEndsWhenTheProxyStops: stopping the proxy closes its WebSockets (closeAll):
// the loop ends both halves and the client sees the end.
func TestWebSocketRelayEndsWhenTheProxyStops(t *testing.T) {
	host, port := upgradeEcho(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(benchAuth{}, Options{Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	wp := wsPod("lean", time.Minute, host, true, map[string]string{workspace.AnnWorkspacePort: port})
	wp.CreationTimestamp = metav1.Now()
	p.PodChanged(wp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	if err := waitListening(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	c, br := openUpgraded(t, ln.Addr().String())
	echoOnce(t, p, c, br)
	cancel()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(br); len(b) != 0 || err != nil {
		t.Fatalf("after the proxy stopped the client read %q, %v; want the end", b, err)
	}
	waitFor(t, "the halves ending", func() bool { return p.conns.rawActive.Load() == 0 })
	waitStopped(t, done)
}

// TestWebSocketRelaySeesTheEndThatCameWithTheLastBytes: the pod writes its last bytes and
// half-closes at once; the read that takes the bytes may take the end with them, and the event
// that said so is the one being handled: the half must read on to the end, not wait (it did, and
// hung on the first run).
func TestWebSocketRelaySeesTheEndThatCameWithTheLastBytes(t *testing.T) {
	for i := range 200 {
		r := startRelay(t, nil)
		relayMsg(t, r.client, r.pod, []byte("hi"))
		if _, err := r.pod.Write([]byte("bye")); err != nil {
			t.Fatal(err)
		}
		_ = r.pod.CloseWrite()
		if err := ended(t, "the pod-to-client half", r.p2c); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if b, err := io.ReadAll(r.client); string(b) != "bye" || err != nil {
			t.Fatalf("run %d: the client read %q, %v; want bye and the end", i, b, err)
		}
		_ = r.client.Close()
		_ = r.pod.Close()
		_ = ended(t, "the client-to-pod half", r.c2p)
	}
}

// queuedBytes is what c's socket has received and not yet given to a read (SIOCINQ, whose
// number is TIOCINQ's).
func queuedBytes(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var e syscall.Errno
	if err := raw.Control(func(fd uintptr) {
		_, _, e = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || e != 0 {
		t.Fatalf("SIOCINQ: %v %v", err, e)
	}
	return n
}

// TestWebSocketRelayFloodTakesTurns: one WebSocket floods (1.5 MiB waiting in the pod's socket,
// room for all of it on the client's side, so that nothing stops the flood's half but its turn)
// and another one on the same loop exchanges small messages. The test makes the loop's turns
// itself: every turn relays the quiet WebSocket's message and at most one turn's bytes of the
// flood, and the loop comes back to the flood (no event will come for bytes already waiting)
// until all of it is relayed, before it would wait. Without the turns the first turn relayed
// the whole flood; without the coming back the flood stopped after its first turn.
func TestWebSocketRelayFloodTakesTurns(t *testing.T) {
	l, perTurn := turnsLoop(t)
	size := 6 * perTurn
	fd := uintptr(l.epfd)
	flood := startRelayOn(t, l, roomySockets)
	quiet := startRelayOn(t, l, nil)
	stream := make([]byte, size)
	for i := range stream {
		stream[i] = byte(i*7 + i>>10)
	}
	_ = flood.pod.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := flood.pod.Write(stream); err != nil {
		t.Fatalf("the flood does not fit in its sockets' buffers: %v", err)
	}
	waitFor(t, "the flood waiting whole in the pod's socket", func() bool { return queuedBytes(t, flood.toPod) == size })
	written := func(h *relayHalf) int64 { return relayedBy(l, h) }
	msg := []byte("ping")
	for k := 1; k <= 4; k++ {
		from, to, half := quiet.client, quiet.fromClient, &quiet.p.c2p
		if k%2 == 0 {
			from, to, half = quiet.pod, quiet.toPod, &quiet.p.p2c
		}
		before := written(half)
		if _, err := from.Write(msg); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the quiet message in the loop's socket", func() bool { return queuedBytes(t, to) == len(msg) })
		more := l.turn(fd)
		if n := written(half) - before; n != int64(len(msg)) {
			t.Errorf("turn %d: the quiet WebSocket's message: %d bytes relayed, want %d", k, n, len(msg))
		}
		if n := written(&flood.p.p2c); n == 0 || n > int64(k*perTurn) {
			t.Errorf("after %d turns the flood relayed %d bytes, want 1 to %d", k, n, k*perTurn)
		}
		if !more {
			t.Fatalf("turn %d: the loop would wait with the flood's bytes waiting", k)
		}
		got := make([]byte, len(msg))
		var err error
		if k%2 == 1 {
			_, err = io.ReadFull(quiet.pod, got)
		} else {
			_, err = io.ReadFull(quiet.client, got)
		}
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("turn %d: the quiet WebSocket's peer read %q, %v", k, got, err)
		}
	}
	for turns := 0; l.turn(fd); turns++ {
		if turns > 2*size/l.turnBytes {
			t.Fatalf("%d more turns and the loop is still busy", turns)
		}
	}
	if n := written(&flood.p.p2c); n != int64(size) {
		t.Fatalf("the loop would wait with %d of the flood's %d bytes relayed", n, size)
	}
	got := make([]byte, size)
	if _, err := io.ReadFull(flood.client, got); err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("the client got the flood changed (%v)", err)
	}
	endOnTurns(t, l, flood, quiet)
}

// TestWebSocketRelayQueuedHalfTakesOneTurnPerTurn: a half that used up its turn waits in the
// loop's list for its next one (again) and takes it after the next batch. When that batch also
// brings an event for its socket (more bytes from the pod), the half still takes one turn in it,
// not one for the event and one from the list. With turns of one read (turnBytes 1) a turn is
// one read and one send, so the sends count the turns.
func TestWebSocketRelayQueuedHalfTakesOneTurnPerTurn(t *testing.T) {
	l, _ := turnsLoop(t)
	l.turnBytes = 1
	fd := uintptr(l.epfd)
	r := startRelayOn(t, l, roomySockets)
	h := &r.p.p2c
	sends := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return h.sends
	}
	stream := make([]byte, 4*wsCopyBuf+1<<10)
	for i := range stream {
		stream[i] = byte(i*7 + i>>10)
	}
	first, more := stream[:4*wsCopyBuf], stream[4*wsCopyBuf:]
	_ = r.pod.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.pod.Write(first); err != nil {
		t.Fatalf("the flood does not fit in its sockets' buffers: %v", err)
	}
	waitFor(t, "the flood waiting whole in the pod's socket", func() bool { return queuedBytes(t, r.toPod) == len(first) })
	if !l.turn(fd) {
		t.Fatal("after one turn the loop would wait with the flood's bytes waiting")
	}
	if n := sends(); n != 1 {
		t.Fatalf("the first turn made %d sends, want 1", n)
	}
	// The half is in the list; the pod's next bytes raise an event for its socket.
	if _, err := r.pod.Write(more); err != nil {
		t.Fatal(err)
	}
	left := len(stream) - int(relayedBy(l, h))
	waitFor(t, "the pod's next bytes in the loop's socket", func() bool { return queuedBytes(t, r.toPod) == left })
	l.turn(fd)
	if n := sends() - 1; n != 1 {
		t.Errorf("the turn with an event for the waiting half made %d sends for it, want 1 (one turn)", n)
	}
	for turns := 0; l.turn(fd); turns++ {
		if turns > 2*len(stream)/wsSmallBuf {
			t.Fatalf("%d more turns and the loop is still busy", turns)
		}
	}
	got := make([]byte, len(stream))
	if _, err := io.ReadFull(r.client, got); err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("the client got the flood changed (%v)", err)
	}
	endOnTurns(t, l, r)
}

// endOnTurns closes runs, WebSockets of the loop l that the test makes the turns of, makes the
// turns until they are gone (their descriptors given back) and checks how their halves ended.
func endOnTurns(t *testing.T, l *relayLoop, runs ...*relayRun) {
	t.Helper()
	for _, r := range runs {
		r.p.close()
		praw, _ := r.toPod.SyscallConn()
		shutdownRaw(praw)
	}
	for turns := 0; ; turns++ {
		l.turn(uintptr(l.epfd))
		l.mu.Lock()
		left := len(l.slots) - len(l.free)
		l.mu.Unlock()
		if left == 0 {
			break
		}
		if turns > 100 {
			t.Fatalf("%d WebSockets still in the loop after 100 turns", left)
		}
	}
	for _, r := range runs {
		for _, h := range []chan error{r.c2p, r.p2c} {
			if err := ended(t, "a half", h); err != nil && !errors.Is(err, net.ErrClosed) {
				t.Errorf("a half ended with %v", err)
			}
		}
	}
}

// turnsLoop is a relay loop that is not started (the test makes its turns, l.turn) and closed
// at the end of the test, with turns of 8 KiB, so that a flood of a few turns waits whole in the
// proxy's receive buffer under Linux's default limits too (net.core.rmem_max 212992: a buffer
// of 416 KiB once the kernel doubles it; a host with higher limits gives the 1 MiB asked for).
// perTurn is the most a half relays in one turn: the turn ends after the read that reaches
// turnBytes.
func turnsLoop(t *testing.T) (l *relayLoop, perTurn int) {
	t.Helper()
	l, err := newRelayLoop()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.file.Close() })
	l.turnBytes = 8 << 10
	return l, l.turnBytes + wsCopyBuf
}

// relayedBy is what h has written so far.
func relayedBy(l *relayLoop, h *relayHalf) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return h.written
}

// roomySockets asks for 1 MiB socket buffers where a flood waits (the pod's send buffer and
// the proxy's receive buffer on the pod's side, and the same on the client's side).
func roomySockets(client, fromClient, toPod, pod *net.TCPConn) {
	for _, c := range []*net.TCPConn{client, toPod} {
		_ = c.SetReadBuffer(1 << 20)
	}
	for _, c := range []*net.TCPConn{fromClient, pod} {
		_ = c.SetWriteBuffer(1 << 20)
	}
}

// TestWebSocketRelayJoinLeavesWhatWaitsToTheLoop: bytes that already wait in a socket when its
// half joins are relayed by the loop, in turns like the rest. The joining goroutine relayed them
// itself, under the loop's lock, for as long as the socket stayed full: a client flooding right
// after the upgrade held up every WebSocket on its loop.
func TestWebSocketRelayJoinLeavesWhatWaitsToTheLoop(t *testing.T) {
	l, perTurn := turnsLoop(t)
	size := 4 * perTurn
	stream := bytes.Repeat([]byte("flood!"), size/6)
	size = len(stream)
	r := startRelayOn(t, l, func(client, fromClient, toPod, pod *net.TCPConn) {
		roomySockets(client, fromClient, toPod, pod)
		_ = pod.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := pod.Write(stream); err != nil {
			t.Fatalf("the flood does not fit in its sockets' buffers: %v", err)
		}
		waitFor(t, "the flood waiting whole in the pod's socket", func() bool { return queuedBytes(t, toPod) == size })
	})
	if n := relayedBy(l, &r.p.p2c); n != 0 {
		t.Errorf("the joining half relayed %d bytes itself, want 0 (the loop relays them in turns)", n)
	}
	if more := l.turn(uintptr(l.epfd)); !more {
		t.Error("after one turn the loop would wait with the flood's bytes waiting")
	}
	if n := relayedBy(l, &r.p.p2c); n == 0 || n > int64(perTurn) {
		t.Errorf("the first turn relayed %d bytes, want 1 to %d", n, perTurn)
	}
	for turns := 0; l.turn(uintptr(l.epfd)); turns++ {
		if turns > 2*size/l.turnBytes {
			t.Fatalf("%d more turns and the loop is still busy", turns)
		}
	}
	got := make([]byte, size)
	if _, err := io.ReadFull(r.client, got); err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("the client got the flood changed (%v)", err)
	}
	endOnTurns(t, l, r)
}

// TestWebSocketRelayLoopThatStopsEndsItsWebSocketsAndTakesNoMore: should a loop's wait fail
// (it cannot today: its file is never closed and has no deadline; a deadline is the way to make
// it fail here), the process goes on (it panicked, taking every tenant's proxy down): the loop's
// WebSockets end with the error, their descriptors and the loop's own are closed, and the loop
// takes no new WebSocket.
func TestWebSocketRelayLoopThatStopsEndsItsWebSocketsAndTakesNoMore(t *testing.T) {
	l, err := newRelayLoop()
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		l.run()
		close(stopped)
	}()
	r := startRelayOn(t, l, nil)
	socks := r.sockets(t)
	relayMsg(t, r.client, r.pod, []byte("hello pod"))
	relayMsg(t, r.pod, r.client, []byte("hello client"))
	_ = l.file.SetReadDeadline(time.Unix(1, 0))
	for _, h := range []chan error{r.c2p, r.p2c} {
		var le *relayLoopError
		if err := ended(t, "a half", h); !errors.As(err, &le) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a half of the stopped loop ended with %v, want the loop's error", err)
		}
	}
	select {
	case <-stopped:
	case <-time.After(waitBound):
		t.Fatalf("the loop did not stop within %v", waitBound)
	}
	if err := l.raw.Control(func(uintptr) {}); err == nil {
		t.Error("the stopped loop's epoll descriptor is still open")
	}
	craw, _ := r.fromClient.SyscallConn()
	praw, _ := r.toPod.SyscallConn()
	if p, err := l.add(craw, praw); err == nil {
		t.Errorf("a stopped loop took a new WebSocket (%v)", p)
	}
	for _, c := range []net.Conn{r.client, r.fromClient, r.toPod, r.pod} {
		_ = c.Close()
	}
	waitFor(t, "the loop's descriptors closed", func() bool { return heldFDs(t, socks) == 0 })
}

// TestWebSocketsAreCopiedWhenEveryRelayLoopHasStopped: a stopped loop is never picked, and with
// every loop stopped a WebSocket through the proxy is copied (copyRaw) and works.
func TestWebSocketsAreCopiedWhenEveryRelayLoopHasStopped(t *testing.T) {
	if _, err := pickRelayLoop(); err != nil {
		t.Fatal(err)
	}
	// Marked stopped without stopping them (the loops are the process's): they take nothing new.
	for _, l := range relayLoops {
		l.stopped.Store(true)
		defer l.stopped.Store(false)
	}
	running := relayLoops[len(relayLoops)-1]
	running.stopped.Store(false)
	for range 2 * len(relayLoops) {
		if l, err := pickRelayLoop(); l != running || err != nil {
			t.Fatalf("picked %p, %v; want the one loop still running, %p", l, err, running)
		}
	}
	running.stopped.Store(true)
	if l, err := pickRelayLoop(); !errors.Is(err, errRelayLoopsStopped) {
		t.Fatalf("with every loop stopped: picked %p, %v; want %v", l, err, errRelayLoopsStopped)
	}
	host, port := upgradeEcho(t)
	p, addr := startProxy(t, Options{}, host, port)
	c, br := openUpgraded(t, addr)
	echoOnce(t, p, c, br)
	echoOnce(t, p, c, br)
	p.conns.mu.Lock()
	defer p.conns.mu.Unlock()
	for _, m := range p.conns.byPod {
		for tc := range m {
			pc := tc.ReadWriteCloser.(*upgradedConn).pc
			pc.relayMu.Lock()
			if pc.relay != nil {
				t.Error("a WebSocket was registered with a stopped loop")
			}
			pc.relayMu.Unlock()
		}
	}
}

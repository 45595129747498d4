//go:build linux && !386

package proxy

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The relay loops (docs/proxy.md, "Both halves of a WebSocket"). copyRaw waits for each socket on
// a goroutine of its own: one park and one wake-up through the runtime's poller per message and
// direction, most of what the proxy spent in user space per round trip above nginx. A WebSocket
// whose two sides are TCP sockets with nothing buffered above them is relayed by a loop instead,
// as nginx's worker does it: each loop has an epoll instance of its own holding both sockets of
// its WebSockets (edge-triggered), waits for it through the runtime's poller (the epoll
// descriptor is readable when one of its sockets is ready), and reads and writes every ready
// socket itself (readFD, writeFD: they never wait). One goroutine park and wake-up per batch of
// ready sockets, not per message; an idle loop is parked like any waiting goroutine (no CPU).
// There is one loop per processor the process may run Go code on (GOMAXPROCS at the first
// WebSocket); a WebSocket stays on its loop.
//
// The loop owns duplicates (dup(2)) of both descriptors and never uses the net.Conns' own
// numbers: a number it uses is its own until it closes it itself, so it cannot be another
// connection's after the net.Conn was closed elsewhere (a descriptor number is reused at once).
// A duplicate keeps the socket open, though: closing the net.Conn no longer ends the connection.
// So every close of the pod's side shuts its socket down first (upgradedConn.Close and the
// transport's abort on a cancelled request: shutdown(2) acts on the socket, which the loop sees),
// and the loop then ends both halves and closes its duplicates, which closes the client's socket
// too once ReverseProxy has closed its net.Conn (it closes both sides when either copy ends).
// Closing a pod's WebSockets (closePod: the pod deleted or not ready, the proxy stopping) goes
// through upgradedConn.Close.
//
// Each half (client to pod, pod to client) keeps copyRaw's buffers and rules: a 4 KiB buffer of
// its own, a 32 KiB one from wsBufPool for a burst (a message over 4 KiB is still one send), given
// back once the socket is empty or drained with everything written. What the other side's send
// buffer does not take stays in the half (rest) and the half stops reading its socket until that
// side is writable again: nothing waits, so a reader that stopped reading holds up nothing but
// its own WebSocket's half, and a close still ends it at once.

// relayLoopsBuilt: this system has relay loops.
const relayLoopsBuilt = true

var (
	relayLoops     []*relayLoop
	relayLoopsNext atomic.Uint32
	relayLoopsOnce sync.Once
	relayLoopsErr  error
)

// pickRelayLoop starts the loops at the first call and returns the next one that still runs,
// round robin.
func pickRelayLoop() (*relayLoop, error) {
	relayLoopsOnce.Do(func() {
		for range max(1, runtime.GOMAXPROCS(0)) {
			l, err := newRelayLoop()
			if err != nil {
				relayLoopsErr = err
				return
			}
			go l.run()
			relayLoops = append(relayLoops, l)
		}
	})
	if len(relayLoops) == 0 {
		return nil, relayLoopsErr
	}
	next := int(relayLoopsNext.Add(1))
	for i := range relayLoops {
		if l := relayLoops[(next+i)%len(relayLoops)]; !l.stopped.Load() {
			return l, nil
		}
	}
	return nil, errRelayLoopsStopped
}

// relayLoop is one loop: its epoll descriptor and the WebSockets registered with it.
type relayLoop struct {
	epfd   int
	file   *os.File        // epfd's (closed only by stop)
	raw    syscall.RawConn // file's, through the runtime's poller
	pollFn func(uintptr) bool
	// polls counts the loop's epoll_wait calls (tests: an idle loop makes none).
	polls atomic.Int64
	// stopped: the loop's wait failed (run): its WebSockets were ended, it takes no new one.
	stopped atomic.Bool
	// turnBytes is how much a half relays per turn: relayTurn (a test of turns sets a smaller
	// one before the loop relays anything, so that its flood fits any host's socket buffers).
	turnBytes int

	mu sync.Mutex // held while a batch is handled, and by a half joining
	// slots holds the registered pairs; an event carries its pair's slot and generation, so
	// that an event for a pair already freed (later in the same batch) finds nothing.
	slots  []*relayPair
	gens   []uint32
	free   []uint32
	events [128]syscall.EpollEvent
	// again holds the halves that used up their turn (relayTurn) with their socket still
	// readable: edge-triggered, no event will come for them, so the loop serves them in its
	// next turn, after that turn's batch, before it waits. next is the list being filled while
	// again is served.
	again, next []*relayHalf
}

func newRelayLoop() (*relayLoop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so that os.NewFile registers it with the runtime's poller.
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	f := os.NewFile(uintptr(epfd), "websocket-relay")
	// A file the runtime's poller did not take has no deadlines: the loop could not wait on it.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return nil, err
	}
	raw, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	l := &relayLoop{epfd: epfd, file: f, raw: raw, turnBytes: relayTurn}
	l.pollFn = l.poll
	return l, nil
}

// run waits for the loop's sockets until the wait fails, which it cannot today (the file is
// never closed and has no deadline). Should it fail, the loop stops: it says so, ends its
// WebSockets (their halves return the error, and ReverseProxy closes both sides, as for any copy
// that fails), closes their descriptors and its own, and takes no new WebSocket
// (pickRelayLoop skips it; when every loop has stopped, WebSockets are copied by copyRaw).
// A panic here would take every tenant's proxy down.
func (l *relayLoop) run() {
	var err error
	for err == nil {
		err = l.raw.Read(l.pollFn)
	}
	l.stop(err)
}

// stop ends the loop after its wait failed with err.
func (l *relayLoop) stop(err error) {
	err = &relayLoopError{err: err}
	l.mu.Lock()
	l.stopped.Store(true)
	n := 0
	for _, p := range l.slots {
		if p != nil {
			n++
			l.end(p, err)
		}
	}
	l.mu.Unlock()
	if lg := relayLoopsLog.Load(); lg != nil {
		lg.Error(err, "WebSocket relay loop stopped; its WebSockets were closed, new ones are copied without it", "webSockets", n)
	}
	// No pair is left, and add registers none on a stopped loop: nothing uses epfd again.
	_ = l.file.Close()
}

// relayLoopError is what the halves of a stopped loop's WebSockets return.
type relayLoopError struct{ err error }

func (e *relayLoopError) Error() string { return "websocket relay loop stopped: " + e.err.Error() }
func (e *relayLoopError) Unwrap() error { return e.err }

// errRelayLoopsStopped: every loop has stopped (WebSockets are copied by copyRaw).
var errRelayLoopsStopped = errors.New("every websocket relay loop has stopped")

// errRelayLoopStopped: the loop a WebSocket was offered to has stopped.
var errRelayLoopStopped = errors.New("this websocket relay loop has stopped")

// poll is raw.Read's function: it handles what the epoll instance has ready, and asks to wait
// when it had less than a full batch and no half is left with its turn used up. raw.Read resets
// the descriptor's readiness once, before its first call, and never again while it waits and
// calls it again: a socket that became ready after the last epoll_wait made the epoll descriptor
// readable after that reset, so the wait ends at once and the next call finds it.
func (l *relayLoop) poll(fd uintptr) bool {
	for l.turn(fd) {
	}
	return false
}

// turn is one epoll_wait (which never waits) and the sockets it found ready, then one more turn
// for each half that used up its turn before (again): more when the loop must go on before it
// waits (a full batch, or a half that used up its turn again).
func (l *relayLoop) turn(fd uintptr) (more bool) {
	l.polls.Add(1)
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
	if e == syscall.EINTR {
		return true
	}
	n := 0
	if e == 0 {
		n = int(r)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n == 0 && len(l.again) == 0 {
		return false
	}
	// The halves that used up their turn before this batch: served after it. Those that use up
	// their turn in this one (in the batch or after it) go to the next turn's list.
	again := l.again
	l.again, l.next = l.next[:0], nil
	for i := range n {
		ev := &l.events[i]
		slot, gen, side := uint32(ev.Fd), uint32(ev.Pad)>>1, ev.Pad&1
		if p := l.slots[slot]; p != nil && p.gen == gen {
			l.handle(p, side, ev.Events)
		}
	}
	for i, h := range again {
		again[i] = nil
		h.queued = false
		if h.p.closing.Load() {
			l.end(h.p, errRelayClosed) // as its next event would
			continue
		}
		if h.active && !h.done && h.readable && len(h.rest) == 0 {
			h.pump(l.turnBytes)
			l.maybeFree(h.p)
		}
	}
	l.next = again[:0]
	return n == len(l.events) || len(l.again) > 0
}

// epollET is EPOLLET as the event mask's type wants it (syscall's constant is negative).
const epollET = 1 << 31

// errRelayClosed is what a half returns when its WebSocket was closed (as a copy reading a
// closed net.Conn returns).
var errRelayClosed = &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}

// handle is one event on p's client socket (side 0) or pod socket (side 1).
func (l *relayLoop) handle(p *relayPair, side int32, ev uint32) {
	if p.closing.Load() {
		l.end(p, errRelayClosed)
		return
	}
	rh, wh := &p.c2p, &p.p2c // the half reading this socket, the half writing it
	if side == 1 {
		rh, wh = &p.p2c, &p.c2p
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLHUP|syscall.EPOLLERR|syscall.EPOLLRDHUP) != 0 {
		rh.readable = true
	}
	if ev&(syscall.EPOLLHUP|syscall.EPOLLERR|syscall.EPOLLRDHUP) != 0 {
		// The peer ended its side (or the socket failed): a short read no longer means empty.
		rh.ended = true
	}
	// A half that used up its turn is served after the batch (turn), once per turn. (In the
	// first branch a queued half cannot occur today: pump queues a half only after a whole flush,
	// so it has no rest; the guard keeps the rule local. TestWebSocketRelayQueuedHalfTakesOneTurnPerTurn
	// covers the second.)
	if ev&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 && wh.active && !wh.done && len(wh.rest) > 0 {
		wh.flush()
		if !wh.done && len(wh.rest) == 0 && wh.readable && !wh.queued {
			wh.pump(l.turnBytes)
		}
	}
	if rh.active && !rh.done && rh.readable && len(rh.rest) == 0 && !rh.queued {
		rh.pump(l.turnBytes)
	}
	l.maybeFree(p)
}

// end ends both halves of p with err.
func (l *relayLoop) end(p *relayPair, err error) {
	for _, h := range []*relayHalf{&p.c2p, &p.p2c} {
		if !h.done {
			h.finish(err)
		}
	}
	l.maybeFree(p)
}

// maybeFree removes p and closes the loop's descriptors once both halves have ended. The
// registrations are removed before the close: a duplicate closed while the socket stays open
// (its net.Conn) would stay registered.
func (l *relayLoop) maybeFree(p *relayPair) {
	if !p.c2p.done || !p.p2c.done || p.freed {
		return
	}
	p.freed = true
	for _, fd := range []int{p.cfd, p.pfd} {
		_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
		_ = syscall.Close(fd)
	}
	l.slots[p.slot] = nil
	l.free = append(l.free, p.slot)
}

// relayPair is a WebSocket in a loop: its two sockets (the loop's own descriptors) and halves.
type relayPair struct {
	l         *relayLoop
	slot, gen uint32
	cfd, pfd  int
	c2p, p2c  relayHalf
	// closing is set by close: the next event on either socket ends both halves.
	closing atomic.Bool
	freed   bool
}

// relayTurn is how much a half relays per turn (up to one large buffer more: the turn ends
// after the read that reaches it) before the loop serves the other ready
// sockets: a WebSocket flooding at loopback speed held up the others on its loop for up to 12.6
// ms (a review's test) while one read-and-write run emptied its socket. 256 KiB is eight of the
// large buffer's reads and sends; a burst of a few MiB still goes through within one wait.
const relayTurn = 256 << 10

// relayHalf is one direction of a pair, from one descriptor to the other.
type relayHalf struct {
	p        *relayPair
	from, to int
	active   bool // its goroutine has joined (run): until then its socket is not read
	readable bool // from may hold bytes not read yet
	// ended: an event said from's peer ended its side (or from failed). A read that returns the
	// last bytes may take the end with them, and no event follows: the half reads until a read
	// returns the end instead of taking a short read for an empty socket (nginx's pending_eof).
	ended  bool
	done   bool
	queued bool // in the loop's again list
	wsBuffers
	rest    []byte // read, not written yet: to's send buffer was full
	written int64
	sends   int // send calls that sent something (tests)
	err     error
	doneC   chan struct{} // closed when the half ends
}

// newRelayPair registers the WebSocket between the sockets under client and pod with a loop.
func newRelayPair(client, pod syscall.RawConn) (*relayPair, error) {
	for {
		l, err := pickRelayLoop()
		if err != nil {
			return nil, err
		}
		// A loop that stopped since it was picked takes nothing: the next one that runs may.
		if p, err := l.add(client, pod); err != errRelayLoopStopped {
			return p, err
		}
	}
}

// add registers the WebSocket between the sockets under client and pod with l. Each side's
// descriptor is duplicated inside its RawConn.Control, which keeps it open.
func (l *relayLoop) add(client, pod syscall.RawConn) (*relayPair, error) {
	cfd, err := dupFD(client)
	if err != nil {
		return nil, err
	}
	pfd, err := dupFD(pod)
	if err != nil {
		_ = syscall.Close(cfd)
		return nil, err
	}
	p := &relayPair{l: l, cfd: cfd, pfd: pfd}
	p.c2p = relayHalf{p: p, from: cfd, to: pfd, doneC: make(chan struct{})}
	p.p2c = relayHalf{p: p, from: pfd, to: cfd, doneC: make(chan struct{})}
	p.c2p.buf, p.p2c.buf = p.c2p.small[:], p.p2c.small[:]
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped.Load() {
		_ = syscall.Close(cfd)
		_ = syscall.Close(pfd)
		return nil, errRelayLoopStopped
	}
	if n := len(l.free); n > 0 {
		p.slot = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		p.slot = uint32(len(l.slots))
		l.slots = append(l.slots, nil)
		l.gens = append(l.gens, 0)
	}
	l.gens[p.slot] = (l.gens[p.slot] + 1) & (1<<31 - 1) // an event carries 31 bits of it
	p.gen = l.gens[p.slot]
	l.slots[p.slot] = p
	for side, fd := range []int{cfd, pfd} {
		ev := p.event(int32(side))
		if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			l.end(p, err) // closes both descriptors
			return nil, os.NewSyscallError("epoll_ctl", err)
		}
	}
	return p, nil
}

// event is what p's registration of its client socket (side 0) or pod socket (side 1) asks for
// and carries: edge-triggered, and the pair's slot, generation and side.
func (p *relayPair) event(side int32) syscall.EpollEvent {
	return syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET, Fd: int32(p.slot), Pad: int32(p.gen<<1) | side}
}

// run relays one half (client to pod with c2p) until it ends: what it wrote and why it ended
// (nil at the end of its source, as for io.Copy).
func (p *relayPair) run(c2p bool) (int64, error) {
	h := &p.p2c
	if c2p {
		h = &p.c2p
	}
	l := p.l
	l.mu.Lock()
	if p.closing.Load() {
		l.end(p, errRelayClosed)
	}
	if !h.done {
		h.active = true
		wsBufBytes.Add(wsSmallBuf)
		// What arrived before, whose readiness the loop has seen already, is relayed by the
		// loop, in turns like the rest: modifying the registration makes epoll check the socket
		// again and report it if it is ready (an edge-triggered re-arm). Relaying it here, under
		// the loop's lock, would hold up every WebSocket on the loop for as long as a client that
		// floods right after the upgrade keeps its socket full.
		ev := p.event(1) // the pod's socket, which p2c reads
		if c2p {
			ev = p.event(0)
		}
		if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_MOD, h.from, &ev); err != nil {
			l.end(p, os.NewSyscallError("epoll_ctl", err))
		}
	}
	l.mu.Unlock()
	<-h.doneC
	l.mu.Lock()
	defer l.mu.Unlock()
	return h.written, h.err
}

// close ends p: both halves end at the next event on either socket, which the caller then
// brings about by shutting a socket down.
func (p *relayPair) close() { p.closing.Store(true) }

// finish ends h with err.
func (h *relayHalf) finish(err error) {
	h.done, h.err, h.rest = true, err, nil
	h.release()
	if h.active {
		wsBufBytes.Add(-wsSmallBuf)
	}
	close(h.doneC)
}

// flush writes what it can of rest; an error ends the half.
func (h *relayHalf) flush() {
	m, _, err := writeFD(h.to, h.rest)
	if m > 0 {
		h.sends++
	}
	h.written += int64(m)
	h.rest = h.rest[m:]
	if err != nil {
		h.finish(err)
		return
	}
	if len(h.rest) == 0 {
		h.rest = nil
	}
}

// pump reads from and writes to until from is empty, to's send buffer is full, either side
// fails or ends (copyRaw's rawCopy.read, without any wait), or, with turn > 0, it has relayed
// turn bytes: then the loop serves the half again after its batch (again).
func (h *relayHalf) pump(turn int) {
	relayed := 0
	for {
		if turn > 0 && relayed >= turn {
			h.readable = true
			if !h.queued {
				h.queued = true
				h.p.l.again = append(h.p.l.again, h)
			}
			return
		}
		n, empty, drained, short, err := h.readChunk(uintptr(h.from))
		switch {
		case empty:
			h.readable = false
			h.release()
			return
		case err != nil:
			h.finish(err)
			return
		case n == 0:
			h.finish(nil) // the other end closed its side
			return
		}
		// After an event that said the peer ended its side, a short read may have taken the
		// end with the last bytes (ended): only a read that finds nothing says empty then.
		emptied := drained || short && !h.ended
		relayed += n
		h.rest = h.buf[:n]
		h.flush()
		if h.done {
			return
		}
		if len(h.rest) > 0 {
			// to is full: read on once it is writable (handle), keeping the buffer.
			h.readable = true
			return
		}
		if emptied {
			// The socket is empty: the next bytes raise an event.
			h.readable = false
			h.release()
			return
		}
	}
}

// dupFD is a close-on-exec duplicate of raw's descriptor, made while raw keeps it open.
func dupFD(raw syscall.RawConn) (int, error) {
	nfd, derr := -1, error(nil)
	err := raw.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = os.NewSyscallError("fcntl", e)
			return
		}
		nfd = int(r)
	})
	if err == nil {
		err = derr
	}
	return nfd, err
}

// shutdownRaw shuts raw's socket down (both directions), if it is still open.
func shutdownRaw(raw syscall.RawConn) {
	_ = raw.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
}

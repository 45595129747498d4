package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// holdPod answers /hold only when released, /big with 1 MiB, anything else with its path.
type holdPod struct {
	arrived chan string
	release chan struct{}
	gone    atomic.Int64 // /hold requests whose context ended before their release
}

func (h *holdPod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/hold"):
		h.arrived <- r.URL.Path
		select {
		case <-h.release:
		case <-r.Context().Done():
			h.gone.Add(1)
			return
		}
	case strings.HasSuffix(r.URL.Path, "/big"):
		w.Header().Set("Content-Length", fmt.Sprint(1<<20))
		_, _ = w.Write([]byte(strings.Repeat("b", 1<<20)))
		return
	}
	_, _ = io.WriteString(w, "answer to "+r.URL.Path)
}

func leanGet(path string, extra ...string) string {
	return "GET /ws/jane/demo/" + path + " HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n" + strings.Join(extra, "") + "\r\n"
}

// readAnswer reads one answer within 20 s (a connection left waiting would wait out the proxy's
// 2 min idle timeout) and returns its status and body.
func readAnswer(c net.Conn, br *bufio.Reader) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return "", err
	}
	if len(b) > 64 {
		return fmt.Sprintf("%d %d bytes", res.StatusCode, len(b)), nil
	}
	return fmt.Sprintf("%d %s", res.StatusCode, b), nil
}

// TestLeanServerWaitsOnTheClientSocket: a TCP connection is served inside one RawConn.Read, and
// after an answer the loop waits for the next request instead of reading first. Nothing may hang:
// a request that arrives before the wait (while the previous one is served), pipelined requests,
// headers arriving in pieces, large answers and headers, a proxy that stops while a connection
// waits, and a client that leaves while its request waits for a slow pod.
func TestLeanServerWaitsOnTheClientSocket(t *testing.T) {
	pod := &holdPod{arrived: make(chan string, 16), release: make(chan struct{})}
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, addr := startProxy(t, Options{}, host, port, func(p *Proxy) { p.watchAfter = 20 * time.Millisecond })
	s := p.lean.Load()

	dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	expect := func(t *testing.T, c net.Conn, br *bufio.Reader, want string) {
		t.Helper()
		got, err := readAnswer(c, br)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		if got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	arrived := func(t *testing.T) {
		t.Helper()
		select {
		case <-pod.arrived:
		case <-time.After(20 * time.Second):
			t.Fatal("the held request did not reach the pod within 20s")
		}
	}

	t.Run("lockstep requests: a wait without a read after each answer", func(t *testing.T) {
		rawConns, waits := s.rawConns.Load(), s.waits.Load()
		c, br := dial(t)
		const n = 20
		for i := range n {
			if _, err := io.WriteString(c, leanGet(fmt.Sprint("r", i))); err != nil {
				t.Fatal(err)
			}
			expect(t, c, br, fmt.Sprintf("200 answer to /r%d", i))
		}
		// (startProxy's own probe connection may be counted here too.)
		if got := s.rawConns.Load() - rawConns; got < 1 {
			t.Errorf("%d connections served inside RawConn.Read, want at least 1", got)
		}
		// The read of each request emptied the socket, so after each of the first n-1 answers
		// the loop waited without reading (the count may include other connections' waits: none
		// run here).
		if got := s.waits.Load() - waits; got < n-1 {
			t.Errorf("%d waits without a read before them for %d requests, want at least %d", got, n, n-1)
		}
	})

	t.Run("a request that arrives while the previous one is served", func(t *testing.T) {
		c, br := dial(t)
		if _, err := io.WriteString(c, leanGet("hold")); err != nil {
			t.Fatal(err)
		}
		arrived(t)
		// Sent before the answer: its bytes are in the socket before the loop waits.
		if _, err := io.WriteString(c, leanGet("second")); err != nil {
			t.Fatal(err)
		}
		pod.release <- struct{}{}
		expect(t, c, br, "200 answer to /hold")
		expect(t, c, br, "200 answer to /second")
		// The start of a request before the answer, the rest after it.
		if _, err := io.WriteString(c, leanGet("hold")); err != nil {
			t.Fatal(err)
		}
		arrived(t)
		third := leanGet("third")
		if _, err := io.WriteString(c, third[:10]); err != nil {
			t.Fatal(err)
		}
		pod.release <- struct{}{}
		expect(t, c, br, "200 answer to /hold")
		if _, err := io.WriteString(c, third[10:]); err != nil {
			t.Fatal(err)
		}
		expect(t, c, br, "200 answer to /third")
	})

	t.Run("pipelined requests in one write", func(t *testing.T) {
		c, br := dial(t)
		if _, err := io.WriteString(c, leanGet("p1")+leanGet("big")+leanGet("p2")+leanGet("p3")); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"200 answer to /p1", fmt.Sprintf("200 %d bytes", 1<<20), "200 answer to /p2", "200 answer to /p3"} {
			expect(t, c, br, want)
		}
	})

	t.Run("headers in pieces", func(t *testing.T) {
		c, br := dial(t)
		req := leanGet("pieces", "X-Filler: "+strings.Repeat("f", 3000)+"\r\n")
		for i := 0; i < len(req); i += 500 {
			if _, err := io.WriteString(c, req[i:min(i+500, len(req))]); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, c, br, "200 answer to /pieces")
		// One byte per write.
		req = leanGet("bytes")
		for i := range len(req) {
			if _, err := io.WriteString(c, req[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, c, br, "200 answer to /bytes")
	})

	t.Run("large answers and headers", func(t *testing.T) {
		handed := s.handedOff.Load()
		c, br := dial(t)
		for i := range 3 {
			if _, err := io.WriteString(c, leanGet("big")); err != nil {
				t.Fatal(err)
			}
			expect(t, c, br, fmt.Sprintf("200 %d bytes", 1<<20))
			// Headers of nearly the whole 8 KiB read buffer.
			big := leanGet(fmt.Sprint("h", i), "X-Filler: "+strings.Repeat("f", leanHeaderBuf-200)+"\r\n")
			if _, err := io.WriteString(c, big); err != nil {
				t.Fatal(err)
			}
			expect(t, c, br, fmt.Sprintf("200 answer to /h%d", i))
		}
		if got := s.handedOff.Load() - handed; got != 0 {
			t.Errorf("%d connections handed to net/http, want 0: this test is about the lean loop", got)
		}
	})

	for _, reset := range []bool{false, true} {
		name := "a client that closes while the pod is slow"
		if reset {
			name = "a client that resets the connection while the pod is slow"
		}
		t.Run(name, func(t *testing.T) {
			gone := pod.gone.Load()
			c, _ := dial(t)
			if _, err := io.WriteString(c, leanGet("hold")); err != nil {
				t.Fatal(err)
			}
			arrived(t)
			if reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			_ = c.Close()
			for deadline := time.Now().Add(20 * time.Second); pod.gone.Load() == gone; {
				if time.Now().After(deadline) {
					t.Fatal("the pod's request was not cancelled within 20s of the client going away")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}

	t.Run("a client that leaves after the watch has backed off", func(t *testing.T) {
		// Five peeks: the gap to the next one is 16 ticks now; the client's leaving is still
		// noticed at the next peek.
		gone, polls := pod.gone.Load(), s.polls.Load()
		c, _ := dial(t)
		if _, err := io.WriteString(c, leanGet("hold")); err != nil {
			t.Fatal(err)
		}
		arrived(t)
		for deadline := time.Now().Add(20 * time.Second); s.polls.Load()-polls < 5; {
			if time.Now().After(deadline) {
				t.Fatalf("%d peeks at the slow request's client within 20s, want 5", s.polls.Load()-polls)
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = c.Close()
		for deadline := time.Now().Add(20 * time.Second); pod.gone.Load() == gone; {
			if time.Now().After(deadline) {
				t.Fatal("the pod's request was not cancelled within 20s of the client going away")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	t.Run("a client gone while its 1 MiB answer is written", func(t *testing.T) {
		// The answer's writes (write(2) on the socket) fail with EPIPE or ECONNRESET: the
		// connection ends, the process does not (SIGPIPE), and the next client is served.
		for _, reset := range []bool{false, true} {
			c, _ := dial(t)
			if _, err := io.WriteString(c, leanGet("big")+leanGet("big")); err != nil {
				t.Fatal(err)
			}
			if reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			_ = c.Close()
		}
		c, br := dial(t)
		if _, err := io.WriteString(c, leanGet("still")); err != nil {
			t.Fatal(err)
		}
		expect(t, c, br, "200 answer to /still")
	})

	t.Run("a client that leaves pipelined bytes while the pod is slow", func(t *testing.T) {
		// The watch ends when the next request is already there; the request is still answered.
		c, br := dial(t)
		if _, err := io.WriteString(c, leanGet("hold")+leanGet("after")); err != nil {
			t.Fatal(err)
		}
		arrived(t)
		pod.release <- struct{}{}
		expect(t, c, br, "200 answer to /hold")
		expect(t, c, br, "200 answer to /after")
	})
}

// TestLeanServerStopWakesAWaitingConnection: a connection waiting for its next request inside
// its RawConn.Read is closed when the proxy stops.
func TestLeanServerStopWakesAWaitingConnection(t *testing.T) {
	pod := &holdPod{arrived: make(chan string, 1), release: make(chan struct{})}
	backend := httptest.NewServer(pod)
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	var (
		c    net.Conn
		lean *leanServer
	)
	t.Run("serve", func(t *testing.T) {
		p, addr := startProxy(t, Options{}, host, port) // stopped when this subtest ends
		lean = p.lean.Load()
		var err error
		c, err = net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if _, err := io.WriteString(c, leanGet("one")); err != nil {
			t.Fatal(err)
		}
		if got, err := readAnswer(c, br); err != nil || got != "200 answer to /one" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	if c == nil {
		return
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if b, err := io.ReadAll(c); err != nil {
		t.Fatalf("the waiting connection was not closed within 20s of the proxy stopping (read %q): %v", b, err)
	}
	// Woken by the stop itself, not closed when the stop's grace ran out.
	if n := lean.forced.Load(); n != 0 {
		t.Fatalf("%d connections were closed only after the stop's grace ran out; want the waiting one woken at once", n)
	}
}

// TestWatchBacksOff: a slow request on a connection that is peeked at is peeked at the first
// tick it is slow (2 to 3 ticks after it started), then after 1, 2, 4 and 8 ticks, then every 16;
// a new request starts over; a connection watched by a read (not peeked at) is due at every tick
// from then on (startWatch starts its one read once).
func TestWatchBacksOff(t *testing.T) {
	due := func(lc *leanConn, since, from, to int64) []int64 {
		var ks []int64
		for k := from; k <= to; k++ {
			if lc.watchDue(k, since) {
				ks = append(ks, k)
			}
		}
		return ks
	}
	peeked := &leanConn{}
	peeked.r.raw = fakeRawConn{}
	if got, want := due(peeked, 5, 1, 100), []int64{7, 8, 10, 14, 22, 38, 54, 70, 86}; !reflect.DeepEqual(got, want) {
		t.Errorf("peeks at ticks %v, want %v", got, want)
	}
	if got, want := due(peeked, 101, 101, 110), []int64{103, 104, 106, 110}; !reflect.DeepEqual(got, want) {
		t.Errorf("the next request: peeks at ticks %v, want %v", got, want)
	}
	if got := due(peeked, 0, 1, 50); got != nil {
		t.Errorf("no request: peeks at ticks %v", got)
	}
	read := &leanConn{}
	if got, want := due(read, 5, 1, 10), []int64{7, 8, 9, 10}; !reflect.DeepEqual(got, want) {
		t.Errorf("a connection watched by a read: due at ticks %v, want %v", got, want)
	}
}

// fakeRawConn stands for a socket in TestWatchBacksOff (never used).
type fakeRawConn struct{}

func (fakeRawConn) Control(func(uintptr)) error    { return nil }
func (fakeRawConn) Read(func(uintptr) bool) error  { return nil }
func (fakeRawConn) Write(func(uintptr) bool) error { return nil }

// TestReusedHeadersAreBounded: what a connection keeps for its next request is emptied, and a
// header map or value buffer grown by a request or answer with many headers is dropped rather
// than kept while the connection idles.
func TestReusedHeadersAreBounded(t *testing.T) {
	small := http.Header{"A": {"1"}}
	if h := reuseHeader(small); h == nil || len(h) != 0 {
		t.Errorf("a small header map: got %v, want it kept and empty", h)
	}
	big := http.Header{}
	for i := range maxKeptHeaders + 1 {
		big[fmt.Sprint("X-", i)] = []string{"1"}
	}
	if h := reuseHeader(big); h != nil {
		t.Errorf("a header map of %d keys was kept", maxKeptHeaders+1)
	}
	vals := make([]string, 3, 8)
	vals[0], vals[1], vals[2] = "a", "b", "c"
	if v := reuseVals(vals); len(v) != 0 || cap(v) != 8 || vals[0] != "" {
		t.Errorf("a small value buffer: got len %d cap %d, first %q; want it kept, empty, its strings released", len(v), cap(v), vals[0])
	}
	if v := reuseVals(make([]string, 10, maxKeptHeaders+1)); v != nil {
		t.Errorf("a value buffer of capacity %d was kept", maxKeptHeaders+1)
	}
}

// TestLargeRawAnswerLinesAreNotKept: the buffer a connection copies an answer's header lines
// into (the raw answer) is dropped after an answer whose lines outgrew maxKeptRawLines, not kept
// while the connection idles.
func TestLargeRawAnswerLinesAreNotKept(t *testing.T) {
	big := strings.Repeat("b", maxKeptRawLines+1000)
	// The answer in one write: net/http's server wrote a head over its 4 KiB buffer in two, and
	// the head not whole in the transport's buffer at once is read by http.ReadResponse, not
	// raw (the test failed 4 times in 100).
	backend := startHostile(t, func(w io.Writer) error {
		_, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Big: "+big+"\r\nContent-Length: 2\r\n\r\nok")
		return err
	})
	host, port := backend.addr()
	p, addr := startProxy(t, Options{}, host, port)
	c := dialProxy(t, addr)
	if _, err := io.WriteString(c, "GET /ws/jane/demo/x HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Big") != big {
		t.Fatalf("answer %d with X-Big of %d bytes, want 200 with %d", res.StatusCode, len(res.Header.Get("X-Big")), len(big))
	}
	s := p.lean.Load()
	var lc *leanConn
	s.mu.Lock()
	for k := range s.conns {
		lc = k
	}
	s.mu.Unlock()
	if lc == nil {
		t.Fatal("no lean connection")
	}
	// The connection's buffers are read once it has ended (its end, under s.mu, is the sync).
	_ = c.Close()
	waitFor(t, "the connection's end", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, open := s.conns[lc]
		return !open
	})
	if lc.rawAns.length != 2 {
		t.Fatalf("the answer did not go raw (length %d): the test tests nothing", lc.rawAns.length)
	}
	if lc.s.served.Load() != 1 || lc.rawAns.lines != nil {
		t.Errorf("after %d requests the connection kept %d bytes of answer lines (capacity %d), want none past %d",
			lc.s.served.Load(), len(lc.rawAns.lines), cap(lc.rawAns.lines), maxKeptRawLines)
	}
}

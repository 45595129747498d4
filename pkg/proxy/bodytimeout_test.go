package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// bodyPod is a pod that reads each request's whole body and answers with its length; open counts
// the connections it holds.
func bodyPod(t *testing.T) (host, port string, open *atomic.Int64) {
	t.Helper()
	open = new(atomic.Int64)
	host, port, _ = net.SplitHostPort(podEvery(t, func(c net.Conn, br *bufio.Reader) {
		open.Add(1)
		defer open.Add(-1)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			n, err := io.Copy(io.Discard, req.Body)
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%d", len(fmt.Sprint(n)), n); err != nil {
				return
			}
		}
	}))
	return host, port, open
}

// TestAStalledRequestBodyEndsTheRequest: a client that announces a body and then stops sending
// (a byte a minute, or none) held a goroutine and a pod connection for as long as it liked: only
// the request headers had a timeout. Now a read of the body that waits RequestBodyTimeout without
// a byte ends the request: the client gets 408 and the pod connection is closed, on the fast path,
// through ReverseProxy, for an upload over net/http's Transport, and on net/http's server alone.
// The rest of a body nobody reads (an answer of 401), which net/http reads itself before it sends
// the answer, gets one timeout too. A body that keeps coming, however slowly, arrives whole.
func TestAStalledRequestBodyEndsTheRequest(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		opts   Options
		length int
	}{
		{"fast path", Options{}, maxSyncBody},
		{"ReverseProxy", Options{NoFastPath: true}, maxSyncBody},
		{"an upload over net/http's Transport", Options{}, 1 << 20},
		{"net/http's server", Options{StandardServer: true}, maxSyncBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, port, open := bodyPod(t)
			tc.opts.RequestBodyTimeout = timeout
			_, addr := startProxy(t, tc.opts, host, port)
			c := dialProxy(t, addr)
			br := bufio.NewReader(c)
			head := fmt.Sprintf("POST /ws/jane/demo/upload HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\nContent-Length: %d\r\n\r\n", tc.length)
			// Taken before the write: the proxy's wait for more of the body starts after it
			// reads this byte, so no answer can come sooner than timeout after this instant.
			started := time.Now()
			if _, err := io.WriteString(c, head+"x"); err != nil {
				t.Fatal(err)
			}
			got, err := readWholeAnswer(br)
			want := fmt.Sprintf("408 408 Request Timeout: no byte of the request body arrived for %s\n", timeout)
			if err != nil || got != want {
				t.Fatalf("answer %q, %v; want %q", got, err, want)
			}
			if waited := time.Since(started); waited < timeout {
				t.Fatalf("answered after %v, before the timeout of %v", waited, timeout)
			}
			_ = c.SetReadDeadline(time.Now().Add(waitBound))
			if b, err := io.ReadAll(br); err != nil {
				t.Fatalf("the connection was not closed after the 408 (read %q): %v", b, err)
			}
			waitFor(t, "the pod connection closed", func() bool { return open.Load() == 0 })
		})
	}
	t.Run("a body nobody reads", func(t *testing.T) {
		// Refused before anything reads the body: net/http reads the rest itself before it
		// sends the 401, and that read is bounded too.
		host, port, _ := bodyPod(t)
		_, addr := startProxy(t, Options{RequestBodyTimeout: timeout}, host, port)
		c := dialProxy(t, addr)
		if _, err := io.WriteString(c, "POST /ws/jane/demo/upload HTTP/1.1\r\nHost: proxy.example\r\nContent-Length: 1000\r\n\r\nx"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != http.StatusUnauthorized || !res.Close {
			t.Fatalf("answer %v, %v; want 401 and the connection closed", res, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(waitBound))
		if b, err := io.ReadAll(br); err != nil {
			t.Fatalf("the connection was not closed after the 401 (read %q): %v", b, err)
		}
	})
	t.Run("a slow body that keeps coming", func(t *testing.T) {
		// Its own, longer timeout: a byte every gap must never be taken for a stall, even when
		// a loaded machine holds the writer (or the proxy) back for a second or more; the whole
		// body still takes longer than one timeout, so a timeout that bounded the whole body
		// (rather than each wait for a byte) would end it.
		const (
			slowTimeout = 2 * time.Second
			gap         = 100 * time.Millisecond
			n           = 25 // n*gap > slowTimeout
		)
		host, port, _ := bodyPod(t)
		_, addr := startProxy(t, Options{RequestBodyTimeout: slowTimeout}, host, port)
		c := dialProxy(t, addr)
		started := time.Now()
		if _, err := fmt.Fprintf(c, "POST /ws/jane/demo/upload HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\nContent-Length: %d\r\n\r\n", n); err != nil {
			t.Fatal(err)
		}
		for range n {
			time.Sleep(gap)
			if _, err := io.WriteString(c, "x"); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := readWholeAnswer(bufio.NewReader(c)); err != nil || got != fmt.Sprintf("200 %d", n) {
			t.Fatalf("answer %q, %v; want 200 %d", got, err, n)
		}
		if took := time.Since(started); took <= slowTimeout {
			t.Fatalf("the body took %v, not longer than the timeout of %v: the test proves nothing", took, slowTimeout)
		}
	})
}

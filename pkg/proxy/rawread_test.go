package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawPod is a loopback pod written by hand: serve gets every request's head on the one
// connection the transport opens and writes what it likes.
func rawPod(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c, bufio.NewReader(c))
	}()
	return ln.Addr().String()
}

// podEvery is a pod at the returned address that serves every connection, each on a goroutine
// of its own with a 30 s deadline (rawPod serves one).
func podEvery(tb testing.TB, serve func(c net.Conn, br *bufio.Reader)) string {
	tb.Helper()
	return acceptEvery(tb, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		serve(c, bufio.NewReader(c))
	})
}

// acceptEvery listens on a loopback port until the test ends and calls serve with each connection
// on a goroutine of its own, closing it when serve returns; it returns the address.
func acceptEvery(tb testing.TB, serve func(c net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// readHead reads one request's headers (the transport's GETs have no body).
func readHead(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if line == "\r\n" {
			return b.String(), nil
		}
	}
}

// get sends a GET through tr with a bounded wait: a lost readiness notice would hang it.
func get(t *testing.T, tr http.RoundTripper, url string) (string, error) {
	t.Helper()
	_, body, err := do(tr, boundedCtx(t), http.MethodGet, url, nil, nil)
	return body, err
}

// The answer's first read writes the request (rawread.go) on a TCP connection to the pod; these
// cases are what could go wrong with a read that does not try the socket first.
func TestSyncTransportWritesTheRequestInTheAnswersRead(t *testing.T) {
	t.Run("the pooled connection uses it", func(t *testing.T) {
		addr := rawPod(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readHead(br); err == nil {
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
			}
		})
		tr, _ := newTestTransport(t, time.Minute)
		if body, err := get(t, tr, "http://"+addr+"/"); err != nil || body != "ok" {
			t.Fatalf("answer %q, %v; want ok", body, err)
		}
		pc, ok := tr.get(addr, false)
		if !ok {
			t.Fatal("no idle connection after the answer")
		}
		defer pc.close()
		if pc.lr.raw == nil || pc.lr.rawFn == nil {
			t.Fatal("a TCP connection to the pod does not write its requests in the answer's read")
		}
	})
	t.Run("bytes that arrived before the request are read with the answer", func(t *testing.T) {
		read, sent := make(chan struct{}), make(chan struct{})
		addr := rawPod(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readHead(br); err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"))
			// Once the first answer is read (the connection is back in the pool), the start of
			// the next answer, before its request: it lies in the proxy's socket while the next
			// request is written, so its readiness notice comes before the wait.
			<-read
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\n"))
			close(sent)
			if _, err := readHead(br); err != nil {
				return
			}
			_, _ = c.Write([]byte("Content-Length: 6\r\n\r\nsecond"))
		})
		tr, _ := newTestTransport(t, time.Minute)
		if body, err := get(t, tr, "http://"+addr+"/1"); err != nil || body != "first" {
			t.Fatalf("first answer %q, %v", body, err)
		}
		close(read)
		<-sent
		if body, err := get(t, tr, "http://"+addr+"/2"); err != nil || body != "second" {
			t.Fatalf("second answer %q, %v; want second", body, err)
		}
	})
	t.Run("an answer in many pieces", func(t *testing.T) {
		addr := rawPod(t, func(c net.Conn, br *bufio.Reader) {
			for i := 0; i < 3; i++ {
				if _, err := readHead(br); err != nil {
					return
				}
				ans := "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 10\r\n\r\n0123456789"
				for j := range ans {
					if _, err := c.Write([]byte{ans[j]}); err != nil {
						return
					}
				}
			}
		})
		tr, _ := newTestTransport(t, time.Minute)
		for i := 0; i < 3; i++ {
			if body, err := get(t, tr, "http://"+addr+"/"); err != nil || body != "0123456789" {
				t.Fatalf("answer %d: %q, %v", i, body, err)
			}
		}
	})
	t.Run("a pod that closes instead of answering", func(t *testing.T) {
		addr := rawPod(t, func(c net.Conn, br *bufio.Reader) { _, _ = readHead(br) })
		tr, _ := newTestTransport(t, time.Minute)
		if _, err := get(t, tr, "http://"+addr+"/"); err == nil || !strings.Contains(err.Error(), "read response from") {
			t.Fatalf("error %v, want the read of the response named", err)
		}
	})
	t.Run("an answer to a request that went out in part before its last flush", func(t *testing.T) {
		// A slow upload: the headers and most of the body fill the writer and go out, the pod
		// answers at once (it does not read the body), and the body's last byte comes 200 ms
		// later, as from a slow client. The answer's readiness notice came before the last flush:
		// writing that flush inside the answer's read would forget it and wait out the header
		// timeout.
		answered := make(chan struct{})
		addr := rawPod(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readHead(br); err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"))
			close(answered)
			_, _ = io.Copy(io.Discard, br)
		})
		tr, _ := newTestTransport(t, 5*time.Second)
		const size = 16 << 10
		body := io.MultiReader(bytes.NewReader(make([]byte, size-1)), readerFunc(func(p []byte) (int, error) {
			select {
			case <-answered:
			case <-time.After(10 * time.Second):
				return 0, errors.New("the pod did not answer the request's headers within 10s")
			}
			time.Sleep(200 * time.Millisecond) // the slow client's last byte
			p[0] = 'x'
			return 1, io.EOF
		}))
		req, err := http.NewRequestWithContext(boundedCtx(t), http.MethodPost, "http://"+addr+"/upload", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		start := time.Now()
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("error %v after %s, want the pod's 401", err, time.Since(start).Round(time.Millisecond))
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", res.StatusCode)
		}
	})
	t.Run("the request header timeout ends the wait", func(t *testing.T) {
		got := make(chan string, 1)
		addr := rawPod(t, func(c net.Conn, br *bufio.Reader) {
			h, _ := readHead(br)
			got <- h
			_, _ = br.ReadByte() // until the proxy closes the connection
		})
		tr, _ := newTestTransport(t, 100*time.Millisecond)
		var ne net.Error
		if _, err := get(t, tr, "http://"+addr+"/slow"); err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("error %v, want a timeout", err)
		}
		if h := <-got; !strings.HasPrefix(h, "GET /slow HTTP/1.1\r\n") {
			t.Fatalf("the pod got %q, want the request", h)
		}
	})
}

type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

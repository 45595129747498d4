package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReusedBuffersStayWithTheirConnection: every client connection keeps its request's header
// map and values, and the pod's answer is parsed into buffers of that connection (forward.go);
// the fast path's per-request state comes from a pool. Many connections at once, each sending
// its own requests (some pipelined, with a varying number of headers each way), must each get
// exactly the answers to their own requests: nothing of one connection's request or answer may
// reach another, or a later request of the same connection.
func TestReusedBuffersStayWithTheirConnection(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Id")
		n, _ := strconv.Atoi(r.Header.Get("X-Extra"))
		h := w.Header()
		h.Set("X-Echo", id)
		for i := 0; i < n; i++ {
			h.Set(fmt.Sprintf("X-Extra-%d", i), id)
		}
		// Headers of the request the pod saw, so the client checks them too.
		h.Set("X-Seen-Extra", strconv.Itoa(len(r.Header.Values("X-Req-Extra"))))
		body := "body of " + id
		h.Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
	}))
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	p, addr := startProxy(t, Options{}, host, port)

	const conns, perConn = 8, 60
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- clientRequests(addr, c, perConn)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if served := p.lean.Load().served.Load(); served < conns*perConn {
		t.Errorf("the lean loop served %d requests, want at least %d", served, conns*perConn)
	}
}

// clientRequests sends perConn requests on one connection, two at a time every third time
// (pipelined), and checks every answer is its own request's.
func clientRequests(addr string, conn, perConn int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	request := func(i int) string {
		id := fmt.Sprintf("c%d-r%d", conn, i)
		var b strings.Builder
		fmt.Fprintf(&b, "GET /ws/jane/demo/%s HTTP/1.1\r\nHost: proxy.example\r\nAuthorization: Bearer bench\r\nX-Id: %s\r\nX-Extra: %d\r\n", id, id, (conn+i)%7)
		for j := 0; j < (conn*3+i)%5; j++ {
			fmt.Fprintf(&b, "X-Req-Extra: %s-%d\r\n", id, j)
		}
		b.WriteString("\r\n")
		return b.String()
	}
	check := func(i int) error {
		id := fmt.Sprintf("c%d-r%d", conn, i)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("%s: %v", id, err)
		}
		b, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if err != nil {
			return fmt.Errorf("%s: body: %v", id, err)
		}
		extra := (conn + i) % 7
		if res.StatusCode != http.StatusOK || string(b) != "body of "+id || res.Header.Get("X-Echo") != id {
			return fmt.Errorf("%s: got %d %q, X-Echo %q", id, res.StatusCode, b, res.Header.Get("X-Echo"))
		}
		if want := strconv.Itoa((conn*3 + i) % 5); res.Header.Get("X-Seen-Extra") != want {
			return fmt.Errorf("%s: the pod saw %s X-Req-Extra headers, want %s", id, res.Header.Get("X-Seen-Extra"), want)
		}
		n := 0
		for k, vv := range res.Header {
			if strings.HasPrefix(k, "X-Extra-") {
				n++
				if len(vv) != 1 || vv[0] != id {
					return fmt.Errorf("%s: %s: %q", id, k, vv)
				}
			}
		}
		if n != extra {
			return fmt.Errorf("%s: %d X-Extra- headers, want %d: %v", id, n, extra, res.Header)
		}
		return nil
	}
	for i := 0; i < perConn; i++ {
		raw := request(i)
		pipelined := i%3 == 0 && i+1 < perConn
		if pipelined {
			raw += request(i + 1)
		}
		if _, err := io.WriteString(c, raw); err != nil {
			return err
		}
		if err := check(i); err != nil {
			return err
		}
		if pipelined {
			i++
			if err := check(i); err != nil {
				return err
			}
		}
	}
	return nil
}

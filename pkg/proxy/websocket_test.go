package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// answeringPod is a pod that answers every request on a connection of its own with answer and
// then holds the connection until the proxy closes it (an upgraded one echoes what it gets);
// open counts the connections it holds.
func answeringPod(t *testing.T, answer string) (host, port string, open *atomic.Int64) {
	t.Helper()
	open = new(atomic.Int64)
	host, port, _ = net.SplitHostPort(podEvery(t, func(c net.Conn, br *bufio.Reader) {
		open.Add(1)
		defer open.Add(-1)
		if _, err := readHead(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, answer); err != nil {
			return
		}
		_, _ = io.Copy(c, br) // until the proxy closes the connection
	}))
	return host, port, open
}

// readWholeAnswer reads one answer and returns its status and whole body (readAnswer shortens
// long ones).
func readWholeAnswer(br *bufio.Reader) (string, error) {
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	return fmt.Sprintf("%d %s", res.StatusCode, b), err
}

// TestASwitchReverseProxyWouldRefuseIsRefusedBeforeItIsTracked: a pod that answers a WebSocket
// handshake with a 101 that does not switch to the protocol asked for (no Upgrade at all, another
// protocol, no "upgrade" in Connection, a protocol that is not printable ASCII) gets the client a
// 502 that says so, and leaves neither a tracked WebSocket nor a pod connection behind, on every
// server and transport. ReverseProxy refuses such a switch itself, but after ModifyResponse had
// tracked the answer's connection and without closing it: each entry stayed until the pod was
// deleted and counted as an open WebSocket, so the workspace never looked idle. A switch to the
// protocol asked for, in another case, still goes through.
func TestASwitchReverseProxyWouldRefuseIsRefusedBeforeItIsTracked(t *testing.T) {
	const handshakes = 50
	handshake := leanGet("ws", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
	for _, tc := range []struct {
		name, answer, want string
	}{
		{"a bare 101", "HTTP/1.1 101 Switching Protocols\r\n\r\n",
			`502 502 Bad Gateway: the workspace pod switched to protocol "" when "websocket" was asked for` + "\n"},
		{"another protocol", "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
			`502 502 Bad Gateway: the workspace pod switched to protocol "h2c" when "websocket" was asked for` + "\n"},
		{"an Upgrade that Connection does not name", "HTTP/1.1 101 Switching Protocols\r\nConnection: keep-alive\r\nUpgrade: websocket\r\n\r\n",
			`502 502 Bad Gateway: the workspace pod switched to protocol "" when "websocket" was asked for` + "\n"},
		{"a protocol that is not printable ASCII", "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websöcket\r\n\r\n",
			`502 502 Bad Gateway: the workspace pod switched to protocol "websöcket" when "websocket" was asked for` + "\n"},
		{"the protocol asked for, in another case", "HTTP/1.1 101 Switching Protocols\r\nConnection: keep-alive, upgrade\r\nUpgrade: WebSocket\r\n\r\n",
			"101 "},
	} {
		for _, srv := range []struct {
			name string
			opts Options
		}{
			{"lean loop and net/http", Options{}},
			{"net/http's server", Options{StandardServer: true}},
			{"net/http's Transport", Options{StandardTransport: true}},
		} {
			t.Run(tc.name+"/"+srv.name, func(t *testing.T) {
				host, port, open := answeringPod(t, tc.answer)
				p, addr := startProxy(t, srv.opts, host, port)
				for i := 0; i < handshakes; i++ {
					c := dialProxy(t, addr)
					if _, err := io.WriteString(c, handshake); err != nil {
						t.Fatal(err)
					}
					got, err := readWholeAnswer(bufio.NewReader(c))
					if err != nil || got != tc.want {
						t.Fatalf("handshake %d: %q, %v; want %q", i, got, err, tc.want)
					}
					_ = c.Close()
				}
				waitFor(t, "no WebSocket tracked and no pod connection open", func() bool {
					return p.OpenWebSockets("uid-lean") == 0 && open.Load() == 0
				})
			})
		}
	}
}

// TestAnUpgradedPodConnectionLeavesTheRegistryWhenItCloses: the registry's entry of a WebSocket
// lives as long as its pod connection, whatever closes that connection. ReverseProxy gives up on
// a switch it cannot complete (here a ResponseWriter that cannot be hijacked) without closing the
// answer's body; the request's context ending then closes the pod connection, and that must
// remove the entry too, or it stays until the pod is deleted.
func TestAnUpgradedPodConnectionLeavesTheRegistryWhenItCloses(t *testing.T) {
	t.Run("closed by the request's context", func(t *testing.T) {
		host, port, open := answeringPod(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		p, err := New(benchAuth{}, Options{BindAddress: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		pod := wsPod("lean", time.Minute, host, true, map[string]string{workspace.AnnWorkspacePort: port})
		pod.CreationTimestamp = metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		p.PodChanged(pod)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://proxy.example/ws/jane/demo/ws", nil)
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		w := &discardWriter{h: http.Header{}} // no Hijack
		p.ServeHTTP(w, req)
		if w.code != http.StatusBadGateway {
			t.Fatalf("status %d, want 502: ReverseProxy cannot switch protocols on this writer", w.code)
		}
		cancel()
		waitFor(t, "no WebSocket tracked and no pod connection open", func() bool {
			return p.OpenWebSockets("uid-lean") == 0 && open.Load() == 0
		})
	})
	t.Run("closed before it was tracked", func(t *testing.T) {
		reg := newConnRegistry(logr.Discard())
		a, _ := tcpPair(t)
		pc := &persistConn{conn: a}
		_ = pc.close()
		reg.track("pod", &upgradedConn{pc: pc}, true)
		if n := reg.count("pod"); n != 0 {
			t.Fatalf("%d tracked, want 0: the connection was closed already", n)
		}
	})
	t.Run("closed by the transport", func(t *testing.T) {
		reg := newConnRegistry(logr.Discard())
		a, _ := tcpPair(t)
		pc := &persistConn{conn: a}
		c := reg.track("pod", &upgradedConn{pc: pc}, true)
		if n := reg.count("pod"); n != 1 {
			t.Fatalf("%d tracked, want 1", n)
		}
		pc.abort() // a cancelled request's canceller, not the body's Close
		if n := reg.count("pod"); n != 0 {
			t.Fatalf("%d tracked after the pod connection closed, want 0", n)
		}
		_ = c.Close() // ReverseProxy's, later: nothing left to remove
		if n := reg.count("pod"); n != 0 {
			t.Fatalf("%d tracked, want 0", n)
		}
	})
}

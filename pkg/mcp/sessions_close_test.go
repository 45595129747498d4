package mcp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

const (
	listCallBody  = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_workspaces","arguments":{}}}`
	getCallBody   = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_workspace","arguments":{"id":"ws-0"}}}`
	pingBody      = `{"jsonrpc":"2.0","id":4,"method":"ping"}`
	goodInitBody  = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	longFollow    = `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"get_workspace_events","arguments":{"id":"ws-0","follow":true,"timeoutSeconds":300},"_meta":{"progressToken":"p"}}}`
	eventsNow     = `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"get_workspace_events","arguments":{"id":"ws-0"}}}`
	shortFollow   = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_workspace_events","arguments":{"id":"ws-0","follow":true,"timeoutSeconds":1}}}`
	rawAPIVersion = "2025-06-18"
)

// TestFailedInitializeClosesNoSession: an initialize the SDK refuses (no params, a protocol
// version that is not a string) still gets an Mcp-Session-Id, and the SDK closes that session
// when the POST ends; the limiter recorded the id anyway, so with a cap of one it closed the
// user's working session to make room for a dead one, and list_workspaces (answered by fastList,
// which trusts the limiter's table) still answered 200 with the user's workspaces on the dead id
// while every other call on it got 404. Now only an initialize that succeeded records its
// session: the working session stays, and the dead id answers 404 to every call.
func TestFailedInitializeClosesNoSession(t *testing.T) {
	ws := newWorkspaceServer(t, nil, func(ws *workspaceServer) { ws.opts.MaxSessionsPerUser = 1 })
	good := &rawClient{t: t, url: ws.srv.URL, user: ws.caller.Subject, version: rawAPIVersion}
	good.initialize()
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":null}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5}}`,
	} {
		bad := &rawClient{t: t, url: ws.srv.URL, user: ws.caller.Subject, version: rawAPIVersion}
		_, _, msg := bad.post(body)
		if bad.session == "" || msg["error"] == nil {
			t.Fatalf("%s answered session %q, %v: the test needs an initialize that fails and is handed a session id", body, bad.session, msg)
		}
		if st, _, msg := good.post(pingBody); st != http.StatusOK || msg["result"] == nil {
			t.Errorf("after the failed initialize %s, the user's only working session answers ping with %d %v: a session that never opened took its place", body, st, msg)
		}
		for _, call := range []string{listCallBody, getCallBody} {
			if st, _, msg := bad.post(call); st != http.StatusNotFound {
				t.Errorf("%.60s on the id of the failed initialize %s answered %d %.120v; want 404 (the SDK closed that session)", call, body, st, msg)
			}
		}
	}
	// The working session still answers through fastList too.
	if st, _, msg := good.post(listCallBody); st != http.StatusOK || msg["result"] == nil {
		t.Errorf("list_workspaces on the working session answered %d %.120v", st, msg)
	}
}

// eventGate is an API server whose next event list, once armed, blocks until released, whatever
// its context says: a call in flight for as long as a test wants.
type eventGate struct {
	corev1client.EventsGetter
	mu      sync.Mutex
	armed   bool          // the next list blocks
	release chan struct{} // closed by open
	entered chan struct{} // closed when the blocked list began
}

// arm makes the next list block until release is closed.
func (g *eventGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
	g.release, g.entered = make(chan struct{}), make(chan struct{})
}

func (g *eventGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release != nil {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}
}

func (g *eventGate) Events(ns string) corev1client.EventInterface {
	return gatedList{g.EventsGetter.Events(ns), g}
}

type gatedList struct {
	corev1client.EventInterface
	g *eventGate
}

func (l gatedList) List(ctx context.Context, o metav1.ListOptions) (*corev1.EventList, error) {
	l.g.mu.Lock()
	armed, release, entered := l.g.armed, l.g.release, l.g.entered
	l.g.armed = false // one list blocks
	l.g.mu.Unlock()
	if !armed {
		return l.EventInterface.List(ctx, o)
	}
	close(entered)
	<-release
	return l.EventInterface.List(context.WithoutCancel(ctx), o)
}

// startPost sends one JSON-RPC message on session ("": none) and returns the answer, whose body
// the caller reads and closes.
func startPost(ctx context.Context, url, session, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer test")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", rawAPIVersion)
	}
	return http.DefaultClient.Do(req)
}

// within waits for ch at most d and reports whether it was closed (or sent on).
func within[T any](ch <-chan T, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestEvictionDoesNotWaitForAFollow: closing a user's least recently used session to make room
// for a new one ran inside the new session's initialize, and the SDK's close waits for the calls
// in flight on the closed session: with a follow of get_workspace_events in flight there, the new
// initialize waited for the follow's end (up to its 300 s), and the follow kept its place among
// the user's follows until then. Now the new initialize is answered while a call of the closed
// session is still in flight (blocked in the API server until the test releases it, so the
// order is proven, not timed), the closed session's follow ends at once and frees the user's only
// follow slot, and the closed session is gone once its last call returned.
func TestEvictionDoesNotWaitForAFollow(t *testing.T) {
	gate := &eventGate{}
	ws := newWorkspaceServer(t, nil, func(ws *workspaceServer) {
		ws.opts.MaxSessionsPerUser = 1
		ws.wrap = func(c corev1client.EventsGetter) corev1client.EventsGetter { gate.EventsGetter = c; return gate }
	})
	ws.addEvent(t, "Scheduled")
	// Runs before the server's Close (cleanups run last first), which waits for every request.
	ctx, cancel := context.WithTimeout(context.Background(), 2*callBound)
	t.Cleanup(func() { gate.open(); cancel() })

	old := &rawClient{t: t, url: ws.srv.URL, user: ws.caller.Subject, version: rawAPIVersion}
	old.initialize()

	// A follow of 300 s in flight on the old session: its first notification arrived.
	resp, err := startPost(ctx, ws.srv.URL, old.session, longFollow)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	followStarted, followEnded := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		started, last := false, ""
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				if !started {
					started = true
					followStarted <- d
				}
				last = d
			}
		}
		followEnded <- last
	}()
	if !within(followStarted, callBound) {
		t.Fatalf("the follow sent no notification within %v", callBound)
	}

	// A call on the old session blocked in the API server until the test releases it.
	gate.arm()
	go func() {
		if resp, err := startPost(ctx, ws.srv.URL, old.session, eventsNow); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	if !within(gate.entered, callBound) {
		t.Fatalf("the call did not reach the API server within %v", callBound)
	}

	// The new session's initialize closes the old session, and is answered while the old
	// session's call is still blocked in the API server (the test has not released it): the
	// SDK's close of the old session, which waits for that call, did not hold it up.
	opened := make(chan string, 1)
	go func() {
		resp, err := startPost(ctx, ws.srv.URL, "", goodInitBody)
		if err != nil {
			opened <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"protocolVersion"`) {
			opened <- fmt.Sprintf("error: %d %.200s", resp.StatusCode, b)
			return
		}
		opened <- resp.Header.Get("Mcp-Session-Id")
	}()
	var session string
	select {
	case session = <-opened:
	case <-time.After(callBound):
		t.Fatalf("the new session's initialize was not answered within %v while a follow and a call were in flight on the session it closed: the close waits for them", callBound)
	}
	if session == "" || strings.HasPrefix(session, "error: ") {
		t.Fatalf("the new session's initialize: %q", session)
	}
	fresh := &rawClient{t: t, url: ws.srv.URL, user: ws.caller.Subject, version: rawAPIVersion, session: session}
	fresh.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	// The old session's follow ended, and its place among the user's follows is free.
	if !within(followEnded, callBound) {
		t.Fatalf("the follow of the closed session still runs %v after its session was closed", callBound)
	}
	g := NewWithT(t)
	g.Eventually(func() string {
		st, _, msg := fresh.post(shortFollow)
		if st != http.StatusOK {
			return fmt.Sprintf("status %d", st)
		}
		if r, _ := msg["result"].(map[string]any); r == nil || r["isError"] == true {
			return fmt.Sprintf("%.200v", msg)
		}
		return ""
	}, callBound, 50*time.Millisecond).Should(BeEmpty(), "the follow of the closed session still holds the user's only follow slot")

	// Once its last call returns, the old session is gone.
	gate.open()
	g.Eventually(func() int {
		st, _, _ := old.post(pingBody)
		return st
	}, callBound, 50*time.Millisecond).Should(Equal(http.StatusNotFound), "the closed session still answers")
	if st, _, msg := fresh.post(pingBody); st != http.StatusOK || msg["result"] == nil {
		t.Errorf("the new session answers ping with %d %v", st, msg)
	}
}

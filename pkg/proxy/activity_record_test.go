package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// patchLog is a client.Writer that only remembers the pods patched (the write itself is tested
// against a real API server in activity_test.go).
type patchLog struct {
	client.Writer
	mu      sync.Mutex
	patched []string
}

func (p *patchLog) Patch(_ context.Context, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.patched = append(p.patched, obj.GetName())
	return nil
}

func (p *patchLog) writes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.patched...)
}

func records(a *activityRecorder) int {
	n := 0
	a.pods.Range(func(any, any) bool { n++; return true })
	return n
}

// TestActivityRecordMadeAtFirstRequest: cached pods get no activity record (most workspaces get
// no request); the first forwarded request makes one from the pod the router holds, with the
// nogoo9/last-activity another replica wrote, so the write interval holds across replicas; a
// later change of the pod updates it, and a pod that is gone gets none.
func TestActivityRecordMadeAtFirstRequest(t *testing.T) {
	now := t0
	w := &patchLog{}
	conns := newConnRegistry(logr.Discard())
	r := newRouter(time.Minute, conns, nil, logr.Discard())
	r.now = func() time.Time { return now }
	a := newActivityRecorder(ActivityOptions{Writer: w, Interval: time.Minute, Now: func() time.Time { return now }}, r.pod, conns, logr.Discard())
	feed := func(p *corev1.Pod) { r.upsert(p); a.observe(p) }
	req, _ := http.NewRequest(http.MethodGet, "http://proxy/ws/jane/demo/", nil)
	key := wsKey{"default", "demo"}

	// Another replica recorded activity 10 s ago.
	pod := wsPod("ws-a", time.Hour, "10.0.0.1", true, map[string]string{workspace.AnnLastActivity: now.Add(-10 * time.Second).Format(time.RFC3339)})
	feed(pod)
	for i := range 50 {
		other := wsPod("ws-other", time.Hour, "10.0.1.1", true, map[string]string{workspace.AnnWorkspacePath: "/ws/jane/o/", workspace.AnnPreviewPath: "-"})
		other.UID = types.UID("uid-other-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		other.Labels[workspace.LabelWorkspaceID] = "o" + string(other.UID)
		feed(other)
	}
	if n := records(a); n != 0 {
		t.Fatalf("%d activity records before any request; want none", n)
	}

	a.touch(key, pod.UID, req)
	if n := records(a); n != 1 {
		t.Fatalf("%d activity records after one request; want 1", n)
	}
	a.flush(context.Background())
	if got := w.writes(); len(got) != 0 {
		t.Fatalf("wrote %v 10 s after another replica's write; want nothing within the interval of 1m0s", got)
	}

	// 51 s later the interval since the other replica's write is over.
	now = now.Add(51 * time.Second)
	a.touch(key, pod.UID, req)
	a.flush(context.Background())
	if got := w.writes(); len(got) != 1 || got[0] != "ws-a" {
		t.Fatalf("writes = %v, want one for ws-a once the interval since the recorded value is over", got)
	}

	// A later write by another replica reaches the record through observe.
	changed := pod.DeepCopy()
	changed.Annotations[workspace.AnnLastActivity] = now.Add(30 * time.Second).Format(time.RFC3339)
	feed(changed)
	now = now.Add(70 * time.Second) // 40 s after that write, 70 s after this replica's
	a.touch(key, pod.UID, req)
	a.flush(context.Background())
	if got := w.writes(); len(got) != 1 {
		t.Fatalf("writes = %v: the record did not take the other replica's later value", got)
	}

	// A deleted pod loses its record, and a request still holding its route makes none.
	r.remove(changed)
	a.forget(changed.UID)
	a.touch(key, pod.UID, req)
	if n := records(a); n != 0 {
		t.Fatalf("%d activity records after the pod was deleted; want none", n)
	}

	// A health check makes the record (a WebSocket opened through it counts while open) but is
	// no activity: nothing is written.
	fresh := wsPod("ws-b", time.Minute, "10.0.0.2", true, nil)
	feed(fresh)
	hc, _ := http.NewRequest(http.MethodGet, "http://proxy/ws/jane/demo/", nil)
	hc.Header.Set(HealthCheckHeader, "1")
	a.touch(key, fresh.UID, hc)
	now = now.Add(time.Hour)
	a.flush(context.Background())
	if n, got := records(a), w.writes(); n != 1 || len(got) != 1 {
		t.Fatalf("after a health check: %d records (want 1), writes %v (want only the earlier one)", n, got)
	}
}

// TestAnAnonymousWebSocketToAPublicPreviewIsNotActivity: an open WebSocket counts as activity
// because it is a person's terminal or editor; one opened anonymously on a public preview could be
// anyone's (an uptime checker, the workspace's own process calling its public URL) and, held open,
// would keep the workspace from ever being culled. The owner's WebSocket, opened after it, counts.
func TestAnAnonymousWebSocketToAPublicPreviewIsNotActivity(t *testing.T) {
	host, port := upgradeEcho(t)
	now := t0
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	w := &patchLog{}
	p, err := New(verifierOnly{}, Options{BindAddress: ":0", Activity: ActivityOptions{Writer: w, Interval: time.Minute, Now: clock}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.transport.CloseIdleConnections()
	pod := podAt("jane", "demo", host, port, true)
	p.PodChanged(pod)
	srv := httptest.NewServer(p)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	upgrade := func(path, token string) net.Conn {
		t.Helper()
		c := dialProxy(t, addr)
		auth := ""
		if token != "" {
			auth = "Authorization: Bearer " + token + "\r\n"
		}
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: proxy.example\r\n"+auth+"Connection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade of %s: %v %v", path, res, err)
		}
		return c
	}

	// The owner's one request makes the pod's record; its activity is written.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ws/jane/demo/", nil)
	req.Header.Set("Authorization", "Bearer good")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	p.activity.flush(context.Background())
	if got := w.writes(); len(got) != 1 {
		t.Fatalf("writes after the owner's request = %v, want one", got)
	}

	// An anonymous WebSocket on the public preview, held open for hours.
	anon := upgrade("/preview/jane/demo/live", "")
	if n := p.OpenWebSockets(string(pod.UID)); n != 1 {
		t.Fatalf("%d WebSockets open to the pod after the anonymous handshake, want 1", n)
	}
	for range 3 {
		advance(2 * time.Hour)
		p.activity.flush(context.Background())
	}
	if got := w.writes(); len(got) != 1 {
		t.Fatalf("an anonymous WebSocket on the public preview wrote activity %d more times, want none", len(got)-1)
	}

	// The owner's WebSocket is a person's: it counts while open, hours after its handshake (the
	// handshake itself, a request, is written first).
	upgrade("/ws/jane/demo/term", "good")
	p.activity.flush(context.Background())
	advance(2 * time.Hour)
	p.activity.flush(context.Background())
	if got := w.writes(); len(got) != 3 {
		t.Fatalf("writes with the owner's WebSocket open = %v, want two more: its handshake and, 2h later, the open WebSocket", got)
	}
	_ = anon.Close()
}

// TestAStoppedPublicPreviewNamesNobody: the page of a stopped workspace says why it was stopped,
// and the reason names people ("stopped by an admin (alice@corp) at ...", or whatever a kubectl
// user wrote in nogoo9/stop-requested). A public preview shows that page to anyone, unauthenticated:
// there it says only that the workspace is stopped. Its owner, on the workspace path, still reads
// the reason. The link to the workspace's page in the UI names its namespace, which the UI
// needs for a workspace outside nogoo9's own (/workspaces/<id> is a page of nogoo9's namespace
// only).
func TestAStoppedPublicPreviewNamesNobody(t *testing.T) {
	const reason = "stopped by an admin (alice@corp) at 2026-01-02T03:04:05Z"
	p, err := New(verifierOnly{}, Options{BindAddress: ":0", UIURL: "https://ui.example.test/"})
	if err != nil {
		t.Fatal(err)
	}
	pod := podAt("jane", "demo", "", "", true)
	pod.Namespace = "team-a"
	pod.Annotations[workspace.AnnStopRequested] = reason
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	p.PodChanged(pod)
	const page = "https://ui.example.test/namespaces/team-a/workspaces/demo"

	get := func(path, token, accept string) (int, string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "http://proxy.example"+path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		r.Header.Set("Accept", accept)
		p.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for _, accept := range []string{"text/html", "*/*"} {
		code, body := get("/preview/jane/demo/", "", accept)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "is stopped") {
			t.Fatalf("anonymous, Accept %s: answer %d %q, want 503 saying the workspace is stopped", accept, code, body)
		}
		for _, secret := range []string{"alice", "admin", "corp"} {
			if strings.Contains(body, secret) {
				t.Errorf("anonymous, Accept %s: the stopped page of a public preview names %q: %q", accept, secret, body)
			}
		}
		if accept == "text/html" && !strings.Contains(body, `href="`+page+`"`) {
			t.Errorf("anonymous: the stopped page links to %q, want %s", body, page)
		}
	}
	code, body := get("/ws/jane/demo/", "good", "text/html")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "alice@corp") || !strings.Contains(body, `href="`+page+`"`) {
		t.Fatalf("the owner: answer %d %q, want 503 with the reason and a link to %s", code, body, page)
	}
}

package proxy

import (
	"context"
	"net/http"
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

package proxy

import (
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// wsPod builds a workspace pod of workspace "demo" owned by "jane"; ready pods get ip.
func wsPod(name string, age time.Duration, ip string, ready bool, ann map[string]string) *corev1.Pod {
	a := map[string]string{
		workspace.AnnOwner:         "jane",
		workspace.AnnWorkspacePath: "/ws/jane/demo/",
		workspace.AnnWorkspacePort: "8080",
		workspace.AnnPreviewPath:   "/preview/jane/demo/",
		workspace.AnnPreviewPort:   "3000",
	}
	for k, v := range ann {
		if v == "-" {
			delete(a, k)
			continue
		}
		a[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(t0.Add(-age)),
			Labels:            map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo"},
			Annotations:       a,
		},
		Spec: corev1.PodSpec{NodeName: "node"},
	}
	if ip != "" {
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.ContainersReady, Status: status},
			{Type: corev1.PodReady, Status: status},
		}
	} else {
		p.Status.Phase = corev1.PodPending
	}
	return p
}

func TestRoutesForPicksTheTargetPod(t *testing.T) {
	key := wsKey{"default", "demo"}
	old := wsPod("old", time.Hour, "127.1.0.1", true, nil)
	newReady := wsPod("new", time.Minute, "127.1.0.2", true, map[string]string{workspace.AnnUpgradeFrom: "old"})
	newStarting := wsPod("new", time.Minute, "", false, map[string]string{workspace.AnnUpgradeFrom: "old"})
	newNotReady := wsPod("new", time.Minute, "127.1.0.2", false, map[string]string{workspace.AnnUpgradeFrom: "old"})
	deleting := wsPod("old", time.Hour, "127.1.0.1", true, nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		wantAddr string
		wantPod  string
		wantBad  string // substring of the 503 reason, "" when served
	}{
		{name: "a single ready pod is served on its workspace port", pods: []*corev1.Pod{old}, wantAddr: "127.1.0.1:8080", wantPod: "old"},
		{name: "during an upgrade the old pod serves while the new one starts", pods: []*corev1.Pod{newStarting, old}, wantAddr: "127.1.0.1:8080", wantPod: "old"},
		{name: "a new pod with an IP but not Ready does not take traffic yet", pods: []*corev1.Pod{old, newNotReady}, wantAddr: "127.1.0.1:8080", wantPod: "old"},
		{name: "the new pod takes traffic as soon as it is Ready", pods: []*corev1.Pod{old, newReady}, wantAddr: "127.1.0.2:8080", wantPod: "new"},
		{name: "a deleting old pod is not used once the new one is Ready", pods: []*corev1.Pod{deleting, newReady}, wantAddr: "127.1.0.2:8080", wantPod: "new"},
		{name: "a workspace with only a pending pod answers starting", pods: []*corev1.Pod{wsPod("p", time.Minute, "", false, nil)}, wantBad: "starting"},
		{name: "a running pod that is not ready answers starting", pods: []*corev1.Pod{wsPod("p", time.Minute, "127.1.0.3", false, nil)}, wantBad: "starting"},
		{name: "maintenance makes the workspace unavailable with its reason", pods: []*corev1.Pod{wsPod("p", time.Minute, "127.1.0.3", true, map[string]string{workspace.AnnMaintenance: "disk resize"})}, wantBad: "unavailable: Maintenance: disk resize"},
		{name: "a bad port annotation is reported, not served", pods: []*corev1.Pod{wsPod("p", time.Minute, "127.1.0.3", true, map[string]string{workspace.AnnWorkspacePort: "http"})}, wantBad: "misconfigured: annotation nogoo9/workspace-port"},
		{name: "a missing port annotation is reported, not served", pods: []*corev1.Pod{wsPod("p", time.Minute, "127.1.0.3", true, map[string]string{workspace.AnnWorkspacePort: "-"})}, wantBad: "missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			targets, errs := routesFor(key, tc.pods, t0)
			if len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
			var ws *target
			for _, tg := range targets {
				if tg.kind == kindWorkspace {
					ws = tg
				}
			}
			if ws == nil {
				t.Fatalf("no workspace route among %d targets", len(targets))
			}
			msg, bad := ws.unavailable()
			if tc.wantBad != "" {
				if !bad || !strings.Contains(msg, tc.wantBad) {
					t.Fatalf("unavailable() = %q, %v; want a reason containing %q", msg, bad, tc.wantBad)
				}
				return
			}
			if bad {
				t.Fatalf("unexpectedly unavailable: %s", msg)
			}
			if ws.addr != tc.wantAddr || ws.podName != tc.wantPod {
				t.Fatalf("target = %s (%s), want %s (%s)", ws.addr, ws.podName, tc.wantAddr, tc.wantPod)
			}
		})
	}
}

func TestRoutesForReadsFlagsFromAnnotations(t *testing.T) {
	key := wsKey{"default", "demo"}
	tests := []struct {
		name                  string
		ann                   map[string]string
		wantStrip, wantPublic bool
		wantRoutes            int
		wantErr               string
	}{
		{name: "defaults strip the prefix and keep the preview private", wantStrip: true, wantRoutes: 2},
		{name: "strip-prefix false keeps the prefix", ann: map[string]string{workspace.AnnStripPrefix: "false"}, wantRoutes: 2},
		{name: "public-preview true opens only the preview", ann: map[string]string{workspace.AnnPublicPreview: "true"}, wantStrip: true, wantPublic: true, wantRoutes: 2},
		{name: "public-preview with another value stays private", ann: map[string]string{workspace.AnnPublicPreview: "yes"}, wantStrip: true, wantRoutes: 2},
		{name: "no preview path means one route", ann: map[string]string{workspace.AnnPreviewPath: "-"}, wantStrip: true, wantRoutes: 1},
		{name: "a relative path is refused with the annotation named", ann: map[string]string{workspace.AnnPreviewPath: "preview/x"}, wantStrip: true, wantRoutes: 1, wantErr: "nogoo9/preview-path"},
		{name: "the reserved prefix cannot be claimed", ann: map[string]string{workspace.AnnPreviewPath: "/_nogoo9/login"}, wantStrip: true, wantRoutes: 1, wantErr: "reserves"},
		{name: "the root cannot be claimed", ann: map[string]string{workspace.AnnPreviewPath: "/./"}, wantStrip: true, wantRoutes: 1, wantErr: "root"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			targets, errs := routesFor(key, []*corev1.Pod{wsPod("p", time.Minute, "127.1.0.1", true, tc.ann)}, t0)
			if len(targets) != tc.wantRoutes {
				t.Fatalf("got %d routes, want %d", len(targets), tc.wantRoutes)
			}
			if tc.wantErr != "" {
				if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
					t.Fatalf("errors = %v, want one containing %q", errs, tc.wantErr)
				}
			} else if len(errs) != 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
			for _, tg := range targets {
				if tg.strip != tc.wantStrip {
					t.Errorf("%s route strip = %v, want %v", tg.kind, tg.strip, tc.wantStrip)
				}
				if want := tc.wantPublic && tg.kind == kindPreview; tg.public != want {
					t.Errorf("%s route public = %v, want %v", tg.kind, tg.public, want)
				}
			}
		})
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/ws/jane/demo/", "/ws/jane/demo/"},
		{"/ws/jane/demo/a/b.js", "/ws/jane/demo/a/b.js"},
		{"/ws/jane/demo/../../bob/demo/", "/ws/bob/demo/"},
		{"/ws/jane/demo/..", "/ws/jane"},
		{"/ws//jane/demo/", "/ws/jane/demo/"},
		{"//ws/jane/demo/x", "/ws/jane/demo/x"},
		{"/ws/jane/./demo/", "/ws/jane/demo/"},
		{"/ws/jane/demo/.../x", "/ws/jane/demo/.../x"},
		{"/ws/jane/demo/..x", "/ws/jane/demo/..x"},
		{"/ws/jane/demo/x/.", "/ws/jane/demo/x"},
		{"", "/"},
		{"ws/jane", "/ws/jane"},
	}
	for _, tc := range tests {
		if got := cleanPath(tc.in); got != tc.want {
			t.Errorf("cleanPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTableLookupLongestPrefix(t *testing.T) {
	a := &target{prefix: "/ws/jane/demo/"}
	b := &target{prefix: "/ws/jane/demo/sub/"}
	c := &target{prefix: "/preview/jane/demo/"}
	tbl := table{routes: map[string]*target{a.prefix: a, b.prefix: b, c.prefix: c}, maxDepth: 5}
	tests := []struct {
		path string
		want *target
	}{
		{"/ws/jane/demo/", a},
		{"/ws/jane/demo/index.html", a},
		{"/ws/jane/demo/sub/x", b},
		{"/ws/jane/demo/subway", a},
		{"/ws/jane/demo", nil},
		{"/ws/jane/demox/", nil},
		{"/ws/bob/demo/", nil},
		{"/preview/jane/demo/a/b/c/d/e/f", c},
		{"/", nil},
	}
	for _, tc := range tests {
		if got := tbl.lookup(tc.path); got != tc.want {
			t.Errorf("lookup(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	a := &target{prefix: "/ws/jane/demo/"}
	tbl := table{routes: map[string]*target{a.prefix: a}, maxDepth: 4}
	p := "/ws/jane/demo/static/app.js"
	if n := testing.AllocsPerRun(100, func() { _ = tbl.lookup(cleanPath(p)) }); n != 0 {
		t.Fatalf("cleanPath+lookup allocated %v times per request, want 0", n)
	}
}

func TestOriginAllowed(t *testing.T) {
	tests := []struct {
		name    string
		origin  string
		host    string
		allowed []string
		want    bool
	}{
		{"no origin: not a browser", "", "proxy.example.com", nil, true},
		{"same origin", "https://proxy.example.com", "proxy.example.com", nil, true},
		{"same origin with port", "http://127.0.0.1:8091", "127.0.0.1:8091", nil, true},
		{"another site", "https://evil.example", "proxy.example.com", nil, false},
		{"another port is another origin", "https://proxy.example.com:444", "proxy.example.com", nil, false},
		{"listed origin", "https://ide.example.com", "proxy.example.com", []string{"https://ide.example.com"}, true},
		{"listed origin compared case-insensitively", "https://IDE.example.com", "proxy.example.com", []string{"https://ide.example.com"}, true},
		{"wildcard", "https://evil.example", "proxy.example.com", []string{"*"}, true},
		{"opaque null origin", "null", "proxy.example.com", nil, false},
		{"non-http scheme", "file://proxy.example.com", "proxy.example.com", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := originAllowed(tc.origin, tc.host, tc.allowed); got != tc.want {
				t.Fatalf("originAllowed(%q, %q, %v) = %v, want %v", tc.origin, tc.host, tc.allowed, got, tc.want)
			}
		})
	}
}

func TestStripCookie(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"only the nogoo9 cookie", []string{"nogoo9_token=abc"}, nil},
		{"keeps the workspace's cookies", []string{"a=1; nogoo9_token=abc; b=2"}, []string{"a=1; b=2"}},
		{"several header lines", []string{"nogoo9_token=abc", "x=y"}, []string{"x=y"}},
		{"every cookie in nogoo9's name space goes, in any case and with either prefix", []string{"nogoo9_token_other=1; NOGOO9_session=2; __Host-nogoo9_token=abc; __secure-Nogoo9_x=3; keep=1"}, []string{"keep=1"}},
		{"a cookie that only contains nogoo9 later in its name is kept", []string{"my_nogoo9=1; nogoo9_token=abc"}, []string{"my_nogoo9=1"}},
		{"no nogoo9 cookie is left untouched", []string{"a=1;b=2"}, []string{"a=1;b=2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Cookie": tc.in}
			stripCookie(h, tc.in)
			got := h["Cookie"]
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("Cookie = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"bind address required", Options{}, "bind address is empty"},
		{"negative grace", Options{BindAddress: ":0", NotReadyGrace: -time.Second}, "negative"},
		{"origin with a path", Options{BindAddress: ":0", AllowedOrigins: []string{"https://x.example/app"}}, "not an origin"},
		{"origin without scheme", Options{BindAddress: ":0", AllowedOrigins: []string{"x.example"}}, "not an origin"},
		{"negative response limits", Options{BindAddress: ":0", MaxResponseHeaderBytes: -1}, "must not be negative"},
		{"valid", Options{BindAddress: ":0", AllowedOrigins: []string{"https://x.example", "*"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.opts.withDefaults()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if o.NotReadyGrace != DefaultNotReadyGrace || o.MaxIdleConnsPerPod != DefaultMaxIdleConnsPerPod ||
					o.ResponseHeaderTimeout != DefaultResponseHeaderTimeout || o.MaxResponseHeaderBytes != DefaultMaxResponseHeaderBytes ||
					o.Max1xxResponses != DefaultMax1xxResponses || o.MaxSetCookies != DefaultMaxSetCookies || o.MaxConnsPerClient != DefaultMaxConnsPerClient {
					t.Fatalf("defaults not applied: %+v", o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestReverseProxyMadeAtFirstRequest: building routes makes no ReverseProxy (most workspaces get
// no request between two changes of their pods); the first request makes one, every later and
// concurrent request gets that same one, and a route that is never forwarded gets none.
func TestReverseProxyMadeAtFirstRequest(t *testing.T) {
	var made atomic.Int32
	newRP := func(tg *target) *httputil.ReverseProxy {
		if tg.addr == "" {
			return nil
		}
		made.Add(1)
		return &httputil.ReverseProxy{}
	}
	r := newRouter(time.Minute, newConnRegistry(logr.Discard()), newRP, logr.Discard())
	r.now = func() time.Time { return t0 }
	r.upsert(wsPod("ws-ready", time.Hour, "10.0.0.1", true, nil))
	pending := wsPod("ws-pending", time.Hour, "", false, map[string]string{workspace.AnnWorkspacePath: "/ws/jane/other/", workspace.AnnPreviewPath: "-"})
	pending.Labels[workspace.LabelWorkspaceID] = "other"
	r.upsert(pending)
	if n := made.Load(); n != 0 {
		t.Fatalf("building the routes made %d ReverseProxies; want none before a request", n)
	}
	ready := r.lookup("/ws/jane/demo/x")
	if ready == nil || ready.addr == "" {
		t.Fatalf("no ready route for /ws/jane/demo/: %+v", ready)
	}
	var wg sync.WaitGroup
	got := make([]*httputil.ReverseProxy, 8)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = ready.reverseProxy(r.newRP) }()
	}
	wg.Wait()
	for i, rp := range got {
		if rp == nil || rp != got[0] {
			t.Fatalf("request %d got ReverseProxy %p, request 0 got %p: want one, the same", i, rp, got[0])
		}
	}
	if rp := ready.reverseProxy(r.newRP); rp != got[0] {
		t.Fatal("a later request got another ReverseProxy")
	}
	if tg := r.lookup("/ws/jane/other/x"); tg == nil || tg.reverseProxy(r.newRP) != nil {
		t.Fatalf("a route with no ready pod must have no ReverseProxy: %+v", tg)
	}
}

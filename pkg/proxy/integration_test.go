package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/proxy"
	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// One envtest API server and one manager with the proxy for every integration test here.
var (
	k8s       client.Client
	envCfg    *rest.Config // the test API server's, for tests that start a manager of their own
	proxyURL  string       // http://127.0.0.1:port
	proxyHost string
)

const ns = "default"

// stubAuth accepts three fixed tokens: the integration tests exercise the proxy's authorization,
// not token verification (pkg/auth's own tests do that).
type stubAuth struct{}

func (stubAuth) Authenticate(r *http.Request) (*auth.Caller, error) {
	token, err := auth.TokenFromRequest(r)
	if err != nil {
		return nil, err
	}
	return stubAuth{}.VerifyToken(r.Context(), token)
}

func (stubAuth) VerifyToken(_ context.Context, token string) (*auth.Caller, error) {
	switch token {
	case "jane-token":
		return &auth.Caller{Subject: "jane"}, nil
	case "bob-token":
		return &auth.Caller{Subject: "bob"}, nil
	case "admin-token":
		return &auth.Caller{Subject: "root", IsAdmin: true}, nil
	}
	return nil, &auth.Error{Reason: "unknown token"}
}

func TestMain(m *testing.M) {
	apiserver.Main(m, func(cfg *rest.Config) int {
		if cfg == nil {
			return m.Run()
		}
		return runWithEnv(m, cfg)
	}, apiserver.BenchmarksNeedNone)
}

func runWithEnv(m *testing.M, cfg *rest.Config) int {
	envCfg = cfg
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache:               podcache.NewCache,
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}: podcache.Pods(),
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "create manager:", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		return 1
	}
	proxyHost = ln.Addr().String()
	proxyURL = "http://" + proxyHost
	if err := proxy.Setup(mgr, stubAuth{}, proxy.Options{Listener: ln, NotReadyGrace: 2 * time.Second, InsecureCookie: true}); err != nil {
		fmt.Fprintln(os.Stderr, "proxy setup:", err)
		return 1
	}
	if err := setupActivityProxy(mgr); err != nil {
		fmt.Fprintln(os.Stderr, "activity proxy setup:", err)
		return 1
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	<-done
	return code
}

func integration(t *testing.T) *WithT {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs envtest (run without -short)")
	}
	return NewWithT(t)
}

// backend is a workspace server listening on a pod IP (127.1.x.y is loopback here).
type backend struct {
	name    string
	release chan struct{}
}

func startBackend(t *testing.T, ip, name string, port int) *backend {
	t.Helper()
	b := &backend{name: name, release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("/ws", websocket.Server{Handler: func(c *websocket.Conn) {
		for {
			var msg string
			if err := websocket.Message.Receive(c, &msg); err != nil {
				return
			}
			if err := websocket.Message.Send(c, name+":"+msg); err != nil {
				return
			}
		}
	}})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: hello from %s\n\n", name)
		w.(http.Flusher).Flush()
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "pod=%s path=%s auth=%q cookie=%q prefix=%q", name, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Cookie"), r.Header.Get("X-Forwarded-Prefix"))
	})
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
	if err != nil {
		t.Fatalf("listen on pod IP %s: %v", ip, err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
		_ = srv.Close()
	})
	return b
}

// seq makes pod names and workspace ids unique per run, so that -count=N runs the tests again in
// the same API server without clashing with what an earlier run is still deleting.
var seq atomic.Int64

// uniq is base with a suffix unique in this test process.
func uniq(base string) string { return fmt.Sprintf("%s-%d", base, seq.Add(1)) }

// createPod creates a workspace pod of workspace id owned by owner and, when ip is set, marks it
// Running and Ready on ip (envtest has no kubelet); the pod is deleted when the test ends. An
// upgrade's new pod is named like workspace.UpgradePodName does ("<old>-up-<x>"), because pods
// created within the same second are ordered by name.
func createPod(t *testing.T, g *WithT, name, id, owner, ip string, ann map[string]string) *corev1.Pod {
	t.Helper()
	a := map[string]string{
		workspace.AnnOwner:         owner,
		workspace.AnnWorkspacePath: "/ws/" + owner + "/" + id + "/",
		workspace.AnnWorkspacePort: "8080",
		workspace.AnnPreviewPath:   "/preview/" + owner + "/" + id + "/",
		workspace.AnnPreviewPort:   "8080",
	}
	for k, v := range ann {
		a[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels:      map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id},
			Annotations: a,
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
	}
	g.Expect(k8s.Create(context.Background(), pod)).To(Succeed())
	t.Cleanup(func() {
		err := k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("clean up pod %s: %v", pod.Name, err)
		}
	})
	if ip != "" {
		setReady(g, pod, ip, true)
	}
	return pod
}

func setReady(g *WithT, pod *corev1.Pod, ip string, ready bool) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
		},
	}
	g.Expect(k8s.Status().Update(context.Background(), pod)).To(Succeed())
}

func deletePod(g *WithT, pod *corev1.Pod) {
	g.Expect(k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0))).To(Succeed())
}

var plain = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// get requests path through the proxy with token ("" for none) and returns status and body.
func get(path, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, proxyURL+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := plain.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

func TestOnlyTheOwnerAndAdminsReachAWorkspace(t *testing.T) {
	g := integration(t)
	startBackend(t, "127.1.1.1", "jane-pod", 8080)
	startBackend(t, "127.1.1.2", "bob-pod", 8080)
	a, b := uniq("authz"), uniq("authzb")
	createPod(t, g, a, a, "jane", "127.1.1.1", nil)
	createPod(t, g, b, b, "bob", "127.1.1.2", map[string]string{workspace.AnnPublicPreview: "true"})
	// Every case below depends on both workspaces being routable: wait for each, including the
	// public preview (its own route).
	waitRoutable(g, "/ws/jane/"+a+"/", "jane-token", "pod=jane-pod")
	waitRoutable(g, "/ws/bob/"+b+"/", "bob-token", "pod=bob-pod")
	waitRoutable(g, "/preview/bob/"+b+"/", "", "pod=bob-pod")
	ids := strings.NewReplacer("authz2", b, "authz", a)

	tests := []struct {
		name, path, token string
		wantCode          int
		wantBody          string
	}{
		{"the owner reaches the workspace, prefix stripped, credentials not forwarded", "/ws/jane/authz/a/b?x=1", "jane-token", 200, `pod=jane-pod path=/a/b auth="" cookie="" prefix="/ws/jane/authz"`},
		{"an admin reaches any workspace", "/ws/jane/authz/", "admin-token", 200, "pod=jane-pod path=/ "},
		{"another user is forbidden", "/ws/jane/authz/", "bob-token", 403, "belongs to another user"},
		{"no token is unauthorized", "/ws/jane/authz/", "", 401, "no bearer token"},
		{"a bad token is unauthorized", "/ws/jane/authz/", "nope", 401, "unknown token"},
		{"the preview is private by default", "/preview/jane/authz/", "", 401, ""},
		{"a preview opted in to public needs no token", "/preview/bob/authz2/x", "", 200, "pod=bob-pod path=/x"},
		{"the opted-in workspace path itself stays private", "/ws/bob/authz2/", "", 401, ""},
		{"dot segments cannot climb into another user's workspace", "/ws/jane/authz/../../bob/authz2/", "jane-token", 403, "authz2 belongs to another user"},
		{"encoded slashes are decoded before matching", "/ws/jane/authz/..%2F..%2Fbob%2Fauthz2/", "jane-token", 403, "authz2 belongs to another user"},
		{"double slashes are collapsed", "//ws//jane//authz//x", "jane-token", 200, "pod=jane-pod path=/x"},
		{"a path without the trailing slash is redirected for the owner, query kept", "/ws/jane/authz?x=1", "jane-token", 308, `href="/ws/jane/authz/?x=1"`},
		{"a path without the trailing slash is redirected for an admin", "/ws/jane/authz", "admin-token", 308, `href="/ws/jane/authz/"`},
		{"another user's workspace without the trailing slash is forbidden, not redirected", "/ws/jane/authz", "bob-token", 403, "belongs to another user"},
		{"a workspace without the trailing slash and no token is unauthorized, not redirected", "/ws/jane/authz", "", 401, "no bearer token"},
		{"a public preview without the trailing slash is redirected without a token", "/preview/bob/authz2", "", 308, `href="/preview/bob/authz2/"`},
		{"an unknown workspace is not found", "/ws/jane/nothing/", "jane-token", 404, "no workspace"},
		{"an unknown workspace without the trailing slash is not found", "/ws/jane/nothing", "bob-token", 404, "no workspace"},
		{"an unknown workspace without a token is unauthorized", "/ws/jane/nothing", "", 401, "no bearer token"},
	}
	for _, tc := range tests {
		tc.path, tc.wantBody = ids.Replace(tc.path), ids.Replace(tc.wantBody)
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(tc.path, tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("GET %s: %d %q, want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

// waitRoutable waits until path answers 200 with want in the body for token.
func waitRoutable(g *WithT, path, token, want string) {
	g.Eventually(func(g Gomega) {
		code, body, err := get(path, token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring(want))
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed(), "GET %s never reached %s", path, want)
}

func TestBrowserLoginSetsACookieThatIsNotForwarded(t *testing.T) {
	g := integration(t)
	startBackend(t, "127.1.1.3", "login-pod", 8080)
	id := uniq("login")
	createPod(t, g, id, id, "jane", "127.1.1.3", nil)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}

	res, err := browser.PostForm(proxyURL+"/_nogoo9/login", url.Values{"token": {"wrong"}})
	g.Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusUnauthorized))

	res, err = browser.Get(proxyURL + "/_nogoo9/login?token=jane-token")
	g.Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusBadRequest), "a token in the URL is refused")
	g.Expect(res.Cookies()).To(BeEmpty())

	res, err = browser.PostForm(proxyURL+"/_nogoo9/login", url.Values{"token": {"jane-token"}, "next": {"/ws/jane/" + id + "/"}})
	g.Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	var cookie *http.Cookie
	for _, c := range res.Request.Response.Cookies() {
		if c.Name == proxy.InsecureCookieName { // the suite runs with InsecureCookie
			cookie = c
		}
	}
	g.Expect(cookie).NotTo(BeNil())
	g.Expect(cookie.HttpOnly).To(BeTrue())
	g.Expect(cookie.SameSite).To(Equal(http.SameSiteLaxMode))
	g.Eventually(func(g Gomega) {
		req, _ := http.NewRequest(http.MethodGet, proxyURL+"/ws/jane/"+id+"/page", nil)
		req.Header.Set("Cookie", "theme=dark; "+proxy.InsecureCookieName+"=jane-token; nogoo9_other=x")
		res, err := plain.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		g.Expect(res.StatusCode).To(Equal(http.StatusOK), string(b))
		g.Expect(string(b)).To(ContainSubstring(`path=/page auth="" cookie="theme=dark"`))
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
}

func TestHTTPSwitchesToTheNewPodWithoutAFailedRequest(t *testing.T) {
	g := integration(t)
	startBackend(t, "127.1.2.1", "old", 8080)
	startBackend(t, "127.1.2.2", "new", 8080)
	id := uniq("cut")
	path := "/ws/jane/" + id + "/"
	old := createPod(t, g, id, id, "jane", "127.1.2.1", nil)
	g.Eventually(func() string { _, b, _ := get(path, "jane-token"); return b }, 30*time.Second, 20*time.Millisecond).Should(ContainSubstring("pod=old"))

	// A bounded request loop runs through the whole switch and the old pod's deletion.
	var (
		stop               atomic.Bool
		failures, requests atomic.Int64
		firstNew           atomic.Int64 // unix nanos of the first answer from the new pod
		lastErr            atomic.Value
		wg                 sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Bounded by time, not by a request count, which a fast machine can use up before the switch ends.
		for deadline := time.Now().Add(3 * time.Minute); !stop.Load() && time.Now().Before(deadline); {
			code, body, err := get(path, "jane-token")
			requests.Add(1)
			if err != nil || code != http.StatusOK {
				failures.Add(1)
				lastErr.Store(fmt.Sprintf("%d %s %v", code, body, err))
				continue
			}
			if strings.Contains(body, "pod=new") {
				firstNew.CompareAndSwap(0, time.Now().UnixNano())
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	g.Eventually(requests.Load, 30*time.Second).Should(BeNumerically(">", 20))
	newPod := createPod(t, g, id+"-up-1", id, "jane", "", map[string]string{workspace.AnnUpgradeFrom: id})
	g.Consistently(firstNew.Load, time.Second, 50*time.Millisecond).Should(BeZero(), "the new pod got traffic before it was Ready")
	readyAt := time.Now()
	setReady(g, newPod, "127.1.2.2", true)
	g.Eventually(firstNew.Load, 30*time.Second, 10*time.Millisecond).ShouldNot(BeZero())
	t.Logf("HTTP cutover: first answer from the new pod %v after it was marked Ready", time.Duration(firstNew.Load()-readyAt.UnixNano()))
	deletePod(g, old)
	before := requests.Load()
	g.Eventually(requests.Load, 30*time.Second).Should(BeNumerically(">", before+20))
	stop.Store(true)
	wg.Wait()
	g.Expect(failures.Load()).To(BeZero(), "failed requests during the switch, last: %v", lastErr.Load())
	_, body, _ := get(path, "jane-token")
	g.Expect(body).To(ContainSubstring("pod=new"))
}

func dialWS(path, origin, token string) (*websocket.Conn, error) {
	cfg, err := websocket.NewConfig("ws://"+proxyHost+path, origin)
	if err != nil {
		return nil, err
	}
	cfg.Header.Set("Authorization", "Bearer "+token)
	// Bounded as plain's requests are: a proxy that never answers the handshake fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), plain.Timeout)
	defer cancel()
	return cfg.DialContext(ctx)
}

// dialJanes opens a WebSocket to jane's workspace id through the proxy as jane, from the proxy's
// own origin, retrying until the route is there (30 s at most).
func dialJanes(g *WithT, id string) *websocket.Conn {
	var c *websocket.Conn
	g.Eventually(func() error {
		var err error
		c, err = dialWS("/ws/jane/"+id+"/ws", "http://"+proxyHost, "jane-token")
		return err
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	return c
}

func echo(c *websocket.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := websocket.Message.Send(c, msg); err != nil {
		return "", err
	}
	var out string
	err := websocket.Message.Receive(c, &out)
	return out, err
}

func TestWebSocketStaysOnItsPodAndClosesWhenThePodIsDeleted(t *testing.T) {
	g := integration(t)
	startBackend(t, "127.1.3.1", "old", 8080)
	startBackend(t, "127.1.3.2", "new", 8080)
	id := uniq("wsc")
	old := createPod(t, g, id, id, "jane", "127.1.3.1", nil)
	origin := "http://" + proxyHost
	c1 := dialJanes(g, id)
	defer c1.Close()
	g.Expect(echo(c1, "a")).To(Equal("old:a"))

	_, err := dialWS("/ws/jane/"+id+"/ws", "https://evil.example", "jane-token")
	g.Expect(err).To(HaveOccurred(), "a WebSocket from a foreign origin must be refused")

	newPod := createPod(t, g, id+"-up-1", id, "jane", "127.1.3.2", map[string]string{workspace.AnnUpgradeFrom: id})
	g.Eventually(func() string { _, b, _ := get("/ws/jane/"+id+"/", "jane-token"); return b }, 30*time.Second, 20*time.Millisecond).Should(ContainSubstring("pod=new"))
	g.Expect(echo(c1, "b")).To(Equal("old:b"), "an open WebSocket must stay on the pod it was opened on")
	c2, err := dialWS("/ws/jane/"+id+"/ws", origin, "jane-token")
	g.Expect(err).NotTo(HaveOccurred())
	defer c2.Close()
	g.Expect(echo(c2, "c")).To(Equal("new:c"))

	deletePod(g, old)
	waitClosed(t, c1, "its pod was deleted")
	g.Expect(echo(c2, "d")).To(Equal("new:d"), "the WebSocket on the new pod must stay open")
	c3, err := dialWS("/ws/jane/"+id+"/ws", origin, "jane-token")
	g.Expect(err).NotTo(HaveOccurred())
	defer c3.Close()
	g.Expect(echo(c3, "e")).To(Equal("new:e"), "a reconnect lands on the new pod")
	_ = newPod
}

func TestWebSocketClosesWhenItsPodStaysNotReady(t *testing.T) {
	g := integration(t)
	startBackend(t, "127.1.3.3", "flaky", 8080)
	id := uniq("wsg")
	pod := createPod(t, g, id, id, "jane", "127.1.3.3", nil)
	c := dialJanes(g, id)
	defer c.Close()
	g.Expect(echo(c, "a")).To(Equal("flaky:a"))
	setReady(g, pod, "127.1.3.3", false) // grace is 2s in this suite
	waitClosed(t, c, "its pod stayed not-ready past the grace period")
}

func TestServerSentEventsAreFlushedAtOnce(t *testing.T) {
	g := integration(t)
	b := startBackend(t, "127.1.4.1", "sse", 8080)
	id := uniq("sse")
	createPod(t, g, id, id, "jane", "127.1.4.1", nil)
	waitRoutable(g, "/ws/jane/"+id+"/", "jane-token", "pod=sse")

	req, _ := http.NewRequest(http.MethodGet, proxyURL+"/ws/jane/"+id+"/sse", nil)
	req.Header.Set("Authorization", "Bearer jane-token")
	res, err := plain.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer res.Body.Close()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(res.Body).ReadString('\n')
		line <- s
	}()
	// The backend holds the stream open until released: the event can only arrive if the proxy
	// flushed it.
	select {
	case s := <-line:
		g.Expect(s).To(Equal("data: hello from sse\n"))
	case <-time.After(30 * time.Second):
		t.Fatal("the first event did not arrive while the stream was open: the proxy buffers")
	}
	close(b.release)
}

func TestUnavailableAndStartingWorkspacesAnswer503(t *testing.T) {
	g := integration(t)
	startBackend(t, "127.1.5.1", "maint", 8080)
	id := uniq("maint")
	pod := createPod(t, g, id, id, "jane", "127.1.5.1", nil)
	g.Eventually(func() int { c, _, _ := get("/ws/jane/"+id+"/", "jane-token"); return c }, 30*time.Second, 50*time.Millisecond).Should(Equal(200))

	patch := []byte(`{"metadata":{"annotations":{"` + workspace.AnnMaintenance + `":"disk resize until 14:00"}}}`)
	g.Expect(k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	g.Eventually(func() string { c, b, _ := get("/ws/jane/"+id+"/", "jane-token"); return fmt.Sprint(c, " ", b) }, 30*time.Second, 50*time.Millisecond).
		Should(And(HavePrefix("503"), ContainSubstring("disk resize until 14:00")))

	patch = []byte(`{"metadata":{"annotations":{"` + workspace.AnnMaintenance + `":null}}}`)
	g.Expect(k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	g.Eventually(func() int { c, _, _ := get("/ws/jane/"+id+"/", "jane-token"); return c }, 30*time.Second, 50*time.Millisecond).Should(Equal(200))

	starting := uniq("starting")
	createPod(t, g, starting, starting, "jane", "", nil)
	g.Eventually(func() string { c, b, _ := get("/ws/jane/"+starting+"/", "jane-token"); return fmt.Sprint(c, " ", b) }, 30*time.Second, 50*time.Millisecond).
		Should(And(HavePrefix("503"), ContainSubstring("starting")))
}

// waitClosed reads c until the proxy closes it; it fails the test after 30 s.
func waitClosed(t *testing.T, c *websocket.Conn, what string) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		var s string
		_ = websocket.Message.Receive(c, &s)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the WebSocket was not closed within 30s after %s", what)
	}
}

func TestWebSocketsCloseWhenTheWorkspaceTurnsUnavailable(t *testing.T) {
	g := integration(t)
	startBackend(t, "127.1.5.2", "repair", 8080)
	id := uniq("repair")
	pod := createPod(t, g, id, id, "jane", "127.1.5.2", nil)
	origin := "http://" + proxyHost
	open := func() *websocket.Conn {
		c := dialJanes(g, id)
		g.Expect(echo(c, "a")).To(Equal("repair:a"))
		return c
	}

	c := open()
	defer c.Close()
	patch := []byte(`{"metadata":{"annotations":{"` + workspace.AnnMaintenance + `":"disk repair"}}}`)
	g.Expect(k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	waitClosed(t, c, "the maintenance annotation was set")
	_, err := dialWS("/ws/jane/"+id+"/ws", origin, "jane-token")
	g.Expect(err).To(HaveOccurred(), "a new WebSocket to a workspace in maintenance must be refused")

	patch = []byte(`{"metadata":{"annotations":{"` + workspace.AnnMaintenance + `":null}}}`)
	g.Expect(k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	c2 := open()
	defer c2.Close()
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)).To(Succeed())
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
		Type: workspace.ConditionPrefix + "Storage", Status: corev1.ConditionFalse,
		Reason: "MountLost", Message: "the home volume is being repaired", LastTransitionTime: metav1.Now(),
	})
	g.Expect(k8s.Status().Update(context.Background(), pod)).To(Succeed())
	waitClosed(t, c2, "a Workspace* condition turned False")
	g.Eventually(func() string { c, b, _ := get("/ws/jane/"+id+"/", "jane-token"); return fmt.Sprint(c, " ", b) }, 30*time.Second, 50*time.Millisecond).
		Should(And(HavePrefix("503"), ContainSubstring("MountLost")))
}

package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// relay is a loopback TCP relay between nogoo9 and kube-apiserver that the test can cut: cut
// closes every open connection (every watch ends) and, until restore, resets every new one at
// once (as when the API server is down). The listener stays open throughout, so the address is
// never given up and restore cannot find it taken.
type relay struct {
	addr     string
	upstream string
	ln       net.Listener
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]struct{}
}

func newRelay(t *testing.T, upstream string) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay: listen: %v", err)
	}
	r := &relay{addr: ln.Addr().String(), upstream: upstream, ln: ln, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by the clean-up
			}
			go r.pipe(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		r.cut()
	})
	return r
}

// refuse resets c (RST, not an orderly close), as close to a refused connection as an accepted
// one gets.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (r *relay) pipe(c net.Conn) {
	r.mu.Lock()
	down := r.down
	r.mu.Unlock()
	if down {
		refuse(c)
		return
	}
	up, err := (&net.Dialer{Timeout: 10 * time.Second}).Dial("tcp", r.upstream)
	if err != nil {
		refuse(c)
		return
	}
	r.mu.Lock()
	if r.down { // cut while dialling
		r.mu.Unlock()
		refuse(c)
		_ = up.Close()
		return
	}
	r.conns[c], r.conns[up] = struct{}{}, struct{}{}
	r.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close(); _ = c.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	_ = up.Close()
}

func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = true
	for c := range r.conns {
		_ = c.Close()
		delete(r.conns, c)
	}
}

func (r *relay) restore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = false
}

// apiLog records nogoo9's requests to the API server: when each watch started, and which
// responses told a watch its resource version was compacted ("too old resource version", 410).
type apiLog struct {
	mu         sync.Mutex
	lastWatch  time.Time
	expired    []string // paths of watches ended by 410
	listsAfter []string // paths of lists since mark
	marked     bool
	trace      []string // every request and its outcome, shown when the test fails
}

func (l *apiLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		watch := req.URL.Query().Get("watch") == "true"
		l.mu.Lock()
		if watch {
			l.lastWatch = time.Now()
		}
		// A relist is a LIST or, with client-go's watch-list, a watch that sends the initial state.
		initial := !watch || req.URL.Query().Get("sendInitialEvents") == "true"
		if req.Method == http.MethodGet && initial && l.marked {
			l.listsAfter = append(l.listsAfter, req.URL.Path)
		}
		l.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		l.mu.Lock()
		if err != nil {
			l.trace = append(l.trace, fmt.Sprintf("%s %s %s: %v", time.Now().Format("15:04:05.000"), req.Method, req.URL, err))
		} else {
			l.trace = append(l.trace, fmt.Sprintf("%s %s %s: %d", time.Now().Format("15:04:05.000"), req.Method, req.URL, resp.StatusCode))
		}
		l.mu.Unlock()
		if err != nil || req.Method != http.MethodGet {
			return resp, err
		}
		if resp.StatusCode == http.StatusGone {
			l.addExpired(req.URL.Path)
		}
		if watch {
			resp.Body = &scanBody{ReadCloser: resp.Body, found: func() { l.addExpired(req.URL.Path) }}
		}
		return resp, nil
	})
}

func (l *apiLog) addExpired(path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expired = append(l.expired, path)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// scanBody calls found once if the stream carries the message of the API server's 410 Expired
// Status for a compacted revision: "too old resource version" (watch cache) or "The
// resourceVersion for the provided watch is too old." (etcd); the text is the same in JSON and
// protobuf.
type scanBody struct {
	io.ReadCloser
	tail  []byte
	done  bool
	found func()
}

var tooOld = [][]byte{[]byte("too old resource version"), []byte("provided watch is too old")}

func (s *scanBody) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if !s.done && n > 0 {
		buf := append(s.tail, p[:n]...)
		for _, m := range tooOld {
			if !s.done && bytes.Contains(buf, m) {
				s.done = true
				s.found()
			}
		}
		if len(buf) > 32 {
			buf = buf[len(buf)-32:]
		}
		s.tail = append([]byte(nil), buf...)
	}
	return n, err
}

// etcdClient bounds each call to etcd's JSON gateway.
var etcdClient = &http.Client{Timeout: 30 * time.Second}

// etcdPost posts body to etcd's JSON gateway at path and decodes the answer into out.
func etcdPost(t *testing.T, etcd, path, body string, out any) {
	t.Helper()
	resp, err := etcdClient.Post(etcd+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("etcd %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd %s: %s: %s", path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("etcd %s: %v: %s", path, err, b)
		}
	}
}

// TestWatchExpiryRelist (issue 17): nogoo9's watches break, the world changes, etcd compacts past
// everything nogoo9 saw, and the watches come back. The reflectors' watches from their last
// resource version must end with 410 Gone ("too old resource version") and relist; after that
// the cache holds exactly the API server's pods (a pod deleted during the cut is gone, the pod
// created is there, the intent written is seen) and the upgrade controller acts on the intent
// exactly once: one upgraded pod, one UpgradeStarted Event.
func TestWatchExpiryRelist(t *testing.T) {
	var env *envtest.Environment
	cfg, c := startAPIServer(t, func(e *envtest.Environment) {
		env = e
		// Without the watch cache, watches are served by etcd, so a compacted revision is a 410.
		e.ControlPlane.GetAPIServer().Configure().Set("watch-cache", "false")
	})
	ctx := context.Background()
	ns := newNamespace(t, c, "relist")
	g := gomega.NewWithT(t)
	reg := &fakeTemplates{}
	reg.set(ideTemplate("v1", "ide:1", ""))
	e := &upgradeEnv{t: t, g: g, cfg: cfg, c: c, ns: ns, reg: reg, clock: &testClock{now: time.Now()}}
	gone, kept := e.spawn("ann", "gone"), e.spawn("ann", "kept")

	// nogoo9's manager, as main.go builds it (podcache.Options), through the relay.
	api, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rl := newRelay(t, api.Host)
	var log apiLog
	rcfg := rest.CopyConfig(cfg)
	rcfg.Host = "https://" + rl.addr
	rcfg.Wrap(log.wrap)
	mgr := newTestManager(t, rcfg, func(o *ctrl.Options) { o.Cache = podcache.Options(ns) })
	t.Cleanup(func() { // before the manager's logs (newTestManager's clean-up runs after this one)
		if t.Failed() {
			log.mu.Lock()
			t.Log(strings.Join(log.trace, "\n"))
			log.mu.Unlock()
		}
	})
	opts := UpgradeOptions{Now: e.clock.Now, Name: UpgradeControllerName + "-relist"}
	if err := SetupWorkspaceReconciler(mgr, reg, opts); err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, mgr)

	// The cache equals the API server: same pods, same resource versions.
	cacheIsWorld := func(g gomega.Gomega) map[string]*corev1.Pod {
		var api, cached corev1.PodList
		g.Expect(c.List(ctx, &api, client.InNamespace(ns))).To(gomega.Succeed())
		g.Expect(mgr.GetCache().List(ctx, &cached, client.InNamespace(ns))).To(gomega.Succeed())
		want, got := map[string]string{}, map[string]string{}
		for _, p := range api.Items {
			want[p.Name] = p.ResourceVersion
		}
		out := map[string]*corev1.Pod{}
		for i, p := range cached.Items {
			got[p.Name] = p.ResourceVersion
			out[p.Name] = &cached.Items[i]
		}
		g.Expect(got).To(gomega.Equal(want))
		return out
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(cacheIsWorld(g)).To(gomega.HaveLen(2))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	// A watch cut in its first second counts as "very short" and relists at once; wait until the
	// pod watch has run a while, so the cut leaves the reflector resuming from its version.
	g.Eventually(func() time.Duration {
		log.mu.Lock()
		defer log.mu.Unlock()
		return time.Since(log.lastWatch)
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(gomega.BeNumerically(">", 2*time.Second))

	// Cut; change the world; compact etcd to its current revision; restore.
	reg.set(ideTemplate("v2", "ide:2", ""))
	rl.cut()
	g.Expect(c.Delete(ctx, gone)).To(gomega.Succeed())
	e.annotate(kept.Name, workspace.AnnUpgradeRequested, ptr.To("true"))
	added := e.spawn("ann", "added")
	etcd := env.ControlPlane.Etcd.URL.String()
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	etcdPost(t, etcd, "/v3/kv/range", `{"key":"AA=="}`, &rng)
	g.Expect(rng.Header.Revision).NotTo(gomega.BeEmpty())
	etcdPost(t, etcd, "/v3/kv/compaction", fmt.Sprintf(`{"revision":%q,"physical":true}`, rng.Header.Revision), nil)
	log.mu.Lock()
	log.marked = true
	log.mu.Unlock()
	rl.restore()

	podsPath := "/api/v1/namespaces/" + ns + "/pods"
	g.Eventually(func(g gomega.Gomega) {
		log.mu.Lock()
		defer log.mu.Unlock()
		g.Expect(log.expired).To(gomega.ContainElement(podsPath), "the pod watch ended with 410 Gone")
		g.Expect(log.listsAfter).To(gomega.ContainElement(podsPath), "the pod informer relisted")
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())

	// The model: the deleted pod gone, the new one there, the intent seen (or already acted on).
	up := e.upgradedPod("kept", kept.Name)
	g.Eventually(func(g gomega.Gomega) {
		pods := cacheIsWorld(g)
		g.Expect(pods).NotTo(gomega.HaveKey(gone.Name))
		g.Expect(pods).To(gomega.HaveKey(added.Name))
		g.Expect(pods).To(gomega.HaveKey(up.Name))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())

	// Exactly once: the upgrade finishes with one new pod and one UpgradeStarted.
	e.setReady(up.Name)
	g.Eventually(func(g gomega.Gomega) {
		pods := e.pods(g, "kept")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods).To(gomega.HaveKey(up.Name))
		g.Expect(e.events(g, up.Name)).To(gomega.ContainElement(upgrade.ReasonUpgradeSucceeded))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(e.pods(g, "kept")).To(gomega.HaveLen(1))
		g.Expect(e.pods(g, "gone")).To(gomega.BeEmpty())
		g.Expect(e.pods(g, "added")).To(gomega.HaveLen(1))
		var started int
		for _, r := range e.events(g, kept.Name) {
			if r == upgrade.ReasonUpgradeStarted {
				started++
			}
		}
		g.Expect(started).To(gomega.Equal(1), "UpgradeStarted Events on %s", kept.Name)
	}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
	g.Eventually(cacheIsWorld).WithTimeout(30 * time.Second).Should(gomega.HaveLen(2))
}

package ui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"io/fs"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// These tests check the UI's own layer (sessions, CSRF, rendering, streams) over a Service whose
// cache is controller-runtime's fake client: the Kubernetes side of every operation is the
// service's, tested against a real API server in pkg/api and in the browser e2e specs.

const ns = "ns"

// tokens is a pure stand-in for the authenticator: a fixed token -> caller table.
type tokens map[string]*auth.Caller

func (t tokens) Authenticate(r *http.Request) (*auth.Caller, error) {
	tok, err := auth.TokenFromRequest(r)
	if err != nil {
		return nil, err
	}
	return t.VerifyToken(r.Context(), tok)
}

func (t tokens) VerifyToken(_ context.Context, token string) (*auth.Caller, error) {
	if c, ok := t[token]; ok {
		return c, nil
	}
	return nil, &auth.Error{Reason: "invalid token"}
}

type stubTemplates map[string]*templates.Template

func (s stubTemplates) Get(name string) (*templates.Template, bool) { t, ok := s[name]; return t, ok }

// Infos offers ns's own templates (keys "<ns>/<name>") and the others (plain names) not shadowed
// by one of them, as the registry does.
func (s stubTemplates) Infos(ns string) []frontend.TemplateInfo {
	var out []frontend.TemplateInfo
	for key, t := range s {
		where, name := workspace.SplitTemplateKey(key)
		switch {
		case where == "" && s[workspace.JoinTemplateKey(ns, name)] == nil:
			out = append(out, frontend.TemplateInfo{Name: t.Name, Version: t.Version, Description: t.Description, Valid: true})
		case where != "" && where == ns:
			out = append(out, frontend.TemplateInfo{Name: t.Name, Namespace: where, Version: t.Version, Description: t.Description, Valid: true})
		}
	}
	return out
}

func wsPod(owner, id, version string, ready bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "ws-" + id, Namespace: ns, UID: ktypes.UID("uid-" + id), CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)),
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
				workspace.LabelTemplate: "python", workspace.LabelTemplateVersion: version,
			},
			Annotations: map[string]string{workspace.AnnOwner: owner, workspace.AnnTemplateVersion: version, workspace.AnnWorkspacePath: "/u/" + id + "/"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide:" + version}}},
	}
	if ready {
		p.Spec.NodeName = "node-1"
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}}
	}
	return p
}

type fixture struct {
	ui   *UI
	srv  *httptest.Server
	k8s  client.Client
	hub  *Hub
	tmpl stubTemplates
}

func newFixture(t testing.TB, o Options, pods ...*corev1.Pod) *fixture {
	return newFixtureWith(t, o, nil, pods...)
}

// newFixtureWith is newFixture whose service keeps views fed by informer (nil: reads per call).
func newFixtureWith(t testing.TB, o Options, informer frontend.PodInformer, pods ...*corev1.Pod) *fixture {
	t.Helper()
	return newFixtureConfig(t, o, informer, nil, pods...)
}

// newFixtureConfig is newFixtureWith whose service Config is changed by cfg first (nil: none).
func newFixtureConfig(t testing.TB, o Options, informer frontend.PodInformer, cfg func(*frontend.Config), pods ...*corev1.Pod) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	objs := make([]client.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, frontend.IndexOwner, func(o client.Object) []string { return []string{o.GetAnnotations()[workspace.AnnOwner]} }).
		WithIndex(&corev1.Pod{}, podcache.IndexWorkspaceID, podcache.WorkspaceID).Build()
	tmpl := stubTemplates{"python": {Name: "python", Version: "2.0", Description: "Python 3",
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide", Env: []corev1.EnvVar{{Name: "REPO", Value: "${context.repo}"}, {Name: "LIT", Value: "$${context.literal}"}}}}}}}
	fc := frontend.Config{Namespace: ns, Cache: c, Client: c, Events: kfake.NewClientset().CoreV1(), Templates: tmpl, Pods: informer}
	if cfg != nil {
		cfg(&fc)
	}
	svc, err := frontend.New(fc)
	if err != nil {
		t.Fatal(err)
	}
	o.Service, o.Templates, o.DevLogin = svc, tmpl, true
	if o.Auth == nil {
		o.Auth = tokens{
			"alice-token": {Subject: "alice"},
			"bob-token":   {Subject: "bob"},
			"admin-token": {Subject: "root", IsAdmin: true},
		}
	}
	if o.Hub == nil {
		o.Hub = NewHub()
	}
	u, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(u.Handler())
	t.Cleanup(srv.Close)
	return &fixture{ui: u, srv: srv, k8s: c, hub: o.Hub, tmpl: tmpl}
}

// browser is an http.Client with a cookie jar that does not follow redirects, sending the
// headers a browser sends on a same-origin request.
type browser struct {
	t   *testing.T
	c   *http.Client
	url string
}

func (f *fixture) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, url: f.srv.URL, c: &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// stream opens path as b's event stream, bounded to 20 s (ctx, for the test's own calls too), and
// returns read: it reads until the stream has sent want and returns all the stream has sent so far.
// hdr are more request headers, name then value (Last-Event-ID, as a reconnecting browser sends).
func (b *browser) stream(t *testing.T, path string, hdr ...string) (read func(want string) string, ctx context.Context) {
	t.Helper()
	resp, ctx := b.openStream(t, path, hdr...)
	var got strings.Builder
	buf := make([]byte, 64<<10)
	return func(want string) string {
		t.Helper()
		for !strings.Contains(got.String(), want) {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n]) // the last bytes of a stream that ends can come with io.EOF
			if err != nil && !strings.Contains(got.String(), want) {
				t.Fatalf("stream ended (%v) before %q; got:\n%s", err, want, got.String())
			}
		}
		return got.String()
	}, ctx
}

// openStream sends the request of b's event stream at path, bounded to 20 s (ctx), and returns
// its answer, closed when the test ends. hdr are more request headers, name then value.
func (b *browser) openStream(t *testing.T, path string, hdr ...string) (*http.Response, context.Context) {
	t.Helper()
	req, _ := http.NewRequest("GET", b.url+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	resp, err := b.c.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, ctx
}

var sseConnectRe = regexp.MustCompile(`sse-connect="([^"]+)"`)

// streamURL loads the page at path and returns the URL of the stream it connects to.
func (b *browser) streamURL(t *testing.T, path string) string {
	t.Helper()
	_, page := b.do("GET", path, nil)
	m := sseConnectRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("GET %s has no stream:\n%s", path, page)
	}
	return html.UnescapeString(m[1])
}

// pageStream loads the page at path and opens its stream, as the browser does.
func (b *browser) pageStream(t *testing.T, path string) (read func(want string) string, ctx context.Context) {
	t.Helper()
	return b.stream(t, b.streamURL(t, path))
}

func (b *browser) do(method, path string, form url.Values, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.url+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

var (
	loginCSRFRe = regexp.MustCompile(`name="login_csrf" value="([^"]+)"`)
	csrfRe      = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// login logs in with token through the development login and returns the page's CSRF token.
func (b *browser) login(token string) string {
	b.t.Helper()
	_, page := b.do("GET", "/login", nil)
	m := loginCSRFRe.FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("login page has no login_csrf field:\n%s", page)
	}
	resp, body := b.do("POST", "/login", url.Values{"token": {token}, "login_csrf": {m[1]}, "next": {"/"}})
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("login: %s\n%s", resp.Status, body)
	}
	_, home := b.do("GET", "/", nil)
	c := csrfRe.FindStringSubmatch(home)
	if c == nil {
		b.t.Fatalf("home page has no csrf field:\n%s", home)
	}
	return c[1]
}

func TestDevLoginSetsAServerSideSessionCookieNeverTheToken(t *testing.T) {
	f := newFixture(t, Options{})
	b := f.browser(t)
	_, page := b.do("GET", "/login", nil)
	lc := loginCSRFRe.FindStringSubmatch(page)[1]

	resp, body := b.do("POST", "/login", url.Values{"token": {"wrong"}, "login_csrf": {lc}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "was not accepted") {
		t.Fatalf("a wrong token: %s, want 401 with a message", resp.Status)
	}
	for _, c := range resp.Cookies() {
		if strings.Contains(c.Name, "session") {
			t.Fatalf("a wrong token got a session cookie %s", c.Name)
		}
	}

	_, page = b.do("GET", "/login", nil)
	lc = loginCSRFRe.FindStringSubmatch(page)[1]
	resp, _ = b.do("POST", "/login", url.Values{"token": {"alice-token"}, "login_csrf": {lc}, "next": {"/workspaces/new"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/workspaces/new" {
		t.Fatalf("login: %s to %q, want 303 to /workspaces/new", resp.Status, resp.Header.Get("Location"))
	}
	var sc *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-nogoo9-session" {
			sc = c
		}
	}
	if sc == nil {
		t.Fatalf("no __Host-nogoo9-session cookie in %v", resp.Header.Values("Set-Cookie"))
	}
	if !sc.HttpOnly || !sc.Secure || sc.SameSite != http.SameSiteStrictMode || sc.Path != "/" || sc.Domain != "" {
		t.Errorf("session cookie attributes: %s; want HttpOnly, Secure, SameSite=Strict, Path=/, no Domain", resp.Header.Values("Set-Cookie"))
	}
	if strings.Contains(strings.Join(resp.Header.Values("Set-Cookie"), ";"), "alice-token") || len(sc.Value) < 40 {
		t.Errorf("the cookie carries the token or a short id: %q", sc.Value)
	}
}

func TestDevLoginRefusesAFormWithoutItsLoginCSRFToken(t *testing.T) {
	f := newFixture(t, Options{})
	b := f.browser(t)
	b.do("GET", "/login", nil) // sets the login cookie
	resp, _ := b.do("POST", "/login", url.Values{"token": {"alice-token"}, "login_csrf": {"forged"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login with a forged login_csrf: %s, want 403", resp.Status)
	}
}

func TestInsecureCookieDropsSecureAndThePrefix(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true})
	b := f.browser(t)
	b.login("alice-token")
	u, _ := url.Parse(f.srv.URL)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "nogoo9-session" {
			return
		}
	}
	t.Fatal("no nogoo9-session cookie with --ui-insecure-cookie")
}

func TestStateChangingRequestsNeedTheSessionsCSRFTokenAndSameOrigin(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true))
	b := f.browser(t)
	csrf := b.login("alice-token")
	intent := func() string {
		var p corev1.Pod
		if err := f.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "ws-a1"}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[workspace.AnnUpgradeRequested]
	}
	tests := []struct {
		name   string
		form   url.Values
		hdr    []string
		status int
	}{
		{"no token", url.Values{}, nil, http.StatusForbidden},
		{"a wrong token", url.Values{"csrf": {"x" + csrf}}, nil, http.StatusForbidden},
		{"the right token from a cross-site page", url.Values{"csrf": {csrf}}, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"the right token from a same-site but other origin page (a workspace)", url.Values{"csrf": {csrf}}, []string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := b.do("POST", "/workspaces/a1/upgrade", tc.form, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s, want %d", resp.Status, tc.status)
			}
			if intent() != "" {
				t.Fatal("a refused request recorded an upgrade")
			}
		})
	}
	resp, body := b.do("POST", "/workspaces/a1/upgrade", nil, "X-CSRF-Token", csrf, "HX-Request", "true")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Upgrade to 2.0 requested") {
		t.Fatalf("upgrade with the header token: %s %s", resp.Status, body)
	}
	if intent() == "" {
		t.Fatal("the upgrade was not recorded")
	}
}

func TestLogoutEndsTheSessionOnTheServer(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true})
	b := f.browser(t)
	csrf := b.login("alice-token")
	u, _ := url.Parse(f.srv.URL)
	stolen := b.c.Jar.Cookies(u)
	resp, _ := b.do("POST", "/logout", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %s", resp.Status)
	}
	if _, page := b.do("GET", resp.Header.Get("Location"), nil); !strings.Contains(page, "You are logged out.") {
		t.Errorf("the page logout leads to (%s) does not say so:\n%s", resp.Header.Get("Location"), page)
	}
	// A copy of the cookie taken before logout is worthless after it.
	b2 := f.browser(t)
	b2.c.Jar.SetCookies(u, stolen)
	resp, _ = b2.do("GET", "/", nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("the old cookie after logout: %s to %q, want a redirect to /login", resp.Status, resp.Header.Get("Location"))
	}
}

// The login page says nothing a link wrote: a URL names a notice by its code, and the single
// sign-on's error by a code of the OAuth specifications, never by words shown on nogoo9's own page
// ("nogoo9 has moved: log in at ..."). Before stop 48 the page showed ?error= as written.
func TestTheLoginPageShowsNoTextFromItsURL(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true})
	b := f.browser(t)
	const lure = "nogoo9 has moved: log in at https://nogoo9-corp.example"
	for _, q := range []string{"error=", "notice=", "error_description="} {
		_, page := b.do("GET", "/login?"+q+url.QueryEscape(lure), nil)
		if strings.Contains(page, "nogoo9-corp.example") {
			t.Errorf("GET /login?%s... shows the link's words:\n%s", q, page)
		}
	}
}

func TestAnotherUsersWorkspaceIsAccessDeniedWithTheServicesMessage(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("bob", "b1", "1.0", true))
	b := f.browser(t)
	csrf := b.login("alice-token")
	for _, tc := range []struct{ method, path string }{
		{"GET", "/workspaces/b1"}, {"GET", "/workspaces/b1/delete"}, {"POST", "/workspaces/b1/delete"}, {"POST", "/workspaces/b1/upgrade"},
	} {
		var form url.Values
		if tc.method == "POST" {
			form = url.Values{"csrf": {csrf}}
		}
		resp, body := b.do(tc.method, tc.path, form)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, frontend.MsgAccessDenied+": workspace &#34;b1&#34; belongs to another user") {
			t.Errorf("%s %s: %s, want 403 Access Denied\n%s", tc.method, tc.path, resp.Status, body)
		}
	}
	resp, _ := b.do("GET", "/?all=1", nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a user listing every user's workspaces: %s, want 403", resp.Status)
	}
}

func TestUpgradeAllButtonOnlyForAdminsAndOnlyWhenSomethingIsOutdated(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true), wsPod("bob", "b1", "2.0", true))
	user := f.browser(t)
	user.login("alice-token")
	_, page := user.do("GET", "/", nil)
	if strings.Contains(page, "Upgrade All Outdated") {
		t.Error("a user sees the Upgrade All Outdated button")
	}
	if !strings.Contains(page, "Outdated: 2.0 available") || !strings.Contains(page, "Ready") {
		t.Errorf("alice's row lacks the Outdated badge or its phase:\n%s", page)
	}
	admin := f.browser(t)
	csrf := admin.login("admin-token")
	_, page = admin.do("GET", "/?all=1", nil)
	if !strings.Contains(page, "Upgrade All Outdated (1)") {
		t.Errorf("the admin does not see the button with 1 outdated workspace:\n%s", page)
	}
	_, page = admin.do("GET", "/upgrade-all", nil)
	if !strings.Contains(page, "This upgrades 1 workspace of 1 user") {
		t.Errorf("confirmation does not say how many:\n%s", page)
	}
	resp, page := admin.do("POST", "/upgrade-all", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="result-a1"`) || strings.Contains(page, `id="result-b1"`) {
		t.Errorf("result page: %s\n%s", resp.Status, page)
	}
	_, page = admin.do("GET", "/upgrade-all", nil)
	if !strings.Contains(page, "No workspace is outdated") {
		// a1 has its intent recorded but is still on 1.0 until the controller acts: it is still
		// listed; what matters is that bob's up-to-date workspace never is.
		if strings.Contains(page, ">b1<") {
			t.Errorf("an up-to-date workspace is listed for upgrade:\n%s", page)
		}
	}
	resp, _ = user.do("POST", "/upgrade-all", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a user posting upgrade-all (even with a stolen CSRF token): %s, want 403", resp.Status)
	}
}

func TestSpawnErrorsAppearNextToTheirField(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true})
	b := f.browser(t)
	csrf := b.login("alice-token")
	_, page := b.do("GET", "/workspaces/new", nil)
	if !strings.Contains(page, `name="ctx.repo"`) || strings.Contains(page, "ctx.literal") {
		t.Errorf("the form does not ask for exactly the required context (repo):\n%s", page)
	}
	if strings.Contains(page, `name="namespace"`) {
		t.Errorf("with one watched namespace the form offers a namespace choice:\n%s", page)
	}
	resp, page := b.do("POST", "/workspaces", url.Values{"csrf": {csrf}, "template": {"python"}, "id": {"Not Valid!"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, `id="id-error"`) {
		t.Errorf("an invalid id: %s, error not next to the id field:\n%s", resp.Status, page)
	}
	resp, page = b.do("POST", "/workspaces", url.Values{"csrf": {csrf}, "template": {"nope"}, "id": {"x"}})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(page, `id="template-error"`) {
		t.Errorf("an unknown template: %s, error not next to the template field:\n%s", resp.Status, page)
	}
}

func TestListStreamSendsTheChangedRowWithoutPolling(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true), wsPod("bob", "b1", "1.0", true))
	b := f.browser(t)
	b.login("alice-token")
	read, ctx := b.pageStream(t, "/")
	read(": connected")
	// Bob's workspace changes: alice's stream must not show it. Then alice's goes Terminating.
	f.hub.changed("b1")
	var p corev1.Pod
	_ = f.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ws-a1"}, &p)
	p.Annotations[workspace.AnnMaintenance] = "disk move"
	if err := f.k8s.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	f.hub.changed("a1")
	got := read("</template>")
	if !strings.Contains(got, `id="ws-a1"`) || !strings.Contains(got, "Maintenance: disk move") || strings.Contains(got, "ws-b1") {
		t.Fatalf("stream event:\n%s", got)
	}
	if !strings.Contains(got, "event: update") || !strings.Contains(got, "data: <template><tr id=\"ws-a1\"") {
		t.Fatalf("not an SSE update event carrying the row:\n%s", got)
	}
}

func TestHubReplaysChangesSinceAPageAndFallsBackToEverything(t *testing.T) {
	h := NewHub()
	h.changed("a")
	page := h.Seq()
	h.changed("b")
	h.changed("b")
	s := h.Subscribe(page)
	ids, all, _ := s.Take()
	if all || len(ids) != 1 || ids[0] != "b" {
		t.Errorf("replay since the page: %v all=%v, want [b]", ids, all)
	}
	s.Close()
	for i := 0; i < ringSize+1; i++ {
		h.changed("x")
	}
	s = h.Subscribe(page)
	if _, all, _ := s.Take(); !all {
		t.Error("a page older than the ring did not get a full refresh")
	}
	h.TemplateChanged("python")
	if _, all, _ := s.Take(); !all {
		t.Error("a template change did not refresh everything")
	}
	s.Close()
	if len(h.subs) != 0 {
		t.Error("Close left the subscription registered")
	}
}

func TestSafeNextStaysOnThisSite(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/": "/", "/workspaces/a?x=1": "/workspaces/a?x=1", "//evil.example": "/",
		"https://evil.example/": "/", "/\\evil.example": "/", "javascript:alert(1)": "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPagesCarryAStrictContentSecurityPolicy(t *testing.T) {
	f := newFixture(t, Options{})
	resp, _ := f.browser(t).do("GET", "/login", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
}

func TestVendoredChecksums(t *testing.T) {
	readme, err := os.ReadFile("static/vendor/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"htmx.min.js", "htmx-ext-sse.min.js"} {
		b, err := staticFS.ReadFile("static/vendor/" + f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if !strings.Contains(string(readme), "`"+hex.EncodeToString(sum[:])+"`") {
			t.Errorf("%s: sha256 %x is not recorded in static/vendor/README.md", f, sum)
		}
	}
}

func TestPinToggleOnTheWorkspacePage(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true), wsPod("bob", "b1", "1.0", true))
	b := f.browser(t)
	csrf := b.login("alice-token")
	pinned := func(name string) string {
		var p corev1.Pod
		if err := f.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[workspace.AnnPinned]
	}
	if resp, _ := b.do("POST", "/workspaces/a1/pin", url.Values{"action": {"on"}}); resp.StatusCode != http.StatusForbidden || pinned("ws-a1") != "" {
		t.Fatalf("a pin without the CSRF token: %s, pinned %q; want 403 and nothing written", resp.Status, pinned("ws-a1"))
	}
	if resp, _ := b.do("POST", "/workspaces/b1/pin", url.Values{"csrf": {csrf}, "action": {"on"}}); resp.StatusCode != http.StatusForbidden || pinned("ws-b1") != "" {
		t.Fatalf("pinning another user's workspace: %s; want 403 and nothing written", resp.Status)
	}
	resp, _ := b.do("POST", "/workspaces/a1/pin", url.Values{"csrf": {csrf}, "action": {"on"}})
	if resp.StatusCode != http.StatusSeeOther || pinned("ws-a1") != "true" {
		t.Fatalf("pin: %s, pinned %q", resp.Status, pinned("ws-a1"))
	}
	resp, _ = b.do("POST", "/workspaces/a1/pin", url.Values{"csrf": {csrf}, "action": {"off"}})
	if resp.StatusCode != http.StatusSeeOther || pinned("ws-a1") != "" {
		t.Fatalf("unpin: %s, pinned %q", resp.Status, pinned("ws-a1"))
	}
}

// bobOnly is a pure stand-in for pkg/authz's SubjectAccessReview: only bob may spawn elsewhere.
type bobOnly struct{}

func (bobOnly) MaySpawn(_ context.Context, c *auth.Caller, namespace string) (bool, string, error) {
	if c.Subject == "bob" {
		return true, "", nil
	}
	return false, "no RoleBinding in " + namespace, nil
}

const otherNS = "team-b"

// spawnedContextKeys is where podSpawner records the context keys a spawn was given.
const spawnedContextKeys = "test/context-keys"

// podSpawner stands in for pkg/spawner (tested against a real API server there): it writes the
// workspace's pod where the service asks, so the request's namespace can be checked.
type podSpawner struct{ c client.Client }

func (s podSpawner) Spawn(ctx context.Context, r frontend.SpawnRequest) (*corev1.Pod, error) {
	p := wsPod(r.Owner, r.ID, "2.0", false)
	p.Namespace, p.UID, p.Annotations[workspace.AnnWorkspacePath] = r.Namespace, "", ""
	keys := slices.Sorted(maps.Keys(r.Context))
	p.Annotations[spawnedContextKeys] = strings.Join(keys, ",")
	return p, s.c.Create(ctx, p)
}

func twoNamespaces(c *frontend.Config) {
	c.Namespaces = []string{ns, otherNS}
	c.Access = bobOnly{}
	c.Spawner = podSpawner{c.Client}
}

func TestWorkspacesInAnotherNamespaceHaveTheirOwnPagesAndActions(t *testing.T) {
	other := wsPod("alice", "a1", "1.0", true) // the same id in another namespace
	other.Namespace, other.UID = otherNS, "uid-other-a1"
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, twoNamespaces, wsPod("alice", "a1", "1.0", true), other)
	b := f.browser(t)
	csrf := b.login("alice-token")
	pinned := func(namespace string) string {
		var p corev1.Pod
		if err := f.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "ws-a1"}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[workspace.AnnPinned]
	}
	_, list := b.do("GET", "/", nil)
	for _, want := range []string{`href="/workspaces/a1"`, `href="/namespaces/team-b/workspaces/a1"`, "namespace team-b", "namespace ns", `action="/namespaces/team-b/workspaces/a1/upgrade"`, `href="/namespaces/team-b/workspaces/a1/delete"`} {
		if !strings.Contains(list, want) {
			t.Errorf("the list lacks %s:\n%s", want, list)
		}
	}
	resp, page := b.do("GET", "/namespaces/team-b/workspaces/a1", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `action="/namespaces/team-b/workspaces/a1/pin"`) || !strings.Contains(page, "/namespaces/team-b/workspaces/a1/stream?since=") {
		t.Fatalf("the page in team-b: %s\n%s", resp.Status, page)
	}
	if resp, _ := b.do("POST", "/namespaces/team-b/workspaces/a1/pin", url.Values{"action": {"on"}}); resp.StatusCode != http.StatusForbidden || pinned(otherNS) != "" {
		t.Fatalf("a pin in team-b without the CSRF token: %s, pinned %q; want 403 and nothing written", resp.Status, pinned(otherNS))
	}
	if resp, _ := b.do("POST", "/namespaces/team-b/workspaces/a1/pin", url.Values{"csrf": {csrf}, "action": {"on"}}, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden || pinned(otherNS) != "" {
		t.Fatalf("a cross-site pin in team-b: %s; want 403 and nothing written", resp.Status)
	}
	resp, _ = b.do("POST", "/namespaces/team-b/workspaces/a1/pin", url.Values{"csrf": {csrf}, "action": {"on"}})
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/namespaces/team-b/workspaces/a1?done=pinned&id=a1&sig=") {
		t.Fatalf("pin in team-b: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	if pinned(otherNS) != "true" || pinned(ns) != "" {
		t.Fatalf("pinned team-b %q, ns %q: want only team-b's a1 pinned", pinned(otherNS), pinned(ns))
	}
	// The old path still means nogoo9's own namespace.
	resp, _ = b.do("POST", "/workspaces/a1/pin", url.Values{"csrf": {csrf}, "action": {"on"}})
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/workspaces/a1?done=pinned&id=a1&sig=") || pinned(ns) != "true" {
		t.Fatalf("pin by the old path: %s to %q, pinned %q", resp.Status, resp.Header.Get("Location"), pinned(ns))
	}
	resp, page = b.do("GET", "/namespaces/elsewhere/workspaces/a1", nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(page, "Not found: no workspace you can see has this address") || strings.Contains(page, "elsewhere") {
		t.Fatalf("an unwatched namespace: %s, want 404 saying there is no such workspace, without the link's namespace\n%s", resp.Status, page)
	}
}

func TestSpawnFormOffersTheWatchedNamespacesAndShowsTheRefusal(t *testing.T) {
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, twoNamespaces)
	b := f.browser(t)
	csrf := b.login("alice-token")
	_, page := b.do("GET", "/workspaces/new", nil)
	if !strings.Contains(page, `<option value="ns" selected>ns</option>`) || !strings.Contains(page, `<option value="team-b">team-b</option>`) {
		t.Fatalf("the form does not offer both namespaces with nogoo9's own chosen:\n%s", page)
	}
	form := url.Values{"csrf": {csrf}, "template": {"python"}, "id": {"x1"}, "namespace": {otherNS}, "ctx.repo": {"r"}}
	resp, page := b.do("POST", "/workspaces", form)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, `id="namespace-error"`) ||
		!strings.Contains(page, "Forbidden: alice may not create workspaces in namespace team-b") || !strings.Contains(page, `<option value="team-b" selected>`) {
		t.Fatalf("a refused namespace: %s, want 403 next to the namespace, the choice kept:\n%s", resp.Status, page)
	}
	var pods corev1.PodList
	if err := f.k8s.List(context.Background(), &pods, client.InNamespace(otherNS)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("a refused spawn left %d pods (%v)", len(pods.Items), err)
	}
	b2 := f.browser(t)
	csrf2 := b2.login("bob-token")
	form.Set("csrf", csrf2)
	if resp, page := b2.do("POST", "/workspaces", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bob's spawn in team-b: %s\n%s", resp.Status, page)
	}
	if err := f.k8s.List(context.Background(), &pods, client.InNamespace(otherNS)); err != nil || len(pods.Items) != 1 {
		t.Fatalf("bob's spawn in team-b: %d pods there (%v), want 1", len(pods.Items), err)
	}
	if _, list := b2.do("GET", "/", nil); !strings.Contains(list, `href="/namespaces/team-b/workspaces/x1"`) {
		t.Fatalf("bob's list lacks his workspace in team-b:\n%s", list)
	}
}

func TestSpawnFormOffersTheChosenNamespacesTemplates(t *testing.T) {
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, twoNamespaces)
	// team-b has its own python, which needs another context key than nogoo9's.
	f.tmpl[workspace.JoinTemplateKey(otherNS, "python")] = &templates.Template{Name: "python", Version: "7.0", Description: "team-b's Python",
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "team-ide", Env: []corev1.EnvVar{{Name: "BRANCH", Value: "${context.branch}"}}}}}}
	b := f.browser(t)
	csrf := b.login("bob-token")
	_, home := b.do("GET", "/workspaces/new", nil)
	if !strings.Contains(home, "Python 3") || strings.Contains(home, "team-b&#39;s Python") || !strings.Contains(home, `name="ctx.repo"`) || strings.Contains(home, `name="ctx.branch"`) {
		t.Fatalf("the form for nogoo9's namespace should offer nogoo9's python and its context key repo only:\n%s", home)
	}
	if !strings.Contains(home, `href="/workspaces/new?namespace=team-b"`) {
		t.Fatalf("the form lacks the link to team-b's templates:\n%s", home)
	}
	_, team := b.do("GET", "/workspaces/new?namespace=team-b", nil)
	if !strings.Contains(team, "team-b&#39;s Python") || strings.Contains(team, "Python 3") || !strings.Contains(team, `name="ctx.branch"`) || strings.Contains(team, `name="ctx.repo"`) ||
		!strings.Contains(team, `<option value="team-b" selected>`) {
		t.Fatalf("the form for team-b should offer team-b's python, its context key branch, and team-b chosen:\n%s", team)
	}
	resp, bad := b.do("GET", "/workspaces/new?namespace=elsewhere", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(bad, `id="namespace-error"`) || !strings.Contains(bad, "is not watched by nogoo9") || !strings.Contains(bad, "Python 3") {
		t.Fatalf("an unwatched namespace: %s, want the form with the message next to the choice and nogoo9's templates:\n%s", resp.Status, bad)
	}
	// alice may not spawn in team-b: she is told so next to the choice and sees nogoo9's templates only.
	alice := f.browser(t)
	alice.login("alice-token")
	resp, refused := alice.do("GET", "/workspaces/new?namespace=team-b", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(refused, `id="namespace-error"`) || !strings.Contains(refused, "alice may not create workspaces in namespace team-b") ||
		strings.Contains(refused, "team-b&#39;s Python") || !strings.Contains(refused, "Python 3") {
		t.Fatalf("team-b's form for alice, who may not spawn there: %s, want the refusal next to the choice and nogoo9's templates only:\n%s", resp.Status, refused)
	}
	// The spawn sends the chosen namespace's template's context key, not nogoo9's.
	form := url.Values{"csrf": {csrf}, "template": {"python"}, "id": {"t1"}, "namespace": {otherNS}, "ctx.branch": {"main"}, "ctx.repo": {"r"}}
	if resp, page := b.do("POST", "/workspaces", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bob's spawn of team-b's python: %s\n%s", resp.Status, page)
	}
	var p corev1.Pod
	if err := f.k8s.Get(context.Background(), client.ObjectKey{Namespace: otherNS, Name: "ws-t1"}, &p); err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations[spawnedContextKeys]; got != "branch" {
		t.Fatalf("the spawn in team-b was given context keys %q, want only team-b's python's: branch", got)
	}
}

func TestListStreamUpdatesTheRowOfAWorkspaceInAnotherNamespace(t *testing.T) {
	other := wsPod("alice", "a1", "1.0", true)
	other.Namespace = otherNS
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, twoNamespaces, other)
	b := f.browser(t)
	b.login("alice-token")
	read, ctx := b.pageStream(t, "/")
	read(": connected")
	var p corev1.Pod
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: otherNS, Name: "ws-a1"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Annotations[workspace.AnnMaintenance] = "disk move"
	if err := f.k8s.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	f.hub.changed("a1") // the hub names workspaces by id; a1 is not in nogoo9's own namespace
	got := read("</template>")
	if strings.Contains(got, `hx-swap-oob="delete"`) || !strings.Contains(got, `<tr id="ws-team-b_a1"`) || !strings.Contains(got, "Maintenance: disk move") {
		t.Fatalf("want team-b's a1 row updated (not a row deleted):\n%s", got)
	}
}

// The namespace filter: the chosen namespace is in the URL, the page and its live stream show
// only that namespace's rows (a user's own, or every user's for an admin), and a namespace that
// cannot be shown is a clear message next to the choice that does not repeat it, never a 500.
func TestNamespaceFilterKeepsToOneNamespaceInThePageAndItsStream(t *testing.T) {
	a2 := wsPod("alice", "a2", "1.0", true)
	a2.Namespace = otherNS
	b1 := wsPod("bob", "b1", "1.0", true)
	b1.Namespace = otherNS
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, twoNamespaces, wsPod("alice", "a1", "1.0", true), a2, b1)
	alice := f.browser(t)
	alice.login("alice-token")
	admin := f.browser(t)
	admin.login("admin-token")
	const (
		rowA1 = `href="/workspaces/a1"`
		rowA2 = `href="/namespaces/team-b/workspaces/a2"`
		rowB1 = `href="/namespaces/team-b/workspaces/b1"`
	)
	tests := []struct {
		name       string
		b          *browser
		path       string
		wantStatus int
		want, not  []string
	}{
		{"a user's list without a filter covers every watched namespace", alice, "/", 200,
			[]string{rowA1, rowA2, `<option value="">all namespaces</option>`, `id="namespace-filter"`}, []string{rowB1}},
		{"a user's list of one namespace", alice, "/?namespace=team-b", 200,
			[]string{rowA2, "<option selected>team-b</option>", "in namespace team-b", "/stream?namespace=team-b&amp;rows="}, []string{rowA1, rowB1}},
		{"an admin's list of nogoo9's own namespace", admin, "/?all=1&namespace=ns", 200,
			[]string{rowA1, "<option selected>ns</option>", `name="all" value="1"`}, []string{rowA2, rowB1}},
		{"an admin's list of the team namespace holds every user's there", admin, "/?all=1&namespace=team-b", 200,
			[]string{rowA2, rowB1}, []string{rowA1}},
		{"a namespace nogoo9 does not watch is not named back", alice, "/?namespace=elsewhere", 404,
			[]string{`id="namespace-error"`, "The namespace asked for is not watched by nogoo9: choose one of [ns, team-b]", `aria-invalid="true"`}, []string{rowA1, rowA2, "sse-connect", "elsewhere"}},
		{"a namespace that is no name is not shown", alice, "/?namespace=%3Cscript%3Ealert(1)%3C/script%3E", 400,
			[]string{`id="namespace-error"`, "The namespace asked for is not a namespace name: choose one of [ns, team-b]"}, []string{"alert(1)", rowA1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, page := tc.b.do("GET", tc.path, nil)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("GET %s: %s, want %d\n%s", tc.path, resp.Status, tc.wantStatus, page)
			}
			for _, s := range tc.want {
				if !strings.Contains(page, s) {
					t.Errorf("GET %s lacks %s", tc.path, s)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(page, s) {
					t.Errorf("GET %s shows %s", tc.path, s)
				}
			}
			if t.Failed() {
				t.Log(page)
			}
		})
	}

	t.Run("the stream of a filtered list sends the rows of that namespace only", func(t *testing.T) {
		read, ctx := alice.pageStream(t, "/?namespace=ns")
		read(": connected")
		for _, k := range []client.ObjectKey{{Namespace: otherNS, Name: "ws-a2"}, {Namespace: ns, Name: "ws-a1"}} {
			var p corev1.Pod
			if err := f.k8s.Get(ctx, k, &p); err != nil {
				t.Fatal(err)
			}
			p.Annotations[workspace.AnnMaintenance] = "disk move"
			if err := f.k8s.Update(ctx, &p); err != nil {
				t.Fatal(err)
			}
		}
		f.hub.changed("a2") // first: a row of team-b, which this page does not show
		f.hub.changed("a1")
		if got := read(`<tr id="ws-a1"`); strings.Contains(got, "ws-team-b_a2") {
			t.Fatalf("the stream of namespace ns sent team-b's a2:\n%s", got)
		}
	})
}

// A workspace deleted after its list page was rendered but before the page's stream connected
// (a browser under load is slow to connect): the stream reads its rows after the deletion, so a
// row-by-row update would never remove the row the page still shows. The replayed change sends
// the whole list, without it.
func TestListStreamRemovesARowDeletedBeforeTheStreamConnected(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true), wsPod("alice", "a2", "1.0", true))
	b := f.browser(t)
	b.login("alice-token")
	seq := f.hub.Seq()
	if _, page := b.do("GET", "/", nil); !strings.Contains(page, `id="ws-a2"`) {
		t.Fatalf("the page lacks a2:\n%s", page)
	}
	var p corev1.Pod
	if err := f.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "ws-a2"}, &p); err != nil {
		t.Fatal(err)
	}
	if err := f.k8s.Delete(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	f.hub.changed("a2")
	read, _ := b.stream(t, fmt.Sprintf("/stream?since=%d", seq))
	got := read("</template>")
	if !strings.Contains(got, `<tbody id="rows" hx-swap-oob="true">`) || !strings.Contains(got, `id="ws-a1"`) || strings.Contains(got, `id="ws-a2"`) {
		t.Fatalf("want the whole list without a2:\n%s", got)
	}
}

// The hub hears of a pod change after the cache holds it (it is one more handler on the pod
// informer, and handlers run behind the cache, more so under load). A workspace created after its
// list page was rendered can thus be in the rows the stream reads when it connects while the hub
// has not heard of it yet: nothing is replayed, and the notice that comes later was sent as a
// swap of a row the page never had, so the workspace never appeared on the page (nor did any of
// its later changes: the e2e spec saw a workspace never show Ready). The stream compares its
// rows with the page's (the rows digest in its URL) and sends the whole list when they differ.
func TestListStreamShowsAWorkspaceTheCacheHeldBeforeTheHubHeardOfIt(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true))
	b := f.browser(t)
	b.login("alice-token")
	stream := b.streamURL(t, "/") // the page shows a1 only
	if err := f.k8s.Create(context.Background(), wsPod("alice", "a2", "1.0", true)); err != nil {
		t.Fatal(err)
	}
	read, _ := b.stream(t, stream) // the cache has a2, the hub has not heard of it
	read(": connected")
	f.hub.changed("a2") // the hub's notice comes after the stream connected
	got := read("</template>")
	if !strings.Contains(got, `<tbody id="rows" hx-swap-oob="true">`) || !strings.Contains(got, `id="ws-a1"`) || !strings.Contains(got, `id="ws-a2"`) {
		t.Fatalf("want the whole list with a2 (the page lacks a2's row: a row swap would do nothing):\n%s", got)
	}
}

// The same race the other way: a workspace deleted after its list page was rendered, the hub
// not told yet when the stream reads its rows. Row by row, the late notice removed nothing (the
// stream's rows never had it) and the page kept a workspace that was gone.
func TestListStreamRemovesARowTheCacheDroppedBeforeTheHubHeardOfIt(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true), wsPod("alice", "a2", "1.0", true))
	b := f.browser(t)
	b.login("alice-token")
	stream := b.streamURL(t, "/") // the page shows a1 and a2
	if err := f.k8s.Delete(context.Background(), wsPod("alice", "a2", "1.0", true)); err != nil {
		t.Fatal(err)
	}
	read, _ := b.stream(t, stream)
	read(": connected")
	f.hub.changed("a2")
	got := read("</template>")
	if !strings.Contains(got, `<tbody id="rows" hx-swap-oob="true">`) || !strings.Contains(got, `id="ws-a1"`) || strings.Contains(got, `id="ws-a2"`) {
		t.Fatalf("want the whole list without a2:\n%s", got)
	}
}

// A browser that reconnects (Last-Event-ID) shows what its last stream sent, not what its page's
// rows digest describes: the stream cannot compare, so it sends the whole list at once. Here the
// last stream had added a2, a2 is deleted, and the hub has not heard of it when the browser
// reconnects: the new stream's rows equal the page's (a1), yet the browser shows a2 too.
func TestAReconnectingListStreamSendsTheWholeList(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true))
	b := f.browser(t)
	b.login("alice-token")
	stream := b.streamURL(t, "/")
	if err := f.k8s.Create(context.Background(), wsPod("alice", "a2", "1.0", true)); err != nil {
		t.Fatal(err)
	}
	f.hub.changed("a2")
	last := f.hub.Seq() // the last stream sent a2's row with this id, then ended
	if err := f.k8s.Delete(context.Background(), wsPod("alice", "a2", "1.0", true)); err != nil {
		t.Fatal(err)
	}
	read, _ := b.stream(t, stream, "Last-Event-ID", strconv.FormatUint(last, 10))
	read(": connected")
	f.hub.changed("a2")
	got := read("</template>")
	if !strings.Contains(got, `<tbody id="rows" hx-swap-oob="true">`) || !strings.Contains(got, `id="ws-a1"`) || strings.Contains(got, `id="ws-a2"`) {
		t.Fatalf("want the whole list without a2:\n%s", got)
	}
}

// stoppedClock is a clock that does not move: a rate limiter's bucket never refills during a test,
// however slowly the machine runs it.
func stoppedClock() func() time.Time {
	t0 := time.Now()
	return func() time.Time { return t0 }
}

// Failed token checks at the development login are limited per client address (auth.Guard): a
// client that sends garbage tokens waits (429, Retry-After), another client from another address
// logs in. Before stop 48 the login checked tokens without the address, so every client shared
// one bucket. The second browser connects from 127.0.0.2 (loopback).
func TestOneClientsGarbageTokensDoNotLockOthersOutOfTheLogin(t *testing.T) {
	f := newFixture(t, Options{Auth: auth.NewGuard(tokens{"alice-token": {Subject: "alice"}}, auth.GuardOptions{Now: stoppedClock()})})
	mallory, alice := f.browser(t), f.browser(t)
	alice.c.Transport = &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 10 * time.Second}).DialContext}
	t.Cleanup(alice.c.CloseIdleConnections)
	post := func(b *browser, token string) (*http.Response, string) {
		_, page := b.do("GET", "/login", nil)
		m := loginCSRFRe.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("login page has no login_csrf field:\n%s", page)
		}
		return b.do("POST", "/login", url.Values{"token": {token}, "login_csrf": {m[1]}, "next": {"/"}})
	}
	for i := range 30 { // past the per-client burst (10)
		post(mallory, fmt.Sprintf("garbage-%d", i))
	}
	if resp, body := post(mallory, "alice-token"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "Too many tokens were refused") {
		t.Fatalf("a valid token from the client that sent 30 garbage ones: %s (Retry-After %q), want 429 with Retry-After and a message", resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp, body := post(alice, "alice-token"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a valid token from another address: %s, want 303 (logged in)\n%s", resp.Status, body)
	}
}

// No page says what a link wrote, with a session or without: not the path of a page that does
// not exist, not a namespace or workspace id that names none (in the query or the path), not a
// confirmation nogoo9 did not issue. A link could otherwise make nogoo9's own page say "nogoo9
// has moved: log in at ..." (docs/security.md). Each page still says what to do. Before stop 49
// the 404 page, the namespace filter (its heading and its message) and the service's texts for a
// workspace or namespace that is none all repeated the link.
func TestPagesShowNoTextFromTheirURL(t *testing.T) {
	const (
		lure  = "nogoo9 has moved: log in at nogoo9-corp.example"
		label = "nogoo9-moved-log-in-at-nogoo9-corp" // a lure that is a valid workspace id
	)
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, twoNamespaces, wsPod("alice", "a1", "1.0", true))
	anon := f.browser(t)
	if resp, page := anon.do("GET", "/"+url.PathEscape(lure), nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(page, "go back to your workspaces") || strings.Contains(page, "nogoo9-corp") {
		t.Errorf("GET /<lure> without a session: %s, want 404 saying what to do and not the path\n%s", resp.Status, page)
	}
	b := f.browser(t)
	b.login("alice-token")
	for _, tc := range []struct {
		name, path string
		status     int
		says       string
	}{
		{"a page that does not exist", "/" + url.PathEscape(lure), 404, "nogoo9 has no page at this address"},
		{"the list filtered by a namespace that is no name", "/?namespace=" + url.QueryEscape(lure), 400, "choose one of [ns, team-b]"},
		{"the list filtered by a namespace nogoo9 does not watch", "/?namespace=" + label, 404, "choose one of [ns, team-b]"},
		{"the list's stream filtered by a namespace that is no name", "/stream?namespace=" + url.QueryEscape(lure), 400, "choose one of [ns, team-b]"},
		{"the new-workspace form for a namespace that is no name", "/workspaces/new?namespace=" + url.QueryEscape(lure), 200, "choose one of [ns, team-b]"},
		{"the new-workspace form for a namespace nogoo9 does not watch", "/workspaces/new?namespace=" + label, 200, "choose one of [ns, team-b]"},
		{"the page of a workspace id that is none", "/workspaces/" + url.PathEscape(lure), 400, "go back to your workspaces"},
		{"the page of a workspace that does not exist", "/workspaces/" + label, 404, "go back to your workspaces"},
		{"the delete page of a workspace that does not exist", "/workspaces/" + label + "/delete", 404, "go back to your workspaces"},
		{"the stream of a workspace that does not exist", "/workspaces/" + label + "/stream", 404, "go back to your workspaces"},
		{"a workspace in a namespace that is no name", "/namespaces/" + url.PathEscape(lure) + "/workspaces/a1", 400, "go back to your workspaces"},
		{"a workspace in a namespace nogoo9 does not watch", "/namespaces/" + label + "/workspaces/a1", 404, "go back to your workspaces"},
		{"a confirmation nogoo9 did not sign", "/?done=deleted&id=" + label, 200, "My workspaces"},
		{"a workspace page's confirmation nogoo9 did not sign", "/workspaces/a1?done=pinned&id=" + label, 200, "Workspace a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, page := b.do("GET", tc.path, nil)
			if resp.StatusCode != tc.status || !strings.Contains(page, tc.says) {
				t.Errorf("GET %s: %s, want %d saying %q\n%s", tc.path, resp.Status, tc.status, tc.says, page)
			}
			if strings.Contains(page, "nogoo9-corp") {
				t.Errorf("GET %s shows the link's words:\n%s", tc.path, page)
			}
		})
	}
}

// A form over the 64 KiB bound is refused as too large, saying so and how large it may be. Before
// stop 49 the bound cut the form short unseen, its CSRF token read as missing, and the person who
// pasted a long value was told the form was stale (403).
func TestAFormOverTheBoundIsRefusedAsTooLargeNotAsStale(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true))
	b := f.browser(t)
	csrf := b.login("alice-token")
	big := strings.Repeat("x", 70<<10)
	form := url.Values{"csrf": {csrf}, "template": {"python"}, "id": {"big"}, "ctx.repo": {big}}
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"a page's form", nil},
		{"htmx's request, its token in a header", []string{"HX-Request", "true", "X-CSRF-Token", csrf}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, page := b.do("POST", "/workspaces", form, tc.hdr...)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(page, "the form is larger than 64 KiB; go back, shorten") {
				t.Errorf("a 70 KiB form: %s, want 413 naming the bound\n%s", resp.Status, page)
			}
		})
	}
	t.Run("a multipart form", func(t *testing.T) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for k, v := range form {
			_ = mw.WriteField(k, v[0])
		}
		_ = mw.Close()
		req, _ := http.NewRequest("POST", b.url+"/workspaces", &body)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a 70 KiB multipart form: %s, want 413", resp.Status)
		}
	})
	var pods corev1.PodList
	if err := f.k8s.List(context.Background(), &pods); err != nil || len(pods.Items) != 1 {
		t.Fatalf("a refused form changed the pods: %d, want a1 only (%v)", len(pods.Items), err)
	}
	// Under the bound nothing changed: the token is read from the form as before.
	if resp, page := b.do("POST", "/workspaces/a1/pin", url.Values{"csrf": {csrf}, "action": {"on"}, "padding": {strings.Repeat("x", 60<<10)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a 60 KiB form: %s, want it done (303)\n%s", resp.Status, page)
	}
}

var (
	elementIDRe = regexp.MustCompile(`\sid="([^"]*)"`)
	plainIDRe   = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
)

// htmx swaps out of band every element whose id a fragment names, so an id on a page must be one
// element's. A workspace's id is its tenant's choice (or any label a writer of pods sets): "all-slot"
// gave its Upgrade button the id of the header's slot (upgrade-all-slot), which every live update
// of an admin's list swaps, and the same id in nogoo9's namespace as "<ns>_<id>" elsewhere gave
// two rows one id. Every page and stream fragment here holds each id once.
func TestAWorkspaceIdCannotTakeAnotherElementsId(t *testing.T) {
	var pods []*corev1.Pod
	for _, id := range []string{"all-slot", "all", "all-summary", "all-result", "rows", "rows-empty", "summary", "events", "main", "logout", "live-status"} {
		pods = append(pods, wsPod("bob", id, "1.0", true))
	}
	underscored := wsPod("bob", "team-b_a1", "1.0", true) // a label value, not an id a spawn allows
	other := wsPod("alice", "a1", "1.0", true)
	other.Namespace, other.UID = otherNS, "uid-other-a1"
	dotted := wsPod("alice", "a.b", "1.0", true)
	pods = append(pods, underscored, other, dotted)
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, twoNamespaces, pods...)
	admin := f.browser(t)
	csrf := admin.login("admin-token")
	unique := func(t *testing.T, what, page string) {
		t.Helper()
		seen := map[string]bool{}
		for _, m := range elementIDRe.FindAllStringSubmatch(page, -1) {
			if seen[m[1]] {
				t.Errorf("%s: id=%q is on more than one element", what, m[1])
			}
			seen[m[1]] = true
			if !plainIDRe.MatchString(m[1]) {
				t.Errorf("%s: id=%q is not a plain CSS identifier (htmx finds targets by selector)", what, m[1])
			}
		}
		if !seen["upgrade-all-slot"] {
			t.Errorf("%s lacks the header's upgrade-all-slot", what)
		}
	}
	_, list := admin.do("GET", "/?all=1", nil)
	if strings.Count(list, "<tr id=") != len(pods) {
		t.Fatalf("the list does not show the %d workspaces:\n%s", len(pods), list)
	}
	unique(t, "the list", list)
	if !strings.Contains(list, `id="ws-all-slot__upgrade"`) || !strings.Contains(list, `hx-target="#ws-all-slot__msg"`) {
		t.Errorf("the list lacks all-slot's Upgrade button or its message target")
	}
	if n := strings.Count(list, `<tr id="ws-_`); n != 2 || !strings.Contains(list, `<tr id="ws-team-b_a1"`) {
		t.Errorf("want team-b's a1 as ws-team-b_a1 and the ids team-b_a1 and a.b hex-encoded (2 rows), got %d encoded", n)
	}
	_, page := admin.do("GET", "/workspaces/all-slot", nil)
	unique(t, "all-slot's page", page)
	read, _ := admin.pageStream(t, "/?all=1")
	read("upgrade-all-slot") // the stream's first update: the header's button
	f.hub.changed("all-slot")
	unique(t, "the stream's header and row updates", read("id: ")) // the row's update

	_, page = admin.do("GET", "/upgrade-all", nil)
	unique(t, "the upgrade-all confirmation", page)
	_, page = admin.do("POST", "/upgrade-all", url.Values{"csrf": {csrf}})
	unique(t, "the upgrade-all result", page)
}

// An element id made from data starts with a prefix reserved for it (ws- for a workspace's
// elements, result- for a result's row, tpl- for a template's choice, ctx- for a context field),
// and no fixed id, in a template or in the fragments the streams write, starts with one: data
// can then never make an id a page already has.
func TestNoFixedElementIDStartsWithAPrefixReservedForData(t *testing.T) {
	reserved := []string{"ws-", "result-", "tpl-", "ctx-"}
	var sources []string
	_ = fs.WalkDir(templateFS, "templates", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			sources = append(sources, path)
		}
		return nil
	})
	goFiles, _ := filepath.Glob("*.go")
	for _, g := range goFiles {
		if !strings.HasSuffix(g, "_test.go") {
			sources = append(sources, g)
		}
	}
	fixed := 0
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\bid=\\?"([^"\\]*)\\?"`).FindAllStringSubmatch(string(b), -1) {
			id := m[1]
			fromData := strings.Contains(id, "{{") || strings.Contains(id, "%")
			prefixed := slices.ContainsFunc(reserved, func(p string) bool { return strings.HasPrefix(id, p) })
			switch {
			case fromData && !prefixed:
				t.Errorf("%s: id=%q is made from data without a reserved prefix %v", src, id, reserved)
			case !fromData && prefixed:
				t.Errorf("%s: the fixed id=%q starts with a prefix reserved for ids made from data %v", src, id, reserved)
			case !fromData:
				fixed++
			}
		}
	}
	if fixed < 20 {
		t.Fatalf("found only %d fixed ids in %v: the search is broken", fixed, sources)
	}
}

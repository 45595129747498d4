package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// originsProxy is a proxy with per-workspace origins under https://ws.example.com, routing jane's
// demo (its preview public) and bob's other to one backend, which counts what reaches it, and
// mallory's evil, whose public preview claims a path inside jane's workspace, to another.
type originsProxy struct {
	p       *Proxy
	o       *workspace.Origins
	reached *atomic.Int64
	// evilReached counts the requests that reached mallory's pod.
	evilReached *atomic.Int64
	// demo, preview and other are the hosts of jane's demo, its preview and bob's other.
	demo, preview, other string
}

func newOriginsProxy(t *testing.T) *originsProxy {
	t.Helper()
	var reached atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = w.Write([]byte("workspace page"))
	}))
	t.Cleanup(backend.Close)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	var evilReached atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evilReached.Add(1)
		_, _ = w.Write([]byte("alert(document.cookie)"))
	}))
	t.Cleanup(evil.Close)
	evilHost, evilPort, _ := net.SplitHostPort(strings.TrimPrefix(evil.URL, "http://"))
	o, err := workspace.ParseOrigins("https://ws.example.com")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(verifierOnly{}, Options{BindAddress: ":0", Origins: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.transport.CloseIdleConnections)
	p.PodChanged(podAt("jane", "demo", host, port, true))
	p.PodChanged(podAt("bob", "other", host, port, false))
	// A tenant's path annotation can claim a prefix inside another workspace's (the admission
	// policy refuses it only where it is bound): the longest prefix wins the path.
	squat := podAt("mallory", "evil", evilHost, evilPort, true)
	squat.Annotations[workspace.AnnPreviewPath] = "/ws/jane/demo/static/"
	p.PodChanged(squat)
	return &originsProxy{
		p: p, o: o, reached: &reached, evilReached: &evilReached,
		demo:    o.HostFor("default", "demo", false),
		preview: o.HostFor("default", "demo", true),
		other:   o.HostFor("default", "other", false),
	}
}

// do serves one request to host with the given fields and reports the answer and whether it
// reached the workspace.
func (op *originsProxy) do(method, host, target string, form url.Values, hdr map[string]string) (*httptest.ResponseRecorder, bool) {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req := httptest.NewRequest(method, "https://"+host+target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	before, evilBefore := op.reached.Load(), op.evilReached.Load()
	w := httptest.NewRecorder()
	op.p.ServeHTTP(w, req)
	if op.evilReached.Load() != evilBefore {
		panic("a request to " + host + target + " reached the pod that claims a path inside another workspace")
	}
	return w, op.reached.Load() != before
}

func withCookie(hdr map[string]string) map[string]string {
	out := map[string]string{"Cookie": CookieName + "=good"}
	for k, v := range hdr {
		out[k] = v
	}
	return out
}

// TestOriginsServeAWorkspaceOnlyToItsOwnHostsPages: with per-workspace origins, a request that
// carries the login cookie reaches a workspace only on that workspace's host and only when a page
// of that host (or the person, by navigating) sent it. Every row that must not reach the workspace
// would reach it on one shared origin, where the cookie goes with every request of every page.
func TestOriginsServeAWorkspaceOnlyToItsOwnHostsPages(t *testing.T) {
	op := newOriginsProxy(t)
	demoOrigin := "https://" + op.demo
	otherOrigin := "https://" + op.other
	tests := []struct {
		name         string
		method, host string
		path         string
		hdr          map[string]string
		wantCode     int
		wantLocation string
	}{
		{"its own page's fetch", "GET", op.demo, "/ws/jane/demo/x", withCookie(map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}), 200, ""},
		{"its own page's form post", "POST", op.demo, "/ws/jane/demo/x", withCookie(map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate", "Origin": demoOrigin}), 200, ""},
		{"a bookmark or a typed address", "GET", op.demo, "/ws/jane/demo/", withCookie(map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}), 200, ""},
		{"a link from another site's page", "GET", op.demo, "/ws/jane/demo/", withCookie(map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}), 200, ""},
		{"its own page's script, in a path another workspace claims", "GET", op.demo, "/ws/jane/demo/static/app.js", withCookie(map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"}), 200, ""},
		{"another workspace's page framing it (clickjacking)", "GET", op.demo, "/ws/jane/demo/", withCookie(map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}), 403, ""},
		{"a browser without fetch metadata: a script or an image of any page looks the same", "GET", op.demo, "/ws/jane/demo/", withCookie(nil), 403, ""},
		{"another workspace's page fetching it", "GET", op.demo, "/ws/jane/demo/secret", withCookie(map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Origin": otherOrigin}), 403, ""},
		{"another workspace's page opening its WebSocket", "GET", op.demo, "/ws/jane/demo/term", withCookie(map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "websocket", "Origin": otherOrigin}), 403, ""},
		{"another workspace's page posting a form to it", "POST", op.demo, "/ws/jane/demo/run", withCookie(map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Origin": otherOrigin}), 403, ""},
		{"another site's no-cors image", "GET", op.demo, "/ws/jane/demo/x", withCookie(map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}), 403, ""},
		{"an old browser, another Origin", "POST", op.demo, "/ws/jane/demo/run", withCookie(map[string]string{"Origin": otherOrigin}), 403, ""},
		{"a sandboxed frame (Origin null)", "POST", op.demo, "/ws/jane/demo/run", withCookie(map[string]string{"Origin": "null"}), 403, ""},
		{"its path on the apex host", "GET", "ws.example.com", "/ws/jane/demo/x?y=1", withCookie(nil), 307, demoOrigin + "/ws/jane/demo/x?y=1"},
		{"its path on another workspace's host", "GET", op.other, "/ws/jane/demo/secret", withCookie(map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}), 404, ""},
		{"its path on another workspace's host, anonymous (no probing)", "GET", op.other, "/ws/jane/demo/", nil, 404, ""},
		{"a post to its path on another workspace's host", "POST", op.other, "/ws/jane/demo/run", withCookie(map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": otherOrigin}), 404, ""},
		{"a post to its path on the apex", "POST", "ws.example.com", "/ws/jane/demo/run", withCookie(nil), 421, ""},
		{"its path on a host outside the domain", "GET", "proxy.internal:8091", "/ws/jane/demo/", withCookie(nil), 307, demoOrigin + "/ws/jane/demo/"},
		{"its preview on the workspace's host", "GET", op.demo, "/preview/jane/demo/", nil, 404, ""},
		{"its preview on the apex", "GET", "ws.example.com", "/preview/jane/demo/", nil, 307, "https://" + op.preview + "/preview/jane/demo/"},
		{"its prefix without the slash", "GET", op.demo, "/ws/jane/demo", withCookie(nil), 308, "/ws/jane/demo/"},
		{"its public preview on the preview's host, anonymous", "GET", op.preview, "/preview/jane/demo/", nil, 200, ""},
		{"a program's bearer token on any host", "POST", "proxy.internal:8091", "/ws/jane/demo/api", map[string]string{"Authorization": "Bearer good", "Origin": otherOrigin}, 200, ""},
		{"a navigation without a login goes to the apex's login", "GET", op.demo, "/ws/jane/demo/x?y=1", map[string]string{"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Site": "none"}, 303,
			"https://ws.example.com/_nogoo9/login?next=" + url.QueryEscape(demoOrigin+"/ws/jane/demo/x?y=1")},
		{"a script without a login gets 401", "GET", op.demo, "/ws/jane/demo/x", map[string]string{"Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "same-origin"}, 401, ""},
		{"a navigation to its path on the apex without a login goes to the apex's login", "GET", "ws.example.com", "/ws/jane/demo/x", map[string]string{"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Site": "none"}, 303,
			"https://ws.example.com/_nogoo9/login?next=" + url.QueryEscape("/ws/jane/demo/x")},
		{"another user's workspace on its own host", "GET", op.other, "/ws/bob/other/", withCookie(map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}), 403, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, reached := op.do(tc.method, tc.host, tc.path, nil, tc.hdr)
			if w.Code != tc.wantCode || w.Header().Get("Location") != tc.wantLocation {
				t.Fatalf("%s %s%s: %d Location %q (%s), want %d Location %q", tc.method, tc.host, tc.path, w.Code, w.Header().Get("Location"), strings.TrimSpace(w.Body.String()), tc.wantCode, tc.wantLocation)
			}
			if reached != (tc.wantCode == 200) {
				t.Fatalf("reached the workspace: %v, want %v", reached, tc.wantCode == 200)
			}
		})
	}
}

// TestOriginsLoginHappensOnTheApexAndIsHandedToTheWorkspaceHost: a workspace host never shows a
// login form (its own pages could read what is typed into it) and takes a token only from the
// apex's hand-off page; the apex hands a token only to a workspace host of its own domain.
func TestOriginsLoginHappensOnTheApexAndIsHandedToTheWorkspaceHost(t *testing.T) {
	op := newOriginsProxy(t)
	apex := "https://ws.example.com"
	demoURL := "https://" + op.demo + "/ws/jane/demo/x?y=1"
	apexPost := map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": apex}

	t.Run("the workspace host sends GET to the apex's form", func(t *testing.T) {
		w, _ := op.do("GET", op.demo, "/_nogoo9/login?next=/ws/jane/demo/", nil, nil)
		want := apex + "/_nogoo9/login?next=" + url.QueryEscape("https://"+op.demo+"/ws/jane/demo/")
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != want || strings.Contains(w.Body.String(), "<form") {
			t.Fatalf("%d Location %q body %q, want 303 to %q and no form", w.Code, w.Header().Get("Location"), w.Body.String(), want)
		}
	})
	t.Run("another name of the proxy sends its login to the apex", func(t *testing.T) {
		w, _ := op.do("GET", "proxy.internal:8091", "/_nogoo9/login?next=%2Fws%2F", nil, nil)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != apex+"/_nogoo9/login?next=%2Fws%2F" {
			t.Fatalf("%d Location %q, want 303 to the apex's login", w.Code, w.Header().Get("Location"))
		}
		w, _ = op.do("POST", "proxy.internal:8091", "/_nogoo9/login", url.Values{"token": {"good"}}, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "https://proxy.internal:8091"})
		if w.Code != http.StatusMisdirectedRequest || cookieNamed(w, CookieName) != nil {
			t.Fatalf("%d cookie %+v, want 421 and no cookie", w.Code, cookieNamed(w, CookieName))
		}
	})
	t.Run("the apex's form keeps a workspace host's address", func(t *testing.T) {
		w, _ := op.do("GET", "ws.example.com", "/_nogoo9/login?next="+url.QueryEscape(demoURL), nil, nil)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `value="`+strings.ReplaceAll(demoURL, "&", "&amp;")+`"`) {
			t.Fatalf("%d %q, want the form with next %q", w.Code, w.Body.String(), demoURL)
		}
	})
	for _, next := range []string{
		"https://evil.example/", "https://a.b.ws.example.com/", "http://" + op.demo + "/", "https://" + op.demo + ".evil.example/",
		"https://jane@" + op.demo + "/",
	} {
		t.Run("no hand-off to "+next, func(t *testing.T) {
			w, _ := op.do("POST", "ws.example.com", "/_nogoo9/login", url.Values{"token": {"good"}, "next": {next}}, apexPost)
			if strings.Contains(w.Body.String(), "good") || w.Header().Get("Content-Security-Policy") != "frame-ancestors 'none'" {
				t.Fatalf("%d %q CSP %q: the token left the apex", w.Code, w.Body.String(), w.Header().Get("Content-Security-Policy"))
			}
			if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") {
				t.Fatalf("%d Location %q, want a 303 on the apex", w.Code, loc)
			}
		})
	}

	t.Run("a hand-off's path stays on the workspace host", func(t *testing.T) {
		w, _ := op.do("POST", "ws.example.com", "/_nogoo9/login", url.Values{"token": {"good"}, "next": {"https://" + op.demo + "/\\evil.example"}}, apexPost)
		checkHandoff(t, w, "https://"+op.demo, "/")
	})

	var handoff *httptest.ResponseRecorder
	t.Run("a login on the apex hands the token to the workspace host", func(t *testing.T) {
		w, _ := op.do("POST", "ws.example.com", "/_nogoo9/login", url.Values{"token": {"good"}, "next": {demoURL}}, apexPost)
		handoff = w
		checkHandoff(t, w, "https://"+op.demo, "/ws/jane/demo/x?y=1")
		if c := cookieNamed(w, CookieName); c == nil || c.Value != "good" || c.Domain != "" {
			t.Fatalf("apex cookie %+v, want the token, host-only", c)
		}
	})
	t.Run("a valid apex cookie hands off without a form", func(t *testing.T) {
		w, _ := op.do("GET", "ws.example.com", "/_nogoo9/login?next="+url.QueryEscape(demoURL), nil, withCookie(nil))
		checkHandoff(t, w, "https://"+op.demo, "/ws/jane/demo/x?y=1")
	})
	t.Run("the hand-off page's script is the one its policy allows", func(t *testing.T) {
		m := regexp.MustCompile(`<script>(.*)</script>`).FindStringSubmatch(handoff.Body.String())
		if m == nil {
			t.Fatalf("no script in %q", handoff.Body.String())
		}
		sum := sha256.Sum256([]byte(m[1]))
		if want := "script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(handoff.Header().Get("Content-Security-Policy"), want) {
			t.Fatalf("CSP %q does not allow the page's script (%s)", handoff.Header().Get("Content-Security-Policy"), want)
		}
	})

	form := url.Values{"token": {"good"}, "next": {"/ws/jane/demo/x?y=1"}}
	t.Run("the workspace host takes the hand-off", func(t *testing.T) {
		w, _ := op.do("POST", op.demo, "/_nogoo9/login", form, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": apex})
		if c := cookieNamed(w, CookieName); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ws/jane/demo/x?y=1" || c == nil || c.Value != "good" || c.Domain != "" || !c.HttpOnly || !c.Secure {
			t.Fatalf("%d Location %q cookie %+v, want 303 to the path with a host-only HttpOnly Secure cookie", w.Code, w.Header().Get("Location"), c)
		}
	})
	for name, hdr := range map[string]map[string]string{
		"its own page (login CSRF)":     {"Sec-Fetch-Site": "same-origin", "Origin": "https://" + op.demo},
		"another workspace's page":      {"Sec-Fetch-Site": "same-site", "Origin": "https://" + op.other},
		"a post without Origin":         nil,
		"a post with Origin null":       {"Origin": "null"},
		"the apex's origin over http":   {"Origin": "http://ws.example.com"},
		"a look-alike of the apex host": {"Origin": "https://ws.example.com.evil.example"},
	} {
		t.Run("the workspace host refuses a login from "+name, func(t *testing.T) {
			w, _ := op.do("POST", op.demo, "/_nogoo9/login", form, hdr)
			if w.Code != http.StatusForbidden || cookieNamed(w, CookieName) != nil {
				t.Fatalf("%d %q with cookie %+v, want 403 and no cookie", w.Code, w.Body.String(), cookieNamed(w, CookieName))
			}
		})
	}
	t.Run("the workspace host refuses a bad token", func(t *testing.T) {
		w, _ := op.do("POST", op.demo, "/_nogoo9/login", url.Values{"token": {"forged"}}, map[string]string{"Origin": apex})
		if w.Code != http.StatusUnauthorized || cookieNamed(w, CookieName) != nil {
			t.Fatalf("%d with cookie %+v, want 401 and no cookie", w.Code, cookieNamed(w, CookieName))
		}
	})
}

func TestCrossSiteUse(t *testing.T) {
	own := "https://demo-x.ws.example.com"
	allowed := []string{"https://ide.example.com"}
	for _, tc := range []struct {
		name   string
		method string
		hdr    map[string]string
		pass   bool
	}{
		{"same-origin fetch", "GET", map[string]string{"Sec-Fetch-Site": "same-origin"}, true},
		{"same-origin post with its Origin", "POST", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": own}, true},
		{"same-origin with another Origin", "POST", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "https://other.ws.example.com"}, false},
		{"typed address", "GET", map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, true},
		{"link from another site", "GET", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, true},
		{"form post from another site", "POST", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, false},
		{"frame from a sibling host", "GET", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}, false},
		{"image from a sibling host", "GET", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}, false},
		{"an unknown Sec-Fetch-Site", "GET", map[string]string{"Sec-Fetch-Site": "same-planet"}, false},
		{"WebSocket from its own page, with metadata", "GET", map[string]string{"Upgrade": "websocket", "Origin": own, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "websocket"}, true},
		{"WebSocket from its own page, no metadata", "GET", map[string]string{"Upgrade": "websocket", "Origin": own}, true},
		{"WebSocket from a sibling host", "GET", map[string]string{"Upgrade": "websocket", "Origin": "https://other.ws.example.com", "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "websocket"}, false},
		{"WebSocket from a sibling host, no metadata", "GET", map[string]string{"Upgrade": "websocket", "Origin": "https://other.ws.example.com"}, false},
		{"WebSocket from an allowed origin", "GET", map[string]string{"Upgrade": "websocket", "Origin": "https://ide.example.com", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "websocket"}, true},
		{"a fetch from an allowed origin (only WebSockets are)", "POST", map[string]string{"Origin": "https://ide.example.com", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, false},
		{"no metadata, no Origin", "GET", nil, false},
	} {
		h := http.Header{}
		for k, v := range tc.hdr {
			h.Set(k, v)
		}
		if why := crossSiteUse(h, tc.method, own, allowed); (why == "") != tc.pass {
			t.Errorf("%s: crossSiteUse = %q, want pass %v", tc.name, why, tc.pass)
		}
	}
}

// TestALoginCookieIsReadOnlyUnderItsOwnName: a page can set a cookie whose name is the login
// cookie's behind a Unicode space (no prefix rules then apply: any path, Domain= a parent); the
// browser sends it with the space, and strings.TrimSpace would have read it as the login cookie.
func TestALoginCookieIsReadOnlyUnderItsOwnName(t *testing.T) {
	for _, line := range []string{"\u2000" + CookieName + "=attacker", "\u00a0" + CookieName + "=attacker", "\u3000" + CookieName + "=attacker; a=b"} {
		if v, found, _ := cookieValue([]string{line}, CookieName); found {
			t.Errorf("cookieValue(%q) found the login cookie %q", line, v)
		}
	}
	if v, found, _ := cookieValue([]string{"a=b;\t " + CookieName + "=good "}, CookieName); !found || v != "good" {
		t.Errorf("the login cookie after a tab and a space: %q, %v", v, found)
	}
}

func checkHandoff(t *testing.T, w *httptest.ResponseRecorder, origin, next string) {
	t.Helper()
	body, csp := w.Body.String(), w.Header().Get("Content-Security-Policy")
	if w.Code != 200 || !strings.Contains(body, `action="`+origin+`/_nogoo9/login"`) || !strings.Contains(body, `name="token" value="good"`) ||
		!strings.Contains(body, `name="next" value="`+strings.ReplaceAll(next, "&", "&amp;")+`"`) {
		t.Fatalf("%d %q, want the hand-off form to %s with next %q", w.Code, body, origin, next)
	}
	if !strings.Contains(csp, "form-action "+origin+";") || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q, want form-action %s only, nothing else loaded, never framed", csp, origin)
	}
	if rp := w.Header().Get("Referrer-Policy"); rp != "strict-origin" {
		t.Fatalf("Referrer-Policy %q: with no-referrer the browser posts Origin: null, which the host refuses", rp)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q, want no-store: the page holds a token", cc)
	}
}

func TestOriginsOverPlainHTTPNeedTheInsecureCookie(t *testing.T) {
	if _, err := New(verifierOnly{}, Options{BindAddress: ":0", Origins: &workspace.Origins{Scheme: "http", Host: "ws.localhost:8091"}}); err == nil || !strings.Contains(err.Error(), "--insecure-cookie") {
		t.Fatalf("plain http without --insecure-cookie: %v, want an error naming --insecure-cookie", err)
	}
	if _, err := New(verifierOnly{}, Options{BindAddress: ":0", InsecureCookie: true, Origins: &workspace.Origins{Scheme: "http", Host: "ws.localhost:8091"}}); err != nil {
		t.Fatal(err)
	}
}

// TestOriginsLogoutAtTheApexLogsOutEveryHostItLoggedIn: each workspace host has its own cookie,
// so a logout at the apex alone left every workspace open in the browser. The apex remembers the
// hosts it handed a login to and, on logout, posts a logout to each in turn.
func TestOriginsLogoutAtTheApexLogsOutEveryHostItLoggedIn(t *testing.T) {
	op := newOriginsProxy(t)
	apex := "https://ws.example.com"
	apexPost := map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": apex}
	hostsName := "__Host-nogoo9_hosts"
	label := func(host string) string { return strings.TrimSuffix(host, ".ws.example.com") }

	// Two hand-offs: demo, then other (most recent first).
	w, _ := op.do("POST", "ws.example.com", "/_nogoo9/login", url.Values{"token": {"good"}, "next": {"https://" + op.demo + "/ws/jane/demo/"}}, apexPost)
	c := cookieNamed(w, hostsName)
	if c == nil || c.Value != label(op.demo) || !c.HttpOnly || !c.Secure {
		t.Fatalf("hosts cookie after the first hand-off: %+v", c)
	}
	w, _ = op.do("GET", "ws.example.com", "/_nogoo9/login?next="+url.QueryEscape("https://"+op.other+"/ws/bob/other/"), nil,
		map[string]string{"Cookie": CookieName + "=good; " + hostsName + "=" + c.Value})
	if c = cookieNamed(w, hostsName); c == nil || c.Value != label(op.other)+"."+label(op.demo) {
		t.Fatalf("hosts cookie after the second hand-off: %+v", c)
	}
	hosts := c.Value

	// The apex's logout clears its cookie and posts a logout to the first host.
	w, _ = op.do("POST", "ws.example.com", "/_nogoo9/logout", url.Values{}, map[string]string{
		"Sec-Fetch-Site": "same-origin", "Origin": apex, "Cookie": CookieName + "=good; " + hostsName + "=" + hosts})
	if lc := cookieNamed(w, CookieName); lc == nil || lc.MaxAge >= 0 {
		t.Fatalf("the apex's login cookie is not cleared: %+v", lc)
	}
	checkLogoutForm(t, w, "https://"+op.other)
	if c = cookieNamed(w, hostsName); c == nil || c.Value != label(op.demo) {
		t.Fatalf("hosts left after the first: %+v", c)
	}

	// The host takes the logout from the apex's page and sends the browser back.
	w, _ = op.do("POST", op.other, "/_nogoo9/logout", url.Values{"continue": {"1"}}, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": apex, "Cookie": CookieName + "=good"})
	if lc := cookieNamed(w, CookieName); w.Code != http.StatusSeeOther || lc == nil || lc.MaxAge >= 0 || w.Header().Get("Location") != apex+"/_nogoo9/logout?continue=1" {
		t.Fatalf("host logout: %d Location %q cookie %+v, want 303 back to the apex and the cookie cleared", w.Code, w.Header().Get("Location"), lc)
	}
	// Another workspace's page cannot post it.
	w, _ = op.do("POST", op.other, "/_nogoo9/logout", url.Values{}, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "https://" + op.demo})
	if w.Code != http.StatusForbidden {
		t.Fatalf("a logout posted by another workspace's page: %d, want 403", w.Code)
	}

	// Back on the apex: the next host, then the login form.
	w, _ = op.do("GET", "ws.example.com", "/_nogoo9/logout?continue=1", nil, map[string]string{"Cookie": hostsName + "=" + label(op.demo)})
	checkLogoutForm(t, w, "https://"+op.demo)
	if c = cookieNamed(w, hostsName); c == nil || c.MaxAge >= 0 {
		t.Fatalf("the hosts cookie is not cleared after the last host: %+v", c)
	}
	w, _ = op.do("GET", "ws.example.com", "/_nogoo9/logout?continue=1", nil, nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/_nogoo9/login" {
		t.Fatalf("continue with no host left: %d Location %q, want the login form", w.Code, w.Header().Get("Location"))
	}
	// A link to continue cannot log a signed-in person out of their hosts.
	w, _ = op.do("GET", "ws.example.com", "/_nogoo9/logout?continue=1", nil, map[string]string{"Cookie": CookieName + "=good; " + hostsName + "=" + hosts})
	if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "continue") || cookieNamed(w, hostsName) != nil {
		t.Fatalf("continue while logged in: %d %q, want the plain logout page", w.Code, w.Body.String())
	}
	// A forged list can name only hosts of this domain: a value that is no label is dropped.
	w, _ = op.do("GET", "ws.example.com", "/_nogoo9/logout?continue=1", nil, map[string]string{"Cookie": hostsName + "=evil_host:8443"})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("a list naming another domain: %d %q, want no form", w.Code, w.Body.String())
	}
}

func checkLogoutForm(t *testing.T, w *httptest.ResponseRecorder, origin string) {
	t.Helper()
	body, csp := w.Body.String(), w.Header().Get("Content-Security-Policy")
	if w.Code != 200 || !strings.Contains(body, `action="`+origin+`/_nogoo9/logout"`) || !strings.Contains(body, `name="continue" value="1"`) || strings.Contains(body, `name="token"`) {
		t.Fatalf("%d %q, want a logout form posted to %s", w.Code, body, origin)
	}
	if !strings.Contains(csp, "form-action "+origin+" https://ws.example.com;") || w.Header().Get("Referrer-Policy") != "strict-origin" {
		t.Fatalf("CSP %q Referrer-Policy %q", csp, w.Header().Get("Referrer-Policy"))
	}
}
